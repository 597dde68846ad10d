"""The evaluation harness: run policies on a scenario over seeds, and summarise what they achieved.

Episodes run on the batched environment, fed by :mod:`dlsched.policies.feed`: on a batchable
backend (replay) a handcrafted policy's seeds in batches run at once (:func:`run_episodes`),
otherwise one at a time (:func:`run_episode`; learned models, the Docker backend).
:func:`evaluation_episodes` hands each episode over as it ends, so that an evaluation of many
episodes keeps only their scores.

Every step is recorded (:class:`StepRecord`, with one :class:`ContainerSample` per job), the
episode is scored (:class:`EpisodeMetrics`), and the scores of many seeds are summarised per
policy (:class:`PolicySummary`): the mean, a 95% Student-t confidence interval across seeds, and
the ratio to the ``default`` and ``oracle`` policies when they were evaluated too, and to the
bound no policy can beat on those seeds where a scenario has one (:class:`BoundSummary`).

One module per concept, every public name of them importable from here
(``from dlsched.runs.evaluation import evaluate``):

- :mod:`.records`: what is recorded of an episode (its steps, jobs and identity) and its JSON
  form;
- :mod:`.metrics`: the metric catalogue (:class:`EpisodeMetrics`, :data:`METRICS`);
- :mod:`.runners`: running and scoring episodes (:func:`run_episode`,
  :func:`run_episodes`, :func:`evaluation_episodes`, :func:`evaluate`; :func:`check_backend`
  before any);
- :mod:`.summaries`: the statistics across seeds (:func:`estimate`, :func:`summarise`);
- :mod:`.bounds`: what no policy can beat on a seed's episode of a replay scenario
  (:func:`episode_bounds`, :func:`evaluation_bound`; :func:`bound_refusal` says where none is
  given).
"""

from __future__ import annotations

from dlsched.runs.evaluation.bounds import (
    EpisodeBound,
    bound_refusal,
    episode_bounds,
    evaluation_bound,
    mean_completion_bound,
    satisfied_fraction_bound,
)
from dlsched.runs.evaluation.metrics import (
    COST_METRIC,
    METRIC_SPECS,
    METRICS,
    PRIMARY_METRIC,
    EpisodeMetrics,
    MetricSpec,
    metrics_for,
)
from dlsched.runs.evaluation.records import (
    DEFAULT_POLICY,
    ORACLE_POLICY,
    ContainerSample,
    EpisodeResult,
    EpisodeScore,
    JobOutcome,
    PolicyIdentity,
    StepRecord,
    backend_label,
    to_jsonable,
)
from dlsched.runs.evaluation.runners import (
    ENV_IDS,
    MAX_EPISODES,
    at_once_refusal,
    check_backend,
    check_evaluation_size,
    episode_metrics,
    episode_result,
    evaluate,
    evaluation_episodes,
    run_episode,
    run_episodes,
    step_record,
)
from dlsched.runs.evaluation.summaries import (
    CONFIDENCE,
    BoundSummary,
    Estimate,
    MetricSummary,
    PolicySummary,
    estimate,
    summarise,
    summarise_bound,
    summarise_policy,
    with_ratios,
)

__all__ = [
    "CONFIDENCE",
    "COST_METRIC",
    "DEFAULT_POLICY",
    "ENV_IDS",
    "MAX_EPISODES",
    "METRICS",
    "METRIC_SPECS",
    "ORACLE_POLICY",
    "PRIMARY_METRIC",
    "BoundSummary",
    "ContainerSample",
    "EpisodeBound",
    "EpisodeMetrics",
    "EpisodeResult",
    "EpisodeScore",
    "Estimate",
    "JobOutcome",
    "MetricSpec",
    "MetricSummary",
    "PolicyIdentity",
    "PolicySummary",
    "StepRecord",
    "at_once_refusal",
    "backend_label",
    "bound_refusal",
    "check_backend",
    "check_evaluation_size",
    "episode_bounds",
    "episode_metrics",
    "episode_result",
    "estimate",
    "evaluate",
    "evaluation_bound",
    "evaluation_episodes",
    "mean_completion_bound",
    "metrics_for",
    "run_episode",
    "run_episodes",
    "satisfied_fraction_bound",
    "step_record",
    "summarise",
    "summarise_bound",
    "summarise_policy",
    "to_jsonable",
    "with_ratios",
]
