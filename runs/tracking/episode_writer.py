"""The episode writer: an evaluation's MLflow logging and episode plots, beside its episodes.

Logging an episode to a sqlite store costs more than running a replay episode (SQLAlchemy's unit
of work for every metric point, a transaction per call), and drawing its plots costs ten times
more. Done between the episodes, they made a tracked evaluation over 20 times slower than an
untracked one. The writer takes them off the episodes' path: the evaluation hands each finished
episode over (:meth:`EpisodeWriter.submit`) and runs the next one while the writer draws the
episode's plots (when asked) and logs it as a child run
(:func:`~dlsched.runs.tracking.episode_run.log_episode_run`); :meth:`EpisodeWriter.replies` and
:meth:`EpisodeWriter.close` say what became of each.

The evaluation never waits for the writer between episodes:

- episodes go over a pipe, which holds a few hundred kilobytes (a few episodes): a writer that
  stops reading (deadlocked, or hung on a locked store) would block the evaluation's next send
  for ever. A courier thread of the evaluation sends them from a queue instead, and only it can
  block;
- the writer answers every episode it is handed (:class:`EpisodeLogged`,
  :class:`EpisodeHandled` for one it did not log, :class:`WriterFailed`), so its answers say it
  is alive whether or not it logs. One that says nothing for :data:`STALL_TIMEOUT_S` while it
  holds episodes is taken for stuck and stopped, in the middle of the evaluation as at its end;
  the evaluation then goes on untracked (every episode is on disk already) and ends ``KILLED``
  the runs the writer left ``RUNNING``.

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
import queue
import signal
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow import MlflowClient
from sqlalchemy import event

from dlsched.runs.evaluation.records import DEFAULT_POLICY, EpisodeResult
from dlsched.runs.interruption import deferred
from dlsched.runs.tracking.episode_run import log_episode_run
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
class EpisodeHandled:
    """An episode was handled without being logged: its plots drawn after the store failed, or
    nothing done (no plots asked for). Its reply, so that a writer that only draws is not taken
    for a silent one."""

    name: str


@dataclass(frozen=True)
class WriterFailed:
    """The writer stopped logging: the store refused a write, or a plot could not be drawn.

    Attributes:
        what: what failed, as a clause (``logging episode default-seed1 failed: ...``).
        stopped: the writer is no more (it said nothing for :data:`STALL_TIMEOUT_S` with
            episodes in hand and was stopped, or it ended unexpectedly): episode runs it had
            started may be left ``RUNNING`` for the evaluation to end.
    """

    what: str
    stopped: bool = False


#: What the writer answers for each episode handed to it, one each (:class:`WriterFailed` also
#: comes from the evaluation's side when the writer is stopped or gone).
Reply = EpisodeLogged | EpisodeHandled | WriterFailed
_Event = threading.Event | multiprocessing.synchronize.Event

#: Linux's prctl option that signals a process when its parent dies.
_PR_SET_PDEATHSIG = 1
#: Seconds the writer may say nothing while it holds episodes before it is taken for stuck (a
#: forked child can deadlock on a lock another thread held at the fork, or hang on a locked
#: store). It answers every episode; logging one takes tens of milliseconds, drawing its plots
#: about a second, on a tracking server at most ``HTTP_GIVE_UP_S`` (25 s) a call: a minute of
#: silence is no slow episode.
STALL_TIMEOUT_S = 60.0


class EpisodeWriter:
    """Logs the episodes handed to it, in a child process or a thread (module docstring).

    Build it with :meth:`start`; hand it episodes with :meth:`submit`, which never waits for
    the writer; :meth:`close` at the end.
    """

    def __init__(
        self,
        connection: Connection,
        worker: multiprocessing.process.BaseProcess | threading.Thread,
        hurry: _Event,
        stall_timeout_s: float,
    ) -> None:
        self._connection = connection
        self._worker = worker
        self._hurry = hurry
        self._stall_timeout_s = stall_timeout_s
        # what the courier sends, in order: put() never blocks, and is safe under a signal
        self._outbox: queue.SimpleQueue[EpisodeJob | _Close] = queue.SimpleQueue()
        self._courier = threading.Thread(
            target=_deliver,
            args=(self._outbox, connection),
            name="dlsched-episode-courier",
            daemon=True,
        )
        self._courier.start()
        # replies received and not yet returned: a signal between the two keeps them here
        self._received: list[Reply] = []
        self._unanswered = 0  # episodes handed over that the writer has not answered yet
        self._heard_at = time.monotonic()  # its last answer, or the hand-over that woke it
        self._close_sent = False
        self._ended = False  # the writer ended, was stopped or is gone: nothing more to hand
        self._closed = False

    @classmethod
    def start(
        cls,
        client: MlflowClient,
        context: EpisodeRunContext,
        stall_timeout_s: float | None = None,
    ) -> EpisodeWriter:
        """Start a writer for ``context``'s store: a forked process where it is safe, else a
        thread sharing ``client``.

        Args:
            client: the evaluation's client (the thread's).
            context: what the episode runs are logged with.
            stall_timeout_s: the longest silence taken for work while the writer holds
                episodes, in seconds (:data:`STALL_TIMEOUT_S` by default).
        """
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
        # the courier thread starts after the fork: the child must not copy its locks
        return cls(
            ours, worker, hurry, STALL_TIMEOUT_S if stall_timeout_s is None else stall_timeout_s
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run to its end."""
        return self._closed

    def submit(self, job: EpisodeJob) -> list[Reply]:
        """Hand an episode over without waiting for the writer; what it has reported since the
        last call (:meth:`replies`).

        Once the writer is stopped or gone (a reply :class:`WriterFailed` with ``stopped``),
        nothing more is handed over: the evaluation goes on untracked.
        """
        replies = self.replies()
        if self._ended or self._close_sent:
            return replies
        with deferred():  # counted if and only if queued
            if self._unanswered == 0:
                self._heard_at = time.monotonic()  # an idle writer's silence was no stall
            self._unanswered += 1
            self._outbox.put(job)
        return replies

    def replies(self) -> list[Reply]:
        """What the writer has reported so far, without waiting.

        A writer that has said nothing for the stall timeout while it holds episodes is stopped
        here, in the middle of the evaluation as :meth:`close` stops it at the end; one that
        ended unexpectedly is said once. Either way the last reply is a :class:`WriterFailed`
        with ``stopped`` set.
        """
        if not self._ended:
            try:
                while self._connection.poll():
                    self._receive()
            except (EOFError, OSError):  # its end is closed
                self._received += self._ended_itself()
            if not self._ended and self._unanswered and self._silence_left() <= 0:
                self._received.append(self._stop())
        replies, self._received = self._received, []
        return replies

    def close(self, hurry: bool = False) -> list[Reply]:
        """Let the writer finish every episode handed over and end; its last replies.

        A writer that says nothing for the stall timeout (:meth:`start`) while it holds
        episodes, or when told to end, is taken for stuck: a child process is killed (it ignores
        SIGTERM), a thread left behind (it is a daemon, and hears no more from the evaluation),
        and the last reply is a :class:`WriterFailed` with ``stopped`` set, naming the wait. A
        signal while it waits leaves it to be called again (with ``hurry``).

        Args:
            hurry: the evaluation was stopped: the writer logs what it holds without drawing
                plots (the episodes and their records are logged; plots cost the most).
        """
        if self._closed:
            return []
        if hurry:
            self._hurry.set()
        if not self._ended and not self._close_sent:
            if self._unanswered == 0:
                self._heard_at = time.monotonic()
            self._close_sent = True
            self._outbox.put(_Close())
        while not self._ended:
            try:
                if self._connection.poll(max(0.0, self._silence_left())):
                    self._receive()
                else:
                    self._received.append(self._stop())
            except (EOFError, OSError):  # it ended
                self._received += self._ended_itself()
        self._closed = True
        return self.replies()

    def _receive(self) -> None:
        """Receive one reply (the pipe has one)."""
        # a signal in the middle of a message would leave the rest of it in the pipe
        with deferred():
            self._received.append(self._connection.recv())
            self._unanswered -= 1
            self._heard_at = time.monotonic()

    def _silence_left(self) -> float:
        return self._heard_at + self._stall_timeout_s - time.monotonic()

    @property
    def _kind(self) -> str:
        return "thread" if isinstance(self._worker, threading.Thread) else "process"

    def _stop(self) -> WriterFailed:
        """End a writer that has said nothing for the stall timeout (see :meth:`close`)."""
        # a thread cannot be killed (a daemon, it ends with the evaluation); a child ignores
        # SIGTERM, so it is killed outright
        if isinstance(self._worker, multiprocessing.process.BaseProcess):
            self._worker.kill()
            self._end(join_worker=True)
        else:
            self._end(join_worker=False)
        return WriterFailed(
            f"the {self._kind} logging the episodes said nothing for {self._stall_timeout_s:g} s "
            "and was stopped (deadlocked or hung on the store)",
            stopped=True,
        )

    def _ended_itself(self) -> list[Reply]:
        """The writer's end of the pipe closed: nothing if it was told to close and did, else
        that it is gone."""
        self._end(join_worker=True)
        exit_code = getattr(self._worker, "exitcode", 0)
        if self._close_sent and not exit_code:
            return []
        how = f" (exit code {exit_code})" if exit_code else ""
        return [
            WriterFailed(
                f"the {self._kind} logging the episodes ended unexpectedly{how}", stopped=True
            )
        ]

    def _end(self, join_worker: bool) -> None:
        """Hang up on the writer and let the courier go (again if a signal cut it short)."""
        if join_worker:
            self._worker.join()
        # shut this end down: a courier blocked on a full pipe fails at once (so does one woken
        # by the last message below), and a stuck thread that wakes up hears the end
        with (
            contextlib.suppress(OSError),
            socket.socket(fileno=os.dup(self._connection.fileno())) as end,
        ):
            end.shutdown(socket.SHUT_RDWR)
        self._outbox.put(_Close())
        self._courier.join(self._stall_timeout_s)
        if not self._courier.is_alive():  # else it still holds the pipe: left to end with it
            self._connection.close()
        self._ended = True


class _Close:
    """No more episodes: finish those handed over and end."""


def _deliver(outbox: queue.SimpleQueue[EpisodeJob | _Close], connection: Connection) -> None:
    """The courier: send what is queued, in order, until the close is sent or the writer has
    hung up; only this thread ever waits for room in the pipe."""
    while True:
        message = outbox.get()
        try:
            connection.send(message)
        except OSError:  # the writer is gone, or was stopped: the evaluation's side says so
            return
        if isinstance(message, _Close):
            return


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
    once ``hurry`` is set, without plots. Every episode is answered, logged or not."""
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
        outcome = _write(job, client, context, defaults, plots=not hurry.is_set(), log=not failed)
        failed = failed or isinstance(outcome, WriterFailed)
        reply(outcome)


def _write(
    job: EpisodeJob,
    client: MlflowClient,
    context: EpisodeRunContext,
    defaults: Mapping[int, EpisodeResult],
    plots: bool,
    log: bool,
) -> Reply:
    """Draw one episode's plots and log it, as the job and the writer's state say; the reply."""
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
        return EpisodeHandled(name)
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
