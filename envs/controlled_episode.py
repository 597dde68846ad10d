"""One episode whose placements, limits and times its caller chooses, on any backend.

An environment decides when jobs are placed (at their arrival, by its placer) and how long a
step lasts (the scenario's interval). A measurement does not: calibration starts one job, waits
for its first iteration, then starts others beside it, and reads the jobs over windows of its
own. :class:`ControlledEpisode` lets it, through the same
:class:`~dlsched.envs.episode_batch.EpisodeBatch` the environments drive (one row, from
:meth:`~dlsched.envs.backend.Backend.episode_batch`), and checks every call as the environment
loop checks its own: only arrived, unplaced jobs go to free slots; limits are finite numbers in
``(0, 1]`` of placed jobs; only running jobs move, to a free slot of another worker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.envs.backend import Backend
from dlsched.envs.decision import Placement, Placements
from dlsched.envs.decision_checks import job_limit
from dlsched.envs.episode_batch import HAS_ENDED, IS_ACTIVE, MIGRATING, UNPLACED, EpisodeBatch, Move
from dlsched.envs.errors import ActionError, require_reset
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import JobSpec, Scenario
from dlsched.envs.telemetry import Telemetry
from dlsched.envs.telemetry_columns import columns_of

#: Time within which a job counts as arrived (the environment loop's tolerance).
_ARRIVED_EPS = 1e-9
_ROW = np.ones(1, dtype=bool)
_ROW_INDEX = np.zeros(1, dtype=np.int64)


class ControlledEpisode:
    """One episode of ``scenario`` on ``backend``, driven call by call (see the module docstring).

    Each :meth:`reset` takes a new batch of one row from the backend, sized for its jobs, and
    closes the one before (on Docker: the previous episode's containers are removed).

    Args:
        backend: the backend; the caller closes it (:meth:`close` closes only the episode).
        scenario: the scenario (its workers, slots and kind); the jobs are the caller's.
    """

    def __init__(self, backend: Backend, scenario: Scenario) -> None:
        self.backend = backend
        self.scenario = scenario
        self._batch: EpisodeBatch | None = None
        self._column: dict[str, int] = {}

    @property
    def batch(self) -> EpisodeBatch:
        """The batch holding the current episode.

        Raises:
            ResetNeededError: before the first :meth:`reset`.
        """
        return self._require("reading the batch")

    def reset(self, jobs: Sequence[JobSpec], rng: np.random.Generator) -> Telemetry:
        """End the episode before, if any, and start an empty one of ``jobs`` (none placed) at
        time 0.

        Raises:
            ScenarioError: the jobs cannot run on the backend (repeated ids, a workload it does
                not have).
            UnknownNameError: a job's workload is not in the scenario's profile set (replay).
        """
        self.close()
        batch = self._batch = self.backend.episode_batch(self.scenario, 1, jobs)
        batch.reset_rows([0], [jobs], [rng])
        self._column = {job.job_id: column for column, job in enumerate(batch.specs[0])}
        return self.telemetry()

    def place(self, placements: Placements) -> None:
        """Start arrived jobs uncapped where ``placements`` say, in that order.

        Raises:
            ActionError: a job this episode does not have, placed already, not arrived yet, a
                worker or slot out of range, or a slot taken.
        """
        batch = self._require("place()")
        state = batch.state
        taken = self._held_slots()
        columns = []
        for placement in placements:
            job = self._job("placement", placement.job_id)
            if state.phase[0, job] != UNPLACED:
                raise ActionError(f"job {placement.job_id!r} is already placed")
            if state.arrival[0, job] > batch.now[0] + _ARRIVED_EPS:
                raise ActionError(
                    f"placement of {placement.job_id!r} at {batch.now[0]:g} s; it arrives at "
                    f"{state.arrival[0, job]:g} s: advance to its arrival first"
                )
            where = self._free_slot("placement", placement, taken)
            taken.add(where)
            columns.append(job)
        if not columns:
            return
        batch.place(
            np.zeros(len(columns), dtype=np.int64),
            np.array(columns, dtype=np.int64),
            np.array([p.worker for p in placements], dtype=np.int64),
            np.array([p.slot for p in placements], dtype=np.int64),
        )

    def set_limits(self, limits: Mapping[str, float]) -> None:
        """Put ``limits`` (by job id) in force; a job that has ended keeps its own.

        Raises:
            ActionError: a job this episode does not have or that is not placed, a limit that
                is not a finite number in ``(0, 1]`` (nothing is set).
        """
        batch = self._require("set_limits()")
        state = batch.state
        in_force = state.limit.copy()
        for job_id, limit in limits.items():
            job = self._job("limit", job_id)
            value = job_limit(job_id, limit)
            if state.phase[0, job] == UNPLACED:
                raise ActionError(
                    f"limit for job {job_id!r}, which is not placed; placed jobs: "
                    f"{self._ids(state.phase[0] != UNPLACED)}"
                )
            if not HAS_ENDED[state.phase[0, job]]:
                in_force[0, job] = value
        batch.apply(in_force, [])

    def migrate(self, migrations: Placements) -> None:
        """Move running jobs to a free slot of another worker; each keeps its progress.

        Raises:
            ActionError: a job this episode does not have or that is not running, a worker or
                slot out of range, its own worker, or a slot taken (nothing moves).
        """
        batch = self._require("migrate()")
        state = batch.state
        taken = self._held_slots()
        moves = []
        for migration in migrations:
            job = self._job("migration", migration.job_id)
            phase = state.phase[0, job]
            if not IS_ACTIVE[phase] or phase == MIGRATING:
                raise ActionError(
                    f"cannot migrate job {migration.job_id!r}: it is not running (only running "
                    "jobs move)"
                )
            if migration.worker == state.worker[0, job]:
                raise ActionError(
                    f"migration of {migration.job_id!r} to worker {migration.worker}, where it "
                    "runs already"
                )
            where = self._free_slot("migration", migration, taken)
            taken.add(where)
            moves.append(Move(0, job, migration.worker, migration.slot))
        if moves:
            batch.apply(state.limit.copy(), moves)

    def advance(self, seconds: float) -> Telemetry:
        """Let ``seconds`` pass and measure every placed job (CPU usage over this call).

        Raises:
            ActionError: ``seconds`` is negative or not finite.
        """
        batch = self._require("advance()")
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ActionError(f"advance(seconds={seconds!r}); expected a finite number >= 0")
        batch.advance(_ROW, np.array([float(seconds)]))
        return self.telemetry()

    def telemetry(self) -> Telemetry:
        """The episode as last measured: every placed job, CPU usage over the last advance."""
        batch = self._require("telemetry()")
        usage = batch.state.usage
        return columns_of(batch, usage, np.full_like(usage, math.nan), rows=_ROW_INDEX).telemetry(0)

    def incidents(self) -> tuple[str, ...]:
        """What happened in the episode that makes its figures doubtful (none before reset)."""
        return () if self._batch is None else self._batch.incidents(0)

    def progress_traces(self) -> tuple[ProgressTrace, ...]:
        """Every placed job's progress event by event, where the backend sees it."""
        return () if self._batch is None else self._batch.progress_traces(0)

    def close(self) -> None:
        """End the episode and release what its batch holds; closing twice is allowed."""
        if self._batch is not None:
            self._batch.close()

    def _require(self, call: str) -> EpisodeBatch:
        return require_reset(self._batch, call, "a controlled episode")

    def _job(self, what: str, job_id: str) -> int:
        if job_id not in self._column:
            raise ActionError(
                f"{what} of unknown job {job_id!r}; jobs of this episode: {sorted(self._column)}"
            )
        return self._column[job_id]

    def _ids(self, mask: np.ndarray) -> list[str]:
        specs = self.batch.specs[0]
        return sorted(specs[job].job_id for job in np.flatnonzero(mask[: len(specs)]))

    def _held_slots(self) -> set[tuple[int, int]]:
        state = self.batch.state
        held = np.flatnonzero(state.exists[0] & IS_ACTIVE[state.phase[0]])
        return {(int(state.worker[0, job]), int(state.slot[0, job])) for job in held}

    def _free_slot(
        self, what: str, placement: Placement, taken: set[tuple[int, int]]
    ) -> tuple[int, int]:
        batch = self.batch
        if not 0 <= placement.worker < batch.workers:
            raise ActionError(
                f"{what} of {placement.job_id!r} to worker {placement.worker}; workers are "
                f"0..{batch.workers - 1}"
            )
        if not 0 <= placement.slot < batch.slots:
            raise ActionError(
                f"{what} of {placement.job_id!r} to slot {placement.slot}; slots are "
                f"0..{batch.slots - 1}"
            )
        where = (placement.worker, placement.slot)
        if where in taken:
            raise ActionError(
                f"{what} of {placement.job_id!r} to worker {placement.worker}, slot "
                f"{placement.slot}, which another job holds"
            )
        return where
