"""``dlsched evaluate``: run policies on a scenario over seeds, track every episode, summarise.

Order of work, so that nothing is lost: the policies are built and the tracking store is checked
before any episode runs; then :func:`~dlsched.runs.tracking.tracked_evaluation.evaluate_tracked`
records each episode locally (``--out``) and in MLflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import yaml

from dlsched.envs.backend_registry import BACKENDS
from dlsched.envs.errors import BackendError, PolicyError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.workloads.cpu_quota import THREADINGS
from dlsched.policies.policy import ParamValue
from dlsched.runs.commands.argument_types import local_records_folder
from dlsched.runs.commands.options import (
    Subcommands,
    add_episodes,
    add_evaluation_outputs,
    add_policies,
)
from dlsched.runs.policy_specs import build_policies
from dlsched.runs.tracking.compare import ScenarioComparison, render_table
from dlsched.runs.tracking.trajectory import DEFAULT_OUT

# MLflow and the tracking modules are imported in run(): parsing (and refusing) the arguments
# must not wait for them
if TYPE_CHECKING:
    from dlsched.runs.tracking.tracked_evaluation import EvaluationLocation


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched evaluate`` to the CLI."""
    parser = subparsers.add_parser(
        "evaluate",
        help="run policies on a scenario over seeds and track every episode in MLflow",
        description=(
            "Run every policy for N episodes (seeds K ... K+N-1, the same for every policy), "
            "record each episode locally and in MLflow, and print per policy the mean of each "
            "metric with its 95% confidence interval across seeds and the ratio to default "
            "and oracle (when they are among the policies)."
        ),
    )
    parser.add_argument(
        "--scenario", required=True, help="a shipped scenario's name or a scenario YAML path"
    )
    add_policies(
        parser,
        policy_help="policies, repeatable or comma-separated: baseline names (e.g. "
        "default,dqoes), trained model paths (model.zip or its folder), runs:/<run id>/model or "
        "models:/<name>/<version> URIs, shipped models (pretrained:<name>; `dlsched baselines` "
        "lists them)",
        set_example="dqoes.alpha=0.2",
    )
    add_episodes(parser, default=5, episodes_help="episodes (seeds) per policy (5)")
    parser.add_argument("--backend", choices=BACKENDS, default="replay", help="(replay)")
    parser.add_argument(
        "--workload-threading",
        choices=THREADINGS,
        help="docker backend: how the workloads size their thread pools; tuned (the default) "
        "follows the quota, stock runs them as unmodified framework jobs",
    )
    add_evaluation_outputs(
        parser,
        records_help=f"folder of the local episode records ({DEFAULT_OUT}/<evaluation id>/...)",
        no_tracking_help="neither MLflow nor local records: only print the summary",
    )
    parser.add_argument(
        "--no-plots",
        action="store_true",
        help="no plot on the evaluation's run (by default its timeline: satisfied services, or "
        "jobs finished, over time, a line per policy)",
    )
    parser.add_argument(
        "--episode-plots",
        action=argparse.BooleanOptionalAction,
        help="also draw every episode's plots on its run (latency against target or completion "
        "times, CPU limits and usage per container). Default: on for the Docker backend, whose "
        "episodes take minutes; off on replay, where they cost about half a second an episode, "
        "20 times the episode",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--single-env",
        action="store_true",
        help="run every episode on its own single environment, the reference path (replay "
        "runs a baseline's seeds at once on the batched environment otherwise: the same "
        "results, faster); for debugging",
    )
    parser.set_defaults(handler=run)


def episode_plots(args: argparse.Namespace) -> bool:
    """Whether every episode's plots are drawn: as ``--[no-]episode-plots`` says, else on the
    Docker backend only (a plot costs 20 replay episodes, and a fraction of a Docker one)."""
    return bool(args.episode_plots) if args.episode_plots is not None else args.backend != "replay"


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched evaluate`` as ``args`` say; the exit code."""
    from dlsched.runs.evaluation.runners import check_backend, check_evaluation_size
    from dlsched.runs.tracking.target import resolve_tracking_uri
    from dlsched.runs.tracking.tracked_evaluation import EvaluationRequest, evaluate_untracked

    specs = list(args.policy)
    check_evaluation_size(len(specs), args.episodes)
    out = local_records_folder(args, DEFAULT_OUT)
    target = resolve_tracking_uri(args.tracking_uri)
    scenario = load_scenario(args.scenario)
    settings = parse_settings(args.set, specs)
    request = EvaluationRequest(
        scenario=scenario,
        policies=tuple(build_policies(specs, settings, target.uri, [scenario])),
        seeds=tuple(range(args.seed, args.seed + args.episodes)),
        backend=args.backend,
        backend_options=backend_options(args.backend, args.workload_threading),
        batched=not args.single_env,
    )
    progress = not args.no_progress
    if args.no_tracking:
        _print(evaluate_untracked(request, progress), None, args.json)
        return 0
    # nothing is recorded (no store, no run, no folder) for an evaluation that cannot start
    check_backend(scenario, request.backend, request.backend_options)
    # MLflow (about 1 s to import) only when tracking
    from dlsched.runs.tracking.store import open_store
    from dlsched.runs.tracking.tracked_evaluation import evaluate_tracked

    client = open_store(target, lambda line: print(line, file=sys.stderr))
    outcome = evaluate_tracked(
        request,
        client,
        target,
        out,
        experiment=args.experiment,
        plots=not args.no_plots,
        episode_plots=episode_plots(args),
        progress=progress,
        warn=lambda message: print(message, file=sys.stderr),
    )
    _print(outcome.comparison, outcome.location, args.json)
    location = outcome.location
    print(f"episode records: {location.local_folder}", file=sys.stderr)
    if outcome.failure is not None:
        raise outcome.failure
    print(
        f"MLflow: experiment {location.experiment!r}, evaluation {location.id} (run "
        f"{location.parent_run_id}) in {location.tracking_uri}",
        file=sys.stderr,
    )
    return 0


def backend_options(backend: str, workload_threading: str | None) -> dict[str, str]:
    """The backend's options the command line gives.

    Raises:
        BackendError: ``--workload-threading`` with a backend that runs no workload.
    """
    if workload_threading is None:
        return {}
    if backend != "docker":
        raise BackendError(
            f"--workload-threading {workload_threading} applies to the docker backend, not "
            f"{backend!r}: the replay backend's workloads are profiles; add --backend docker "
            "or drop the option"
        )
    return {"workload_threading": workload_threading}


def _print(
    comparison: ScenarioComparison, location: EvaluationLocation | None, as_json: bool
) -> None:
    if as_json:
        from dlsched.runs.tracking.tracked_evaluation import summary_data

        print(json.dumps(summary_data(comparison, location), indent=2))
    else:
        print(render_table([comparison]))


def parse_settings(
    settings: Sequence[str], policies: Sequence[str]
) -> dict[str, dict[str, ParamValue]]:
    """Parameters by policy from ``POLICY.PARAM=VALUE`` strings (values read as YAML scalars).

    Raises:
        PolicyError: a malformed setting, or one for a policy that is not evaluated.
    """
    parsed: dict[str, dict[str, ParamValue]] = {}
    for setting in settings:
        key, equals, text = setting.partition("=")
        policy, dot, param = key.rpartition(".")  # a model path may hold dots, a name not
        if not (equals and dot and policy and param):
            raise PolicyError(
                f"--set {setting!r} is not POLICY.PARAM=VALUE; e.g. --set dqoes.alpha=0.2"
            )
        if policy not in policies:
            raise PolicyError(
                f"--set {setting!r} names policy {policy!r}, which is not evaluated; "
                f"--policy lists {', '.join(policies)}"
            )
        value = yaml.safe_load(text) if text.strip() else text
        if not isinstance(value, bool | int | float | str):
            raise PolicyError(
                f"--set {setting!r}: value {text!r} is not a number, a bool or a string"
            )
        parsed.setdefault(policy, {})[param] = value
    return parsed
