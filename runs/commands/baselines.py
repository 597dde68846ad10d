"""``dlsched baselines``: list the baselines with their parameters, or print the paper report.

``dlsched baselines`` lists every baseline with each parameter and its default (the papers'
values); ``dlsched baselines report`` runs every scenario of the claims file on the replay
backend under each baseline that fits it, next to ``default`` and ``oracle``, and prints the
papers' metrics beside the papers' values (a view of ``dlsched reproduce``'s machinery,
:mod:`dlsched.runs.reproduce.baselines_report`).
"""

from __future__ import annotations

import argparse

from dlsched.baselines.registry import baseline_class, defaults, names
from dlsched.policies.pretrained import PretrainedCard, pretrained_cards
from dlsched.runs.commands.argument_types import positive_int
from dlsched.runs.commands.options import Subcommands
from dlsched.runs.evaluation.judgement import HELD_TO, verdict
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC
from dlsched.runs.parser import ListOption, deprecated_alias, plain
from dlsched.runs.reproduce.baselines_report import format_report, report


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched baselines`` (and ``dlsched baselines report``) to the CLI."""
    parser = subparsers.add_parser(
        "baselines",
        help="list the papers' baselines and their parameters, or print their report",
        description=(
            "Without a subcommand, list every baseline with its parameters and defaults, then "
            "the learned schedulers shipped with dlsched (--policy pretrained:<name>) with how "
            "each was trained. "
            "'report' runs the scenarios of the papers' claims on the replay backend under the "
            "baselines that fit each (inference: default, equal, dqoes, autothrottle, "
            "k8s-autoscaler, oracle; training: default, equal, flowcon, specon, tradl, "
            "k8s-autoscaler, oracle) and prints the satisfied count "
            "(inference) or the mean completion time and makespan (training), with the papers' "
            "values where a claim gives them; `dlsched reproduce` judges the claims."
        ),
    )
    parser.set_defaults(handler=run_list)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    report_parser = actions.add_parser(
        "report", help="run the paper scenarios under every baseline and print the table"
    )
    report_parser.add_argument(
        "--scenario",
        action=ListOption,
        metavar="NAME[,NAME...]",
        help="scenarios to run (repeatable or comma-separated; default: every scenario of the "
        "papers' claims)",
    )
    report_parser.add_argument(
        "--policy",
        action=ListOption,
        metavar="NAME[,NAME...]",
        help="baselines to run (repeatable or comma-separated; default: those that fit each "
        "scenario)",
    )
    report_parser.add_argument(
        "--episodes",
        type=positive_int,
        default=1,
        help="episodes (seeds) per scenario and policy, as evaluate counts them (1)",
    )
    report_parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (0)")
    # --seeds counted episodes here while --seed is a first seed everywhere
    deprecated_alias(report_parser, "--seeds", "--episodes")
    report_parser.set_defaults(handler=run_report)


def run_list(args: argparse.Namespace) -> int:
    """Print every baseline, its one-line summary and its parameters, then every pretrained
    model's card; the exit code."""
    for name in names():
        doc = (baseline_class(name).__doc__ or "").strip().splitlines()
        print(f"{name}: {plain(doc[0]) if doc else ''}")
        for param, default in defaults(name).items():
            print(f"    {param} = {default!r}")
    cards = pretrained_cards()
    if cards:
        print("\nlearned schedulers shipped with dlsched (evaluate --policy pretrained:<name>):")
    for card in cards:
        print(card.describe())
        summary = _summary(card)
        if summary:
            print(f"    {summary}")
    return 0


def _summary(card: PretrainedCard) -> str:
    """The card's held-out rows against a shipped model's targets, in one line (empty where the
    card holds no row of every shipped scenario of its kind)."""
    rows = card.held_out
    if not rows or any(row.metric != rows[0].metric for row in rows):
        return ""
    kind = next(kind for kind, metric in PRIMARY_METRIC.items() if metric == rows[0].metric)
    result = verdict(rows, kind)
    parts = [
        f"on {len(rows)} scenarios: worse than default on {_count(result.below_default)}",
        f"worse than {' or '.join(HELD_TO[kind])} on {_count(result.below_paper)}",
    ]
    if result.mean_gap_closed is not None:
        parts.append(f"{result.mean_gap_closed:.0%} of the gap from them to the oracle closed")
    return "; ".join(parts)


def _count(scenarios: tuple[str, ...]) -> str:
    """How many scenarios, and which where there are any: ``0``, ``1 (docker-smoke-training)``."""
    return f"{len(scenarios)} ({', '.join(scenarios)})" if scenarios else "0"


def run_report(args: argparse.Namespace) -> int:
    """Run the report's episodes as ``args`` (scenario, policy, seeds) ask and print it."""
    seeds = range(args.seed, args.seed + args.episodes)
    rows = report(scenarios=args.scenario, seeds=seeds, policies=args.policy)
    print(format_report(rows))
    return 0
