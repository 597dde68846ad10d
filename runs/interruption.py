"""How a dlsched command is stopped: SIGINT and SIGTERM alike, and never twice.

Users stop long evaluations and trainings with Ctrl-C (SIGINT), ``timeout`` or ``docker stop``
(SIGTERM). Both are handled the same way while :func:`interruptible` is active:

- the first signal raises :class:`Interrupted` (a ``KeyboardInterrupt``) in the main thread, so
  every ``finally`` runs: containers are removed, runs are ended ``KILLED``, a training saves its
  work;
- every later signal only says that this cleanup is in progress: it does not interrupt it,
  because a cleanup cut short leaves containers running and runs ``RUNNING``.

The process then exits with ``128 + signal number`` (130 for SIGINT, 143 for SIGTERM), as a shell
reports a process killed by that signal.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
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


_deferring = 0
_pending: list[int] = []


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
        if _deferring == 0 and _pending:
            # Even over an error of the block: the user asked to stop.
            raise Interrupted(_pending.pop())


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
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            if _deferring:
                _pending.append(signum)
                return
            raise Interrupted(signum)
        notify(
            f"{signal.Signals(signum).name} again: cleanup in progress (removing containers, "
            "ending runs, saving what was done); dlsched exits as soon as it is done"
        )

    # A signal the process was started ignoring (``nohup``, ``cmd &`` in a script) stays ignored
    previous: dict[int, Any] = {
        stop: signal.signal(stop, handle)
        for stop in STOP_SIGNALS
        if signal.getsignal(stop) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        _pending.clear()
        for stop, handler in previous.items():
            signal.signal(stop, handler)
