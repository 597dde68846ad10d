"""A validation as ``dlsched validate`` runs it: both sides tracked, the report logged.

Each side is an ordinary tracked evaluation (:func:`~dlsched.runs.tracking.tracked_evaluation.
evaluate_tracked`): its episodes are on disk and in MLflow exactly as ``dlsched evaluate`` would
leave them, so ``dlsched compare`` shows them too. A validation run in the same experiment is
the parent of both evaluation runs (``mlflow.parentRunId``), and holds the report: its figures
as metrics, ``validation.json`` and ``validation.txt``, a plot per episode of every job on both
sides, and the satisfied fraction (or jobs finished) of every policy over time. The validation's
own files are written to ``<out>/<validation id>/`` before they are logged.

Before anything runs, :func:`host_warnings` compares the engine with the machine the scenario's
profiles were measured on, and the host's load with a quiet host's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from dlsched.envs.docker.engine import connect as connect_engine
from dlsched.envs.errors import BackendError, TrackingError
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.replay.workload_profile import WorkloadProfile
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.policies.policy import Policy
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.fidelity.calibration_measurement import HostDescription
from dlsched.runs.fidelity.host_speed import (
    HOST_SPEED_FILE,
    HostSpeed,
    SpeedBracket,
    write_host_speed,
)
from dlsched.runs.fidelity.quiet_host import QUIET_CORES, sample_load
from dlsched.runs.fidelity.validation_plots import (
    plot_distributions,
    plot_paces,
    plot_timelines,
    plot_twins,
)
from dlsched.runs.fidelity.validation_report import (
    ValidationReport,
    build_report,
    render_report,
    report_data,
    speed_noise_figures,
)
from dlsched.runs.fidelity.validation_sides import REPLAY, Side, replay_spread, run_sides
from dlsched.runs.tracking.owners import end_run, owner_tags
from dlsched.runs.tracking.run_logging import TAG_KIND, log_in_batches
from dlsched.runs.tracking.store import STORE_ERRORS, first_line
from dlsched.runs.tracking.target import TrackingTarget
from dlsched.runs.tracking.tracked_evaluation import EvaluationRequest, evaluate_tracked
from dlsched.runs.tracking.trajectory import unique_id


@dataclass(frozen=True)
class ValidationRequest:
    """What to validate.

    Attributes:
        scenario: the scenario (its workloads must run on both sides).
        policies: the built policies.
        seeds: the seeds, the same on both sides.
        reference: what the model is held against.
        model: the model, or a speed bracket: replay rescaled to the host's speed around its
            episodes, run after them.
        held_out: names of the policies calibration did not see.
        host_speed: the host's speed the model was rescaled to, saved beside the report
            (``None``: the profiles as they are, or the bracket's speed).
        replay_seeds: seeds replay runs in all for the distributions (see
            :func:`~dlsched.runs.fidelity.validation_sides.replay_spread`).
    """

    scenario: Scenario
    policies: tuple[Policy, ...]
    seeds: tuple[int, ...]
    reference: Side
    model: Side | SpeedBracket = REPLAY
    held_out: tuple[str, ...] = ()
    host_speed: HostSpeed | None = None
    replay_seeds: int = 0

    def rescaled_to(self) -> HostSpeed | None:
        """The speed replay was rescaled to (a bracket's: once its reference ran)."""
        if isinstance(self.model, SpeedBracket):
            return self.model.speed
        return self.host_speed


@dataclass(frozen=True)
class ValidationOutcome:
    """What :func:`validate_tracked` did.

    Attributes:
        report: the comparison.
        folder: the validation's local folder.
        run_id: the validation's MLflow run (``None`` if the store failed).
        failure: the store's failure, if it failed (the validation still completed).
        host_speed: the speed replay was rescaled to (``None``: the profiles as they are).
    """

    report: ValidationReport
    folder: Path
    run_id: str | None
    failure: TrackingError | None
    host_speed: HostSpeed | None = None


def scenario_threading(scenario: Scenario) -> Threading:
    """How the scenario's workloads were profiled (``tuned`` or ``stock``).

    A Docker run of the scenario should size the workloads' thread pools the same way.

    Raises:
        BackendError: the scenario's workloads were profiled with different threadings.
    """
    if scenario.workload_threading == "stock":
        return "stock"
    if scenario.workload_threading == "tuned":
        return "tuned"
    profiles = _used_profiles(scenario)
    threadings = {profile.threading for profile in profiles}
    if len(threadings) != 1:
        listing = ", ".join(f"{p.workload} {p.threading}" for p in profiles)
        raise BackendError(
            f"scenario {scenario.name!r} mixes threadings in profile set "
            f"{scenario.profile_set!r} ({listing}); a Docker run has one, so validate "
            "each threading with its own scenario"
        )
    return threadings.pop()


def _used_profiles(scenario: Scenario) -> list[WorkloadProfile]:
    profiles = load_profile_set(scenario.profile_set)
    names = scenario.workload_names()
    return [profiles[name] for name in names if name in profiles]


def host_warnings(scenario: Scenario, reference: Side) -> list[str]:
    """What makes a comparison of ``scenario`` with ``reference`` less trustworthy.

    For a Docker reference: an engine with other cores or another CPU model than the one the
    scenario's profiles were measured on, profiles derived from papers rather than measured,
    workers whose cores differ from the engine's, and a host that is busy right now.
    """
    if reference.backend != "docker" or reference.recorded is not None:
        return []
    endpoint = scenario.workers[0].endpoint if scenario.workers else None
    client = connect_engine(endpoint)
    try:
        host = HostDescription.of(client)
        load = sample_load(client)
    finally:
        client.close()
    warnings = []
    elsewhere = []
    for profile in _used_profiles(scenario):
        measured = profile.measured_on
        if measured is None:
            warnings.append(
                f"profile {profile.workload} of set {scenario.profile_set!r} is derived, not "
                "measured on a host: its errors say how far the derivation is from this host"
            )
        elif measured.cores != host.cores or measured.cpu_model != host.cpu_model:
            warnings.append(
                f"profile {profile.workload} was measured on {measured.describe()}, but this "
                f"engine runs on {host.cpu_model}, {host.cores} cores; calibrate this host "
                "(dlsched calibrate --workload all --output-dir DIR) and validate with "
                "profile_set: DIR"
            )
            if profile.threading == "stock" and profile.kind is JobKind.TRAINING:
                elsewhere.append(profile.workload)
    if elsewhere:
        warnings.append(
            f"{', '.join(elsewhere)} crowd this engine's cores as stock trainings: how much of "
            "its CPU's worth a crowded stock job makes differs between hosts (1.4-1.9x between "
            "two 2-core VMs), and the speed probe does not see it; calibrate this host's "
            "crowding from 5 host episodes of a stock mix (docs/replay-model.md, 'Calibrate "
            "the crowding of your own host')"
        )
    for index, worker in enumerate(scenario.workers):
        if worker.cores != host.cores:
            warnings.append(
                f"worker {index} has {worker.cores:g} cores in the scenario but the engine has "
                f"{host.cores}; the replay side shares cores the host does not have"
            )
    if not load.quiet(QUIET_CORES):
        warnings.append(
            f"the host was busy before the validation ({load.describe()}): host episodes run "
            "slower than on a quiet host, and the errors grow with the load"
        )
    return warnings


def new_validation_id(scenario: Scenario) -> str:
    """A unique validation id: ``<scenario>-validate-<UTC time>-<random suffix>``."""
    return unique_id(f"{scenario.name}-validate", "%Y%m%dT%H%M%SZ")


def validate_tracked(
    request: ValidationRequest,
    client: MlflowClient,
    target: TrackingTarget,
    out: Path,
    warnings: Sequence[str] = (),
    experiment: str | None = None,
    plots: bool = True,
    progress: bool = True,
    warn: Callable[[str], None] = print,
) -> ValidationOutcome:
    """Run both sides as tracked evaluations, compare them, and record the validation.

    Args:
        request: what to validate.
        client: a client from :func:`~dlsched.runs.tracking.store.connect`.
        target: where it tracks.
        out: parent folder of the local records.
        warnings: carried into the report (see :func:`host_warnings`).
        experiment: the MLflow experiment (default: the scenario's name).
        plots: draw the episode and validation plots.
        progress: show progress bars.
        warn: where warnings go.
    """
    validation_id = new_validation_id(request.scenario)
    evaluation_runs: list[str | None] = []
    experiment_id: str | None = None
    failure: TrackingError | None = None

    def episodes_of(side: Side) -> list[EpisodeResult]:
        nonlocal experiment_id, failure
        if side.recorded is not None:
            return side.recorded_episodes(request.scenario, request.policies, request.seeds)
        outcome = evaluate_tracked(
            EvaluationRequest(
                scenario=side.scenario_for(request.scenario),
                policies=request.policies,
                seeds=request.seeds,
                backend=side.backend,
                backend_options=side.options,
            ),
            client,
            target,
            out,
            experiment=experiment,
            plots=plots,
            progress=progress,
            warn=warn,
            # a validation's episodes are few and set side by side episode by episode
            episode_plots=plots,
            keep_results=True,
        )
        evaluation_runs.append(outcome.location.parent_run_id)
        experiment_id = experiment_id or outcome.location.experiment_id
        failure = failure or outcome.failure
        return list(outcome.results)

    sides = run_sides(request.model, request.reference, episodes_of)
    model, reference = sides.model_episodes, sides.reference_episodes
    report = build_report(
        request.scenario,
        model,
        reference,
        request.held_out,
        [*warnings, *sides.notes],
        (sides.model.label(), request.reference.label()),
        replay_spread(
            sides.model,
            request.scenario,
            request.policies,
            request.seeds,
            request.replay_seeds,
            progress,
        ),
        sides.speed_noise(
            request.scenario, request.policies, request.seeds, request.rescaled_to(), progress
        ),
    )
    folder = out / validation_id
    files = _write_files(folder, report, model, reference, plots)
    host_speed = request.rescaled_to()
    if host_speed is not None:
        files.append(write_host_speed(host_speed, folder / HOST_SPEED_FILE))
    if isinstance(request.model, SpeedBracket):
        for name, probe in request.model.probes():
            files.append(write_host_speed(probe, folder / name))
    run_id = None
    if failure is None:
        try:
            run_id = _log_validation(
                client,
                experiment_id,
                validation_id,
                request,
                report,
                evaluation_runs,
                files,
            )
        except STORE_ERRORS as error:
            failure = TrackingError(
                f"tracking to {target.uri} failed while logging the validation: "
                f"{first_line(error)}; its report is on disk in {folder.resolve()}"
            )
            warn(f"warning: {failure}")
    return ValidationOutcome(report, folder, run_id, failure, host_speed)


def _write_files(
    folder: Path,
    report: ValidationReport,
    model: Sequence[EpisodeResult],
    reference: Sequence[EpisodeResult],
    plots: bool,
) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=False)
    files = [folder / "validation.json", folder / "validation.txt"]
    files[0].write_text(json.dumps(report_data(report), indent=2) + "\n")
    files[1].write_text(render_report(report) + "\n")
    if plots:
        files.append(plot_timelines(report, folder / "over-time.png"))
        distributions = plot_distributions(report, folder / "distributions.png")
        if distributions is not None:
            files.append(distributions)
        twins = {(r.policy.name, r.seed): r for r in reference}
        for result in model:
            episode = f"{result.policy.name}-seed{result.seed}"
            host = twins[(result.policy.name, result.seed)]
            files.append(plot_twins(result, host, folder / f"twins-{episode}.png"))
            paces = plot_paces(result, host, folder / f"paces-{episode}.png")
            if paces is not None:
                files.append(paces)
    return files


def _log_validation(
    client: MlflowClient,
    experiment_id: str | None,
    validation_id: str,
    request: ValidationRequest,
    report: ValidationReport,
    evaluation_runs: Sequence[str | None],
    files: Sequence[Path],
) -> str:
    assert experiment_id is not None
    run = client.create_run(
        experiment_id, run_name=validation_id, tags={TAG_KIND: "validation", **owner_tags()}
    )
    run_id = run.info.run_id
    status = "FAILED"
    try:
        _log_report(client, run_id, request, report, evaluation_runs, files)
        status = "FINISHED"
    finally:
        end_run(client, run_id, status)
    return run_id


def _log_report(
    client: MlflowClient,
    run_id: str,
    request: ValidationRequest,
    report: ValidationReport,
    evaluation_runs: Sequence[str | None],
    files: Sequence[Path],
) -> None:
    for evaluation_run in evaluation_runs:
        if evaluation_run is not None:
            client.set_tag(evaluation_run, MLFLOW_PARENT_RUN_ID, run_id)
    params = {
        "scenario": request.scenario.name,
        "scenario.hash": request.scenario.content_hash(),
        "model": report.sides[0],
        "reference": report.sides[1],
        "policies": ",".join(policy.name for policy in request.policies),
        "held_out": ",".join(request.held_out) or "-",
        "seeds": ",".join(str(seed) for seed in request.seeds),
    }
    now_ms = int(time.time() * 1000)
    figures = {
        "validate/median_abs_error": report.all_jobs.median,
        "validate/max_abs_error": report.all_jobs.max,
        "validate/median_ratio": report.all_jobs.median_ratio,
        "validate/kendall_tau": report.kendall_tau,
        "validate/same_ranking": None
        if report.same_ranking is None
        else float(report.same_ranking),
    }
    figures.update(speed_noise_figures(report.speed_noise))
    if report.held_out_jobs is not None:
        figures["validate/held_out_median_abs_error"] = report.held_out_jobs.median
        figures["validate/held_out_max_abs_error"] = report.held_out_jobs.max
    for policy in report.policies:
        figures[f"validate/{policy.policy}/relative_error"] = policy.relative_error
    if report.distributions is not None:
        summary = report.distributions
        figures["validate/distribution/median_w1"] = summary.median_w1
        figures["validate/distribution/median_floor"] = summary.median_floor
        figures["validate/distribution/w1_over_floor"] = summary.w1_over_floor
        figures["validate/distribution/coverage"] = summary.coverage
    for item in report.attribution:
        figures[f"validate/{item.workload}/cores_ratio"] = item.cores_ratio
        figures[f"validate/{item.workload}/progress_per_core_s_ratio"] = item.progress_ratio
    metrics = [
        Metric(key, float(value), now_ms, 0) for key, value in figures.items() if value is not None
    ]
    log_in_batches(client, run_id, metrics, params)
    for path in files:
        client.log_artifact(run_id, str(path))
