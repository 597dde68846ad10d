"""Where to track: the tracking URI a command uses and where it came from (imports no MLflow).

``MLFLOW_TRACKING_URI`` if set, else ``--tracking-uri``, else ``sqlite:///mlflow.db`` in the
working directory (MLflow's own default, so ``mlflow ui`` run in the same folder shows the runs).
A relative sqlite path is resolved against the working directory when the command starts, and
the store is named by its absolute path from then on.

This module is apart from :mod:`dlsched.runs.tracking.store` (which connects, and imports
MLflow, about 1 s) so that a command that tracks nothing (``dlsched evaluate --no-tracking``)
still knows the store of a ``runs:/`` model without importing MLflow.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

ENV_VAR = "MLFLOW_TRACKING_URI"
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


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

    def fix_hint(self, lower: bool = False, untracked: bool = True) -> str:
        """What the user can do about a store that cannot be used (one or two sentences).

        Args:
            lower: start with a lower-case letter (inside a sentence).
            untracked: offer ``--no-tracking`` (a command that writes runs has it; one that
                reads them, such as ``dlsched compare``, has not).
        """
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
        fix += ", or run without tracking: --no-tracking." if untracked else "."
        return fix[0].lower() + fix[1:] if lower else fix


def resolve_tracking_uri(
    flag: str | None,
    environ: Mapping[str, str] | None = None,
    working_directory: Path | None = None,
) -> TrackingTarget:
    """Pick the tracking URI: the environment variable, else the flag, else the default.

    A sqlite store named relative to the working directory is named from the root
    (:func:`absolute_sqlite_uri`).

    Args:
        flag: the ``--tracking-uri`` value, ``None`` if not given.
        environ: the environment to read (``os.environ`` by default).
        working_directory: the folder relative sqlite paths are read from (the process's
            working directory by default).
    """
    from_env = (os.environ if environ is None else environ).get(ENV_VAR) or None
    chosen = from_env or flag or DEFAULT_TRACKING_URI
    uri = absolute_sqlite_uri(chosen, working_directory)
    if from_env is not None:
        differs = flag is not None and absolute_sqlite_uri(flag, working_directory) != uri
        return TrackingTarget(uri, ENV_VAR, flag if differs else None)
    return TrackingTarget(uri, "--tracking-uri" if flag is not None else "default")


def absolute_sqlite_uri(uri: str, working_directory: Path | None = None) -> str:
    """``uri`` with a relative sqlite file (``sqlite:///mlflow.db``) named from the root
    (``sqlite:////home/me/mlflow.db``); any other URI as it is.

    MLflow keeps one store object per URI for the life of the process: a relative URI would
    keep naming the file of the folder it was first used in after the process changed folder
    (a test, a notebook, a caller of :func:`dlsched.runs.evaluation.evaluate`). The absolute
    URI also says which file is used, and still names it from another folder (``tracking.json``
    for ``dlsched runs sync``, ``mlflow ui --backend-store-uri``).

    Args:
        uri: a tracking URI.
        working_directory: the folder a relative path is read from (the process's working
            directory by default).
    """
    parsed = urlparse(uri)
    path = parsed.path[1:]  # sqlite:///rel.db has the path /rel.db; sqlite:////abs.db //abs.db
    if parsed.scheme != "sqlite" or not path or path == ":memory:" or path.startswith("/"):
        return uri
    folder = Path.cwd() if working_directory is None else working_directory
    query = f"?{parsed.query}" if parsed.query else ""
    return f"sqlite:///{folder / path}{query}"


def sqlite_path(target: TrackingTarget) -> Path | None:
    """The file of a sqlite store (``sqlite:///rel.db``, ``sqlite:////abs.db``); ``None`` for an
    in-memory one or a store of another kind."""
    parsed = urlparse(target.uri)
    path = parsed.path[1:]
    return Path(path) if parsed.scheme == "sqlite" and path and path != ":memory:" else None
