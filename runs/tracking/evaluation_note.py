"""What MLflow's UI shows of an evaluation without any setting: the Markdown notes.

MLflow renders the tag ``mlflow.note.content`` as Markdown: a run's on its overview page, an
experiment's above its runs table (its first line also in the experiments list, as plain text).
The UI's columns, charts and landing page are the browser's own state (MLflow 3.17 stores them
in ``localStorage``), not the store's, so the notes are where a logging client can put the
evaluation's numbers in front of a reader:

- the **evaluation's note**: every policy's headline with its 95% interval and, where one is
  given, the bound no policy can beat (the table ``dlsched compare --format markdown`` prints),
  the bar chart of the headlines on one scale (:data:`POLICIES_FILE`) and the timeline;
- the **experiment's note**: a first line with each policy's headline of the newest evaluation,
  then that evaluation's note, linked to its run.

Images are the run's artifacts, served by the tracking server at ``get-artifact`` relative to the
UI's page, so they show in ``mlflow ui`` and ``mlflow server`` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlencode

from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from dlsched.runs.evaluation.metrics import PRIMARY_METRIC
from dlsched.runs.tracking.compare import ScenarioComparison, render_markdown

NOTE_TAG = MLFLOW_RUN_NOTE
POLICIES_FILE = "policies.png"


def _artifact_image(run_id: str, path: str) -> str:
    query = urlencode({"path": path, "run_uuid": run_id})
    return f"![{path}](get-artifact?{query})"


def headline_line(comparison: ScenarioComparison) -> str:
    """``<headline>: <policy> <mean>, ...`` in plain text, the best first, then the bound where
    one is given (``(bound <mean>)``)."""
    primary = PRIMARY_METRIC[comparison.kind]
    spec = next(spec for spec in comparison.metrics if spec.name == primary)
    values = [
        (mean, summary.label)
        for summary in comparison.summaries
        if (mean := summary.metric(primary).estimate.mean) is not None
    ]
    values.sort(key=lambda value: -value[0] if spec.higher_is_better else value[0])
    shown = ", ".join(f"{label} {mean:.{spec.decimals}f}" for mean, label in values)
    bound = comparison.bound.estimate.mean if comparison.bound is not None else None
    beyond = f" (bound {bound:.{spec.decimals}f})" if bound is not None else ""
    return f"{spec.description}: {shown or 'undefined for every policy'}{beyond}"


def evaluation_note(
    comparison: ScenarioComparison, evaluation_id: str, run_id: str, images: Sequence[str]
) -> str:
    """The evaluation run's note: its headlines, then its table and ``images`` (artifact paths)."""
    lines = [
        f"Evaluation {evaluation_id}. {headline_line(comparison)}.",
        "",
        render_markdown([comparison]),
        "",
        *(_artifact_image(run_id, image) for image in images),
    ]
    return "\n".join(lines).rstrip() + "\n"


def experiment_note(
    comparison: ScenarioComparison, experiment_id: str, run_id: str, note: str
) -> str:
    """The experiment's note: the newest evaluation's headlines on its first line, then its
    note under a link to its run."""
    link = f"#/experiments/{experiment_id}/runs/{run_id}"
    return (
        f"Newest evaluation: {headline_line(comparison)}. Open it for every metric with its "
        f"interval and the timeline.\n\n[Open the newest evaluation's run]({link})\n\n{note}"
    )
