"""What every MLflow run of dlsched is logged with: the tags that say what a run is, and
metrics, params and tags in batches within MLflow's limits.

The runs of evaluations (:mod:`~dlsched.runs.tracking.tracker`), of their episodes
(:mod:`~dlsched.runs.tracking.episode_run`), of trainings, validations, comparisons and
reproductions are all tagged :data:`TAG_KIND` and logged with :func:`log_in_batches`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

#: MLflow's batch limits (mlflow.utils.validation).
MAX_METRICS_PER_CALL = 1000
MAX_PARAMS_PER_CALL = 100
MAX_ENTITIES_PER_CALL = 1000

TAG_KIND = "dlsched.kind"  # "evaluation" on parent runs, "episode" on child runs
TAG_EVALUATION = "dlsched.evaluation"
TAG_DEGRADED = "dlsched.degraded"  # "true" on a run whose tracking failed and was synced later
#: What MLflow accepts in a metric name (on Linux); anything else becomes ``_``.
_UNSAFE = re.compile(r"[^\w\-. /:]")


def metric_name(text: str) -> str:
    """``text`` as an MLflow metric name: a policy's label (a model's path, say) may hold
    characters MLflow refuses in one."""
    return _UNSAFE.sub("_", text)


def log_in_batches(
    client: MlflowClient,
    run_id: str,
    metrics: Sequence[Metric] = (),
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> None:
    """Log metrics, params and tags in as few ``log_batch`` calls as MLflow's limits allow.

    Each call is a transaction of the store (a few milliseconds on sqlite whatever it holds), so
    params, tags and metrics share calls: an episode's run is one call.
    """
    param_list = [Param(key, value) for key, value in (params or {}).items()]
    tag_list = [RunTag(key, value) for key, value in (tags or {}).items()]
    metric_list = list(metrics)
    while param_list or tag_list or metric_list:
        params_chunk, param_list = (
            param_list[:MAX_PARAMS_PER_CALL],
            param_list[MAX_PARAMS_PER_CALL:],
        )
        tags_chunk, tag_list = tag_list[:MAX_PARAMS_PER_CALL], tag_list[MAX_PARAMS_PER_CALL:]
        room = min(
            MAX_METRICS_PER_CALL, MAX_ENTITIES_PER_CALL - len(params_chunk) - len(tags_chunk)
        )
        metrics_chunk, metric_list = metric_list[:room], metric_list[room:]
        client.log_batch(
            run_id,
            metrics=metrics_chunk,
            params=params_chunk,
            tags=tags_chunk,
            synchronous=True,
        )
