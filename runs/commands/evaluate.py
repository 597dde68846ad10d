"""``dlsched evaluate``: run policies on a scenario over seeds, track every episode, summarise.

Order of work, so that nothing is lost: the policies are built and the tracking store is checked
before any episode runs; each episode is written to its local folder (``--out``) as soon as it
ends, then logged to MLflow; if the store fails mid-way, the evaluation goes on untracked and
says where the local records are.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from mlflow import MlflowClient

from dlsched.envs.backend import BACKENDS
from dlsched.envs.errors import BackendError, PolicyError, TrackingError
from dlsched.envs.scenario import Scenario
from dlsched.envs.scenario_file import load_scenario
from dlsched.envs.workloads.cpu_quota import THREADINGS
from dlsched.policies.policy import ParamValue, Policy
from dlsched.runs.commands.arguments import positive_int
from dlsched.runs.compare import (
    ScenarioComparison,
    comparison_data,
    render_table,
)
from dlsched.runs.evaluation import (
    EpisodeResult,
    PolicyIdentity,
    backend_label,
    evaluate,
    summarise,
)
from dlsched.runs.tracking import (
    EvaluationTracker,
    TrackingTarget,
    connect,
    new_evaluation_id,
    resolve_tracking_uri,
)
from dlsched.runs.trajectory import DEFAULT_OUT, EvaluationFolder


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``dlsched evaluate`` to the CLI."""
    parser = subparsers.add_parser(
        "evaluate",
        help="run policies on a scenario over seeds and track every episode in MLflow",
        description=(
            "Run every policy for N episodes (seeds K ... K+N-1, the same for every policy), "
            "record each episode locally and in MLflow, and print per policy the mean of each "
            "metric with its 95%% confidence interval across seeds and the ratio to default "
            "and oracle (when they are among the policies)."
        ),
    )
    parser.add_argument(
        "--scenario", required=True, help="a shipped scenario's name or a scenario YAML path"
    )
    parser.add_argument(
        "--policy",
        required=True,
        metavar="P[,P...]",
        help="comma-separated policies: baseline names (e.g. default,dqoes), trained model "
        "paths (model.zip or its folder) or runs:/<run id>/model URIs",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="POLICY.PARAM=VALUE",
        help="set a policy parameter (repeatable), e.g. --set dqoes.alpha=0.2",
    )
    parser.add_argument(
        "--episodes", type=positive_int, default=5, help="episodes (seeds) per policy (5)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (0)")
    parser.add_argument("--backend", choices=BACKENDS, default="replay", help="(replay)")
    parser.add_argument(
        "--workload-threading",
        choices=THREADINGS,
        help="docker backend: how the workloads size their thread pools; tuned (the default) "
        "follows the quota, stock runs them as unmodified framework jobs",
    )
    parser.add_argument("--json", action="store_true", help="print only JSON on stdout")
    parser.add_argument(
        "--tracking-uri",
        help="MLflow tracking URI, used when MLFLOW_TRACKING_URI is unset "
        "(default sqlite:///mlflow.db)",
    )
    parser.add_argument(
        "--experiment", help="MLflow experiment name (default: the scenario's name)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder of the local episode records ({DEFAULT_OUT}/<evaluation id>/...)",
    )
    parser.add_argument(
        "--no-tracking",
        action="store_true",
        help="neither MLflow nor local records: only print the summary",
    )
    parser.add_argument(
        "--no-plots", action="store_true", help="log no plots (they take most of the tracking time)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


@dataclass(frozen=True)
class EvaluationRequest:
    """What to evaluate, as the command line gives it.

    Attributes:
        scenario: the scenario.
        policies: the built policies, in the order given.
        seeds: the seeds of every policy's episodes.
        backend: the backend's name.
        backend_options: keyword arguments of the backend's constructor.
    """

    scenario: Scenario
    policies: tuple[Policy, ...]
    seeds: tuple[int, ...]
    backend: str
    backend_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EvaluationLocation:
    """Where a tracked evaluation's records are.

    Attributes:
        id: the evaluation id (the parent run's name and the local folder's).
        tracking_uri: the MLflow store.
        experiment: the experiment's name.
        experiment_id: its id.
        parent_run_id: the evaluation's run.
        episode_runs: each episode's run id, by ``<policy>-seed<seed>``.
        local_folder: the local records.
    """

    id: str
    tracking_uri: str
    experiment: str
    experiment_id: str | None
    parent_run_id: str | None
    episode_runs: dict[str, str]
    local_folder: str


@dataclass(frozen=True)
class TrackedEvaluation:
    """The outcome of :func:`evaluate_tracked`.

    Attributes:
        comparison: the summary table.
        location: where the records are.
        failure: the store's failure after the evaluation started, if it failed.
    """

    comparison: ScenarioComparison
    location: EvaluationLocation
    failure: TrackingError | None


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched evaluate`` as ``args`` say; the exit code."""
    specs = [spec.strip() for spec in args.policy.split(",") if spec.strip()]
    target = resolve_tracking_uri(args.tracking_uri)
    request = EvaluationRequest(
        scenario=load_scenario(args.scenario),
        policies=tuple(build_policies(specs, parse_settings(args.set, specs), target.uri)),
        seeds=tuple(range(args.seed, args.seed + args.episodes)),
        backend=args.backend,
        backend_options=backend_options(args.backend, args.workload_threading),
    )
    progress = not args.no_progress
    if args.no_tracking:
        _print(evaluate_untracked(request, progress), None, args.json)
        return 0
    print(target.describe(), file=sys.stderr)
    client = connect(target)
    outcome = evaluate_tracked(
        request,
        client,
        target,
        args.out,
        experiment=args.experiment,
        plots=not args.no_plots,
        progress=progress,
        warn=lambda message: print(message, file=sys.stderr),
    )
    _print(outcome.comparison, outcome.location, args.json)
    location = outcome.location
    print(f"episode records: {location.local_folder}", file=sys.stderr)
    if outcome.failure is not None:
        raise outcome.failure
    print(
        f"MLflow: experiment {location.experiment!r}, run {location.id} "
        f"({location.parent_run_id}) in {location.tracking_uri}",
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


def evaluate_untracked(request: EvaluationRequest, progress: bool = True) -> ScenarioComparison:
    """Run the evaluation and summarise it, recording nothing."""
    results = evaluate(
        request.scenario,
        request.policies,
        request.seeds,
        request.backend,
        progress=progress,
        backend_options=request.backend_options,
    )
    return comparison_of(request, results, None)


def evaluate_tracked(
    request: EvaluationRequest,
    client: MlflowClient,
    target: TrackingTarget,
    out: Path,
    experiment: str | None = None,
    plots: bool = True,
    progress: bool = True,
    warn: Callable[[str], None] = print,
) -> TrackedEvaluation:
    """Run the evaluation, recording every episode locally under ``out`` and in MLflow.

    Args:
        request: what to evaluate.
        client: a client from :func:`~dlsched.runs.tracking.connect` (the store was checked).
        target: where it tracks.
        out: parent folder of the local records.
        experiment: the MLflow experiment (default: the scenario's name).
        plots: draw and log the episode plots.
        progress: show a progress bar.
        warn: where warnings go.
    """
    evaluation_id = new_evaluation_id(request.scenario)
    folder = EvaluationFolder.of(out, evaluation_id)
    tracker = EvaluationTracker(
        client,
        target,
        request.scenario,
        folder,
        evaluation_id,
        request.backend,
        [PolicyIdentity.of(policy) for policy in request.policies],
        request.seeds,
        experiment=experiment,
        warn=warn,
        plots=plots,
        backend_options=request.backend_options,
    )
    with tracker:
        results = evaluate(
            request.scenario,
            request.policies,
            request.seeds,
            request.backend,
            on_episode=tracker.record_episode,
            progress=progress,
            backend_options=request.backend_options,
        )
        comparison = comparison_of(request, results, evaluation_id)
        location = EvaluationLocation(
            id=evaluation_id,
            tracking_uri=target.uri,
            experiment=tracker.experiment_name,
            experiment_id=tracker.experiment_id,
            parent_run_id=tracker.parent_run_id,
            episode_runs=dict(tracker.episode_run_ids),
            local_folder=str(folder.path.resolve()),
        )
        summary_json = folder.path / "summary.json"
        summary_json.write_text(json.dumps(_json(comparison, location), indent=2))
        summary_txt = folder.path / "summary.txt"
        summary_txt.write_text(render_table([comparison]) + "\n")
        tracker.finish(comparison.summaries, [summary_json, summary_txt])
    return TrackedEvaluation(comparison, location, tracker.failure)


def comparison_of(
    request: EvaluationRequest, results: Sequence[EpisodeResult], evaluation_id: str | None
) -> ScenarioComparison:
    """The summary table of an evaluation's episodes."""
    summaries = summarise([result.score for result in results], request.scenario.kind)
    return ScenarioComparison(
        scenario=request.scenario.name,
        scenario_hash=request.scenario.content_hash(),
        kind=request.scenario.kind,
        backend=backend_label(request.backend, request.backend_options),
        summaries=summaries,
        evaluations=(evaluation_id,) * len(summaries) if evaluation_id else (),
    )


def _json(comparison: ScenarioComparison, location: EvaluationLocation | None) -> dict[str, object]:
    return {
        "scenarios": comparison_data([comparison]),
        "evaluation": dataclasses.asdict(location) if location is not None else None,
    }


def _print(
    comparison: ScenarioComparison, location: EvaluationLocation | None, as_json: bool
) -> None:
    if as_json:
        print(json.dumps(_json(comparison, location), indent=2))
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


def build_policies(
    specs: Sequence[str],
    params: Mapping[str, Mapping[str, ParamValue]],
    tracking_uri: str | None = None,
) -> list[Policy]:
    """Build each policy ``--policy`` names, with its ``--set`` parameters.

    A spec is a baseline name or a trained model (a path or a ``runs:/`` URI), as
    :func:`dlsched.policies.loading.resolve_policy` reads it.

    Args:
        specs: what ``--policy`` lists.
        params: parameters by spec.
        tracking_uri: the MLflow store of ``runs:/`` models.

    Raises:
        PolicyError: no policy, one listed twice, or two that share a name (their runs and
            folders are named after it).
        UnknownNameError: a baseline name that is not registered.
    """
    from dlsched.policies.loading import resolve_policy

    if not specs:
        raise PolicyError("--policy names no policy; e.g. --policy default,dqoes")
    repeated = sorted({spec for spec in specs if specs.count(spec) > 1})
    if repeated:
        raise PolicyError(f"--policy lists {', '.join(repeated)} more than once; list each once")
    policies = [resolve_policy(spec, params.get(spec), tracking_uri) for spec in specs]
    names = [policy.name for policy in policies]
    shared = sorted({name for name in names if names.count(name) > 1})
    if shared:
        raise PolicyError(
            f"policies {', '.join(specs)} include several called {', '.join(shared)}; runs and "
            "folders are named after the policy, so evaluate them separately"
        )
    return policies
