"""The replay backend: the replay model (:mod:`dlsched.envs.replay.engine`) as a backend.

An environment on the replay backend drives the engine itself, one episode or many
(:meth:`ReplayBackend.episode_batch`). :class:`ReplayBackend` also answers the one-episode
interface every backend shares (reset, apply, advance), by an engine holding one episode, so that
a measurement written against that interface (the contention benchmarks, the backend contract)
runs on the replay model and on a host alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from dlsched.envs.backend import Backend, BackendCapabilities
from dlsched.envs.decision import Placements
from dlsched.envs.episode_batch import Move
from dlsched.envs.errors import ActionError, BackendError
from dlsched.envs.replay.engine import ReplayEngine
from dlsched.envs.scenarios.model import JobSpec, Scenario
from dlsched.envs.telemetry import Telemetry
from dlsched.envs.telemetry_columns import columns_of

_ROW = np.ones(1, dtype=bool)


class ReplayBackend(Backend):
    """Jobs progress in simulated time by their workload profiles (see
    :mod:`dlsched.envs.replay.engine` for the model, ``docs/replay-model.md`` for its design).

    The same generator state and the same calls give the same telemetry.

    Args:
        loss_noise_cv: coefficient of variation of the loss a training job reports around its
            profile's loss curve; 0 reports the curve itself. Mini-batch losses scatter around
            the trend, and growth-efficiency schedulers (FlowCon) must cope with it.
        speed_spread: coefficient of variation of each workload's speed per episode (a factor
            of mean 1 on its throughput, the same for all its jobs in an episode): hosts of one
            CPU model differ in speed by up to 1.6x (``dlsched validate``'s speed probes), and
            a scheduler trained on many speeds meets the host's as one of them. 0 (the
            default) draws nothing: the episodes of the profiles as measured.
    """

    name: ClassVar[str] = "replay"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        simulated_time=True, deterministic=True, batchable=True, reads_profiles=True
    )

    def __init__(self, loss_noise_cv: float = 0.01, speed_spread: float = 0.0) -> None:
        for name, value in (("loss_noise_cv", loss_noise_cv), ("speed_spread", speed_spread)):
            if not (math.isfinite(value) and 0.0 <= value < 1.0):
                raise BackendError(f"{name}={value!r} must be a coefficient of variation in [0, 1)")
        self.loss_noise_cv = float(loss_noise_cv)
        self.speed_spread = float(speed_spread)
        self._engine: ReplayEngine | None = None
        self._column: dict[str, int] = {}

    def episode_batch(self, scenario: Scenario, episodes: int) -> ReplayEngine:
        """The replay model of ``episodes`` episodes of ``scenario``.

        Raises:
            UnknownNameError: a workload of the scenario is not in its profile set.
            ScenarioError: a workload's kind or threading differs from the scenario's.
        """
        return ReplayEngine(scenario, episodes, self.loss_noise_cv, speed_spread=self.speed_spread)

    def reset(
        self, scenario: Scenario, jobs: Sequence[JobSpec], rng: np.random.Generator
    ) -> Telemetry:
        """Start an empty episode of ``jobs`` (none placed yet) at time 0.

        Raises:
            UnknownNameError: a job's workload is not in the profile set (or the set is unknown).
            ScenarioError: a workload's kind or threading differs from the scenario's, or job
                ids repeat.
            ProfileError: a profile of the set is malformed.
        """
        engine = self._engine
        workloads = {job.workload for job in jobs}
        fits = (
            engine is not None
            and engine.scenario == scenario
            and workloads <= set(engine.table.names)
            and len(jobs) <= engine.jobs
        )
        if not fits:
            # Sized for these jobs, which need not be drawn from the scenario's groups.
            engine = self._engine = ReplayEngine(
                scenario, 1, self.loss_noise_cv, sorted(workloads), len(jobs), self.speed_spread
            )
        assert engine is not None
        engine.reset_rows([0], [jobs], [rng])
        self._column = {job.job_id: column for column, job in enumerate(engine.specs[0])}
        return self._telemetry()

    def apply(
        self, limits: Mapping[str, float], placements: Placements = (), migrations: Placements = ()
    ) -> None:
        """Place arriving jobs, move migrating ones, set limits (see :class:`Backend` for what
        the caller checks).

        Raises:
            ActionError: a job this episode does not have.
        """
        engine = self._require_episode()
        if placements:
            columns = np.array([self._job(p.job_id) for p in placements], dtype=np.int64)
            engine.place(
                np.zeros(len(placements), dtype=np.int64),
                columns,
                np.array([p.worker for p in placements], dtype=np.int64),
                np.array([p.slot for p in placements], dtype=np.int64),
            )
        in_force = engine.state.limit.copy()
        for job_id, limit in limits.items():
            in_force[0, self._job(job_id)] = limit
        moves = [Move(0, self._job(m.job_id), m.worker, m.slot) for m in migrations]
        engine.apply(in_force, moves)

    def advance(self, seconds: float) -> Telemetry:
        """Let ``seconds`` of simulated time pass and measure.

        Raises:
            ActionError: ``seconds`` is negative or not finite.
        """
        engine = self._require_episode()
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ActionError(f"advance(seconds={seconds!r}); expected a finite number >= 0")
        engine.advance(_ROW, np.array([float(seconds)]))
        return self._telemetry()

    def close(self) -> None:
        """Forget the episode; the replay backend holds no outside resources."""
        self._engine = None

    def _require_episode(self) -> ReplayEngine:
        if self._engine is None:
            raise BackendError("the replay backend has no episode; call reset() first")
        return self._engine

    def _job(self, job_id: str) -> int:
        if job_id not in self._column:
            raise ActionError(
                f"unknown job {job_id!r}; jobs of this episode: {sorted(self._column)}"
            )
        return self._column[job_id]

    def _telemetry(self) -> Telemetry:
        """The episode as measured now: CPU usage over the last advance, no waiting job."""
        engine = self._require_episode()
        state = engine.state
        return columns_of(engine, state.usage, np.full_like(state.usage, math.nan)).telemetry(0)
