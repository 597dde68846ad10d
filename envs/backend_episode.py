"""A backend of one episode at a time, as the environment loop drives backends.

:class:`BackendEpisode` is the :class:`~dlsched.envs.episode_batch.EpisodeBatch` of a
:class:`~dlsched.envs.backend.Backend` that runs one episode at a time (the Docker backend): one
row, whose arrays it fills from the typed telemetry every :meth:`~BackendEpisode.advance`
returns, and whose calls it turns into the backend's ``reset``, ``apply`` and ``advance``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dlsched.envs.decision import Placement
from dlsched.envs.episode_batch import (
    HAS_ENDED,
    IS_ACTIVE,
    MIGRATING,
    PHASE_OF_STATE,
    STARTING,
    EpisodeBatch,
    EpisodeJobs,
    Generators,
    Move,
)
from dlsched.envs.errors import ScenarioError
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.telemetry import Telemetry

if TYPE_CHECKING:
    from dlsched.envs.backend import Backend

#: The order of an episode's jobs (its columns): by arrival, then id.
_ARRIVAL_ORDER = operator.attrgetter("arrival_s", "job_id")


class BackendEpisode(EpisodeBatch):
    """One episode of ``backend`` as an episode batch of one row (see the module docstring).

    Args:
        backend: the backend; the batch drives it, the caller closes it.
        scenario: the scenario its episodes run.
    """

    def __init__(self, backend: Backend, scenario: Scenario) -> None:
        super().__init__(scenario, 1)
        self.backend = backend
        self._column: dict[str, int] = {}

    def reset_rows(self, rows: Sequence[int], episodes: EpisodeJobs, rngs: Generators) -> None:
        """Reset the backend with the episode's jobs, as they were drawn."""
        if list(rows) != [0] or len(episodes) != 1:
            raise ValueError(f"a one-episode batch resets row 0 alone, not rows {list(rows)}")
        jobs = episodes[0]
        ordered = tuple(sorted(jobs, key=_ARRIVAL_ORDER))
        if len(ordered) > self.jobs:
            raise ScenarioError(
                f"episode has {len(ordered)} jobs but scenario {self.scenario.name!r} allows at "
                f"most {self.jobs}"
            )
        telemetry = self.backend.reset(self.scenario, jobs, rngs[0])
        state = self.state
        state.describe(np.zeros(1, dtype=np.int64), [ordered])
        state.total[0, : len(ordered)] = [job.iterations or 0 for job in ordered]
        self.set_jobs(0, ordered)
        self._column = {job.job_id: column for column, job in enumerate(ordered)}
        self._read(telemetry)

    def place(
        self, rows: np.ndarray, jobs: np.ndarray, workers: np.ndarray, slots: np.ndarray
    ) -> None:
        """Start the jobs on the backend, uncapped."""
        specs = self.specs[0]
        self.backend.apply(
            {},
            [
                Placement(specs[job].job_id, worker, slot)
                for job, worker, slot in zip(
                    jobs.tolist(), workers.tolist(), slots.tolist(), strict=True
                )
            ],
        )
        state = self.state
        state.phase[0, jobs] = STARTING
        state.worker[0, jobs] = workers
        state.slot[0, jobs] = slots
        state.limit[0, jobs] = 1.0

    def apply(self, limits: np.ndarray, migrations: Sequence[Move]) -> None:
        """Set the limits of the active jobs and move the migrating ones, in one call."""
        state = self.state
        specs = self.specs[0]
        active = np.flatnonzero(IS_ACTIVE[state.phase[0]]).tolist()
        in_force = limits[0].tolist()
        self.backend.apply(
            {specs[job].job_id: in_force[job] for job in active},
            (),
            [Placement(specs[move.job].job_id, move.worker, move.slot) for move in migrations],
        )
        # What the backend reads back replaces them at the next measurement.
        state.limit[0, active] = limits[0, active]
        for move in migrations:
            state.phase[0, move.job] = MIGRATING
            state.worker[0, move.job] = move.worker
            state.slot[0, move.job] = move.slot

    def advance(self, rows: np.ndarray, seconds: np.ndarray) -> None:
        """Let the time pass on the backend and read its measurement."""
        if rows[0]:
            self._read(self.backend.advance(float(seconds[0])))

    def incidents(self, row: int) -> tuple[str, ...]:
        return self.backend.incidents()

    def progress_traces(self, row: int) -> tuple[ProgressTrace, ...]:
        return self.backend.progress_traces()

    def _read(self, telemetry: Telemetry) -> None:
        """Write ``telemetry`` (every placed job) into the row."""
        state = self.state
        self.now[0] = telemetry.time_s
        self.cores = np.array([worker.cores for worker in telemetry.workers], dtype=np.float64)
        for job in telemetry.jobs:
            column = self._column[job.job_id]
            phase = PHASE_OF_STATE[job.state]
            if HAS_ENDED[phase] and not HAS_ENDED[state.phase[0, column]]:
                self.ended_jobs += 1
            state.phase[0, column] = phase
            state.worker[0, column] = job.worker if job.worker is not None else 0
            state.slot[0, column] = job.slot if job.slot is not None else 0
            state.limit[0, column] = job.limit
            state.cpu_seconds[0, column] = job.cpu_seconds
            state.usage[0, column] = job.cpu_usage
            training = job.kind is JobKind.TRAINING
            state.units[0, column] = job.iterations if training else job.batches
            state.latency[0, column] = _number(job.latency_s)
            state.loss[0, column] = _number(job.loss)
            state.completed[0, column] = _number(job.completed_s)
            state.throttle_ratio[0, column] = _number(job.throttle_ratio)
            state.total[0, column] = job.total_iterations or 0


def _number(value: float | None) -> float:
    return math.nan if value is None else value
