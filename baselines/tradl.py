"""TRADL: CPU limits that bring training jobs to user-given loss targets sooner (a reconstruction).

Source: no text describing TRADL's algorithm is available; ``docs/papers/tradl.md`` records what
is known (the abstract of the thesis that proposes TRADL and DQoES, and facts recorded from
TRADL's own abstract) and this reconstruction: users give a two-tier target; once a model reaches
its target it can be delivered while training continues; the time to reach the target drops by
up to 48.2%. The scenario carries the tiers (``loss_targets: [first, second]``, in the job's loss
units).

Reconstruction (every choice a parameter or stated here):

- Each job is in a stage: before its first tier, between its tiers, or past both. A job without
  tiers is always before its first, with a target loss of 0.
- The *priority* stage of a worker is the earliest stage some job of it is in, short of past
  both; jobs of that stage share the CPU that the others leave, in proportion to
  ``rate / distance``, the inverse of their estimated time to their next tier (the loss they
  still have to lose over how fast they lose it). That ranks jobs by both their distance to the
  target and their progress rate, and favours the nearest, which shortens the mean time to target
  as shortest-remaining-time-first does.
- Every other job is deprioritised to ``deprioritised_share`` of an equal share. A priority job
  that made no progress over the round gets the same; a priority job with no rate yet (just
  arrived) gets the largest weight of its stage, so it is measured under a fair chance.
- A worker whose jobs are all past both tiers runs them uncapped.
- Growth is measured by :mod:`dlsched.baselines.growth` on the raw loss, every ``interval_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from dlsched.baselines.growth import GrowthMeter, GrowthRounds
from dlsched.baselines.parameters import check_number
from dlsched.envs.decision import Decision
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState, Telemetry


class Stage(IntEnum):
    """Where a job stands against its two-tier target."""

    BEFORE_FIRST = 0
    BEFORE_SECOND = 1
    PAST_BOTH = 2


@dataclass(frozen=True)
class TieredJob:
    """One job in one TRADL round.

    Attributes:
        job_id: the job.
        loss: its last loss (``None`` before its first iteration).
        rate: how fast its loss fell over the round, per second (``None``: not measured yet).
        tiers: its (first, second) loss targets, or ``None``.
    """

    job_id: str
    loss: float | None
    rate: float | None
    tiers: tuple[float, float] | None

    @property
    def stage(self) -> Stage:
        if self.tiers is None or self.loss is None or self.loss > self.tiers[0]:
            return Stage.BEFORE_FIRST
        if self.loss > self.tiers[1]:
            return Stage.BEFORE_SECOND
        return Stage.PAST_BOTH

    @property
    def next_target(self) -> float:
        """The loss of the next tier (0 without tiers)."""
        if self.tiers is None:
            return 0.0
        return self.tiers[0] if self.stage is Stage.BEFORE_FIRST else self.tiers[1]


@dataclass(frozen=True)
class TieredRound:
    """One round on one worker: the priority stage, each priority job's weight, every limit."""

    priority: Stage | None
    weights: dict[str, float]
    limits: dict[str, float]


def tiered_limits(jobs: Sequence[TieredJob], *, deprioritised_share: float) -> TieredRound:
    """The limits of one worker's jobs for the next round (see the module docstring).

    Args:
        jobs: every running job of the worker.
        deprioritised_share: the limit of a deprioritised job, as a fraction of ``1 / n``.
    """
    stages = [job.stage for job in jobs if job.stage is not Stage.PAST_BOTH]
    if not stages:
        return TieredRound(None, {}, {job.job_id: 1.0 for job in jobs})
    priority = min(stages)
    low = deprioritised_share / len(jobs)
    urgent = [job for job in jobs if job.stage is priority]
    measured: dict[str, float] = {}
    for job in urgent:
        if job.rate is None or job.loss is None:
            continue
        distance = job.loss - job.next_target
        measured[job.job_id] = job.rate / distance if job.rate > 0 and distance > 0 else 0.0
    fresh = max(measured.values(), default=1.0) or 1.0
    weights = {job.job_id: measured.get(job.job_id, fresh) for job in urgent}
    limits = {job.job_id: low for job in jobs if job.stage is not priority}
    pool = 1.0 - sum(limits.values())
    total = sum(weights.values())
    for job_id, weight in weights.items():
        share = pool * weight / total if total > 0 else pool / len(urgent)
        limits[job_id] = max(share, low)
    return TieredRound(priority, weights, limits)


class TRADL(GrowthRounds):
    """TRADL (reconstructed): prioritise the jobs nearest to their loss target.

    Every ``interval_s`` seconds, on each worker, it measures each running job's loss rate and
    sets limits with :func:`tiered_limits`; between rounds the limits hold.

    Args:
        interval_s: seconds between rounds (as DQoES's and SpeCon's 10 s).
        deprioritised_share: the limit of a deprioritised job as a fraction of an equal share.
    """

    name = "tradl"
    kinds = (JobKind.TRAINING,)

    def __init__(self, interval_s: float = 10.0, deprioritised_share: float = 0.5) -> None:
        super().__init__()
        self.interval_s = check_number(self.name, "interval_s", interval_s, low=0.0, low_open=True)
        self.deprioritised_share = check_number(
            self.name,
            "deprioritised_share",
            deprioritised_share,
            low=0.0,
            high=1.0,
            low_open=True,
        )
        self._meter = GrowthMeter(normalise_loss=False)

    def run_round(self, telemetry: Telemetry) -> Decision:
        now = telemetry.time_s
        limits: dict[str, float] = {}
        for worker in telemetry.workers:
            jobs = []
            for job in telemetry.on_worker(worker.index):
                if job.state is not JobState.RUNNING:
                    continue
                sample = self._meter.take(job, now, worker.cores)
                rate = None if sample is None else sample.loss_drop_per_s
                jobs.append(TieredJob(job.job_id, job.loss, rate, job.loss_targets))
            if jobs:
                limits.update(
                    tiered_limits(jobs, deprioritised_share=self.deprioritised_share).limits
                )
        return Decision(limits=limits)
