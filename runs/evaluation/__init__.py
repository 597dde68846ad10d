"""The evaluation harness: run policies on a scenario over seeds, and summarise what they achieved.

One episode is run exactly as a user of Gymnasium and Stable-Baselines3 would run it: the
environment wrapped in :class:`~dlsched.policies.TelemetryFeed`, and ``policy.predict(observation,
deterministic=True)`` at every step, so handcrafted and learned policies take the same path.

On the replay backend, :func:`evaluate` runs all seeds of a handcrafted policy at once on the
batched replay environment (:func:`run_episodes_batched`, one copy of the policy per episode),
which gives the same episodes faster; a policy the batch cannot serve (learned models, the
oracle, a placer of its own on several workers: :func:`~dlsched.policies.batched_feed.
batched_refusal`) and the Docker backend run one single environment per episode.

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
  :func:`run_episodes_batched`, :func:`evaluate`);
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
    batched_path_refusal,
    episode_metrics,
    episode_result,
    evaluate,
    run_episode,
    run_episodes_batched,
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
    "backend_label",
    "batched_path_refusal",
    "episode_metrics",
    "episode_result",
    "estimate",
    "evaluate",
    "metrics_for",
    "run_episode",
    "run_episodes_batched",
    "step_record",
    "summarise",
    "summarise_policy",
    "to_jsonable",
    "with_ratios",
]
