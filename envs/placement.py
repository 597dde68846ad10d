"""Placers decide which worker an arriving job runs on."""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from dlsched.envs.errors import UnknownNameError
from dlsched.envs.scenarios.model import JobSpec
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry


class Placer(ABC):
    """Chooses the worker of an arriving job among those with a free slot."""

    @abstractmethod
    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        """Return one of ``candidates`` (worker indices, never empty) for ``job``."""


class SpreadPlacer(Placer):
    """Docker Swarm's default ``spread`` strategy: the worker running the fewest containers.

    Ties go to the lowest worker index, so placement is deterministic.
    """

    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        return min(candidates, key=lambda worker: (len(telemetry.on_worker(worker)), worker))


class LeastWorkPlacer(Placer):
    """The worker with the least estimated work left per core, the arriving job's included.

    A running training job's work left is its remaining iterations at the CPU-seconds per
    iteration it has spent so far (telemetry only: contention that burns CPU without progress
    counts as work); a job without an iteration yet, the arriving one included, counts as the
    mean of the known ones (one CPU-second where none is known, which makes it the fewest jobs
    per core). Spread counts containers, so on workers of unequal cores it crowds the small ones,
    and it ignores how long each job has left; both weigh here. Ties go to the lowest index.
    """

    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        running = [j for j in telemetry.jobs if j.state in _HOLDING]
        known = [left for left in map(_work_left, running) if left is not None]
        typical = sum(known) / len(known) if known else 1.0

        def load(worker: int) -> tuple[float, int]:
            work = typical + sum(
                typical if (left := _work_left(j)) is None else left
                for j in running
                if j.worker == worker
            )
            return (work / telemetry.workers[worker].cores, worker)

        return min(candidates, key=load)


#: The states of a job that holds a slot of its worker.
_HOLDING = frozenset({JobState.RUNNING, JobState.MIGRATING})


def _work_left(job: JobTelemetry) -> float | None:
    """The CPU-seconds a training job has left at its spending so far (``None``: unknown)."""
    if not job.iterations or not job.total_iterations:
        return None
    return (job.total_iterations - job.iterations) * job.cpu_seconds / job.iterations


#: The placers a learned model may declare, by the name its card records.
PLACERS: Mapping[str, type[Placer]] = {"spread": SpreadPlacer, "least-work": LeastWorkPlacer}


def placer_named(name: str) -> Placer:
    """A new placer of ``name`` (a key of :data:`PLACERS`).

    Raises:
        UnknownNameError: no placer has the name.
    """
    if name not in PLACERS:
        raise UnknownNameError("placer", name, PLACERS)
    return PLACERS[name]()


class SpreadQueue:
    """:class:`SpreadPlacer`'s choices for many arrivals in a row, in time linear in them.

    Asked for each job of a burst, ``SpreadPlacer`` counts every candidate worker's jobs in the
    telemetry (a scan of all jobs per worker, per job: 7.9 s to place 640 jobs on 64 workers).
    This queue keeps the count and the free slots of every worker and a heap of the workers
    with a free slot ordered as ``SpreadPlacer`` orders them (fewest active jobs, then the lowest
    index), so it gives the same worker for every job.

    Args:
        counts: per worker, its active jobs now.
        free: per worker, its free slots now.
    """

    def __init__(self, counts: Sequence[int], free: Sequence[int]) -> None:
        # Built without a Python loop over the workers: one queue per arrival on 64 workers
        # cost more than placing the job.
        self.counts = list(map(int, counts))
        self.free = list(map(int, free))
        self._heap = list(itertools.compress(zip(self.counts, itertools.count()), self.free))
        heapq.heapify(self._heap)

    def has_free_slot(self, worker: int) -> bool:
        """Whether ``worker`` has a free slot."""
        return self.free[worker] > 0

    def choose(self) -> int | None:
        """The worker ``SpreadPlacer`` picks among those with a free slot; ``None`` if none has."""
        heap = self._heap
        while heap:
            count, worker = heap[0]
            if count == self.counts[worker] and self.free[worker] > 0:
                return worker
            heapq.heappop(heap)  # an entry from before the worker's count or slots changed
        return None

    def took(self, worker: int) -> None:
        """A job was placed on ``worker``: one more active job, one slot less."""
        self.counts[worker] += 1
        self.free[worker] -= 1
        if self.free[worker] > 0:
            heapq.heappush(self._heap, (self.counts[worker], worker))
