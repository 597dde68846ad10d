"""The episode writer: an evaluation's MLflow logging and episode plots, beside its episodes.

Logging an episode to a sqlite store costs more than running a replay episode (SQLAlchemy's unit
of work for every metric point, a transaction per call), and drawing its plots costs ten times
more. Done between the episodes, they made a tracked evaluation over 20 times slower than an
untracked one. The writer takes them off the episodes' path: the evaluation hands each finished
episode over (:meth:`EpisodeWriter.submit`) and runs the next one while the writer draws the
episode's plots (when asked) and logs it as a child run
(:func:`~dlsched.runs.tracking.tracker.log_episode_run`); :meth:`EpisodeWriter.replies` and
:meth:`EpisodeWriter.close` say what became of each.

Where it runs:

- **a sqlite store**: a child process forked from the evaluation, since the logging is Python
  work in this process, which a thread would hold the interpreter lock for;
- **a tracking server** (or where a child cannot be made safe): a thread, since there the server
  does the work and the client waits on the network.

A forked child must not share what the evaluation holds open, nor be cut in the middle of a write:

- it opens connections of its own: the SQLAlchemy engines it inherits (MLflow keeps one per
  database) are disposed with ``close=False``, SQLAlchemy's recipe for a forked child (new
  connections for the child, the parent's left alone); on a store in WAL mode (the mode
  :func:`~dlsched.runs.tracking.store.connect` gives a new store) they commit without an fsync,
  which otherwise costs more than the episode;
- it ignores SIGINT and SIGTERM: Ctrl-C in a terminal (and ``timeout``) signals the whole process
  group, and a writer stopped in the middle of a run leaves it ``RUNNING``. The evaluation, when
  stopped, tells the writer to log what it holds without plots (:meth:`EpisodeWriter.close` with
  ``hurry``) and waits for it, then ends its own run ``KILLED``;
- it dies with the evaluation (Linux's parent-death signal): an evaluation killed outright
  (SIGKILL) cannot end its runs, and neither must the writer, whose runs carry the evaluation's
  owner tags, so the next command ends them all ``KILLED``
  (:func:`~dlsched.runs.tracking.owners.end_orphaned_runs`) and ``dlsched runs sync`` uploads the
  episodes from disk;
- it leaves MLflow's usage telemetry to the evaluation: the threads behind it are not forked;
- it never runs the evaluation's exit handlers (multiprocessing ends it with ``os._exit``).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow import MlflowClient
from sqlalchemy import event

from dlsched.runs.evaluation import DEFAULT_POLICY, EpisodeResult
from dlsched.runs.interruption import deferred
from dlsched.runs.tracking.plots import plot_episode
from dlsched.runs.tracking.store import STORE_ERRORS, first_line
from dlsched.runs.tracking.trajectory import episode_name


@dataclass(frozen=True)
class EpisodeRunContext:
    """What every episode run of one evaluation is logged with.

    Attributes:
        tracking_uri: the store.
        experiment_id: the evaluation's experiment.
        parent_run_id: the evaluation's run.
        evaluation_id: the evaluation's id.
        version: dlsched's version.
        commit: the source commit, if known.
        owner_tags: the evaluation process's owner tags, which the episode runs carry whichever
            process logs them (see the module docstring).
    """

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    evaluation_id: str
    version: str
    commit: str | None
    owner_tags: Mapping[str, str]


@dataclass(frozen=True)
class EpisodeJob:
    """One finished episode for the writer.

    Attributes:
        result: the episode.
        folder: its local folder (written already); plots go there and it is logged from there.
        plots: draw the episode's plots into ``folder`` first.
        log: log it to MLflow (false once the store has failed: plots only).
    """

    result: EpisodeResult
    folder: Path
    plots: bool
    log: bool


@dataclass(frozen=True)
class EpisodeLogged:
    """An episode is in the store, its run ``FINISHED``."""

    name: str
    run_id: str


@dataclass(frozen=True)
class WriterFailed:
    """The writer stopped logging: the store refused a write, or a plot could not be drawn.

    Attributes:
        what: what failed, as a clause (``logging episode default-seed1 failed: ...``).
        stopped: the writer said nothing for :data:`STALL_TIMEOUT_S` and was stopped: episode
            runs it had started may be left ``RUNNING`` for the evaluation to end.
    """

    what: str
    stopped: bool = False


Reply = EpisodeLogged | WriterFailed
_Event = threading.Event | multiprocessing.synchronize.Event

#: Linux's prctl option that signals a process when its parent dies.
_PR_SET_PDEATHSIG = 1
#: Seconds :meth:`EpisodeWriter.close` waits for the writer's next word before it takes it for
#: stuck (a forked child can deadlock on a lock another thread held at the fork). Logging an
#: episode takes tens of milliseconds, drawing its plots about a second, on a tracking server
#: at most ``HTTP_GIVE_UP_S`` (25 s) a call: a minute of silence is no slow episode.
STALL_TIMEOUT_S = 60.0


class EpisodeWriter:
    """Logs the episodes handed to it, in a child process or a thread (module docstring).

    Build it with :meth:`start`; hand it episodes with :meth:`submit`; :meth:`close` once.
    """

    def __init__(
        self,
        connection: Connection,
        worker: multiprocessing.process.BaseProcess | threading.Thread,
        hurry: _Event,
    ) -> None:
        self._connection = connection
        self._worker = worker
        self._hurry = hurry
        self._closed = False

    @classmethod
    def start(cls, client: MlflowClient, context: EpisodeRunContext) -> EpisodeWriter:
        """Start a writer for ``context``'s store: a forked process where it is safe, else a
        thread sharing ``client``."""
        ours, theirs = multiprocessing.Pipe(duplex=True)
        worker: multiprocessing.process.BaseProcess | threading.Thread
        hurry: _Event
        if _forkable(context.tracking_uri):
            fork = multiprocessing.get_context("fork")
            hurry = fork.Event()
            worker = fork.Process(
                target=_serve_in_child,
                args=(theirs, ours, context, hurry, os.getpid()),
                name="dlsched-episode-writer",
                daemon=True,
            )
            worker.start()
            theirs.close()  # the child holds it now: its exit is this end's EOF
        else:
            hurry = threading.Event()
            worker = threading.Thread(
                target=_serve_in_thread,
                args=(theirs, client, context, hurry),
                name="dlsched-episode-writer",
                daemon=True,
            )
            worker.start()
        return cls(ours, worker, hurry)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def submit(self, job: EpisodeJob) -> list[Reply]:
        """Hand an episode over; what the writer has reported since the last call.

        The replies are read first, so the writer never waits on a full pipe back while this
        waits for room to send.
        """
        replies = self.replies()
        try:
            # a signal in the middle of a send would leave half a message in the pipe
            with deferred():
                self._connection.send(job)
        except OSError:  # the writer is gone (killed by the system, say)
            replies.append(self._gone())
        return replies

    def replies(self) -> list[Reply]:
        """What the writer has reported so far, without waiting."""
        replies = []
        with contextlib.suppress(EOFError, OSError):  # an ended writer has said all it will
            while self._connection.poll():
                replies.append(self._connection.recv())
        return replies

    def close(self, hurry: bool = False, stall_timeout_s: float | None = None) -> list[Reply]:
        """Let the writer finish every episode handed over and end; its last replies.

        A writer that says nothing for ``stall_timeout_s`` is taken for stuck: a child process
        is killed (it ignores SIGTERM), a thread left behind (it is a daemon), and the last
        reply is a :class:`WriterFailed` with ``stopped`` set, naming the wait.

        Args:
            hurry: the evaluation was stopped: the writer logs what it holds without drawing
                plots (the episodes and their records are logged; plots cost the most).
            stall_timeout_s: the longest silence taken for work, in seconds
                (:data:`STALL_TIMEOUT_S` by default).
        """
        if self._closed:
            return []
        stall_timeout_s = STALL_TIMEOUT_S if stall_timeout_s is None else stall_timeout_s
        self._closed = True
        if hurry:
            self._hurry.set()
        replies = self.replies()
        with contextlib.suppress(OSError):  # a writer that died cannot be told anything
            self._connection.send(_Close())
        while True:
            try:
                if not self._connection.poll(stall_timeout_s):
                    replies.append(self._stop(stall_timeout_s))
                    self._connection.close()
                    return replies
                replies.append(self._connection.recv())
            except (EOFError, OSError):
                break
        self._worker.join()
        self._connection.close()
        exit_code = getattr(self._worker, "exitcode", 0)
        if exit_code:  # killed before it said what became of every episode
            replies.append(self._gone())
        return replies

    def _stop(self, stall_timeout_s: float) -> WriterFailed:
        """End a writer that has said nothing for ``stall_timeout_s`` (see :meth:`close`)."""
        kind = "thread" if isinstance(self._worker, threading.Thread) else "process"
        # a thread cannot be killed (a daemon, it ends with the evaluation); a child ignores
        # SIGTERM, so it is killed outright
        if isinstance(self._worker, multiprocessing.process.BaseProcess):
            self._worker.kill()
            self._worker.join()
        return WriterFailed(
            f"the {kind} logging the episodes said nothing for {stall_timeout_s:.0f} s and was "
            "stopped (deadlocked or hung on the store)",
            stopped=True,
        )

    def _gone(self) -> WriterFailed:
        exit_code = getattr(self._worker, "exitcode", None)
        how = f" (exit code {exit_code})" if exit_code is not None else ""
        return WriterFailed(f"the process logging the episodes ended unexpectedly{how}")


class _Close:
    """No more episodes: finish those handed over and end."""


def _forkable(tracking_uri: str) -> bool:
    """Whether a forked child can log to this store safely (see the module docstring)."""
    parsed = urlparse(tracking_uri)
    return (
        parsed.scheme == "sqlite"
        and parsed.path not in ("", "/", "/:memory:")  # an in-memory database is this process's
        and "fork" in multiprocessing.get_all_start_methods()
        and _engine_cache() is not None
    )


def _engine_cache() -> Mapping[str, Any] | None:
    """MLflow's SQLAlchemy engines by database URI, ``None`` if this MLflow keeps them elsewhere
    (then the writer is a thread: a child that cannot renew them must not be forked)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engines = getattr(SqlAlchemyStore, "_engine_map", None)
    return engines if isinstance(engines, dict) else None


def _serve_in_child(
    connection: Connection,
    parent_end: Connection,
    context: EpisodeRunContext,
    hurry: _Event,
    parent_pid: int,
) -> None:
    parent_end.close()  # the fork's copy: open, it would hide the evaluation's end (EOF) here
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    for engine in (_engine_cache() or {}).values():
        engine.dispose(close=False)
        event.listen(engine, "connect", _commit_without_fsync_in_wal)
    # MLflow's usage telemetry runs on threads a fork does not copy: a lock one of them held
    # would stay held here. The evaluation's process reports its own use
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    _serve(connection, MlflowClient(context.tracking_uri), context, hurry)


def _commit_without_fsync_in_wal(connection: Any, record: Any) -> None:
    """In WAL mode, commit without an fsync (``synchronous=NORMAL``): safe from corruption, at
    worst the last commits lost to a power cut, whose episodes are on disk for ``runs sync``.
    In rollback-journal mode, where NORMAL could corrupt the store, nothing changes."""
    cursor = connection.cursor()
    try:
        if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _die_with_parent(parent_pid: int) -> None:
    """Be killed when the evaluation dies (Linux; elsewhere the writer ends at the pipe's EOF)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before the signal was asked for
        os._exit(1)


def _serve_in_thread(
    connection: Connection, client: MlflowClient, context: EpisodeRunContext, hurry: _Event
) -> None:
    try:
        _serve(connection, client, context, hurry)
    finally:
        connection.close()  # this end's close is the evaluation's EOF


def _serve(
    connection: Connection, client: MlflowClient, context: EpisodeRunContext, hurry: _Event
) -> None:
    """Draw and log every episode received until told to close (or the evaluation is gone);
    once ``hurry`` is set, without plots."""
    defaults: dict[int, EpisodeResult] = {}  # default's episodes by seed, for completion plots
    failed = False

    def reply(message: Reply) -> None:
        with contextlib.suppress(OSError):  # the evaluation is gone: nobody to tell
            connection.send(message)

    def next_job() -> EpisodeJob | None:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the evaluation is gone
            return None
        return message if isinstance(message, EpisodeJob) else None  # None: _Close

    while (job := next_job()) is not None:
        result = job.result
        if result.policy.name == DEFAULT_POLICY:
            defaults[result.seed] = result
        if failed and not job.plots:
            continue
        outcome = _write(job, client, context, defaults, plots=not hurry.is_set(), log=not failed)
        if outcome is not None:
            failed = failed or isinstance(outcome, WriterFailed)
            reply(outcome)


def _write(
    job: EpisodeJob,
    client: MlflowClient,
    context: EpisodeRunContext,
    defaults: Mapping[int, EpisodeResult],
    plots: bool,
    log: bool,
) -> Reply | None:
    """Draw one episode's plots and log it, as the job and the writer's state say; the reply."""
    from dlsched.runs.tracking.tracker import log_episode_run  # the tracker imports this module

    result = job.result
    name = episode_name(result.policy, result.seed)
    try:
        if job.plots and plots:
            default = None if result.policy.name == DEFAULT_POLICY else defaults.get(result.seed)
            plot_episode(result, default, job.folder)
    # a full disk, or a bug in a plot: said as a tracking failure, every record is on disk
    except Exception as error:
        return WriterFailed(f"drawing the plots of episode {name} failed: {_said(error)}")
    if not (job.log and log):
        return None
    try:
        run_id = log_episode_run(
            client,
            context.experiment_id,
            context.parent_run_id,
            context.evaluation_id,
            result,
            job.folder,
            context.version,
            context.commit,
            extra_tags=context.owner_tags,
        )
    except STORE_ERRORS as error:
        return WriterFailed(f"logging episode {name} failed: {first_line(error)}")
    # anything else is a bug here or in MLflow: said, not a traceback from a child process
    except Exception as error:
        return WriterFailed(f"logging episode {name} failed: {_said(error)}")
    return EpisodeLogged(name, run_id)


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {first_line(error)}"
