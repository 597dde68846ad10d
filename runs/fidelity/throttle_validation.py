"""The replay model's throttling held against the host's, job by job, for ``dlsched validate``.

Per job of an episode (paired by policy and seed), its **mean throttle ratio**: the mean over
the steps in which it ran under a quota and had its ratio measured (the engine's ``cpu.stat``
on the host, the throttling curves of :mod:`dlsched.envs.replay.throttling` on replay). The
error of a job is the absolute difference of the two means (both are fractions: an absolute
error of 0.1 is ten periods in a hundred); a job with no such step on one side has none, and is
counted as missing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.envs.telemetry import JobState
from dlsched.runs.evaluation.records import EpisodeResult


@dataclass(frozen=True)
class ThrottleComparison:
    """One job's mean throttle ratio on both sides.

    Attributes:
        policy: the policy.
        seed: the seed.
        job_id: the job.
        workload: its workload.
        replay: its mean ratio on replay (``None``: never throttle-measured there).
        host: its mean ratio on the host (``None``: never throttle-measured there).
    """

    policy: str
    seed: int
    job_id: str
    workload: str
    replay: float | None
    host: float | None

    @property
    def error(self) -> float | None:
        """``|replay - host|``; ``None`` where a side has no mean."""
        if self.replay is None or self.host is None:
            return None
        return abs(self.replay - self.host)


@dataclass(frozen=True)
class ThrottleSummary:
    """The errors of the mean throttle ratio over the jobs of a validation.

    Attributes:
        jobs: the jobs with a mean on both sides.
        median_error: the median of their absolute errors (``None`` without any).
        max_error: the largest.
        missing: jobs with a mean on one side only.
        comparisons: every job's comparison.
    """

    jobs: int
    median_error: float | None
    max_error: float | None
    missing: int
    comparisons: tuple[ThrottleComparison, ...]


def mean_throttle_ratio(result: EpisodeResult, job_id: str) -> float | None:
    """``job_id``'s mean throttle ratio over the steps of ``result`` in which it ran and had
    one; ``None`` where it had none."""
    ratios = [
        sample.throttle_ratio
        for step in result.steps
        for sample in step.containers
        if sample.job_id == job_id
        and sample.state is JobState.RUNNING
        and sample.throttle_ratio is not None
    ]
    return statistics.fmean(ratios) if ratios else None


def compare_throttling(
    replay: Sequence[EpisodeResult], host: Sequence[EpisodeResult]
) -> ThrottleSummary | None:
    """Every job's mean throttle ratio on replay against the host, paired by policy and seed;
    ``None`` where neither side measured any (a validation of uncapped policies, or of a host
    recorded before throttling was)."""
    host_by_key = {(result.policy.name, result.seed): result for result in host}
    comparisons = []
    for result in replay:
        twin = host_by_key.get((result.policy.name, result.seed))
        if twin is None:
            continue
        for job in result.jobs:
            comparisons.append(
                ThrottleComparison(
                    policy=result.policy.name,
                    seed=result.seed,
                    job_id=job.job_id,
                    workload=job.workload,
                    replay=mean_throttle_ratio(result, job.job_id),
                    host=mean_throttle_ratio(twin, job.job_id),
                )
            )
    measured = [c for c in comparisons if c.replay is not None or c.host is not None]
    if not measured:
        return None
    errors = [c.error for c in measured if c.error is not None]
    return ThrottleSummary(
        jobs=len(errors),
        median_error=statistics.median(errors) if errors else None,
        max_error=max(errors) if errors else None,
        missing=len(measured) - len(errors),
        comparisons=tuple(measured),
    )
