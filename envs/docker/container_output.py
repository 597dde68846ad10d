"""A workload's progress, read incrementally from the output stream of its container.

A workload prints one JSON line per event (:mod:`dlsched.envs.workloads.events`). The engine
hands its output over in chunks that need not end at a line break, and the stream also carries
lines that are not events (warnings, tracebacks, stray bytes). :class:`JsonLineReader` turns
chunks into events, keeping an unfinished line until its end arrives; :class:`ContainerOutput`
feeds it from a stream in a background thread, so that reading a job's progress at a step costs
nothing but a lock. It also keeps the time of every iteration or batch (the fine trace of
:mod:`dlsched.envs.progress_trace`), up to :data:`~dlsched.envs.progress_trace.MAX_TRACE_EVENTS`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dlsched.envs.progress_trace import MAX_TRACE_EVENTS
from dlsched.envs.workloads.events import (
    BatchEvent,
    DoneEvent,
    IterationEvent,
    StartEvent,
    WorkloadEvent,
    parse_event,
)

_log = logging.getLogger(__name__)

#: A line longer than this without a line break is not an event; it is dropped as it streams in
#: rather than held in memory (an event line is about 150 bytes).
MAX_LINE_BYTES = 1 << 16


class JsonLineReader:
    """Splits a byte stream into lines and returns the workload events among them."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        """Args:
        max_line_bytes: longest line kept; the rest of a longer one is skipped.
        """
        self._max_line_bytes = max_line_bytes
        self._partial = bytearray()
        self._skipping = False  # inside an overlong line, until its line break

    def feed(self, chunk: bytes) -> list[WorkloadEvent]:
        """The events completed by ``chunk``, in order; an unfinished last line is kept."""
        events: list[WorkloadEvent] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                self._partial += chunk[start:end]
                event = parse_event(bytes(self._partial))
                if event is not None:
                    events.append(event)
            self._partial.clear()
            start = end + 1
        if not self._skipping:
            self._partial += chunk[start:]
            if len(self._partial) > self._max_line_bytes:
                self._partial.clear()
                self._skipping = True
        return events

    def finish(self) -> list[WorkloadEvent]:
        """At the end of the stream: the event on a last line that had no line break, if any."""
        event = None if self._skipping else parse_event(bytes(self._partial))
        self._partial.clear()
        self._skipping = False
        return [event] if event is not None else []


@dataclass(frozen=True)
class Progress:
    """What a workload has reported so far.

    Attributes:
        started_at: Unix time of its start event (ready to work), ``None`` before it.
        start_iteration: training iterations done before this run (a resumed job).
        iterations: training iterations completed, counting those before this run.
        loss: the last reported loss, ``None`` before the first iteration.
        accuracy: the last reported minibatch accuracy, if the workload reports one.
        batches: inference batches answered in this run.
        latency_s: latency of the last answered batch, ``None`` before the first.
        done_at: Unix time of its done event, ``None`` before it.
        total_iterations: the iterations its done event reports.
        ended: the stream has ended (the container exited) and everything in it was read.
    """

    started_at: float | None = None
    start_iteration: int = 0
    iterations: int = 0
    loss: float | None = None
    accuracy: float | None = None
    batches: int = 0
    latency_s: float | None = None
    done_at: float | None = None
    total_iterations: int | None = None
    ended: bool = False

    def after(self, event: WorkloadEvent) -> Progress:
        """This progress updated by ``event``."""
        if isinstance(event, StartEvent):
            return dataclasses.replace(
                self,
                started_at=event.time,
                start_iteration=event.start_iteration,
                iterations=max(self.iterations, event.start_iteration),
            )
        if isinstance(event, IterationEvent):
            loss = event.loss if math.isfinite(event.loss) else None
            return dataclasses.replace(
                self, iterations=event.iteration, loss=loss, accuracy=event.accuracy
            )
        if isinstance(event, BatchEvent):
            return dataclasses.replace(self, batches=event.batch, latency_s=event.latency_s)
        if isinstance(event, DoneEvent):
            return dataclasses.replace(self, done_at=event.time, total_iterations=event.iterations)
        raise TypeError(f"not a workload event: {event!r}")


class ContainerOutput:
    """Follows one output stream in a daemon thread and keeps the progress it reports.

    The stream ends when the container exits; :meth:`wait_ended` then returns ``True`` once every
    line before the end has been read, so a caller can tell a finished job (its done event seen)
    from one that died.
    """

    def __init__(
        self,
        chunks: Iterable[bytes],
        cancel: Callable[[], None],
        name: str,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        """Start following.

        Args:
            chunks: the stream, as the byte chunks it delivers (blocking until the next).
            cancel: stops the stream from another thread (closing its connection).
            name: what the stream is, for the thread's name.
            max_line_bytes: longest line kept (see :class:`JsonLineReader`).
        """
        self._chunks = chunks
        self._cancel = cancel
        self._reader = JsonLineReader(max_line_bytes)
        self._lock = threading.Lock()
        self._progress = Progress()
        # (Unix time, units done) of every iteration or batch, up to MAX_TRACE_EVENTS
        self._event_times = array("d")
        self._event_counts = array("q")
        self._events_dropped = False
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"output-{name}", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            for chunk in self._chunks:
                self._apply(self._reader.feed(chunk))
        except Exception as error:
            # A connection that breaks ends the output as an exit does; the caller learns the
            # job's fate from the engine, so this is worth a line in the log, not a crash.
            _log.debug("output stream %s broke: %r", self._thread.name, error)
        finally:
            self._apply(self._reader.finish())
            with self._lock:
                self._progress = dataclasses.replace(self._progress, ended=True)
            self._ended.set()

    def _apply(self, events: list[WorkloadEvent]) -> None:
        if not events:
            return
        with self._lock:
            for event in events:
                self._progress = self._progress.after(event)
                if isinstance(event, IterationEvent | BatchEvent):
                    self._keep_event(event)

    def _keep_event(self, event: IterationEvent | BatchEvent) -> None:
        if len(self._event_times) >= MAX_TRACE_EVENTS:
            self._events_dropped = True
            return
        self._event_times.append(event.time)
        self._event_counts.append(
            event.iteration if isinstance(event, IterationEvent) else event.batch
        )

    def progress(self) -> Progress:
        """The progress reported so far."""
        with self._lock:
            return self._progress

    def events(self) -> tuple[array[float], array[int], bool]:
        """The Unix time and the units done of every iteration or batch reported so far (copies),
        and whether any beyond :data:`~dlsched.envs.progress_trace.MAX_TRACE_EVENTS` were not
        kept."""
        with self._lock:
            return (
                array("d", self._event_times),
                array("q", self._event_counts),
                (self._events_dropped),
            )

    def wait_ended(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the stream to end; whether it has."""
        return self._ended.wait(timeout_s)

    def close(self) -> None:
        """Stop following (the progress read so far stays available)."""
        if not self._ended.is_set():
            # A stream the engine already tore down needs no cancelling.
            with contextlib.suppress(Exception):
                self._cancel()
