"""A reproduction as a user runs it: claims run, report written to a folder, logged to MLflow.

Order of work, so that nothing is lost: the claims file is validated and the tracking store
checked before any episode runs; then the episodes run; then the report (Markdown, HTML, JSON and
figures) is written to its own folder ``<out>/<reproduction id>/``; then it is logged to MLflow.
If the store fails at the end, the report is still on disk and the error says where.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from dlsched.envs.errors import TrackingError
from dlsched.runs.reproduce.claims import ClaimsFile
from dlsched.runs.reproduce.figures import FIGURES_DIR, draw_figures
from dlsched.runs.reproduce.report import (
    HTML_FILE,
    JSON_FILE,
    MARKDOWN_FILE,
    now_context,
    render_html,
    render_markdown,
    results_data,
)
from dlsched.runs.reproduce.runner import Options, Reproduction, reproduce
from dlsched.runs.reproduce.tracked_reproduction import (
    DEFAULT_EXPERIMENT,
    TrackedReproduction,
    track_reproduction,
)
from dlsched.runs.tracking.provenance import dlsched_version, source_commit
from dlsched.runs.tracking.store import connect
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.trajectory import unique_id

#: Where reproductions are written unless told otherwise (beside ``dlsched evaluate``'s records).
DEFAULT_OUT = Path("dlsched-runs")


@dataclass(frozen=True)
class PublishedReproduction:
    """What :func:`reproduce_and_publish` produced.

    Attributes:
        reproduction: the results.
        folder: the report's folder.
        markdown: the Markdown report.
        html: the self-contained HTML page.
        tracked: where it is in MLflow (``None`` without tracking).
    """

    reproduction: Reproduction
    folder: Path
    markdown: Path
    html: Path
    tracked: TrackedReproduction | None


def new_reproduction_id(backend: str) -> str:
    """A unique id: ``reproduce-<backend>-<UTC date-time>-<random hex>``."""
    return unique_id(f"reproduce-{backend}")


def reproduce_and_publish(
    claims: ClaimsFile,
    options: Options,
    out: Path = DEFAULT_OUT,
    tracking: TrackingTarget | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    progress: bool = True,
) -> PublishedReproduction:
    """Run the claims, write the report under ``out`` and log it to ``tracking``'s store.

    Args:
        claims: the claims to run.
        options: backend, seeds, readings.
        out: parent folder of the report's folder.
        tracking: the MLflow store, ``None`` to track nothing.
        experiment: the MLflow experiment.
        progress: show a progress bar.

    Raises:
        TrackingError: the store cannot be used (before anything runs) or failed at the end
            (the report is on disk).
    """
    client = connect(tracking) if tracking is not None else None
    reproduction_id = new_reproduction_id(options.backend)
    folder = out / reproduction_id
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as error:
        raise TrackingError(
            f"cannot create the report folder {folder}: {error.strerror or error}; pass a "
            "writable folder with --out"
        ) from None
    reproduction = reproduce(claims, options, progress=progress)
    version, commit = dlsched_version(), source_commit()
    context = now_context(version, commit)
    figures = draw_figures(reproduction, folder)
    markdown = folder / MARKDOWN_FILE
    markdown.write_text(render_markdown(reproduction, figures, context))
    page = folder / HTML_FILE
    page.write_text(render_html(reproduction, figures, context, folder))
    data = folder / JSON_FILE
    data.write_text(json.dumps(results_data(reproduction, context), indent=1))
    claims_copy = folder / claims.path.name
    shutil.copyfile(claims.path, claims_copy)
    tracked = None
    if client is not None and tracking is not None:
        tracked = track_reproduction(
            client,
            tracking,
            reproduction,
            reproduction_id,
            [markdown, page, data, claims_copy, folder / FIGURES_DIR],
            experiment=experiment,
            version=version,
            commit=commit,
        )
    return PublishedReproduction(reproduction, folder, markdown, page, tracked)
