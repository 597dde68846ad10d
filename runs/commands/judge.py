"""``dlsched judge``: a scheduler on every shipped scenario of its kind, beside the baselines.

It parses and prints; :mod:`dlsched.runs.evaluation.judgement` does the work.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlsched.envs.errors import ArgumentError
from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.commands.argument_types import positive_int, seed
from dlsched.runs.commands.options import Subcommands

#: The first seeds of the judgement: far from training's (0 on) and validation's (1,000,000 on).
FIRST_SEED = {JobKind.INFERENCE: 9300, JobKind.TRAINING: 9400}
EPISODES = {JobKind.INFERENCE: 10, JobKind.TRAINING: 5}


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched judge`` to the CLI."""
    parser = subparsers.add_parser(
        "judge",
        help="run a scheduler on every shipped scenario of its kind beside the baselines",
        description=(
            "Evaluate a scheduler (a trained model, runs:/ or models:/ URI, pretrained:<name>, "
            "or a baseline) on every shipped scenario of its job kind on replay, beside "
            "default, the papers' baselines and the oracle, and print per scenario the means of "
            "the primary metric and the bound, then the verdict: where it is worse than default "
            "(by more than 0.01 of a satisfied fraction or 2% of a mean completion time) or "
            "than the better paper baseline, and how much of the gap from that baseline to the "
            "oracle it closes. Use seeds the model never trained or validated on."
        ),
    )
    parser.add_argument("--policy", required=True, help="the scheduler judged")
    parser.add_argument(
        "--kind",
        choices=[kind.value for kind in JobKind],
        help="the kind of jobs (default: the model's; required for a baseline)",
    )
    parser.add_argument(
        "--episodes",
        type=positive_int,
        help="seeds per scenario (inference 10, training 5)",
    )
    parser.add_argument("--seed", type=seed, help="first seed (inference 9300, training 9400)")
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="judge on these scenarios only (repeatable; default: every shipped one of the kind)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--write-card",
        type=Path,
        metavar="PRETRAINED_JSON",
        help="write the rows as the held_out results of this pretrained card (its other "
        "fields are kept)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched judge`` as ``args`` say; the exit code."""
    from dlsched.envs.scenarios import load_scenario
    from dlsched.policies.learned import LearnedPolicy
    from dlsched.runs.evaluation.judgement import judge, verdict
    from dlsched.runs.policy_specs import resolve_policy

    policy = resolve_policy(args.policy)
    if isinstance(policy, LearnedPolicy):
        kind = policy.card.kind
        if args.kind is not None and JobKind(args.kind) is not kind:
            raise ArgumentError(f"--kind {args.kind} != the model's kind {kind.value}; drop --kind")
    elif args.kind is None:
        raise ArgumentError(f"--policy {args.policy} is not a model: give --kind")
    else:
        kind = JobKind(args.kind)
    first = args.seed if args.seed is not None else FIRST_SEED[kind]
    seeds = list(range(first, first + (args.episodes or EPISODES[kind])))
    scenarios = [load_scenario(name) for name in args.scenario] or None
    rows = judge(
        policy,
        kind,
        seeds,
        scenarios,
        progress=None if args.json else lambda name: print(f"judging on {name}", file=sys.stderr),
    )
    if args.write_card is not None:
        card = json.loads(args.write_card.read_text(encoding="utf-8"))
        card["format"] = 3
        card["held_out"] = [row.to_data() for row in rows]
        args.write_card.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps([row.to_data() for row in rows], indent=2))
        return 0
    result = verdict(rows, kind)
    for row in rows:
        closed = result.gap_closed[row.scenario]
        others = ", ".join(f"{name} {value:.3f}" for name, value in row.baselines.items())
        share = "-" if closed is None else f"{closed:.0%}"
        print(f"{row.scenario}: model {row.model:.3f}; {others}; gap closed {share}")
    print(
        f"worse than default on {len(result.below_default)} of {len(rows)}"
        + (f" ({', '.join(result.below_default)})" if result.below_default else "")
    )
    print(
        f"worse than the better paper baseline on {len(result.below_paper)}"
        + (f" ({', '.join(result.below_paper)})" if result.below_paper else "")
    )
    if result.mean_gap_closed is not None:
        print(
            f"mean share of the gap from the paper baseline to the oracle closed: "
            f"{result.mean_gap_closed:.0%}"
        )
    return 0
