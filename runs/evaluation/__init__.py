"""The evaluation harness: run policies on a scenario over seeds, and summarise what they achieved.

Episodes run on the batched environment, fed by :mod:`dlsched.policies.feed`: on a batchable
backend (replay) a handcrafted policy's seeds in batches run at once (:func:`run_episodes`),
otherwise one at a time (:func:`run_episode`; learned models, the Docker backend).
:func:`evaluation_episodes` hands each episode over as it ends, so that an evaluation of many
episodes keeps only their scores.

Every step is recorded (:class:`StepRecord`, with one :class:`ContainerSample` per job), the
episode is scored (:class:`EpisodeMetrics`), and the scores of many seeds are summarised per
policy (:class:`PolicySummary`): the mean, a 95% Student-t confidence interval across seeds, and
the ratio to the ``default`` and ``oracle`` policies when they were evaluated too.

One module per concept, every public name of them importable from here
(``from dlsched.runs.evaluation import evaluate``):

- :mod:`.records`: what is recorded of an episode (its steps, jobs and identity) and its JSON
  form;
- :mod:`.metrics`: the metric catalogue (:class:`EpisodeMetrics`, :data:`METRICS`);
- :mod:`.runners`: running and scoring episodes (:func:`run_episode`,
  :func:`run_episodes`, :func:`evaluation_episodes`, :func:`evaluate`; :func:`check_backend`
  before any);
- :mod:`.summaries`: the statistics across seeds (:func:`estimate`, :func:`summarise`).
"""

from __future__ import annotations

from dlsched.runs.evaluation.metrics import (
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
    Estimate,
    MetricSummary,
    PolicySummary,
    estimate,
    summarise,
    summarise_policy,
    with_ratios,
)

__all__ = [
    "CONFIDENCE",
    "DEFAULT_POLICY",
    "ENV_IDS",
    "MAX_EPISODES",
    "METRICS",
    "METRIC_SPECS",
    "ORACLE_POLICY",
    "PRIMARY_METRIC",
    "ContainerSample",
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
    "check_backend",
    "check_evaluation_size",
    "episode_metrics",
    "episode_result",
    "estimate",
    "evaluate",
    "evaluation_episodes",
    "metrics_for",
    "run_episode",
    "run_episodes",
    "step_record",
    "summarise",
    "summarise_policy",
    "to_jsonable",
    "with_ratios",
]
