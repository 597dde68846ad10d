"""What MLflow's UI shows of an evaluation without any setting: the notes, and a shared view of
the runs table.

MLflow renders the tag ``mlflow.note.content`` as Markdown: a run's on its overview page, an
experiment's above its runs table (its first line also in the experiments list, as plain text,
cut to the column's width). The UI's columns, charts and landing page are the browser's own
state (MLflow 3.17 stores them in ``localStorage``), not the store's, so the notes are where a
logging client can put the evaluation's numbers in front of a reader, people's numbers rounded
(the metrics beside them keep every digit, as data):

- the **evaluation's note**: a first line with every policy's headline and its 95% interval
  (the run page folds the note after a few lines, behind "Show more"), then the table
  ``dlsched evaluate`` prints with its legend, in a code block (MLflow 3.17 draws a Markdown
  table without cell padding, so ``1.0 ± 0.0`` and ``6.0 ± 0.0`` ran together), then the bar
  chart of the headlines on one scale (:data:`POLICIES_FILE`) and the timeline;
- the **experiment's note**: a first line that starts with each policy's headline in the
  newest evaluation (the experiments list shows about its first 25-40 characters), with links
  to the runs table showing that evaluation's runs with their headlines (:func:`shared_view`)
  and to its run; then that evaluation's note.

MLflow 3.17 keeps a shared view of the runs table as the experiment tag
``mlflow.sharedViewState.<key>`` (its "Share" button writes one) and opens it for a link with
``?viewStateShareKey=<key>``: its filter, sort, columns, their order and widths. So one link
shows each policy's headline column beside the newest evaluation's runs, with no setting in
the browser.

Images are the run's artifacts, served by the tracking server at ``get-artifact`` relative to the
UI's page, so they show in ``mlflow ui`` and ``mlflow server`` alike.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import urlencode

from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE

from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC
from dlsched.runs.evaluation.summaries import Estimate
from dlsched.runs.tracking.compare import ScenarioComparison, render_table
from dlsched.runs.tracking.episode_run import HEADLINE_KEYS, policy_headline_key
from dlsched.runs.tracking.run_logging import TAG_EVALUATION

NOTE_TAG = MLFLOW_RUN_NOTE
POLICIES_FILE = "policies.png"
#: The experiment tag prefix under which MLflow 3.17 keeps a shared view of the runs table.
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
#: The key of the shared view dlsched writes, one per experiment, for its newest evaluation.
SHARED_VIEW_KEY = "dlsched-scores"
#: A headline column's width in the shared view, in pixels: its whole name shows
#: (``dqoes satisfied fraction``; MLflow's default width cuts it after 15 characters or so).
COLUMN_WIDTH_PX = 210
#: The headline as a reader names it, after the scores.
HEADLINE_WORDS = {
    JobKind.INFERENCE: "satisfied fraction (satisfied / active services, over the steps)",
    JobKind.TRAINING: "mean completion time in seconds (arrival to finish)",
}


def _artifact_image(run_id: str, path: str) -> str:
    query = urlencode({"path": path, "run_uuid": run_id})
    return f"![{path}](get-artifact?{query})"


def _ranked(comparison: ScenarioComparison) -> list[tuple[str, Estimate]]:
    """Each row's label and headline estimate, the best first; rows without one left out."""
    primary = PRIMARY_METRIC[comparison.kind]
    spec = next(spec for spec in comparison.metrics if spec.name == primary)
    sign = -1.0 if spec.higher_is_better else 1.0
    rows = [
        (sign * mean, summary.label, estimate)
        for summary in comparison.summaries
        if (mean := (estimate := summary.metric(primary).estimate).mean) is not None
    ]
    rows.sort(key=lambda row: row[0])
    return [(label, estimate) for _, label, estimate in rows]


def headline_line(comparison: ScenarioComparison, intervals: bool = False) -> str:
    """``<policy> <mean>, ...`` the best first, rounded to the table's digits (with ``± <half
    width>`` of the 95% interval, or ``[low, high]`` where it was clipped, if ``intervals``),
    then the bound where one is given (``(bound <mean>)``); plain text."""
    primary = PRIMARY_METRIC[comparison.kind]
    digits = next(spec for spec in comparison.metrics if spec.name == primary).decimals
    shown = []
    for label, estimate in _ranked(comparison):
        text = f"{label} {estimate.mean:.{digits}f}"
        low, high = estimate.ci_low, estimate.ci_high
        if intervals and estimate.clipped and low is not None and high is not None:
            text += f" [{low:.{digits}f}, {high:.{digits}f}]"
        elif intervals and estimate.half_width is not None:
            text += f" ± {estimate.half_width:.{digits}f}"
        shown.append(text)
    bound = comparison.bound.estimate.mean if comparison.bound is not None else None
    beyond = f" (bound {bound:.{digits}f})" if bound is not None else ""
    return f"{', '.join(shown) or 'no policy has a value'}{beyond}"


def evaluation_note(
    comparison: ScenarioComparison, evaluation_id: str, run_id: str, images: Sequence[str]
) -> str:
    """The evaluation run's note: its headlines with their intervals on the first line, then the
    table with its legend, then ``images`` (artifact paths)."""
    seeds = max((len(summary.seeds) for summary in comparison.summaries), default=0)
    lines = [
        f"{headline_line(comparison, intervals=True)}: {HEADLINE_WORDS[comparison.kind]}, mean "
        f"of {seeds} seed{'s' if seeds != 1 else ''} with its 95% interval. Evaluation "
        f"{evaluation_id}.",
        "",
        "```",
        render_table([comparison]),
        "```",
        "",
        *(_artifact_image(run_id, image) for image in images),
    ]
    return "\n".join(lines).rstrip() + "\n"


def experiment_note(
    comparison: ScenarioComparison, experiment_id: str, run_id: str, note: str
) -> str:
    """The experiment's note: the newest evaluation's headlines first on its first line, with
    links to its runs with their headlines (:func:`shared_view_link`) and to its run; then its
    note."""
    run = f"#/experiments/{experiment_id}/runs/{run_id}"
    return (
        f"{headline_line(comparison)}: {HEADLINE_WORDS[comparison.kind]}, newest evaluation. "
        f"[Its episodes' {HEADLINE_KEYS[PRIMARY_METRIC[comparison.kind]].lower()}]"
        f"({shared_view_link(experiment_id)}), [its run]({run}).\n\n{note}"
    )


def shared_view_link(experiment_id: str) -> str:
    """The link, relative to MLflow's UI, that opens the runs table in the shared view
    (:func:`shared_view`), in the "Model training" view whatever the browser last chose."""
    query = urlencode({"viewStateShareKey": SHARED_VIEW_KEY, "workflowType": "machine_learning"})
    return f"#/experiments/{experiment_id}/runs?{query}"


def shared_view(comparison: ScenarioComparison, evaluation_id: str) -> str:
    """The runs table's view of an evaluation with its headlines: the evaluation's run and its
    episodes, by name (the evaluation first, then each policy's seeds), with the episodes'
    headline column (every episode run has it) and each policy's (its mean on the evaluation's
    run, each of its episodes' on theirs), the best policy first, wide enough to read; the JSON
    MLflow 3.17 keeps in the experiment tag ``SHARED_VIEW_PREFIX + SHARED_VIEW_KEY``.

    MLflow applies a shared view's filter, sort, columns, their order and widths, but not which
    parent rows are open; it lists child runs flat, though, under any filter or any sort but
    by time, so the episodes show without a click.
    """
    headline = HEADLINE_KEYS[PRIMARY_METRIC[comparison.kind]]
    keys = [headline] + [
        policy_headline_key(comparison.kind, label) for label, _ in _ranked(comparison)
    ]
    columns = [f"metrics.`{key}`" for key in keys]
    state = {
        "searchFilter": f"tags.`{TAG_EVALUATION}` = '{evaluation_id}'",
        "orderByKey": "tags.`mlflow.runName`",
        "orderByAsc": True,
        "selectedColumns": columns,
        "columnOrder": columns,
        "columnWidths": dict.fromkeys(columns, COLUMN_WIDTH_PX),
    }
    return json.dumps(state)
