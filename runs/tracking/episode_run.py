"""One episode's MLflow run: a child of its evaluation's run, with its tags, params and metrics.

:func:`log_episode_run` logs an episode from its local folder (:mod:`~dlsched.runs.tracking.
trajectory`, written first) as a child run of the evaluation's parent run: params (the policy
and every parameter, the scenario, the backend and its options, the seed, the dlsched version and
commit), per-step metrics (the headline over time), per-episode metrics (:data:`HEADLINE_KEYS`
for the headline, also under the policy's name, ``episode/<metric>`` for the others) and the
folder's files as artifacts. The
evaluation's :class:`~dlsched.runs.tracking.episode_writer.EpisodeWriter` calls it beside the
episodes, and ``dlsched runs sync`` for the episodes a store missed; :mod:`~dlsched.runs.
tracking.stored_runs` reads these keys back.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID

from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.evaluation.metrics import COST_METRIC, PRIMARY_METRIC, EpisodeMetrics
from dlsched.runs.evaluation.records import EpisodeResult, StepRecord
from dlsched.runs.interruption import deferred
from dlsched.runs.tracking.owners import end_run, owner_tags
from dlsched.runs.tracking.run_logging import (
    TAG_EVALUATION,
    TAG_KIND,
    log_in_batches,
    metric_name,
)
from dlsched.runs.tracking.store import STORE_ERRORS
from dlsched.runs.tracking.trajectory import episode_name

TAG_POLICY_PARAMS = "dlsched.policy_params"  # the parameters as typed JSON
TAG_INCIDENTS = "dlsched.incidents"  # what the backend reported that makes the figures doubtful
#: MLflow's limit on a tag's value is 8000 characters.
MAX_TAG_CHARS = 8000
EPISODE_METRIC_PREFIX = "episode/"
#: The MLflow names of the headline metrics (:data:`~dlsched.runs.evaluation.PRIMARY_METRIC`)
#: of the episode runs (in lower case, after the policy, :func:`policy_headline_key`, the
#: parent's), and the prefix of the comparison's: capitalised and
#: spelt out, because MLflow's run table orders metric columns by code point, capitals before
#: lower case, and every other metric is lower case: so the headline is the first column. Episode
#: runs logged by earlier versions hold it as ``episode/<name>``; ``compare`` reads both.
HEADLINE_KEYS: Mapping[str, str] = {
    PRIMARY_METRIC[JobKind.INFERENCE]: "Satisfied fraction",
    PRIMARY_METRIC[JobKind.TRAINING]: "Mean completion s",
}
BACKEND_PARAM_PREFIX = "backend."  # one param per backend option: backend.workload_threading
#: The tag MLflow 3.17's runs table reads to open a run's parent where the browser has no state
#: of its own for the experiment: an evaluation's episodes are then listed under it, with no
#: click on a collapsed parent row (MLflow's own evaluations are tagged so too).
RUN_TYPE_TAG = "mlflow.runType"
RUN_TYPE_EVALUATION = "evaluation"


def policy_headline_key(kind: JobKind, policy: str) -> str:
    """The metric of a policy's headline, ``<policy> <headline>`` (``dqoes satisfied
    fraction``): its mean on the evaluation's run, each episode's own value on that policy's
    episode runs, so that one column of the runs table lines a policy's mean up with its
    episodes.

    The policy comes first, as the runs table cuts a column's header to its first 15
    characters or so; and no ``/``: MLflow's file store keeps a metric in a file named by its
    key, so ``Satisfied fraction`` could not sit beside ``Satisfied fraction/<policy>``.
    """
    return metric_name(f"{policy} {HEADLINE_KEYS[PRIMARY_METRIC[kind]].lower()}")


def policy_cost_key(policy: str) -> str:
    """The metric of a policy's cores allocated (:data:`~dlsched.runs.evaluation.COST_METRIC`),
    ``<policy> cores allocated``: its mean on the evaluation's run beside its headline, each
    episode's own value on that policy's episode runs, as :func:`policy_headline_key` is."""
    return metric_name(f"{policy} cores allocated")


def backend_params(options: Mapping[str, str]) -> dict[str, str]:
    """The params of a backend's options: ``backend.<option>``, read back by :func:`_stored`."""
    return {BACKEND_PARAM_PREFIX + key: str(value) for key, value in options.items()}


def episode_params(
    result: EpisodeResult, evaluation_id: str, version: str, commit: str | None
) -> dict[str, str]:
    """The params of an episode's run."""
    params = {
        "policy": result.policy.name,
        **{f"policy.{key}": str(value) for key, value in result.policy.params},
        "scenario": result.scenario.name,
        "scenario.hash": result.scenario.content_hash(),
        "scenario.kind": result.scenario.kind.value,
        "backend": result.backend,
        **backend_params(result.backend_options),
        "seed": str(result.seed),
        "evaluation": evaluation_id,
        "dlsched.version": version,
    }
    if commit is not None:
        params["git.commit"] = commit
    return params


def metric_step(step: StepRecord) -> int:
    """MLflow's step of a step's metrics: its simulated time, rounded to the second (steps
    shorter than a second share a second; every point is kept)."""
    return round(step.time_s)


def step_metrics(kind: JobKind, step: StepRecord) -> dict[str, float]:
    """The per-step metrics of one step, by MLflow metric name. Their MLflow step is the
    step's simulated time in whole seconds (:func:`metric_step`), so that the chart's x-axis
    reads seconds and episodes of different intervals line up.

    Each point costs the store about 100 us of this process's time, more than a replay step,
    so one series is a metric: the headline over time (satisfied services, or jobs finished),
    which MLflow's chart view draws for the runs side by side. Everything else of every step
    (time, active jobs, the limits' total, reward, the sizes of DQoES's sets G and B, ``Q_G``,
    ``Q_B``) is in the episode's ``episode.json`` artifact, and each container's in
    ``trajectory.csv``.
    """
    if kind is JobKind.INFERENCE:
        return {"satisfied": float(step.satisfied)}
    return {"finished_jobs": float(step.finished_jobs)}


def episode_metric_key(name: str) -> str:
    """The MLflow name of an :class:`EpisodeMetrics` field: its headline name for the headline
    (:data:`HEADLINE_KEYS`), ``episode/<name>`` for the others."""
    return HEADLINE_KEYS.get(name, EPISODE_METRIC_PREFIX + name)


def episode_metrics_by_name(
    metrics: EpisodeMetrics, kind: JobKind, policy: str
) -> dict[str, float]:
    """The per-episode metrics that have a value, by MLflow metric name; the headline and the
    cores allocated also under the policy's own name (:func:`policy_headline_key`,
    :func:`policy_cost_key`)."""
    values = {episode_metric_key(name): value for name, value in metrics.defined().items()}
    headline = getattr(metrics, PRIMARY_METRIC[kind])
    if headline is not None:
        values[policy_headline_key(kind, policy)] = headline
    cost = getattr(metrics, COST_METRIC)
    if cost is not None:
        values[policy_cost_key(policy)] = cost
    return values


def log_episode_run(
    client: MlflowClient,
    experiment_id: str,
    parent_run_id: str,
    evaluation_id: str,
    result: EpisodeResult,
    episode_dir: Path,
    version: str,
    commit: str | None,
    extra_tags: Mapping[str, str] | None = None,
) -> str:
    """Log one episode as a child run of ``parent_run_id``; its run id.

    The run is ended whatever happens: ``FINISHED`` once everything is logged, ``KILLED`` if a
    signal cuts the logging short, ``FAILED`` if the store refuses part of it.
    """
    tags = {
        MLFLOW_PARENT_RUN_ID: parent_run_id,
        TAG_KIND: "episode",
        TAG_EVALUATION: evaluation_id,
        TAG_POLICY_PARAMS: json.dumps(dict(result.policy.params)),
        RUN_TYPE_TAG: RUN_TYPE_EVALUATION,
        **owner_tags(),
        **(extra_tags or {}),
    }
    if result.incidents:
        tags[TAG_INCIDENTS] = "\n".join(result.incidents)[:MAX_TAG_CHARS]
    if commit is not None:
        tags[MLFLOW_GIT_COMMIT] = commit
    name = episode_name(result.policy, result.seed)
    # A signal waits until the episode's run is logged and ended: cut in the middle of MLflow's
    # writes, it left the run RUNNING (its id never returned) or a transaction half-done.
    with deferred():
        return _log_episode(
            client, experiment_id, name, tags, result, episode_dir, evaluation_id, version, commit
        )


def _log_episode(
    client: MlflowClient,
    experiment_id: str,
    name: str,
    tags: Mapping[str, str],
    result: EpisodeResult,
    episode_dir: Path,
    evaluation_id: str,
    version: str,
    commit: str | None,
) -> str:
    run = client.create_run(experiment_id, run_name=name, tags=dict(tags))
    run_id: str = run.info.run_id
    status = "FAILED"
    try:
        now_ms = int(time.time() * 1000)
        metrics = [
            Metric(key, value, now_ms, metric_step(step))
            for step in result.steps
            for key, value in step_metrics(result.scenario.kind, step).items()
        ]
        metrics += [
            Metric(key, value, now_ms, 0)
            for key, value in episode_metrics_by_name(
                result.metrics, result.scenario.kind, result.policy.name
            ).items()
        ]
        params = episode_params(result, evaluation_id, version, commit)
        log_in_batches(client, run_id, metrics, params)
        # the repository of the run just created: client.log_artifacts(run_id) reads the run
        # back to find it (a sizeable part of the episode's logging: docs/performance.md)
        artifacts = get_artifact_repository(run.info.artifact_uri, tracking_uri=client.tracking_uri)
        artifacts.log_artifacts(str(episode_dir))
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        # a store that refused the logging may refuse this too; the owner tags let a later
        # command end the run then
        with contextlib.suppress(*STORE_ERRORS):
            end_run(client, run_id, status)
    return run_id
