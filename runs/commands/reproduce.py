"""``dlsched reproduce``: run the papers' claims, write the report, log it to MLflow.

The work is :func:`dlsched.runs.reproduce.publish.reproduce_and_publish`; this parses the
options, prints the claims table (:func:`~dlsched.runs.reproduce.report.render_claims_lines`)
and says where the report and the MLflow run are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlsched.runs.commands.argument_types import output_folder, positive_int
from dlsched.runs.commands.options import Subcommands, add_episodes, add_tracking_uri
from dlsched.runs.parser import ListOption
from dlsched.runs.reproduce.claims_loader import CLAIMS_FILE, load_claims
from dlsched.runs.reproduce.runner import DEFAULT_EXPERIMENT, Options
from dlsched.runs.tracking.trajectory import DEFAULT_OUT

BACKENDS = ("replay", "docker")


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched reproduce`` to the CLI."""
    parser = subparsers.add_parser(
        "reproduce",
        help="run the papers' claims and report which dlsched reproduces",
        description=(
            "Run every claim of the claims file (the DQoES, FlowCon, SpeCon and TRADL "
            "evaluations) on its scenario under its policy and reference, and write a report "
            "(Markdown and a self-contained HTML page) with the paper's value, ours with its "
            "95% confidence interval and a verdict (reproduced, direction only, not "
            "reproduced) by the rule the report states, the readings of the pseudocode beside "
            "the default, the open gaps investigated and the papers' figures redrawn; log it to "
            "MLflow as one parent run. With --backend docker the claims' host-scale twins run "
            "on the local engine."
        ),
    )
    parser.add_argument(
        "--claims",
        type=Path,
        default=CLAIMS_FILE,
        help="the claims file (default: the shipped one)",
    )
    parser.add_argument(
        "--only",
        action=ListOption,
        default=[],
        metavar="ID[,ID...]",
        help="run only these claims: an id, a pattern with * (dqoes-vb2-*) or a paper "
        "(dqoes, flowcon, specon, tradl); repeatable or comma-separated",
    )
    parser.add_argument("--list", action="store_true", help="list the claims and exit")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="replay",
        help="replay (every claim), or docker (the claims' host-scale twins) (replay)",
    )
    add_episodes(
        parser,
        default=None,
        episodes_help="episodes (seeds) per claim (default: each claim's own, 10 on replay)",
    )
    parser.add_argument(
        "--readings",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run the readings of the pseudocode and the investigations (default: on "
        "replay yes, on docker no)",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=DEFAULT_OUT,
        help=f"parent folder of the report ({DEFAULT_OUT}/reproduce-<backend>-<time>/)",
    )
    add_tracking_uri(parser)
    parser.add_argument(
        "--experiment", default=DEFAULT_EXPERIMENT, help=f"MLflow experiment ({DEFAULT_EXPERIMENT})"
    )
    parser.add_argument("--no-tracking", action="store_true", help="write the report only")
    parser.add_argument(
        "--processes",
        type=positive_int,
        default=None,
        help="processes the replay episodes run in (default: one per core this process may "
        "use; 1 runs them all in this one)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched reproduce`` as ``args`` say; the exit code."""
    claims = load_claims(args.claims)
    if args.only:
        claims = claims.select(args.only)
    if args.list:
        for claim in claims.claims:
            twin = " (docker twin)" if claim.twin else ""
            print(f"{claim.id}: {claim.paper} {claim.section}: {claim.text}{twin}")
        return 0
    # imported here, so that parsing, --help and --list do not wait for MLflow and matplotlib
    from dlsched.runs.reproduce.publish import reproduce_and_publish
    from dlsched.runs.reproduce.report import render_claims_lines
    from dlsched.runs.tracking.target import resolve_tracking_uri

    readings = args.readings if args.readings is not None else args.backend == "replay"
    options = Options(args.backend, args.episodes, args.seed, readings, args.processes)
    target = None
    if not args.no_tracking:
        target = resolve_tracking_uri(args.tracking_uri)
        print(target.describe(), file=sys.stderr)
    published = reproduce_and_publish(
        claims,
        options,
        out=args.out,
        tracking=target,
        experiment=args.experiment,
        progress=not args.no_progress,
    )
    print(render_claims_lines(published.reproduction))
    print(f"report: {published.markdown} and {published.html}", file=sys.stderr)
    if published.tracked is not None:
        tracked = published.tracked
        print(
            f"MLflow: experiment {tracked.experiment!r}, run {published.folder.name} "
            f"({tracked.parent_run_id}) in {tracked.tracking_uri}",
            file=sys.stderr,
        )
    return 0
