"""The statistics of an evaluation across seeds, per policy and metric.

Each metric of a policy is summarised by its mean over the seeds and a 95% Student-t confidence
interval (:class:`Estimate`), and set against the ``default`` and ``oracle`` policies when they
were evaluated too (:class:`MetricSummary`'s ratios); :func:`summarise` does it for every policy
of a scenario (:class:`PolicySummary`). Where the scenario's primary metric has a bound on the
same seeds (:mod:`.bounds`: what no policy can beat), :func:`summarise_bound` summarises it
(:class:`BoundSummary`) and every policy's primary metric is set against it too.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.evaluation.metrics import METRIC_SPECS, PRIMARY_METRIC, MetricSpec, metrics_for
from dlsched.runs.evaluation.records import (
    DEFAULT_POLICY,
    ORACLE_POLICY,
    EpisodeScore,
    PolicyIdentity,
)

#: Confidence level of the intervals across seeds.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A mean across seeds with its confidence interval.

    Attributes:
        mean: the mean of the defined values, ``None`` if there is none.
        ci_low: lower end of the 95% Student-t interval; ``None`` with fewer than two values
            (the interval is undefined, not zero).
        ci_high: upper end.
        n: how many episodes had a value.
        clipped: whether the interval was cut at the range the metric can take (a fraction
            below 0, a count below 0), which leaves it asymmetric around the mean.
    """

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    clipped: bool = False

    @property
    def half_width(self) -> float | None:
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2


def estimate(
    values: Sequence[float], low: float | None = None, high: float | None = None
) -> Estimate:
    """Mean and 95% Student-t confidence interval of independent samples (here: seeds).

    Args:
        values: one value per seed.
        low: the least value the metric can take; the interval is clipped to it (a satisfied
            fraction of 0.034 +- 0.051 cannot reach below 0).
        high: the largest value the metric can take.
    """
    if not values:
        return Estimate(None, None, None, 0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Estimate(mean, None, None, len(values))
    # Student's t quantile (scipy.stats.t.ppf computes it with this function): scipy.special
    # is imported here, not scipy.stats at the top (0.8 s before any command could answer)
    from scipy.special import stdtrit

    sem = statistics.stdev(values) / math.sqrt(len(values))
    half = float(stdtrit(len(values) - 1, (1 + CONFIDENCE) / 2)) * sem
    ci_low = mean - half if low is None else max(mean - half, low)
    ci_high = mean + half if high is None else min(mean + half, high)
    return Estimate(
        mean, ci_low, ci_high, len(values), clipped=(ci_low, ci_high) != (mean - half, mean + half)
    )


@dataclass(frozen=True)
class MetricSummary:
    """One metric of one policy across seeds, and its ratio to the reference policies and to
    the bound.

    A ratio to a policy is the policy's mean over the reference's mean, ``None`` where the
    reference was not evaluated, has no value, or its mean is 0. The ratio to the bound
    (:class:`BoundSummary`) is the policy's mean over the bound's mean on the seeds where the
    policy has a value, for the primary metric where a bound was given; ``None`` otherwise.
    """

    spec: MetricSpec
    estimate: Estimate
    ratio_to_default: float | None = None
    ratio_to_oracle: float | None = None
    ratio_to_bound: float | None = None


@dataclass(frozen=True)
class BoundSummary:
    """The bound of a scenario's primary metric on the seeds of an evaluation: no policy does
    better on any of them (:mod:`dlsched.runs.evaluation.bounds`).

    Attributes:
        spec: the metric it bounds.
        by_seed: each seed's bound, by ascending seed; a seed whose metric no policy can have
            (an episode without jobs) is left out.
        estimate: their mean and 95% interval across the seeds.
    """

    spec: MetricSpec
    by_seed: tuple[tuple[int, float], ...]
    estimate: Estimate

    def mean_over(self, seeds: Sequence[int]) -> float | None:
        """The bound's mean over ``seeds``; ``None`` if any of them has none (or none given)."""
        values = dict(self.by_seed)
        if not seeds or any(seed not in values for seed in seeds):
            return None
        return statistics.fmean(values[seed] for seed in seeds)


def summarise_bound(values: Mapping[int, float | None], kind: JobKind) -> BoundSummary:
    """The bound of ``kind``'s primary metric from each seed's (``None``: the seed has none)."""
    spec = METRIC_SPECS[PRIMARY_METRIC[kind]]
    by_seed = tuple(sorted((seed, value) for seed, value in values.items() if value is not None))
    return BoundSummary(
        spec, by_seed, estimate([value for _, value in by_seed], spec.low, spec.high)
    )


@dataclass(frozen=True)
class PolicySummary:
    """One policy's results on one scenario.

    Attributes:
        policy: the policy and its parameters.
        label: how tables name it (the policy's name unless that is ambiguous).
        seeds: the seeds of its episodes, ascending.
        metrics: one summary per metric that applies to the scenario's kind.
    """

    policy: PolicyIdentity
    label: str
    seeds: tuple[int, ...]
    metrics: tuple[MetricSummary, ...]

    def metric(self, name: str) -> MetricSummary:
        for summary in self.metrics:
            if summary.spec.name == name:
                return summary
        raise KeyError(name)


def summarise_policy(
    label: str,
    scores: Sequence[EpisodeScore],
    kind: JobKind,
    bound: BoundSummary | None = None,
) -> PolicySummary:
    """Summarise one policy's episodes (all of the same policy), with the primary metric's
    ratio to ``bound`` if given; the ratios to other policies are left unset."""
    ordered = sorted(scores, key=lambda score: score.seed)  # a fixed order for the sums
    identities = {score.policy for score in ordered}
    if len(identities) != 1:
        raise ValueError(f"one summary, several policies: {sorted(map(str, identities))}")
    metrics = []
    for spec in metrics_for(kind):
        valued = [
            (score.seed, value)
            for score in ordered
            if (value := getattr(score.metrics, spec.name)) is not None
        ]
        summary = MetricSummary(spec, estimate([value for _, value in valued], spec.low, spec.high))
        if bound is not None and spec.name == bound.spec.name:
            base = bound.mean_over([seed for seed, _ in valued])
            if base and summary.estimate.mean is not None:
                summary = dataclasses.replace(summary, ratio_to_bound=summary.estimate.mean / base)
        metrics.append(summary)
    return PolicySummary(
        ordered[0].policy, label, tuple(score.seed for score in ordered), tuple(metrics)
    )


def with_ratios(
    summary: PolicySummary, default: PolicySummary | None, oracle: PolicySummary | None
) -> PolicySummary:
    """``summary`` with every metric's ratio to the ``default`` and ``oracle`` summaries."""
    metrics = tuple(
        dataclasses.replace(
            metric,
            ratio_to_default=_ratio(metric, default),
            ratio_to_oracle=_ratio(metric, oracle),
        )
        for metric in summary.metrics
    )
    return dataclasses.replace(summary, metrics=metrics)


def _ratio(metric: MetricSummary, reference: PolicySummary | None) -> float | None:
    if reference is None or metric.estimate.mean is None:
        return None
    base = reference.metric(metric.spec.name).estimate.mean
    if base is None or base == 0:
        return None
    return metric.estimate.mean / base


def summarise(
    scores: Iterable[EpisodeScore], kind: JobKind, bound: BoundSummary | None = None
) -> tuple[PolicySummary, ...]:
    """Summarise the episodes of one scenario per policy, with ratios to ``default``/``oracle``
    (and of the primary metric to ``bound``, if given).

    Policies keep the order of their first episode. Each policy name may appear with one set of
    parameters only (an evaluation builds each policy once).
    """
    grouped: dict[PolicyIdentity, list[EpisodeScore]] = {}
    for score in scores:
        grouped.setdefault(score.policy, []).append(score)
    names = [identity.name for identity in grouped]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"policies evaluated with several parameter sets: {duplicated}")
    plain = [
        summarise_policy(identity.name, group, kind, bound) for identity, group in grouped.items()
    ]
    by_name = {summary.policy.name: summary for summary in plain}
    default, oracle = by_name.get(DEFAULT_POLICY), by_name.get(ORACLE_POLICY)
    return tuple(with_ratios(summary, default, oracle) for summary in plain)
