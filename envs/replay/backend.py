"""The replay backend: the replay model (:mod:`dlsched.envs.replay.engine`) as a backend.

An environment on the replay backend drives the engine itself, one episode or many
(:meth:`ReplayBackend.episode_batch`); so does a controlled episode
(:mod:`dlsched.envs.controlled_episode`), the engine holding its one episode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from dlsched.envs.backend import Backend, BackendCapabilities
from dlsched.envs.errors import BackendError
from dlsched.envs.replay.engine import ReplayEngine
from dlsched.envs.scenarios.model import JobSpec, Scenario


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

    def episode_batch(
        self, scenario: Scenario, episodes: int, jobs: Sequence[JobSpec] | None = None
    ) -> ReplayEngine:
        """The replay model of ``episodes`` episodes of ``scenario``; with ``jobs``, sized for
        those jobs and their workloads, which need not be drawn from the scenario's groups.

        Raises:
            UnknownNameError: a workload of the scenario (or of ``jobs``) is not in its profile
                set.
            ScenarioError: a workload's kind or threading differs from the scenario's.
        """
        if jobs is None:
            return ReplayEngine(
                scenario, episodes, self.loss_noise_cv, speed_spread=self.speed_spread
            )
        workloads = sorted({job.workload for job in jobs})
        return ReplayEngine(
            scenario, episodes, self.loss_noise_cv, workloads, len(jobs), self.speed_spread
        )
