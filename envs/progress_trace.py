"""A job's progress as its workload reported it, event by event: the fine host trace.

The environments step every few seconds, and what a step shows of a job (its iterations so far)
hides how it got there. Where co-located thread pools race, a job's pace switches between
levels within a step and between reruns (``docs/fidelity.md``, 'The host as a distribution');
the races are seen only in the times of the workload's own events, one per training iteration or
per answered batch. A backend that sees those events (the Docker backend, from the JSON lines a
workload prints) keeps them as a :class:`ProgressTrace` per job; the replay model has no finer
time than its step and keeps none.

Traces are bounded: a job keeps its first :data:`MAX_TRACE_EVENTS` events (hours of the
fastest workload), and says when it stopped keeping them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Events kept per job and episode (16 bytes each, 16 MB at the limit): at the fastest shipped
#: workload's 60 iterations/s, over 4 hours of one job.
MAX_TRACE_EVENTS = 1_000_000


@dataclass(frozen=True, eq=False)
class ProgressTrace:
    """One job's progress events in an episode, in the order they happened.

    Attributes:
        job_id: the job.
        unit: ``"iteration"`` (a training job) or ``"batch"`` (an inference service).
        times_s: episode seconds of each event (the workload's clock against the episode's
            start; float64).
        counts: units done by each event, that one included (int64; a migrated job goes on
            from the count it resumed at).
        truncated: more events happened than :data:`MAX_TRACE_EVENTS`; those after it are not
            kept.
    """

    job_id: str
    unit: str
    times_s: np.ndarray
    counts: np.ndarray
    truncated: bool = False

    def __post_init__(self) -> None:
        if self.times_s.shape != self.counts.shape or self.times_s.ndim != 1:
            raise ValueError(
                f"trace of {self.job_id}: times and counts do not match: "
                f"{self.times_s.shape} != {self.counts.shape}"
            )

    def __len__(self) -> int:
        return len(self.times_s)

    def per_second(self, horizon_s: float) -> np.ndarray:
        """Units done in each whole second ``[k, k + 1)`` of the episode up to ``horizon_s``
        (the rate a per-second plot draws); events after the horizon are not counted."""
        seconds = max(int(np.ceil(horizon_s)), 0)
        done = np.diff(self.counts, prepend=self.counts[0] - 1 if len(self) else 0)
        bins = np.floor(self.times_s).astype(np.int64)
        kept = (bins >= 0) & (bins < seconds)
        return np.bincount(bins[kept], weights=done[kept], minlength=seconds)
