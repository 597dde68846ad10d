"""Where evaluations and trainings are tracked: the MLflow store, checked before anything runs.

Where to track is :mod:`dlsched.runs.tracking.target`'s (which imports no MLflow).

Two things make a store safe to share:

- **sqlite stores are created once, whole or not at all.** MLflow creates and migrates a new
  sqlite store on first use, without a lock across processes (several processes starting on a
  new store at once break it), and a signal in the middle of its migration leaves the store
  half-migrated for good. :func:`connect` checks and creates a sqlite store under an
  inter-process file lock next to it (``mlflow.db.lock``): the others wait, then find it
  complete. A new store is migrated in a file of dlsched's own beside it
  (``mlflow.db.dlsched-new``, :func:`creation_file`) and linked into place once complete, so
  that the store appears whole or not at all, whatever stops the process (SIGKILL included); a
  creation file left by a process that died is removed by the next one. A store dlsched did not
  create whole (left half-migrated by an older dlsched, or by MLflow itself) is named with what
  is wrong and the repair, never touched.
- **a tracking server that dies is noticed within seconds.** MLflow retries a dead server with
  exponential backoff for minutes (7 retries, 120 s timeouts). :func:`bound_http_retries` sets
  MLflow's own limits (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and friends) to
  :data:`HTTP_LIMITS` unless the user set them, so a failed call is reported within
  :data:`HTTP_GIVE_UP_S` seconds.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlparse

import filelock
import requests
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from dlsched.envs.errors import TrackingError
from dlsched.runs.tracking.owners import end_orphaned_runs
from dlsched.runs.tracking.target import ENV_VAR, TrackingTarget, sqlite_path

#: Seconds the up-front check waits for an HTTP tracking server's health endpoint.
PROBE_TIMEOUT_S = 5.0
#: Seconds a process waits for another one to create a new sqlite store.
STORE_LOCK_TIMEOUT_S = 300.0

#: MLflow's HTTP client limits dlsched sets unless the environment sets them: 2 retries, 1 s
#: backoff factor (sleeps of 0 then 2 s, plus up to 1 s of jitter), 7 s per request.
HTTP_LIMITS: Mapping[str, str] = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "7",
}
#: The longest a failing call to a tracking server takes under :data:`HTTP_LIMITS`: three
#: attempts of 7 s and the sleeps between them.
HTTP_GIVE_UP_S = 3 * 7 + 2 + 2


#: Errors a tracking store raises when it is unreachable or refuses a write.
STORE_ERRORS: tuple[type[BaseException], ...] = (
    MlflowException,
    requests.RequestException,
    OSError,
)


def bound_http_retries(environ: dict[str, str] | None = None) -> None:
    """Set MLflow's HTTP retry and timeout limits to :data:`HTTP_LIMITS` where unset.

    MLflow reads them at every request, so this holds for every client of the process.

    Args:
        environ: the environment to change (``os.environ`` by default).
    """
    environment = os.environ if environ is None else environ
    for name, value in HTTP_LIMITS.items():
        environment.setdefault(name, value)


def connect(target: TrackingTarget, read_only: bool = False) -> MlflowClient:
    """A client of ``target``'s store, after checking that the store answers.

    A new sqlite store is created here, once, under a file lock next to it (see the module
    docstring); an HTTP store gets bounded retries (:func:`bound_http_retries`).

    Args:
        target: the store.
        read_only: the command only reads runs (``dlsched compare``): a missing sqlite file
            is an error saying where the runs may be, not a new empty store.

    Raises:
        TrackingError: naming the URI, what went wrong and the fix, before anything has run.
    """
    scheme = urlparse(target.uri).scheme
    if scheme in ("http", "https"):
        bound_http_retries()
        _probe_http(target, not read_only)
        return _client(target, not read_only)
    if scheme == "sqlite":
        path = sqlite_path(target)
        if path is not None and read_only and not path.exists():
            raise TrackingError(
                f"no MLflow store at {path} (from {target.source}): "
                "nothing was tracked here. Run this in the folder where `dlsched evaluate` "
                f"ran, or set {ENV_VAR} or --tracking-uri to the store that holds the runs"
            )
        if path is not None:
            _check_sqlite_file(target, path)
            return _create_or_open_sqlite(target, path)
    return _client(target, not read_only)


def open_store(
    target: TrackingTarget, notify: Callable[[str], None], read_only: bool = False
) -> MlflowClient:
    """The store a command tracks in, as ``dlsched evaluate``, ``compare`` and ``train`` open
    it: where it is said to ``notify``
    (:meth:`~dlsched.runs.tracking.target.TrackingTarget.describe`), the store checked and
    connected (:func:`connect`, ``read_only`` as there), then the runs of this host whose process
    died without ending them marked ``KILLED``
    (:func:`~dlsched.runs.tracking.owners.end_orphaned_runs`, which says how many to
    ``notify``).

    Raises:
        TrackingError: as :func:`connect`.
    """
    notify(target.describe())
    client = connect(target, read_only)
    end_orphaned_runs(client, notify)
    return client


def _client(target: TrackingTarget, untracked: bool = True) -> MlflowClient:
    try:
        client = MlflowClient(tracking_uri=target.uri)
        client.search_experiments(max_results=1)
    # any failure here means the store cannot be used; it is reported with its cause
    except Exception as error:
        raise TrackingError(
            f"MLflow tracking store {target.uri} (from {target.source}) cannot be used: "
            f"{type(error).__name__}: {first_line(error)}. {target.fix_hint(untracked=untracked)}"
        ) from error
    return client


def _create_or_open_sqlite(target: TrackingTarget, path: Path) -> MlflowClient:
    """Open a complete store at once; create a new one under the lock, once for all processes."""
    # Without the lock, a store another process is migrating looks half-migrated: only a
    # complete one is taken as it is; anything else is looked at again under the lock.
    with contextlib.suppress(TrackingError):
        if _sqlite_schema(target, path) == "complete":
            return _client(target)
    lock = filelock.FileLock(f"{path}.lock", timeout=STORE_LOCK_TIMEOUT_S)
    try:
        with lock:
            # another process may have created it while this one waited
            if _sqlite_schema(target, path) == "new":
                _create_sqlite(path)
            return _client(target)
    except filelock.Timeout:
        raise TrackingError(
            f"MLflow tracking store {target.uri}: another process has held the lock "
            f"{path}.lock for over {STORE_LOCK_TIMEOUT_S:.0f} s while creating the store. If no "
            f"dlsched or MLflow process uses the store, remove {path}.lock and retry"
        ) from None


def creation_file(path: Path) -> Path:
    """The file a new store at ``path`` is migrated in before it is linked into place; only
    dlsched writes it, under the store's lock."""
    return path.with_name(f"{path.name}.dlsched-new")


#: The files sqlite keeps beside a database (a journal, a write-ahead log and its index).
_SIDE_FILE_SUFFIXES: tuple[str, ...] = ("-journal", "-wal", "-shm")


def _remove_with_side_files(path: Path) -> None:
    for suffix in ("", *_SIDE_FILE_SUFFIXES):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _create_sqlite(path: Path) -> None:
    """Create a complete store at ``path``, under its lock, where none is (or only a file that
    holds no table, with nothing to lose).

    MLflow's migration runs in :func:`creation_file`, which nobody else opens: without a journal
    or a sync to disk (if it is cut short the file is thrown away), then it is put in
    write-ahead-log mode, synced, and linked to ``path`` in one step. A creation file found here
    is the leftover of a process that died creating the store (this one holds the lock): it is
    removed first, and this one's is removed if anything, a signal included, stops it.
    """
    new = creation_file(path)
    _remove_with_side_files(new)
    try:
        _migrate(new)
        _write_ahead_log(new)
        _sync_to_disk(new)
        _remove_with_side_files(path)  # no table in it: nothing is lost
        # a link, not a rename: a file another program put at ``path`` since is never replaced
        os.link(new, path)
        _sync_to_disk(path.parent)
    finally:
        _remove_with_side_files(new)


def _migrate(path: Path) -> None:
    """Create MLflow's tables in a new file and migrate them to the latest schema, as MLflow
    does on a store's first use."""
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    engine = sqlalchemy.create_engine(f"sqlite:///{path}")

    @sqlalchemy.event.listens_for(engine, "connect")
    def _unjournaled(connection: sqlite3.Connection, _: object) -> None:
        # the file is thrown away if the migration stops: no rollback or durability to pay for
        connection.execute("PRAGMA journal_mode=MEMORY")
        connection.execute("PRAGMA synchronous=OFF")

    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()


def _sync_to_disk(path: Path) -> None:
    """fsync a file or a folder (a folder's entries: a new link to a file)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_ahead_log(path: Path) -> None:
    """Put a new store in write-ahead-log mode (a property of the file, kept from then on).

    In sqlite's default rollback-journal mode every commit waits for three fsyncs (about 10 ms
    here), and logging an episode takes four commits, more than a replay episode. In WAL mode a
    commit appends to the log, readers (``mlflow ui``) and the writer no longer block each
    other, and the episode writer's connections commit without an fsync (``synchronous=NORMAL``:
    a power cut may lose the last commits, never the database; the episodes are on disk for
    ``dlsched runs sync``). An existing store keeps its mode (see the README to change it), and
    so does a store on a network file system (NFS, SMB), where the log cannot be shared safely.
    """
    if not on_local_file_system(path):
        return  # sqlite's WAL needs shared memory between processes, which NFS and SMB lack
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")


#: File systems on which sqlite's write-ahead log is safe: local disks and memory. On a network
#: file system processes on two machines cannot share its index, and the store may be corrupted.
_LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "f2fs", "apfs", "hfs"}
)


def on_local_file_system(path: Path, mounts: Path = Path("/proc/mounts")) -> bool:
    """Whether ``path`` lies on a file system of :data:`_LOCAL_FILE_SYSTEMS` (``False`` where
    the mount table cannot be read: a store elsewhere keeps sqlite's default journal)."""
    try:
        table = mounts.read_text().splitlines()
    except OSError:
        return False
    resolved = str(path.resolve())
    best, kind = "", ""
    for line in table:
        fields = line.split()
        if len(fields) < 3:
            continue
        # the mount table escapes spaces in mount points as \040
        point = fields[1].replace("\\040", " ")
        inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind in _LOCAL_FILE_SYSTEMS


#: The tables of MLflow's schema that hold what a user tracked; a store whose are empty holds
#: nothing to lose.
_RECORD_TABLES = frozenset({"experiments", "runs", "registered_models"})


def _sqlite_schema(target: TrackingTarget, path: Path) -> str:
    """``"new"`` (no file, or no table yet) or ``"complete"`` (every migration applied).

    Raises:
        TrackingError: a store part-way through its migrations, naming what is wrong and the
            repair: made anew if it holds nothing, else backed up and migrated.
    """
    if not path.exists() or path.stat().st_size == 0:
        return "new"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("select name from sqlite_master")}
            revisions = (
                [row[0] for row in db.execute("select version_num from alembic_version")]
                if "alembic_version" in tables
                else []
            )
            records = sum(
                db.execute(f"select count(*) from {table}").fetchone()[0]
                for table in _RECORD_TABLES & tables
            )
    except sqlite3.Error as error:
        raise TrackingError(
            f"MLflow tracking store {target.uri} is not a readable sqlite "
            f"database: {error}. Move it aside (mv {path} {path}.broken) to start a new store, "
            f"or {target.fix_hint(lower=True)}"
        ) from None
    if not tables - {"alembic_version"}:
        return "new"
    head = _latest_revision()
    leftovers = sorted(table for table in tables if table.startswith("_alembic_tmp_"))
    if leftovers:
        problem = (
            f"it holds the temporary tables of an unfinished migration ({', '.join(leftovers)})"
        )
    elif not revisions:
        problem = "it has tables but no schema revision (its creation was interrupted)"
    elif head is not None and revisions != [head]:
        problem = (
            f"its schema is at revision {', '.join(revisions)}, not this MLflow's {head} (an "
            "older MLflow made it, or a migration stopped part-way)"
        )
    else:
        return "complete"
    if not records:
        # MLflow's migrations cannot resume a creation cut short (`mlflow db upgrade` fails on
        # the tables it finds made): a store with nothing in it is made anew
        raise TrackingError(
            f"MLflow tracking store {target.uri} is half-made: {problem}. It holds no "
            "experiment and no run (its creation was cut short, by an older dlsched or by "
            f"MLflow), so nothing is lost by starting anew: move it aside (mv {path} "
            f"{path}.broken) and rerun, and dlsched creates a new store; or "
            f"{target.fix_hint(lower=True)}"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raise TrackingError(
        f"MLflow tracking store {target.uri} is half-migrated: {problem}. "
        f"dlsched leaves it untouched. Back it up (cp {path} {path}.backup-{stamp}), then "
        f"migrate it with `mlflow db upgrade {target.uri}`; if that fails, keep the backup, "
        f"move the store aside (mv {path} {path}.broken) and start a new one, or "
        f"{target.fix_hint(lower=True)}"
    )


def _latest_revision() -> str | None:
    """The schema revision this MLflow migrates to (``None`` if MLflow no longer says)."""
    try:
        from mlflow.store.db.utils import _get_latest_schema_revision
    except ImportError:  # a private helper: a later MLflow may move it
        return None
    return str(_get_latest_schema_revision())


def _probe_http(target: TrackingTarget, untracked: bool = True) -> None:
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
            f"{reason}. {target.fix_hint(untracked=untracked)}"
        ) from None


def _check_sqlite_file(target: TrackingTarget, path: Path) -> None:
    """Refuse at once what MLflow would retry for minutes: a missing or read-only folder, a
    folder where the file should be, a read-only file."""
    folder = path.parent
    where = f"MLflow tracking store {target.uri} (from {target.source})"
    if not folder.is_dir():
        raise TrackingError(
            f"{where} is in folder {folder.resolve()}, which does not exist. Create it, or "
            f"{target.fix_hint(lower=True)}"
        )
    if path.is_dir():
        raise TrackingError(
            f"{where} is {path.resolve()}, which is a folder, not a database file. Name a file "
            f"(e.g. sqlite:///{path / 'mlflow.db'}), or {target.fix_hint(lower=True)}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TrackingError(
            f"{where}: folder {folder.resolve()} is not writable (sqlite writes its journal "
            f"there). Make it writable, or {target.fix_hint(lower=True)}"
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise TrackingError(
            f"{where}: file {path.resolve()} is not readable and writable by this user. Fix "
            f"its permissions, or {target.fix_hint(lower=True)}"
        )


def first_line(error: BaseException) -> str:
    """The first line of an error's message (MLflow's run over many), or its repr."""
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else repr(error)


#: MLflow 3's experiment tag that picks the UI's view; dlsched's runs are classic ML runs, not
#: GenAI traces, so ``mlflow ui`` opens them in the runs table and charts, not the traces view.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def experiment_id(
    client: MlflowClient,
    name: str,
    target: TrackingTarget,
    tags: Mapping[str, str] | None = None,
) -> str:
    """The id of experiment ``name``, created (with ``tags``) if it does not exist.

    The experiment is tagged for MLflow's classic ML view (:data:`EXPERIMENT_KIND_TAG`), an
    existing one too if it lacks the tag (one that a user set otherwise keeps the user's).

    Raises:
        TrackingError: the experiment is deleted; the message says how to restore it.
    """
    existing = client.get_experiment_by_name(name)
    if existing is None:
        try:
            return client.create_experiment(
                name, tags={**(tags or {}), EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
            )
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
    if EXPERIMENT_KIND_TAG not in existing.tags:
        set_experiment_tag(client, existing.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return str(existing.experiment_id)


#: Times an experiment tag is written again after another writer's insert of it won the race.
_TAG_RACE_RETRIES = 3


def set_experiment_tag(client: MlflowClient, experiment: str, key: str, value: str) -> None:
    """Set an experiment's tag, as writers of one experiment in several processes may at once.

    MLflow's SQL store reads a tag before it inserts or updates it; two first writers of one key
    both read nothing, and the second's insert fails on the key's uniqueness (seen with eight
    evaluations starting together on a tracking server). Written again, the tag is there and
    is updated; the last writer's value stays, as it would have without the race.

    Raises:
        MlflowException: any other failure, or the race lost more than a few times in a row.
    """
    for attempt in range(_TAG_RACE_RETRIES + 1):
        try:
            client.set_experiment_tag(experiment, key, value)
            return
        except MlflowException as error:
            if "UNIQUE constraint failed" not in str(error) or attempt == _TAG_RACE_RETRIES:
                raise
            time.sleep(0.05 * (attempt + 1))
