"""``dlsched compare`` as an MLflow run: its plot and table where ``mlflow ui`` shows them.

A comparison reads many evaluations, so its plot belongs to none of their runs: adding it to
each would change finished runs a user may have shared, and two comparisons of the same runs
would overwrite each other's files. Each ``dlsched compare`` is instead one run of its own, in the
experiment :data:`COMPARE_EXPERIMENT` (tagged ``dlsched.kind = comparison``, which
``dlsched compare`` itself never reads back as an episode), holding:

- params: the filters it was given and the evaluations it compared;
- metrics: the headline of every row, ``<headline>/<scenario>/<policy label>``, the only
  metrics of the run, so the run table and the chart view show them and nothing else;
- artifacts: the plot (the PNG ``dlsched compare`` wrote, under its own name), the table
  (``compare.txt``) and its data (``compare.json``).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric

from dlsched.envs.errors import TrackingError
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC
from dlsched.runs.interruption import deferred
from dlsched.runs.tracking.compare import ScenarioComparison, comparison_data, render_table
from dlsched.runs.tracking.episode_run import HEADLINE_KEYS
from dlsched.runs.tracking.owners import end_run, owner_tags
from dlsched.runs.tracking.run_logging import TAG_KIND, log_in_batches, metric_name
from dlsched.runs.tracking.store import STORE_ERRORS, experiment_id, first_line
from dlsched.runs.tracking.target import TrackingTarget

#: The experiment of the comparison runs.
COMPARE_EXPERIMENT = "dlsched-compare"
#: MLflow's limit on a param's value.
MAX_PARAM_CHARS = 6000


def headline_metrics(comparisons: Sequence[ScenarioComparison]) -> list[Metric]:
    """Every row's headline: ``<headline>/<scenario>/<policy label>`` (its name in
    :data:`~dlsched.runs.tracking.episode_run.HEADLINE_KEYS`)."""
    now_ms = int(time.time() * 1000)
    metrics = []
    for comparison in comparisons:
        primary = PRIMARY_METRIC[comparison.kind]
        for summary in comparison.summaries:
            mean = summary.metric(primary).estimate.mean
            if mean is not None:
                label = f"{HEADLINE_KEYS[primary]}/{comparison.scenario}/{summary.label}"
                key = metric_name(label)
                metrics.append(Metric(key, mean, now_ms, 0))
    return metrics


def log_comparison(
    client: MlflowClient,
    target: TrackingTarget,
    comparisons: Sequence[ScenarioComparison],
    plot: Path | None,
    filters: dict[str, str | None],
) -> str:
    """Log a comparison as a run of :data:`COMPARE_EXPERIMENT`; its run id.

    Args:
        client: the store the evaluations were read from.
        target: where it is.
        comparisons: what ``dlsched compare`` printed.
        plot: the plot it wrote, if any.
        filters: the options that chose the episodes (``experiment``, ``scenario``).

    Raises:
        TrackingError: the store refused the run (its message names the store and the fix).
    """
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    evaluations = sorted({ev for comparison in comparisons for ev in comparison.evaluations})
    params = {
        **{f"filter.{key}": value for key, value in filters.items() if value is not None},
        "scenarios": ",".join(sorted({c.scenario for c in comparisons}))[:MAX_PARAM_CHARS],
        "evaluations": ",".join(evaluations)[:MAX_PARAM_CHARS],
    }
    try:
        experiment = experiment_id(client, COMPARE_EXPERIMENT, target)
        with deferred():  # a run created, its id not yet kept, could never be ended
            run_id: str = client.create_run(
                experiment,
                run_name=f"compare-{stamp}",
                tags={TAG_KIND: "comparison", **owner_tags()},
            ).info.run_id
    except STORE_ERRORS as error:
        raise TrackingError(
            f"MLflow tracking store {target.uri} refused the comparison run: "
            f"{first_line(error)}. {target.fix_hint(untracked=False)}"
        ) from error
    status = "FAILED"
    try:
        with tempfile.TemporaryDirectory(prefix="dlsched-compare-") as scratch:
            table = Path(scratch) / "compare.txt"
            table.write_text(render_table(comparisons) + "\n", encoding="utf-8")
            data = Path(scratch) / "compare.json"
            data.write_text(json.dumps({"scenarios": comparison_data(comparisons)}, indent=2))
            log_in_batches(client, run_id, headline_metrics(comparisons), params)
            for path in (table, data, *([plot] if plot is not None else [])):
                client.log_artifact(run_id, str(path))
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    except STORE_ERRORS as error:
        raise TrackingError(
            f"logging the comparison to {target.uri} failed: {first_line(error)}; the table "
            "above and the plot on disk are complete"
        ) from error
    finally:
        # a store that refused the logging may refuse this too; the owner tags let a later
        # command end the run then
        with deferred(), contextlib.suppress(*STORE_ERRORS):
            end_run(client, run_id, status, sys.stderr)
    return run_id
