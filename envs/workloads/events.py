"""The JSON lines a workload prints, as typed events: written by the workloads, parsed by readers.

Each event is one JSON object on one line of stdout, flushed at once, so that a reader following
the container's output sees progress as it happens. :func:`parse_event` turns a line back into an
event and returns ``None`` for anything else on the stream (torch warnings, tracebacks), which a
reader skips.

This module needs only the standard library, so the Docker backend can import it without torch.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, TextIO


@dataclass(frozen=True)
class StartEvent:
    """The program is ready: data loaded, model built; its first unit starts now.

    Attributes:
        time: Unix time in seconds.
        workload: the workload's name.
        kind: ``"training"`` or ``"inference"``.
        threads: the torch intra-op threads it starts with (see :mod:`.cpu_quota`).
        start_iteration: units (iterations or batches) done before this run, from
            ``--start-iteration`` or a resumed checkpoint; 0 for a fresh job.
    """

    time: float
    workload: str
    kind: Literal["training", "inference"]
    threads: int
    start_iteration: int = 0
    event: Literal["start"] = "start"


@dataclass(frozen=True)
class IterationEvent:
    """One training iteration finished.

    Attributes:
        time: Unix time in seconds when it finished.
        iteration: iterations completed so far, this one included (1 for the first).
        loss: the training loss of this iteration's minibatch.
        accuracy: classification accuracy on this iteration's minibatch, or ``None`` for a
            workload that does not classify (``vae-digits``).
        threads: torch intra-op threads used for it.
    """

    time: float
    iteration: int
    loss: float
    accuracy: float | None
    threads: int
    event: Literal["iteration"] = "iteration"


@dataclass(frozen=True)
class DoneEvent:
    """A training job finished all its iterations; the process exits 0 right after.

    Attributes:
        time: Unix time in seconds.
        iterations: the total iterations of the job (``--iterations``).
    """

    time: float
    iterations: int
    event: Literal["done"] = "done"


@dataclass(frozen=True)
class BatchEvent:
    """An inference service answered one batch.

    Attributes:
        time: Unix time in seconds when the answer was ready.
        batch: batches answered so far, this one included (1 for the first).
        latency_s: seconds from taking the batch to answering it (preprocessing and forward).
        images: images in the batch.
        threads: torch intra-op threads used for it.
    """

    time: float
    batch: int
    latency_s: float
    images: int
    threads: int
    event: Literal["batch"] = "batch"


WorkloadEvent = StartEvent | IterationEvent | DoneEvent | BatchEvent

_EVENT_TYPES: dict[str, type[WorkloadEvent]] = {
    "start": StartEvent,
    "iteration": IterationEvent,
    "done": DoneEvent,
    "batch": BatchEvent,
}


def encode_event(event: WorkloadEvent) -> str:
    """One JSON line (without the newline) for ``event``, its ``event`` key first.

    A non-finite loss (a diverging model) is written as ``null`` so the line stays valid JSON.
    """
    fields = asdict(event)
    ordered: dict[str, Any] = {"event": fields.pop("event")}
    for key, value in fields.items():
        ordered[key] = None if isinstance(value, float) and not math.isfinite(value) else value
    return json.dumps(ordered, separators=(",", ":"))


def emit(event: WorkloadEvent, stream: TextIO | None = None) -> None:
    """Print ``event`` as one line on ``stream`` (stdout by default) and flush it."""
    out = sys.stdout if stream is None else stream
    out.write(encode_event(event) + "\n")
    out.flush()


def parse_event(line: str | bytes) -> WorkloadEvent | None:
    """The event a line of workload output holds, or ``None`` if it holds none.

    Lines that are not JSON objects with a known ``event`` and its fields are not events (a
    workload's stream also carries warnings), so they give ``None`` rather than an error. Keys
    this version does not know are ignored, so a newer workload can add fields. A ``null`` loss
    (written for a non-finite one) comes back as NaN.
    """
    text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(decoded, dict):
        return None
    event_type = _EVENT_TYPES.get(str(decoded.get("event")))
    if event_type is None:
        return None
    known = {field.name for field in fields(event_type)}
    values = {key: value for key, value in decoded.items() if key in known}
    if event_type is IterationEvent and values.get("loss", math.nan) is None:
        values["loss"] = math.nan
    try:
        return event_type(**values)
    except TypeError:
        return None
