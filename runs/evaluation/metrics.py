"""The metric catalogue: what an episode is scored on, and how each score is named and ranked.

Every score of an episode is a field of :class:`EpisodeMetrics`; :data:`METRICS` says, for each,
its label, what it means, the scenario kinds it applies to, which direction wins and the range it
can take (:class:`MetricSpec`).

Metrics:

- inference: the fraction of active jobs that are satisfied (DQoES's set S, journal Section V),
  averaged over the episode's steps and read at its end; the number of jobs in S, G and B at the
  end (the journal reports these counts, e.g. 26 against 3 on the 40-model cluster).
- training: the mean completion time (arrival to finish) and the makespan (first arrival to last
  finish), FlowCon's measures (journal, Section 6); both are undefined for an episode in which a
  job did not finish, and ``unfinished_jobs`` counts such jobs.
- both kinds, what the CPU costs (the measure of Autothrottle and the Kubernetes autoscalers: the
  CPU allocated while the targets are met): the mean cores allocated and used, and the outcome
  per allocated core-second (satisfied service-seconds for inference, completed iterations for
  training); see :func:`~dlsched.runs.evaluation.runners.episode_metrics` for their exact
  definitions.
- both kinds, what a decision costs: the median and 99th percentile of the wall time the policy
  took per decision, so that a learned scheduler's overhead reads beside a heuristic's. These
  two measure the machine that ran the evaluation, not the episode: they are left out of
  equality (two runs of one seed are the same episode) and of the recorded outcomes
  (:attr:`MetricSpec.reproducible`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from dlsched.envs.scenarios.model import JobKind


@dataclass(frozen=True)
class EpisodeMetrics:
    """One episode's scores; a metric that does not apply to the scenario's kind is ``None``.

    See :data:`METRICS` for what each one means.
    """

    episode_return: float
    satisfied_fraction_mean: float | None = None
    satisfied_fraction_final: float | None = None
    satisfied_final: float | None = None
    g_final: float | None = None
    b_final: float | None = None
    mean_completion_s: float | None = None
    makespan_s: float | None = None
    unfinished_jobs: float | None = None
    cores_allocated_mean: float | None = None
    cores_used_mean: float | None = None
    satisfied_per_core_s: float | None = None
    iterations_per_core_s: float | None = None
    decision_ms_median: float | None = field(default=None, compare=False)
    decision_ms_p99: float | None = field(default=None, compare=False)

    def defined(self) -> dict[str, float]:
        """The metrics that have a value, by name."""
        return {
            field.name: value
            for field in dataclasses.fields(self)
            if (value := getattr(self, field.name)) is not None
        }


@dataclass(frozen=True)
class MetricSpec:
    """How one field of :class:`EpisodeMetrics` is named, read and ranked.

    Attributes:
        name: the field of :class:`EpisodeMetrics` (and the MLflow metric ``episode/<name>``).
        label: short column header.
        description: one line for the JSON output and the docs.
        kinds: the scenario kinds it applies to.
        higher_is_better: the direction that wins.
        decimals: digits shown in tables.
        low: the least value it can take (``None``: unbounded); confidence intervals are
            clipped to ``[low, high]``.
        high: the largest value it can take (``None``: unbounded).
        ranked: whether a comparison marks its best (the cores a job used are no aim in
            themselves: a policy that starves its jobs uses few).
        reproducible: whether an episode run again from its seed on a deterministic backend
            gives it again (a wall time does not).
    """

    name: str
    label: str
    description: str
    kinds: tuple[JobKind, ...]
    higher_is_better: bool
    decimals: int
    low: float | None = 0.0
    high: float | None = None
    ranked: bool = True
    reproducible: bool = True


_INFERENCE = (JobKind.INFERENCE,)
_TRAINING = (JobKind.TRAINING,)
_BOTH = (JobKind.INFERENCE, JobKind.TRAINING)

METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "satisfied_fraction_mean",
        "sat.frac mean",
        "satisfied / active services (DQoES's set S: batch latency within (1 ± alpha) x "
        "target, alpha the service's tolerance), averaged over the steps with an active service",
        _INFERENCE,
        True,
        3,
        high=1.0,
    ),
    MetricSpec(
        "satisfied_fraction_final",
        "sat.frac end",
        "satisfied / active services at the episode's end",
        _INFERENCE,
        True,
        3,
        high=1.0,
    ),
    MetricSpec(
        "satisfied_final",
        "|S| end",
        "services satisfied (in S) at the episode's end",
        _INFERENCE,
        True,
        1,
    ),
    MetricSpec(
        "g_final",
        "|G| end",
        "services faster than needed (in G: latency below (1 - alpha) x target, CPU another "
        "could use) at the episode's end",
        _INFERENCE,
        False,
        1,
    ),
    MetricSpec(
        "b_final",
        "|B| end",
        "services too slow (in B: latency above (1 + alpha) x target) at the episode's end",
        _INFERENCE,
        False,
        1,
    ),
    MetricSpec(
        "mean_completion_s",
        "mean compl. s",
        "mean seconds from a job's arrival to its finish (undefined if a job did not finish)",
        _TRAINING,
        False,
        1,
    ),
    MetricSpec(
        "makespan_s",
        "makespan s",
        "seconds from the first arrival to the last finish (undefined if a job did not finish)",
        _TRAINING,
        False,
        1,
    ),
    MetricSpec(
        "unfinished_jobs",
        "unfinished",
        "training jobs not finished when the episode ended",
        _TRAINING,
        False,
        1,
    ),
    MetricSpec(
        "cores_allocated_mean",
        "cores alloc",
        "cores the limits in force hold, per worker the sum of its active jobs' limits in cores "
        "(an uncapped job: the worker's) and at most its cores, summed over the workers, "
        "averaged over the episode's time",
        _BOTH,
        False,
        2,
    ),
    MetricSpec(
        "cores_used_mean",
        "cores used",
        "cores the jobs used, summed over the jobs, averaged over the episode's time",
        _BOTH,
        False,
        2,
        ranked=False,
    ),
    MetricSpec(
        "satisfied_per_core_s",
        "sat.s/core.s",
        "satisfied service-seconds per allocated core-second: the services in S times the "
        "seconds they were in it, over the cores allocated times those seconds",
        _INFERENCE,
        True,
        3,
    ),
    MetricSpec(
        "iterations_per_core_s",
        "iter/core.s",
        "training iterations completed per allocated core-second",
        _TRAINING,
        True,
        3,
    ),
    MetricSpec(
        "episode_return",
        "return",
        "the sum of the environment's rewards over the episode",
        _BOTH,
        True,
        2,
        low=None,
    ),
    MetricSpec(
        "decision_ms_median",
        "decide ms p50",
        "median wall time of the policy's decisions (its act or predict call, nothing of the "
        "environment), in milliseconds",
        _BOTH,
        False,
        3,
        reproducible=False,
    ),
    MetricSpec(
        "decision_ms_p99",
        "decide ms p99",
        "99th percentile of the same wall times, in milliseconds",
        _BOTH,
        False,
        3,
        reproducible=False,
    ),
)

#: Each metric's spec by name.
METRIC_SPECS: Mapping[str, MetricSpec] = {spec.name: spec for spec in METRICS}

#: The metric the ratios in tables and the comparison plot are about, per kind.
PRIMARY_METRIC: Mapping[JobKind, str] = {
    JobKind.INFERENCE: "satisfied_fraction_mean",
    JobKind.TRAINING: "mean_completion_s",
}

#: The metric of what the CPU costs: comparisons rank policies on it beside the primary one.
COST_METRIC = "cores_allocated_mean"


def metrics_for(kind: JobKind) -> tuple[MetricSpec, ...]:
    """The metrics that apply to a scenario kind, in display order."""
    return tuple(spec for spec in METRICS if kind in spec.kinds)
