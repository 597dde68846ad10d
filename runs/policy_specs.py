"""One place that turns what a user types after ``--policy`` into a :class:`Policy`.

It lives above :mod:`dlsched.baselines` and :mod:`dlsched.policies` because a spec may name
either.

- a baseline name (``default``, ``dqoes``, ...): :func:`dlsched.baselines.make`;
- a trained model by path: the ``model.zip`` that ``dlsched train`` wrote, or its folder;
- a trained model in MLflow: ``runs:/<run_id>/model`` (or a registered ``models:/<name>/<v>``),
  downloaded from the tracking store and loaded the same way; a malformed URI, a missing
  store, or a model the store does not hold is refused before MLflow and torch are imported
  (:mod:`dlsched.runs.tracking.model_uris`);
- a model shipped with dlsched: ``pretrained:<name>`` (:mod:`dlsched.policies.pretrained`).

A baseline needs nothing beyond ``pip install dlsched``; a trained model needs the train extra,
and one in MLflow the track extra too, each said before any file is read
(:func:`dlsched.envs.extras.require_extra`).

Every model, whichever way it is named, is loaded by :func:`dlsched.policies.learned.load_model`,
which unpickles nothing; a model saved by dlsched 0.1.0 is refused with the command that
converts it (:mod:`dlsched.runs.model_conversion`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from dlsched.envs.errors import PolicyError
from dlsched.envs.extras import require_extra
from dlsched.envs.scenarios.model import Scenario
from dlsched.policies.model_files import MODEL_FILE, model_files, refuse_pickled_model
from dlsched.policies.policy import ParamValue, Policy
from dlsched.policies.pretrained import PRETRAINED_SCHEME, is_pretrained_spec, load_pretrained
from dlsched.runs.tracking.model_uris import (
    ModelUri,
    check_model_stored,
    is_mlflow_uri,
    parse_model_uri,
)
from dlsched.runs.tracking.target import TrackingTarget, absolute_sqlite_uri, resolve_tracking_uri


def is_model_spec(spec: str) -> bool:
    """Whether ``spec`` names a trained model (an MLflow URI, a shipped model or a path) rather
    than a baseline."""
    if is_mlflow_uri(spec) or spec.startswith(PRETRAINED_SCHEME):
        return True
    return spec.endswith(".zip") or "/" in spec or "\\" in spec or Path(spec).is_dir()


def resolve_policy(
    spec: str,
    params: Mapping[str, ParamValue] | None = None,
    tracking_uri: str | None = None,
) -> Policy:
    """Build the policy ``spec`` names.

    Args:
        spec: a baseline name, a model path (``.zip`` or its folder), a ``runs:/`` or
            ``models:/`` URI, or a shipped model (``pretrained:<name>``).
        params: a baseline's parameters; a trained model takes none.
        tracking_uri: the MLflow store of a ``runs:/`` URI; by default the one ``dlsched
            evaluate`` uses (``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``).

    Raises:
        UnknownNameError: an unknown baseline or pretrained model name.
        PolicyError: a bad parameter, parameters for a trained model, or a model that cannot
            be found or loaded.
        MissingExtraError: a trained model without the train extra, or one in MLflow without
            the track extra.
    """
    if not is_model_spec(spec):
        from dlsched.baselines import make

        return make(spec, **dict(params or {}))
    if params:
        raise PolicyError(
            f"policy {spec!r} is a trained model and takes no parameters, got "
            f"{', '.join(sorted(params))}"
        )
    if is_pretrained_spec(spec):
        return load_pretrained(spec)
    require_extra("train", f"the trained model {spec!r}")
    if is_mlflow_uri(spec):
        model = parse_model_uri(spec)
        with downloaded_model(model, model_store(tracking_uri)) as local:
            return _load_model(local, model.uri)
    return _load_model(model_path(spec), spec)


def _load_model(path: Path, spec: str) -> Policy:
    # checked here, and again as it is loaded, so that a file that is no model, too large, or
    # saved before models were data is refused at once rather than after the seconds SB3 and
    # torch take to import
    refuse_pickled_model(model_files(path), spec)
    from dlsched.policies.learned import load_model

    return load_model(path, source=spec)


def model_path(spec: str) -> Path:
    """The path a model spec names, which must exist.

    Raises:
        PolicyError: nothing there.
    """
    path = Path(spec).expanduser()
    if not path.exists():
        raise PolicyError(
            f"model {spec!r} does not exist; give the {MODEL_FILE} (or its folder) that "
            "`dlsched train` wrote, a runs:/<run_id>/model URI, a pretrained:<name> "
            "(`dlsched baselines` lists them), or a baseline name"
        )
    return path


def model_store(tracking_uri: str | None) -> TrackingTarget:
    """The store of a ``runs:/`` or ``models:/`` model: ``tracking_uri``, else the one
    ``dlsched evaluate`` uses; named with where it came from."""
    resolved = resolve_tracking_uri(None)
    if tracking_uri is None or absolute_sqlite_uri(tracking_uri) == resolved.uri:
        return resolved
    return TrackingTarget(absolute_sqlite_uri(tracking_uri), "--tracking-uri")


@contextmanager
def downloaded_model(model: ModelUri, target: TrackingTarget) -> Iterator[Path]:
    """The model's files downloaded from the store into a temporary folder, which goes when
    the context ends (a loaded model is in memory by then). Only files are copied: nothing of
    the MLflow Model is run (its ``python_function`` code is MLflow's to load, not dlsched's).

    Raises:
        PolicyError: the store does not hold the model, or cannot be read.
        MissingExtraError: the track extra (MLflow) is not installed.
    """
    # refused before MLflow (about 1 s) and torch are imported, and before any store is opened
    check_model_stored(model, target)
    require_extra("track", f"the MLflow model {model.uri!r}")
    from mlflow.artifacts import download_artifacts
    from mlflow.exceptions import MlflowException

    from dlsched.runs.tracking.store import connect

    connect(target, read_only=True)  # a missing, half-made or dead store is said at once
    with tempfile.TemporaryDirectory(prefix="dlsched-model-") as folder:
        try:
            source = model.uri
            if model.run_id is None:
                # the registry is the tracking store's; MLflow would look in its default one
                from mlflow import MlflowClient
                from mlflow.store.artifact.utils.models import get_model_name_and_version

                client = MlflowClient(target.uri, registry_uri=target.uri)
                name, version = get_model_name_and_version(client, model.uri)
                source = client.get_model_version_download_uri(name, version)
            local = download_artifacts(
                artifact_uri=source, dst_path=folder, tracking_uri=target.uri
            )
        except (MlflowException, OSError) as error:
            raise PolicyError(
                f"cannot fetch model {model.uri!r} from MLflow store {target.uri}: "
                f"{str(error).strip().splitlines()[0] if str(error).strip() else error!r}; check "
                "the run id or the registered name and version (`mlflow ui` lists them) and "
                "MLFLOW_TRACKING_URI or --tracking-uri"
            ) from error
        yield Path(local)


def build_policies(
    specs: Sequence[str],
    params: Mapping[str, Mapping[str, ParamValue]],
    tracking_uri: str | None = None,
    scenarios: Sequence[Scenario] = (),
) -> list[Policy]:
    """Build each policy ``--policy`` names, with its ``--set`` parameters.

    A spec is a baseline name or a trained model (a path or a ``runs:/`` URI), as
    :func:`resolve_policy` reads it.

    Args:
        specs: what ``--policy`` lists.
        params: parameters by spec.
        tracking_uri: the MLflow store of ``runs:/`` models.
        scenarios: the scenarios the policies will run on; each policy is checked against
            them (:meth:`~dlsched.policies.Policy.check_scenario`), so that a model trained
            for another environment is refused before any episode runs.

    Raises:
        PolicyError: no policy, one listed twice, two that share a name (their runs and
            folders are named after it), or one that cannot schedule one of ``scenarios``.
        UnknownNameError: a baseline name that is not registered.
    """
    if not specs:
        raise PolicyError("--policy names no policy; e.g. --policy default,dqoes")
    for spec in filter(is_mlflow_uri, specs):  # every URI's form, before any store is opened
        parse_model_uri(spec)
    repeated = sorted({spec for spec in specs if specs.count(spec) > 1})
    if repeated:
        raise PolicyError(f"--policy lists {', '.join(repeated)} more than once; list each once")
    policies = [resolve_policy(spec, params.get(spec), tracking_uri) for spec in specs]
    for policy in policies:
        for scenario in scenarios:
            policy.check_scenario(scenario)
    names = [policy.name for policy in policies]
    shared = sorted({name for name in names if names.count(name) > 1})
    if shared:
        raise PolicyError(
            f"policies {', '.join(specs)} include several called {', '.join(shared)}; runs and "
            "folders are named after the policy, so evaluate them separately"
        )
    return policies
