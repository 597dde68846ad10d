"""How a dlsched command is stopped: SIGINT and SIGTERM alike, and never twice.

Users stop long evaluations and trainings with Ctrl-C (SIGINT), ``timeout`` or ``docker stop``
(SIGTERM). Both are handled the same way while :func:`interruptible` is active:

- the first signal is recorded as the command's stop and raises :class:`Interrupted` (a
  ``KeyboardInterrupt``) in the main thread, so every ``finally`` runs: containers are removed,
  runs are ended ``KILLED``, a training saves its work;
- every later signal only says that this cleanup is in progress: it does not interrupt it,
  because a cleanup cut short leaves containers running and runs ``RUNNING``.

A handler raises wherever the main thread happens to be, and Python drops an exception raised
inside a weakref callback, a ``__del__`` or a garbage collection (``Exception ignored in ...``:
a late Ctrl-C landed in SQLAlchemy's ``_collection_gced`` and the command went on to exit 0). So
the stop stays recorded until it has propagated: one that was dropped (Python's unraisable hook
says so, and nothing is printed) is raised again at the next safe point (the end of a
:func:`deferred` write, :func:`raise_if_stopped`, or :func:`command_ended` once the command's
work is done), and the next signal raises it at once.

The process then exits with ``128 + signal number`` (130 for SIGINT, 143 for SIGTERM), as a shell
reports a process killed by that signal, after one line that says what the stop undid
(:func:`stop_report`): the containers it removed, the runs it ended ``KILLED``, or that the work
was done when it came.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

#: The signals that stop a command.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which.

    Args:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        """``SIGINT`` or ``SIGTERM``."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process killed by the signal: ``128 + signum``."""
        return 128 + self.signum


def exit_code_of(interruption: KeyboardInterrupt) -> int:
    """The exit code of a command stopped by ``interruption`` (130 unless it says otherwise)."""
    return interruption.exit_code if isinstance(interruption, Interrupted) else 130


@dataclass
class _Stop:
    """The stop of the running command, from its first signal until the command ends.

    Attributes:
        signum: the first stop signal, ``None`` before any.
        raised: its :class:`Interrupted` was raised and has not been dropped since: the stop is
            under way, and a later signal must not cut its cleanup short.
        after_work: it was raised once the command's work was done (:func:`command_ended`).
        runs_killed: the runs ended ``KILLED`` since it arrived (:func:`count_killed_run`).
        removed_before: the containers the process had removed on a stop before this command.
    """

    signum: int | None = None
    raised: bool = False
    after_work: bool = False
    runs_killed: int = 0
    removed_before: int = 0

    def due(self) -> bool:
        """Whether the stop arrived and is still to be raised."""
        return self.signum is not None and not self.raised

    def raise_now(self) -> Interrupted:
        """The exception to raise for the stop, from now on under way."""
        assert self.signum is not None
        self.raised = True
        return Interrupted(self.signum)


_stop = _Stop()
_deferring = 0


def _forget_stop() -> None:
    global _stop
    _stop = _Stop()


# a forked child (the episode writer) handles signals of its own, not its parent's stop
os.register_at_fork(after_in_child=_forget_stop)


def raise_if_stopped() -> None:
    """A safe point: raise the command's stop if it arrived and was never raised, or dropped.

    Outside :func:`deferred` and in the main thread only; nothing happens otherwise.
    """
    if _stop.due() and not _deferring and threading.current_thread() is threading.main_thread():
        raise _stop.raise_now()


def command_ended() -> None:
    """The last safe point, once a command has done its work: a stop Python dropped on the way
    is raised now (the work is kept, and :func:`stop_report` says so)."""
    _stop.after_work = True
    raise_if_stopped()


def count_killed_run() -> None:
    """Count a run ended ``KILLED``, for :func:`stop_report`, if a stop has arrived."""
    if _stop.signum is not None:
        _stop.runs_killed += 1


def stop_report(interruption: KeyboardInterrupt, started: bool = True) -> str:
    """The line that says what a command stopped by ``interruption`` did about it, for
    ``dlsched <command>: `` to start: the containers removed and runs ended since the stop
    (``started``: the command had begun its work, past loading and parsing)."""
    name = interruption.name if isinstance(interruption, Interrupted) else "SIGINT"
    if not started:
        return f"interrupted ({name}) before it started"
    if _stop.after_work:
        return f"interrupted ({name}) as it ended: its work was done, and is kept"
    undone = []
    removed = _containers_removed_on_stop() - _stop.removed_before
    if removed:
        undone.append(f"removed {_count(removed, 'container')}")
    if _stop.runs_killed:
        undone.append(f"ended {_count(_stop.runs_killed, 'run')} as KILLED")
    if not undone:  # said outright: a bare "interrupted" reads as if containers were removed
        return f"interrupted ({name}); no container or run was left running: nothing to clean up"
    return f"interrupted ({name}); " + " and ".join(undone)


def _containers_removed_on_stop() -> int:
    # a process that never loaded the Docker backend removed no container
    docker = sys.modules.get("dlsched.envs.docker.exit_cleanup")
    return docker.removed_on_stop() if docker is not None else 0


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'s' if number != 1 else ''}"


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within the block, a stop signal waits for the block's end, then interrupts.

    For a write that must not be cut in two: a run created but never ended, or a store's
    transaction interrupted half-way, is what a signal in the middle of an MLflow call leaves.
    Outside :func:`interruptible`, or outside the main thread (where Python cannot handle
    signals), nothing changes.
    """
    global _deferring
    if threading.current_thread() is not threading.main_thread():
        # a signal interrupts the main thread: the block of another thread (the episode
        # writer's) neither defers it nor may raise it
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        # Even over an error of the block: the user asked to stop.
        raise_if_stopped()


@contextlib.contextmanager
def interruptible(
    notify: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True),
) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` once, then only notify.

    Outside the main thread (where Python cannot set signal handlers) nothing changes, and a
    signal the process ignores (started with ``nohup``, or in the background of a script, where
    the shell ignores SIGINT) stays ignored.

    Args:
        notify: shows the message of a repeated signal (stderr by default).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        repeated = _stop.signum is not None
        if _stop.signum is None:
            _stop.signum = signum
        if _stop.due() and not _deferring:
            raise _stop.raise_now()
        if repeated:
            notify(
                f"{signal.Signals(signum).name} again: cleanup in progress (removing "
                "containers, ending runs, saving what was done); dlsched exits as soon as it is "
                "done"
            )

    # A signal the process was started ignoring (``nohup``, ``cmd &`` in a script) stays ignored
    previous: dict[int, Any] = {
        stop: signal.signal(stop, handle)
        for stop in STOP_SIGNALS
        if signal.getsignal(stop) is not signal.SIG_IGN
    }
    previous_hook = sys.unraisablehook

    def dropped(unraisable: Any) -> None:
        """Python's hook for an exception it cannot raise (weakref callback, ``__del__``)."""
        if isinstance(unraisable.exc_value, Interrupted):
            _stop.raised = False  # not under way after all: raised at the next safe point
            return
        previous_hook(unraisable)

    sys.unraisablehook = dropped
    _stop.removed_before = _containers_removed_on_stop()
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        _forget_stop()
        for stop, handler in previous.items():
            signal.signal(stop, handler)
