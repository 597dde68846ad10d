"""Trained models named by MLflow URIs: their form, and whether a sqlite store holds them, read
without MLflow (imports no MLflow).

``dlsched evaluate --policy runs:/<run id>/model`` once imported torch and MLflow and created a
store in the working folder before finding that nothing held the model (5-6 s for a refusal). A
URI is now read as MLflow reads it and refused at once if malformed (:func:`parse_model_uri`);
then the run or registered model it names is looked up in a sqlite store's file, read-only
(:func:`check_model_stored`): a missing store is said, never created, and a missing model is
said in milliseconds. What is there, MLflow downloads; any other store, MLflow looks in.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from dataclasses import dataclass
from typing import NoReturn

from dlsched.envs.errors import PolicyError
from dlsched.runs.tracking.target import ENV_VAR, TrackingTarget, sqlite_path

#: URI schemes that name MLflow artifacts.
MLFLOW_SCHEMES: tuple[str, ...] = ("runs:/", "models:/")
#: MLflow's rule for a run id (``mlflow.utils.validation``): a letter or digit, then up to 255
#: letters, digits, ``_`` or ``-``; MLflow's own are 32 hex digits.
_RUN_ID = re.compile(r"[A-Za-z0-9][\w\-]{0,255}")
_FORMS = (
    "runs:/<run id>/<path in the run> (e.g. runs:/<32 hex digits>/model, as `dlsched train` "
    "prints it), models:/<name>/<version>, models:/<name>@<alias> or models:/<model id>"
)


@dataclass(frozen=True)
class ModelUri:
    """A ``runs:/`` or ``models:/`` URI, read: exactly one of its fields besides ``uri`` is set
    (and ``version`` only with ``name``).

    Attributes:
        uri: the URI as given.
        run_id: the run of ``runs:/<run id>/<path>``.
        name: the registered model of ``models:/<name>/<version, stage or latest>`` or
            ``models:/<name>@<alias>``.
        version: the version number of ``models:/<name>/<number>``.
        model_id: the logged model of ``models:/<model id>``.
    """

    uri: str
    run_id: str | None = None
    name: str | None = None
    version: str | None = None
    model_id: str | None = None


def is_mlflow_uri(spec: str) -> bool:
    """Whether ``spec`` names a model in MLflow (``runs:/`` or ``models:/``)."""
    return spec.startswith(MLFLOW_SCHEMES)


def parse_model_uri(uri: str) -> ModelUri:
    """Read a ``runs:/`` or ``models:/`` URI as MLflow reads it, more strictly where MLflow
    would reach outside the run (``..`` in its path).

    Raises:
        PolicyError: the URI is malformed, saying what is wrong and the forms it may take.
    """
    scheme, _, rest = uri.partition(":/")
    if rest.startswith("/") or "?" in rest or "#" in rest:
        _malformed(uri, "a model URI has no host, query or fragment")
    parts = rest.removesuffix("/").split("/")
    if scheme == "runs":
        run_id, *path = parts
        if not _RUN_ID.fullmatch(run_id):
            _malformed(uri, f"{run_id!r} is not a run id (letters, digits, _ and -)")
        if any(part in ("", ".", "..") for part in path):
            _malformed(uri, "the path in the run has an empty, '.' or '..' part")
        return ModelUri(uri, run_id=run_id)
    if len(parts) > 2 or not parts[0].strip():
        _malformed(uri, "a models:/ URI names a model and at most one version, stage or alias")
    if len(parts) == 2:
        name, suffix = parts
        if not suffix.strip():
            _malformed(uri, "the version after the model's name is empty")
        return ModelUri(uri, name=name, version=suffix if suffix.isdigit() else None)
    if "@" in parts[0]:
        name, _, alias = parts[0].rpartition("@")
        if not name.strip() or not alias.strip():
            _malformed(uri, "a models:/<name>@<alias> URI needs both")
        return ModelUri(uri, name=name)
    return ModelUri(uri, model_id=parts[0])


def _malformed(uri: str, why: str) -> NoReturn:
    raise PolicyError(f"policy {uri!r} is not a model URI: {why}; name a model as {_FORMS}")


def check_model_stored(model: ModelUri, target: TrackingTarget) -> None:
    """Refuse a model that ``target``'s sqlite store does not hold, reading its file only.

    Nothing is checked in a store of another kind, nor in a file this cannot read (locked, of
    another schema): MLflow answers for those.

    Raises:
        PolicyError: there is no store file (none is created to look), or it holds no such
            run, registered model, version or logged model.
    """
    path = sqlite_path(target)
    if path is None:
        return
    if not path.is_file():
        raise PolicyError(
            f"cannot fetch model {model.uri!r}: there is no MLflow store at {path} (from "
            f"{target.source}), so nothing holds it (dlsched creates none to look). Run this "
            f"where the model was tracked, or set {ENV_VAR} or --tracking-uri to its store"
        )
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            missing = _missing(db, model)
    except sqlite3.Error:
        return
    if missing is not None:
        raise PolicyError(
            f"cannot fetch model {model.uri!r} from MLflow store {target.uri}: {missing}; "
            "check the run id or the registered name and version (`mlflow ui` lists them) "
            f"and {ENV_VAR} or --tracking-uri"
        )


def _missing(db: sqlite3.Connection, model: ModelUri) -> str | None:
    """What the store lacks of ``model``, or ``None`` if it holds it (or cannot say)."""
    tables = {row[0] for row in db.execute("select name from sqlite_master where type='table'")}
    if "runs" not in tables:
        return "it holds no MLflow runs (an empty database, or another program's)"
    if model.run_id is not None:
        query = "select 1 from runs where run_uuid = ?"
        found = db.execute(query, (model.run_id,)).fetchone()
        return None if found else f"it holds no run {model.run_id}"
    if model.name is not None:
        query = "select 1 from registered_models where name = ?"
        if db.execute(query, (model.name,)).fetchone() is None:
            return f"it holds no registered model {model.name!r}"
        if model.version is not None:
            query = "select 1 from model_versions where name = ? and version = ?"
            if db.execute(query, (model.name, int(model.version))).fetchone() is None:
                return f"registered model {model.name!r} has no version {model.version}"
        return None
    if model.model_id is not None and "logged_models" in tables:
        query = "select 1 from logged_models where model_id = ?"
        found = db.execute(query, (model.model_id,)).fetchone()
        return None if found else f"it holds no logged model {model.model_id!r}"
    return None
