"""Removing the containers of this process's live episodes when it is interrupted or exits.

Each Docker backend episode registers its cleanup (a ``weakref.finalize`` of
:func:`remove_episode`) with :func:`track` at reset and withdraws it with :func:`untrack` when it
ends. While any is registered, SIGINT and SIGTERM run every live cleanup, then what the handler
they replaced did; the finalizers also run at interpreter exit and when their backend is
garbage-collected. A signal that arrives during a removal waits for its end, because a removal
cut short leaves containers running. What a killed process leaves behind, ``dlsched docker
cleanup`` (:mod:`dlsched.envs.docker.cleanup`) removes.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from types import FrameType
from typing import Any

from dlsched.envs.docker.containers import remove_managed_containers
from dlsched.envs.docker.engine import connect, endpoint_url

_log = logging.getLogger(__name__)


#: Cleanups of the episodes alive in this process, run on SIGINT/SIGTERM (and, through
#: ``weakref.finalize``, at interpreter exit or when their backend is garbage-collected).
_live_cleanups: set[weakref.finalize[Any, Any]] = set()
_previous_handlers: dict[int, Any] = {}
_INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_registry_lock = threading.Lock()
#: Removals running in this process, and a signal that arrived during one: it is handled once
#: the removal ends, because a removal cut short leaves containers running.
_removing = 0
_deferred_signal: tuple[int, FrameType | None] | None = None
#: Containers removed by the handler of those signals, which a command's last line counts.
_removed_on_stop = 0


def remove_episode(episode: str, endpoints: tuple[str | None, ...]) -> int:
    """Remove an episode's containers from every engine it used, with fresh clients; how many.

    Fresh clients, because this may run inside a signal handler while the backend's own client
    is in the middle of a call. A SIGINT or SIGTERM that arrives meanwhile is handled after it.
    """
    global _removing, _deferred_signal
    _removing += 1
    try:
        removed = _remove_from(episode, endpoints)
    finally:
        _removing -= 1
    if _removing == 0 and _deferred_signal is not None:
        deferred, _deferred_signal = _deferred_signal, None
        _on_interrupt(*deferred)
    return removed


def removed_on_stop() -> int:
    """How many containers this process has removed on a SIGINT or SIGTERM, in all."""
    return _removed_on_stop


def _remove_from(episode: str, endpoints: tuple[str | None, ...]) -> int:
    count = 0
    for endpoint in endpoints:
        try:
            client = connect(endpoint, timeout_s=30.0)
            removed = remove_managed_containers(client, episode)
            client.close()
        except Exception as error:
            # At exit or in a signal handler nobody can act on an exception; say what is left.
            _log.warning(
                "could not remove the containers of episode %s at %s (%r); run "
                "`dlsched docker cleanup`",
                episode,
                endpoint_url(endpoint),
                error,
            )
            continue
        if removed:
            _log.info("removed %d containers of episode %s", len(removed), episode)
        count += len(removed)
    return count


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    """Remove every live episode's containers, then do what the previous handler did.

    During a removal (this handler's, or one that ``close`` began) the signal only waits for its
    end: interrupting it would leave containers running.
    """
    global _deferred_signal, _removed_on_stop
    if _removing:
        if _deferred_signal is None:
            _deferred_signal = (signum, frame)
        _log.warning(
            "%s: removing the episode's containers first; it takes effect when they are gone",
            signal.Signals(signum).name,
        )
        return
    for cleanup in list(_live_cleanups):
        _removed_on_stop += cleanup() or 0  # ``None``: it had run already
    _live_cleanups.clear()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        # Die of the signal as the process would have without us.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def track(cleanup: weakref.finalize[Any, Any]) -> None:
    """Register a live episode's cleanup; from the main thread, handle SIGINT/SIGTERM with it."""
    with _registry_lock:
        _live_cleanups.add(cleanup)
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread; atexit still runs
        for signum in _INTERRUPT_SIGNALS:
            current = signal.getsignal(signum)
            # a signal the process ignores (nohup, `cmd &` in a script) must not end episodes
            if current is not _on_interrupt and current is not signal.SIG_IGN:
                _previous_handlers[signum] = current
                signal.signal(signum, _on_interrupt)


def untrack(cleanup: weakref.finalize[Any, Any]) -> None:
    """Withdraw an ended episode's cleanup; with the last, put back the replaced handlers."""
    with _registry_lock:
        _live_cleanups.discard(cleanup)
        if _live_cleanups or threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in list(_previous_handlers.items()):
            # Put back the handler we replaced, unless someone replaced ours since.
            if signal.getsignal(signum) is _on_interrupt:
                signal.signal(signum, previous)
            del _previous_handlers[signum]
