"""The statistics of a validation: the replay model against the reference, job by job.

The same policies run the same seeds on both sides. A seed draws the same jobs on both (the
environment draws them before the backend starts), so every job of a replay episode has a twin
on the host, and the two can be compared one by one (:func:`compare_episode`):

- training: each job's completion time (arrival to finish);
- inference: each job's batch latencies as the telemetry reported them, every step while it
  ran: their medians, and the earth mover's (Wasserstein-1) distance between the two samples
  (CausalSim's measure of how far a simulator's distribution is from the real one, Alomar et
  al., NSDI 2023, Section 6);
- both: the CPU each job used, and the episode's satisfied fraction over time
  (:func:`timelines`).

**Where an error comes from.** A job's pace is the CPU it gets times the progress each
CPU-second buys it. The first is the model's sharing (water-filling under the limits), the
second its profiles and contention term, and a job can be right on one and wrong on the other.
So every job's progress per core-second is measured on both sides too (iterations per
CPU-second for training; batches, one per batch latency, per CPU-second for inference), and
:func:`attribution` gives, per workload, the median ratio replay / host of each: a workload
whose cores agree and whose progress per core-second does not is off in its speed or its
contention, not in how the worker's CPU was shared.

The **relative error** of a job is ``(replay - host) / host`` (:class:`ErrorSummary` over many).
Per policy, the primary metric (mean satisfied fraction, or mean completion time) is compared
the same way (:func:`compare_policies`), and the policies are ranked by it on each backend;
Kendall's tau between the two rankings says whether replay orders them as the host does
(:func:`ranking_agreement`, 1: the same order).

**The host's own spread.** Where every seed draws the same jobs (a scenario with fixed arrivals
and sizes: the host-scale ones, :func:`same_jobs_every_seed`), a job's reruns on the host differ
by run-to-run noise alone, and no model can be held closer than that. :func:`seed_agreement`
gives how far a host job is from its mean over the seeds (median), and each job's error against
that mean, replay's mean over the seeds against the host's: the comparison with the host's
noise averaged out.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.telemetry import JobState
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.fidelity.distribution_statistics import (
    DistributionSummary,
    JobDistribution,
    SampleComparison,
    distribution_summary,
)


class _ReplayAgainstHost:
    """A value measured on both backends, ``replay`` and ``host`` (fields of the dataclass that
    derives from this), and how far replay's is from the host's."""

    replay: float | None
    host: float | None

    @property
    def relative_error(self) -> float | None:
        """``(replay - host) / host``; ``None`` when either side has no value, or the host's
        is 0."""
        if self.replay is None or self.host is None or self.host == 0:
            return None
        return (self.replay - self.host) / self.host


@dataclass(frozen=True)
class JobComparison(_ReplayAgainstHost):
    """One job of one episode on both backends.

    Attributes:
        policy: the policy's name.
        seed: the episode's seed.
        job_id: the job's id (the same on both backends).
        workload: what it runs.
        measure: what ``replay`` and ``host`` are: ``completion_s`` (training) or
            ``median_latency_s`` (inference).
        replay: the measure on replay; ``None`` if the job never finished or measured.
        host: the measure on the host; ``None`` likewise.
        latency_distance_s: inference: the Wasserstein-1 distance between the job's latency
            samples on the two backends, in seconds; ``None`` for training or without samples.
        replay_cores: mean cores the job used on replay while it ran.
        host_cores: the same on the host.
        held_out: whether its policy was held out of calibration.
        replay_progress_per_core_s: the progress each CPU-second bought the job on replay
            while it ran (:func:`progress_per_core_s`); ``None`` if it used no CPU.
        host_progress_per_core_s: the same on the host.
    """

    policy: str
    seed: int
    job_id: str
    workload: str
    measure: str
    replay: float | None
    host: float | None
    latency_distance_s: float | None
    replay_cores: float
    host_cores: float
    held_out: bool
    replay_progress_per_core_s: float | None = None
    host_progress_per_core_s: float | None = None


@dataclass(frozen=True)
class PolicyComparison(_ReplayAgainstHost):
    """One policy's primary metric, averaged over the seeds, on both backends.

    Attributes:
        policy: the policy's name.
        metric: the metric (:data:`~dlsched.runs.evaluation.PRIMARY_METRIC` of the kind).
        replay: its mean on replay (``None`` if undefined in an episode).
        host: its mean on the host.
        held_out: whether the policy was held out of calibration.
    """

    policy: str
    metric: str
    replay: float | None
    host: float | None
    held_out: bool


@dataclass(frozen=True)
class Timeline:
    """One policy's satisfied fraction or jobs finished over time, on both backends.

    Attributes:
        policy: the policy's name.
        measure: ``satisfied_fraction`` (inference) or ``finished_jobs`` (training).
        times_s: the step times (the interval's multiples).
        replay: the measure at each step, averaged over the seeds (``nan`` where undefined).
        host: the same on the host.
    """

    policy: str
    measure: str
    times_s: tuple[float, ...]
    replay: tuple[float, ...]
    host: tuple[float, ...]

    @property
    def mean_gap(self) -> float | None:
        """Mean of ``|replay - host|`` over the steps where both are defined."""
        gaps = [
            abs(a - b)
            for a, b in zip(self.replay, self.host, strict=True)
            if math.isfinite(a) and math.isfinite(b)
        ]
        return statistics.fmean(gaps) if gaps else None


def timelines(
    replay: Sequence[EpisodeResult], host: Sequence[EpisodeResult]
) -> tuple[Timeline, ...]:
    """Per policy, its measure over time on both backends (mean over seeds, step by step).

    A training episode that ends before the horizon keeps its last value for the steps after.
    """
    kind = replay[0].scenario.kind
    measure = "satisfied_fraction" if kind is JobKind.INFERENCE else "finished_jobs"
    names = list(dict.fromkeys(result.policy.name for result in replay))
    steps = max(len(result.steps) for result in (*replay, *host))
    interval = replay[0].scenario.interval_s
    times = tuple(step * interval for step in range(steps))
    lines = []
    for name in names:
        series = [
            _mean_series([r for r in side if r.policy.name == name], measure, steps)
            for side in (replay, host)
        ]
        lines.append(Timeline(name, measure, times, series[0], series[1]))
    return tuple(lines)


def _mean_series(results: Sequence[EpisodeResult], measure: str, steps: int) -> tuple[float, ...]:
    columns = []
    for result in results:
        values = [
            math.nan if (value := getattr(step, measure)) is None else float(value)
            for step in result.steps
        ]
        values += [values[-1] if measure == "finished_jobs" else math.nan] * (steps - len(values))
        columns.append(values)
    table = np.array(columns, dtype=float)
    with np.errstate(invalid="ignore"):
        counts = np.isfinite(table).sum(axis=0)
        sums = np.nansum(table, axis=0)
    return tuple(float(s / c) if c else math.nan for s, c in zip(sums, counts, strict=True))


@dataclass(frozen=True)
class ErrorSummary:
    """The absolute relative errors of a set of jobs.

    Attributes:
        jobs: jobs with a value on both backends.
        missing: jobs with a value on one backend only (a job that finished on one).
        median: median absolute relative error (``None`` without jobs).
        max: largest absolute relative error.
        median_ratio: median of ``replay / host``: the scale by which replay is off when its
            errors share one sign (1.25: replay's measure is 25% larger).
    """

    jobs: int
    missing: int
    median: float | None
    max: float | None
    median_ratio: float | None = None

    @classmethod
    def of(cls, comparisons: Sequence[JobComparison]) -> ErrorSummary:
        errors = [e for c in comparisons if (e := c.relative_error) is not None]
        return dataclasses.replace(
            _absolute_errors(errors),
            missing=sum(1 for c in comparisons if (c.replay is None) != (c.host is None)),
            median_ratio=statistics.median(1 + e for e in errors) if errors else None,
        )


@dataclass(frozen=True)
class WorkloadAttribution:
    """Where one workload's errors come from: the CPU its jobs got, or what a CPU-second bought.

    Attributes:
        workload: the workload.
        jobs: its jobs with both ratios defined (they used CPU on both sides).
        cores_ratio: median over its jobs of replay's mean cores over the host's.
        progress_ratio: median over its jobs of replay's progress per core-second over the
            host's (1.25: on replay a CPU-second buys 25% more progress than on the host).
    """

    workload: str
    jobs: int
    cores_ratio: float
    progress_ratio: float


def attribution(comparisons: Sequence[JobComparison]) -> tuple[WorkloadAttribution, ...]:
    """Per workload (in order of first appearance), its median cores and progress ratios."""
    ratios: dict[str, list[tuple[float, float]]] = {}
    for job in comparisons:
        replay_pace, host_pace = job.replay_progress_per_core_s, job.host_progress_per_core_s
        if job.replay_cores > 0 and job.host_cores > 0 and replay_pace and host_pace:
            ratios.setdefault(job.workload, []).append(
                (job.replay_cores / job.host_cores, replay_pace / host_pace)
            )
    return tuple(
        WorkloadAttribution(
            workload,
            len(pairs),
            statistics.median(cores for cores, _ in pairs),
            statistics.median(progress for _, progress in pairs),
        )
        for workload, pairs in ratios.items()
    )


@dataclass(frozen=True)
class SeedAgreement:
    """How a job's reruns agree, where every seed draws the same jobs.

    Attributes:
        seeds: the seeds averaged over (at least two).
        host_spread: median over the host's jobs of ``|value - the job's mean| / mean``.
        replay_spread: the same on replay.
        mean_jobs: per policy and job, replay's mean over the seeds against the host's.
        host_against_host: per policy and job, every host rerun against every other, as
            replay is held against the host (``|a - b| / b``): how far the host is from
            itself; its ``jobs`` counts the pairs.
        best_prediction: per policy and job, the least largest error that one prediction can
            have against every host rerun of the job: ``(high - low) / (high + low)`` of its
            fastest and slowest (a prediction between them is off one of the two by at least
            that). The floor under replay's per-job error: no model that predicts one value
            per job does better against these reruns.
    """

    seeds: int
    host_spread: float | None
    replay_spread: float | None
    mean_jobs: ErrorSummary
    host_against_host: ErrorSummary
    best_prediction: ErrorSummary


def same_jobs_every_seed(scenario: Scenario, draws: int = 3) -> bool:
    """Whether ``scenario`` draws the same jobs whatever the seed (nothing in it is random).

    Checked by drawing it ``draws`` times from independent generators: a scenario that draws
    anything (counts, arrivals, sizes, workloads, targets) differs between them.
    """
    first = scenario.realise(np.random.default_rng(0))
    return all(scenario.realise(np.random.default_rng(seed)) == first for seed in range(1, draws))


def seed_agreement(jobs: Sequence[JobComparison]) -> SeedAgreement | None:
    """The agreement of ``jobs``' reruns over the seeds (``None`` with fewer than two seeds).

    Args:
        jobs: every job of every episode, of a scenario that draws the same jobs every seed.
    """
    reruns: dict[tuple[str, str], list[JobComparison]] = {}
    for job in jobs:
        reruns.setdefault((job.policy, job.job_id), []).append(job)
    seeds = len({job.seed for job in jobs})
    if seeds < 2:
        return None

    def spread(values: list[float | None]) -> list[float]:
        known = [value for value in values if value is not None]
        if len(known) < 2 or not (mean := statistics.fmean(known)):
            return []
        return [abs(value - mean) / mean for value in known]

    def mean(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return statistics.fmean(known) if len(known) == len(values) else None

    def pairs(values: list[float | None]) -> list[float]:
        known = [value for value in values if value is not None]
        return [(a - b) / b for a, b in itertools.permutations(known, 2) if b]

    def best(values: list[float | None]) -> list[float]:
        known = [value for value in values if value is not None and value > 0]
        if len(known) < 2:
            return []
        low, high = min(known), max(known)
        return [(high - low) / (high + low)]

    host = [d for runs in reruns.values() for d in spread([job.host for job in runs])]
    host_pairs = [e for runs in reruns.values() for e in pairs([job.host for job in runs])]
    floors = [e for runs in reruns.values() for e in best([job.host for job in runs])]
    replay = [d for runs in reruns.values() for d in spread([job.replay for job in runs])]
    means = [
        dataclasses.replace(
            runs[0],
            seed=-1,  # a mean over the seeds has no seed of its own
            replay=mean([job.replay for job in runs]),
            host=mean([job.host for job in runs]),
        )
        for runs in reruns.values()
    ]
    return SeedAgreement(
        seeds=seeds,
        host_spread=statistics.median(host) if host else None,
        replay_spread=statistics.median(replay) if replay else None,
        mean_jobs=ErrorSummary.of(means),
        host_against_host=_absolute_errors(host_pairs),
        best_prediction=_absolute_errors(floors),
    )


def distributions(
    replay: Sequence[EpisodeResult], host: Sequence[EpisodeResult]
) -> DistributionSummary | None:
    """Each job's outcomes over the seeds as samples on both sides (the seeds are reruns of one
    episode where every seed draws the same jobs; replay may have run more of them than the
    host), and each policy's primary metric likewise; ``None`` with fewer than two host seeds.

    Args:
        replay: the episodes on replay, of a scenario that draws the same jobs every seed.
        host: the episodes on the host.
    """
    if len({result.seed for result in host}) < 2:
        return None
    samples: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    workloads: dict[str, str] = {}
    for side, results in enumerate((replay, host)):
        for result in results:
            for job in result.jobs:
                workloads[job.job_id] = job.workload
                value = job_outcome(result, job.job_id)
                if value is not None:
                    key = (result.policy.name, job.job_id)
                    samples.setdefault(key, ([], []))[side].append(value)
    compared = [
        JobDistribution(policy, job_id, workloads[job_id], SampleComparison(*map(tuple, pair)))
        for (policy, job_id), pair in samples.items()
        if pair[0] and pair[1]
    ]
    metric = PRIMARY_METRIC[replay[0].scenario.kind]
    return distribution_summary(
        compared, _policy_samples(host, metric), _policy_samples(replay, metric)
    )


def _policy_samples(results: Sequence[EpisodeResult], metric: str) -> dict[str, list[float]]:
    """Each policy's ``metric`` per episode; a policy with an undefined value on any episode
    has none."""
    samples: dict[str, list[float]] = {}
    for result in results:
        samples.setdefault(result.policy.name, []).append(getattr(result.metrics, metric))
    return {
        policy: [] if any(v is None for v in values) else values
        for policy, values in samples.items()
    }


def _absolute_errors(errors: Sequence[float]) -> ErrorSummary:
    """The median and the largest of ``errors``' absolute values, one per item."""
    return ErrorSummary(
        jobs=len(errors),
        missing=0,
        median=statistics.median(abs(e) for e in errors) if errors else None,
        max=max(abs(e) for e in errors) if errors else None,
    )


def compare_episodes(
    replay: Sequence[EpisodeResult], host: Sequence[EpisodeResult], held_out: Sequence[str] = ()
) -> tuple[JobComparison, ...]:
    """Compare every job of every episode on replay with its twin on the host (paired by policy
    and seed); ``held_out`` names the policies whose jobs are marked held out.

    Raises:
        ValueError: an episode on one backend has no twin on the other.
    """
    host_by_key = {(result.policy.name, result.seed): result for result in host}
    if set(host_by_key) != {(result.policy.name, result.seed) for result in replay}:
        raise ValueError("the replay and host episodes are not the same policies and seeds")
    return tuple(
        comparison
        for result in replay
        for comparison in compare_episode(
            result, host_by_key[(result.policy.name, result.seed)], result.policy.name in held_out
        )
    )


def compare_episode(
    replay: EpisodeResult, host: EpisodeResult, held_out: bool = False
) -> list[JobComparison]:
    """Compare every job of one seed's episode on replay with its twin on the host.

    Raises:
        ValueError: the two episodes are not of the same policy, seed and jobs.
    """
    if (replay.policy.name, replay.seed) != (host.policy.name, host.seed):
        raise ValueError(
            f"episodes do not match: {replay.policy.name} seed {replay.seed} != "
            f"{host.policy.name} seed {host.seed}"
        )
    replay_jobs = {job.job_id: job for job in replay.jobs}
    host_jobs = {job.job_id for job in host.jobs}
    if set(replay_jobs) != set(host_jobs):
        raise ValueError(
            f"the episodes' jobs differ: {sorted(replay_jobs)} != {sorted(host_jobs)}; the same "
            "seed draws the same jobs, so the scenarios differ"
        )
    kind = replay.scenario.kind
    comparisons = []
    for job_id, outcome in replay_jobs.items():
        replay_value, host_value = job_outcome(replay, job_id), job_outcome(host, job_id)
        if kind is JobKind.TRAINING:
            measure = "completion_s"
            distance = None
        else:
            measure = "median_latency_s"
            replay_latencies = _latencies(replay, job_id)
            host_latencies = _latencies(host, job_id)
            distance = (
                float(stats.wasserstein_distance(replay_latencies, host_latencies))
                if replay_latencies and host_latencies
                else None
            )
        comparisons.append(
            JobComparison(
                policy=replay.policy.name,
                seed=replay.seed,
                job_id=job_id,
                workload=outcome.workload,
                measure=measure,
                replay=replay_value,
                host=host_value,
                latency_distance_s=distance,
                replay_cores=_mean_cores(replay, job_id),
                host_cores=_mean_cores(host, job_id),
                held_out=held_out,
                replay_progress_per_core_s=progress_per_core_s(replay, job_id),
                host_progress_per_core_s=progress_per_core_s(host, job_id),
            )
        )
    return comparisons


def job_outcome(result: EpisodeResult, job_id: str) -> float | None:
    """A job's outcome in an episode: its completion time (training) or its median batch
    latency (inference); ``None`` where it has none (it never finished, or answered no batch)."""
    if result.scenario.kind is JobKind.TRAINING:
        return next(job.completion_s for job in result.jobs if job.job_id == job_id)
    latencies = _latencies(result, job_id)
    return statistics.median(latencies) if latencies else None


def _latencies(result: EpisodeResult, job_id: str) -> list[float]:
    """The batch latencies a job's telemetry reported, one per step while it ran."""
    return [
        sample.latency_s
        for step in result.steps
        for sample in step.containers
        if sample.job_id == job_id
        and sample.latency_s is not None
        and sample.state is JobState.RUNNING
    ]


def _mean_cores(result: EpisodeResult, job_id: str) -> float:
    """Mean cores a job used over the steps in which it ran (0 if it never ran)."""
    used = [
        sample.cpu_usage
        for step in result.steps[1:]
        for sample in step.containers
        if sample.job_id == job_id and sample.state is JobState.RUNNING
    ]
    return statistics.fmean(used) if used else 0.0


def progress_per_core_s(result: EpisodeResult, job_id: str) -> float | None:
    """The progress each CPU-second bought a job over the steps it ran; ``None`` without CPU.

    Each step's sample covers the interval since the step before: training counts the
    iterations done in it, inference the batches a service at that batch latency answers in it
    (the interval over the latency); the CPU-seconds are the cores it used times the interval.
    Inference intervals without a latency (a service still starting) count neither.
    """
    progress = core_s = 0.0
    iterations_before = 0
    for before, step in itertools.pairwise(result.steps):
        span = step.time_s - before.time_s
        for sample in step.containers:
            if sample.job_id != job_id:
                continue
            if sample.state is JobState.RUNNING and span > 0:
                if result.scenario.kind is JobKind.TRAINING:
                    progress += sample.iterations - iterations_before
                    core_s += sample.cpu_usage * span
                elif sample.latency_s:
                    progress += span / sample.latency_s
                    core_s += sample.cpu_usage * span
            iterations_before = sample.iterations
    return progress / core_s if core_s > 0 else None


def compare_policies(
    replay: Sequence[EpisodeResult], host: Sequence[EpisodeResult], held_out: Sequence[str] = ()
) -> tuple[PolicyComparison, ...]:
    """Each policy's primary metric, averaged over its seeds, on both backends."""
    kind = replay[0].scenario.kind
    metric = PRIMARY_METRIC[kind]
    names = list(dict.fromkeys(result.policy.name for result in replay))
    return tuple(
        PolicyComparison(
            policy=name,
            metric=metric,
            replay=_mean_metric(replay, name, metric),
            host=_mean_metric(host, name, metric),
            held_out=name in held_out,
        )
        for name in names
    )


def _mean_metric(results: Sequence[EpisodeResult], policy: str, metric: str) -> float | None:
    values = [getattr(r.metrics, metric) for r in results if r.policy.name == policy]
    if not values or any(value is None for value in values):
        return None
    return statistics.fmean(values)


def ranking_agreement(
    policies: Sequence[PolicyComparison], higher_is_better: bool
) -> tuple[float | None, bool | None]:
    """Kendall's tau between the policies' order on the two backends, and whether it is the same.

    ``None`` for both with fewer than two policies, or if a policy's metric is undefined on a
    backend (a training job that did not finish).
    """
    if len(policies) < 2 or any(p.replay is None or p.host is None for p in policies):
        return None, None
    replay = np.array([p.replay for p in policies], dtype=float)
    host = np.array([p.host for p in policies], dtype=float)
    tau = float(stats.kendalltau(replay, host).statistic)
    order = -1 if higher_is_better else 1
    same = list(np.argsort(order * replay, kind="stable")) == list(
        np.argsort(order * host, kind="stable")
    )
    return (tau if math.isfinite(tau) else None), same
