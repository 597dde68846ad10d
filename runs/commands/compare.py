"""``dlsched compare``: read evaluations back from MLflow and compare them, scenario x policy.

Nothing is rerun: the numbers come from the per-episode metrics of the stored episode runs and
are summarised exactly as ``dlsched evaluate`` summarises them, so the two print the same
numbers for the same episodes.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from dlsched.envs.errors import OutputError, TrackingError
from dlsched.runs.commands.argument_types import image_file
from dlsched.runs.commands.options import Subcommands, add_tracking_uri
from dlsched.runs.tracking.compare import (
    FORMATS,
    compare_stored,
    comparison_data,
    comparison_panels,
    render_markdown,
    render_table,
)
from dlsched.runs.tracking.trajectory import DEFAULT_OUT


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched compare`` to the CLI."""
    parser = subparsers.add_parser(
        "compare",
        help="compare stored evaluations: scenario x policy, from MLflow",
        description=(
            "Read the episode runs of earlier evaluations back from MLflow and print, per "
            "scenario and policy, each metric's mean with its 95% confidence interval across "
            "seeds and the ratio to default, the best marked; write the same as a plot, and "
            "log the plot and the table as a run of the MLflow experiment dlsched-compare."
        ),
    )
    parser.add_argument("--experiment", help="only this MLflow experiment")
    parser.add_argument("--scenario", help="only this scenario (by name)")
    parser.add_argument("--format", choices=FORMATS, default="table", help="(table)")
    add_tracking_uri(parser)
    parser.add_argument(
        "--plot",
        type=image_file,
        help=f"where to write the plot (default {DEFAULT_OUT}/compare-<UTC time>.png)",
    )
    parser.add_argument("--no-plot", action="store_true", help="write no plot")
    parser.add_argument(
        "--no-log",
        action="store_true",
        help="do not log the comparison (plot, table, headline metrics) as a run of the MLflow "
        "experiment dlsched-compare",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched compare`` as ``args`` say; the exit code.

    Raises:
        UnknownNameError: ``--scenario`` names no scenario of the stored episodes (the message
            lists those, with the closest name).
        OutputError: the plot's folder cannot be made.
        TrackingError: no store where it looks, or no finished episode in it.
    """
    # imported here, so that parsing (and refusing) the arguments does not wait for MLflow
    from dlsched.runs.tracking.comparison_run import log_comparison
    from dlsched.runs.tracking.plots import plot_comparison
    from dlsched.runs.tracking.store import open_store
    from dlsched.runs.tracking.stored_runs import load_episodes, stored_scenario
    from dlsched.runs.tracking.target import resolve_tracking_uri

    target = resolve_tracking_uri(args.tracking_uri)
    client = open_store(target, lambda line: print(line, file=sys.stderr), read_only=True)
    comparisons = compare_stored(
        load_episodes(client, args.experiment, args.scenario),
        lambda episode: stored_scenario(client, episode),
    )
    if not comparisons:
        where = "".join(
            f", {flag} {value!r}"
            for flag, value in (("experiment", args.experiment), ("scenario", args.scenario))
            if value is not None
        )
        raise TrackingError(
            f"no finished dlsched episodes in {target.uri}{where}; run dlsched evaluate first"
        )
    if args.format == "json":
        print(json.dumps({"scenarios": comparison_data(comparisons)}, indent=2))
    elif args.format == "markdown":
        print(render_markdown(comparisons))
    else:
        print(render_table(comparisons))
    path = None
    if not args.no_plot:
        path = args.plot
        if path is None:
            stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
            path = DEFAULT_OUT / f"compare-{stamp}.png"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            plot_comparison(comparison_panels(comparisons), path)
        except OSError as error:
            raise OutputError(
                f"cannot write the plot {str(path)!r}: {error}; give --plot a path in a "
                "writable folder, or --no-plot"
            ) from error
        print(f"plot: {path}", file=sys.stderr)
    if not args.no_log:
        filters = {"experiment": args.experiment, "scenario": args.scenario}
        run_id = log_comparison(client, target, comparisons, path, filters)
        print(
            f"comparison logged: MLflow run {run_id} (experiment dlsched-compare)", file=sys.stderr
        )
    return 0
