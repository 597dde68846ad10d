"""Where evaluations and trainings are tracked: the MLflow store, checked before anything runs.

Where to track: ``MLFLOW_TRACKING_URI`` if set, else ``--tracking-uri``, else
``sqlite:///mlflow.db`` in the working directory (MLflow's own default, so ``mlflow ui`` run in
the same folder shows the runs).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import requests
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from dlsched.envs.errors import TrackingError

ENV_VAR = "MLFLOW_TRACKING_URI"
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
#: Seconds the up-front check waits for an HTTP tracking server's health endpoint.
PROBE_TIMEOUT_S = 5.0


#: Errors a tracking store raises when it is unreachable or refuses a write.
STORE_ERRORS: tuple[type[BaseException], ...] = (
    MlflowException,
    requests.RequestException,
    OSError,
)


# ---------------------------------------------------------------------------------- where


@dataclass(frozen=True)
class TrackingTarget:
    """The tracking URI in use and where it came from.

    Attributes:
        uri: the tracking URI.
        source: ``MLFLOW_TRACKING_URI``, ``--tracking-uri`` or ``default``.
        ignored: the ``--tracking-uri`` value that ``MLFLOW_TRACKING_URI`` overrode, if it
            differed.
    """

    uri: str
    source: str
    ignored: str | None = None

    def describe(self) -> str:
        """One line saying which store is used, and a warning if a typed flag was overridden."""
        line = f"tracking: {self.uri} (from {self.source})"
        if self.ignored is not None:
            line += (
                f"\nwarning: --tracking-uri {self.ignored} is ignored because {ENV_VAR} is set "
                f"to {self.uri}; unset {ENV_VAR} to use the flag"
            )
        return line

    def fix_hint(self, lower: bool = False) -> str:
        """What the user can do about a store that cannot be used (one or two sentences)."""
        if self.source == ENV_VAR:
            fix = f"Fix or unset {ENV_VAR}"
        elif self.source == "--tracking-uri":
            fix = "Fix --tracking-uri"
        else:
            fix = f"Set {ENV_VAR} or --tracking-uri to a usable store"
        parsed = urlparse(self.uri)
        if parsed.scheme in ("http", "https"):
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
            fix += f" (or start the server: mlflow server --host {parsed.hostname} --port {port})"
        fix += ", or run without tracking: --no-tracking."
        return fix[0].lower() + fix[1:] if lower else fix


def resolve_tracking_uri(
    flag: str | None, environ: Mapping[str, str] | None = None
) -> TrackingTarget:
    """Pick the tracking URI: the environment variable, else the flag, else the default.

    Args:
        flag: the ``--tracking-uri`` value, ``None`` if not given.
        environ: the environment to read (``os.environ`` by default).
    """
    from_env = (os.environ if environ is None else environ).get(ENV_VAR) or None
    if from_env is not None:
        ignored = flag if flag is not None and flag != from_env else None
        return TrackingTarget(from_env, ENV_VAR, ignored)
    if flag is not None:
        return TrackingTarget(flag, "--tracking-uri")
    return TrackingTarget(DEFAULT_TRACKING_URI, "default")


def connect(target: TrackingTarget) -> MlflowClient:
    """A client of ``target``'s store, after checking that the store answers.

    Raises:
        TrackingError: naming the URI, what went wrong and the fix, before anything has run.
    """
    scheme = urlparse(target.uri).scheme
    if scheme in ("http", "https"):
        _probe_http(target)
    elif scheme == "sqlite":
        _check_sqlite_folder(target)
    try:
        client = MlflowClient(tracking_uri=target.uri)
        client.search_experiments(max_results=1)
    # any failure here means the store cannot be used; it is reported with its cause
    except Exception as error:
        raise TrackingError(
            f"MLflow tracking store {target.uri} (from {target.source}) cannot be used: "
            f"{type(error).__name__}: {first_line(error)}. {target.fix_hint()}"
        ) from error
    return client


def _probe_http(target: TrackingTarget) -> None:
    # MLflow's own client retries a dead server with backoff for minutes; this answers at once
    url = target.uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        pass  # something answers; the API call that follows tells whether it is MLflow
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise TrackingError(
            f"MLflow tracking server {target.uri} (from {target.source}) is unreachable: "
            f"{reason}. {target.fix_hint()}"
        ) from None


def _check_sqlite_folder(target: TrackingTarget) -> None:
    folder = Path(urlparse(target.uri).path[1:]).parent  # sqlite:///rel.db, sqlite:////abs.db
    if not folder.is_dir():
        raise TrackingError(
            f"MLflow tracking store {target.uri} (from {target.source}) is in folder "
            f"{folder.resolve()}, which does not exist. Create it, or {target.fix_hint(lower=True)}"
        )


def first_line(error: BaseException) -> str:
    """The first line of an error's message (MLflow's run over many), or its repr."""
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else repr(error)


def experiment_id(client: MlflowClient, name: str, target: TrackingTarget) -> str:
    """The id of experiment ``name``, created if it does not exist.

    Raises:
        TrackingError: the experiment is deleted; the message says how to restore it.
    """
    existing = client.get_experiment_by_name(name)
    if existing is None:
        try:
            return client.create_experiment(name)
        except MlflowException:
            existing = client.get_experiment_by_name(name)  # created concurrently
            if existing is None:
                raise
    if existing.lifecycle_stage == "deleted":
        raise TrackingError(
            f"MLflow experiment {name!r} (id {existing.experiment_id}) in {target.uri} is "
            f"deleted; restore it (mlflow experiments restore --experiment-id "
            f"{existing.experiment_id}) or pass --experiment with another name"
        )
    return str(existing.experiment_id)
