"""Replay against the host as distributions: many outcomes of one job on each side.

Where co-located thread pools race, one seeded episode rerun on an idle host finishes each job
at very different times (``docs/fidelity.md``), so a model
can only be held to the host's *spread*, not to one run. Here a job's (or a policy's) outcome is
a sample on each side: the host's reruns of one seeded episode, and replay's episodes over many
seeds (or one seed's, where replay is deterministic). :class:`SampleComparison` holds the two
and measures how far apart they are:

- the **Wasserstein-1 distance** (the earth mover's distance: the area between the two
  empirical distribution functions, in the outcome's unit), relative to the host's mean, as
  CausalSim compares a simulator's distribution with the real one (Alomar et al., NSDI 2023,
  Section 6);
- the **two-sample Kolmogorov-Smirnov statistic** (the largest gap between the two distribution
  functions, 0-1), nonparametric as run times need ("Taming Performance Variability", Maricq et
  al., OSDI 2018, Section 4);
- the **coverage**: the fraction of host outcomes inside replay's 10-90% band (a replay as
  spread as the host covers about 80%; a point model covers only the outcomes equal to it);
- the **host's own floor** (:func:`split_half_floor`): the same relative distance between two
  halves of the host's reruns, averaged over every way of splitting them. No model can be held
  closer to the host than the host is to itself.

:func:`ranking_check` asks whether replay orders the policies as the host does wherever the host
can tell them apart: two policies whose host means have bootstrap 95% intervals
(:func:`bootstrap_interval`) that do not overlap must come in the same order on replay.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dlsched.envs.errors import ArgumentError

#: Quantiles of replay's band that :attr:`SampleComparison.coverage` counts host outcomes in.
BAND = (0.10, 0.90)
#: Confidence of :func:`bootstrap_interval`.
CONFIDENCE = 0.95
#: Resamples of :func:`bootstrap_interval`.
BOOTSTRAP_RESAMPLES = 2000
#: Splits :func:`split_half_floor` averages over, at most (all of them for up to 12 reruns).
MAX_SPLITS = 462


@dataclass(frozen=True)
class SampleComparison:
    """One outcome (a job's completion time, a policy's mean, ...) as samples on both sides.

    Attributes:
        replay: replay's outcomes (one per seed, or per draw).
        host: the host's outcomes (one per rerun).
    """

    replay: tuple[float, ...]
    host: tuple[float, ...]

    def __post_init__(self) -> None:
        for side, values in (("replay", self.replay), ("host", self.host)):
            if not values or not all(math.isfinite(value) for value in values):
                raise ArgumentError(f"{side} samples {values!r}: expected one finite value or more")

    @property
    def host_mean(self) -> float:
        return float(np.mean(self.host))

    @property
    def replay_mean(self) -> float:
        return float(np.mean(self.replay))

    @property
    def w1(self) -> float:
        """The Wasserstein-1 distance between the two samples, in the outcome's unit."""
        return float(stats.wasserstein_distance(self.replay, self.host))

    @property
    def relative_w1(self) -> float | None:
        """:attr:`w1` over the host's mean (``None`` where that mean is 0)."""
        mean = self.host_mean
        return None if mean == 0 else self.w1 / abs(mean)

    @property
    def ks(self) -> float:
        """The two-sample Kolmogorov-Smirnov statistic, 0 (the same distribution function) to 1."""
        return float(stats.ks_2samp(self.replay, self.host).statistic)

    @property
    def band(self) -> tuple[float, float]:
        """Replay's 10% and 90% quantiles, each one of replay's outcomes (the smallest whose
        share of outcomes at or below it reaches the quantile): interpolating would shrink a
        few reruns' band inside their own range, so that two outcomes would not cover
        themselves."""
        low, high = np.quantile(self.replay, BAND, method="inverted_cdf")
        return float(low), float(high)

    @property
    def coverage(self) -> float:
        """The fraction of host outcomes inside replay's :attr:`band`, ends included."""
        low, high = self.band
        return sum(low <= value <= high for value in self.host) / len(self.host)

    @property
    def mean_error(self) -> float | None:
        """``(replay mean - host mean) / host mean``; ``None`` where the host's mean is 0."""
        mean = self.host_mean
        return None if mean == 0 else (self.replay_mean - mean) / abs(mean)

    def floor(self) -> float | None:
        """The host's own floor for :attr:`relative_w1` (:func:`split_half_floor`)."""
        return split_half_floor(self.host)


def split_half_floor(host: Sequence[float]) -> float | None:
    """How far the host's reruns are from themselves: the Wasserstein-1 distance between two
    halves of ``host`` over its mean, averaged over the ways of splitting it (every one, up to
    :data:`MAX_SPLITS`; the first ones in lexicographic order beyond). ``None`` with fewer than
    two reruns, or a mean of 0."""
    values = np.asarray(host, dtype=float)
    mean = float(values.mean()) if len(values) else 0.0
    if len(values) < 2 or mean == 0:
        return None
    indices = range(len(values))
    distances = []
    for half in itertools.islice(itertools.combinations(indices, len(values) // 2), MAX_SPLITS):
        chosen = np.zeros(len(values), dtype=bool)
        chosen[list(half)] = True
        distances.append(stats.wasserstein_distance(values[chosen], values[~chosen]))
    return float(np.mean(distances)) / abs(mean)


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap confidence interval.

    Attributes:
        mean: the sample's mean.
        low: the interval's lower end.
        high: its upper end.
    """

    mean: float
    low: float
    high: float

    def separates(self, other: Interval) -> bool:
        """Whether the two intervals do not overlap."""
        return self.high < other.low or other.high < self.low


def bootstrap_interval(values: Sequence[float], seed: int = 0) -> Interval:
    """The mean of ``values`` with a percentile bootstrap :data:`CONFIDENCE` interval
    (:data:`BOOTSTRAP_RESAMPLES` resamples drawn from ``seed``: the same interval every time);
    one value is its own interval, as every resample of it is.

    Raises:
        ArgumentError: no values.
    """
    sample = np.asarray(values, dtype=float)
    if not len(sample):
        raise ArgumentError("a bootstrap interval needs one value or more, got none")
    mean = float(sample.mean())
    if len(sample) == 1:  # SciPy resamples two values or more
        return Interval(mean, mean, mean)
    result = stats.bootstrap(
        (sample,),
        np.mean,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return Interval(mean, float(interval.low), float(interval.high))


@dataclass(frozen=True)
class RankingCheck:
    """Whether replay orders the policies as the host does, where the host can tell.

    Attributes:
        host: each policy's host mean and interval.
        replay: each policy's replay mean and interval.
        separated: the pairs of policies whose host intervals do not overlap.
        disagreements: those of them that replay orders the other way (or ties).
    """

    host: Mapping[str, Interval]
    replay: Mapping[str, Interval]
    separated: tuple[tuple[str, str], ...]
    disagreements: tuple[tuple[str, str], ...]

    @property
    def agrees(self) -> bool:
        """The same order wherever the host separates two policies."""
        return not self.disagreements


def ranking_check(
    host: Mapping[str, Sequence[float]], replay: Mapping[str, Sequence[float]]
) -> RankingCheck:
    """Compare the policies' order on both sides (each policy's outcomes per side, e.g. its
    episodes' mean completion times); pairs are in the order of ``host``.

    Raises:
        ArgumentError: the two sides name different policies.
    """
    if set(host) != set(replay):
        raise ArgumentError(
            f"the host's policies {sorted(host)} and replay's {sorted(replay)} do not match"
        )
    host_intervals = {policy: bootstrap_interval(values) for policy, values in host.items()}
    replay_intervals = {policy: bootstrap_interval(replay[policy]) for policy in host}
    separated, disagreements = [], []
    for first, second in itertools.combinations(host, 2):
        if not host_intervals[first].separates(host_intervals[second]):
            continue
        separated.append((first, second))
        host_order = host_intervals[first].mean < host_intervals[second].mean
        replay_first, replay_second = replay_intervals[first].mean, replay_intervals[second].mean
        if replay_first == replay_second or (replay_first < replay_second) != host_order:
            disagreements.append((first, second))
    return RankingCheck(host_intervals, replay_intervals, tuple(separated), tuple(disagreements))


@dataclass(frozen=True)
class JobDistribution:
    """One job's outcomes over the reruns of its episode, on both sides.

    Attributes:
        policy: the policy that ran it.
        job_id: the job.
        workload: what it runs.
        outcomes: its outcomes (completion time, or median batch latency) on both sides.
    """

    policy: str
    job_id: str
    workload: str
    outcomes: SampleComparison


@dataclass(frozen=True)
class DistributionSummary:
    """Replay's outcomes against the host's spread, over the jobs of a validation whose seeds
    all draw the same jobs (so that the host's seeds are reruns of one episode).

    Attributes:
        jobs: every job with outcomes on both sides over two reruns or more.
        median_w1: the median over the jobs of :attr:`SampleComparison.relative_w1`.
        median_floor: the median over the jobs of the host's split-half floor.
        coverage: the host outcomes inside replay's 10-90% band, over all of them.
        ranking: the policies' order on both sides where the host separates them (``None``
            with one policy, or a policy without a value on every rerun).
    """

    jobs: tuple[JobDistribution, ...]
    median_w1: float | None
    median_floor: float | None
    coverage: float | None
    ranking: RankingCheck | None

    @property
    def w1_over_floor(self) -> float | None:
        """:attr:`median_w1` over :attr:`median_floor`: 1 is as close as the host to itself."""
        if self.median_w1 is None or not self.median_floor:
            return None
        return self.median_w1 / self.median_floor


def distribution_summary(
    jobs: Sequence[JobDistribution],
    host_policies: Mapping[str, Sequence[float]],
    replay_policies: Mapping[str, Sequence[float]],
) -> DistributionSummary:
    """The summary of ``jobs`` and of the policies' outcomes (each policy's primary metric, one
    per rerun, on each side)."""
    distances = [d for job in jobs if (d := job.outcomes.relative_w1) is not None]
    floors = [f for job in jobs if (f := job.outcomes.floor()) is not None]
    inside = sum(job.outcomes.coverage * len(job.outcomes.host) for job in jobs)
    outcomes = sum(len(job.outcomes.host) for job in jobs)
    ranked = len(host_policies) >= 2 and all(
        values for values in (*host_policies.values(), *replay_policies.values())
    )
    return DistributionSummary(
        jobs=tuple(jobs),
        median_w1=float(np.median(distances)) if distances else None,
        median_floor=float(np.median(floors)) if floors else None,
        coverage=inside / outcomes if outcomes else None,
        ranking=ranking_check(host_policies, replay_policies) if ranked else None,
    )
