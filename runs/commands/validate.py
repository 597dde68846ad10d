"""``dlsched validate``: hold the replay model against the real host, job by job.

The comparison is :mod:`dlsched.runs.fidelity.validation_sides` (its statistics
:mod:`~dlsched.runs.fidelity.validation_statistics`, its report
:mod:`~dlsched.runs.fidelity.validation_report`), the tracked run
:mod:`dlsched.runs.fidelity.validation_run`; this module parses and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dlsched.envs.errors import BackendError, PolicyError
from dlsched.envs.replay.profile import profile_set_names
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.workloads.cpu_quota import THREADINGS
from dlsched.runs.commands.argument_types import local_records_folder, sub_windows
from dlsched.runs.commands.evaluate import parse_settings
from dlsched.runs.commands.options import (
    Subcommands,
    add_command_as_written,
    add_episodes,
    add_evaluation_outputs,
    add_policies,
)
from dlsched.runs.fidelity.validation_report import render_report, report_data
from dlsched.runs.fidelity.validation_sides import (
    REPLAY,
    STOCK_REPLAY_SEEDS,
    Side,
    run_validation,
)
from dlsched.runs.policy_specs import build_policies
from dlsched.runs.tracking.trajectory import DEFAULT_OUT

if TYPE_CHECKING:
    from dlsched.runs.fidelity.validation_run import ValidationRequest
    from dlsched.runs.tracking.target import TrackingTarget

_DESCRIPTION = """\
Run every policy on the same seeds on the replay backend and on the local Docker engine (the same
seed draws the same jobs on both), and report how far replay is from the host: per job its
completion time (training) or median batch latency (inference, with the Wasserstein-1 distance
between the two latency samples), per policy its primary metric, the median and largest absolute
relative error, the satisfied fraction (or jobs finished) over time, and whether the policies
rank the same on both (Kendall's tau). Name the policies calibration did not see with
--held-out: their jobs' errors are reported apart.

Both sides are tracked as ordinary evaluations under one validation run in MLflow, with a plot
per episode of every job on replay against the host. The host's episodes take wall-clock time:
run it on a quiet host, one validation at a time. They run in rounds, every policy on a seed
before the next seed, so that the host's drift over the run falls on every policy alike.
"""


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched validate`` to the CLI."""
    parser = add_command_as_written(
        subparsers,
        "validate",
        "hold the replay model against the real host on the same policies and seeds",
        _DESCRIPTION,
    )
    parser.add_argument(
        "--scenario",
        required=True,
        help="a host-scale scenario's name (e.g. docker-training-4) or a scenario YAML path",
    )
    add_policies(
        parser,
        policy_help="policies, repeatable or comma-separated: baseline names, model paths, "
        "runs:/ or models:/ URIs",
        set_example="flowcon.itval_s=10",
    )
    parser.add_argument(
        "--held-out",
        default="",
        metavar="P[,P...]",
        help="policies that calibration did not see, as --policy names them or by their names "
        "(a model's is printed in the report); their jobs' errors are reported apart",
    )
    add_episodes(parser, default=2, episodes_help="episodes (seeds) per policy (2)")
    parser.add_argument(
        "--workload-threading",
        choices=THREADINGS,
        help="how the host's workloads size their thread pools (default: as the scenario's "
        "profiles were measured)",
    )
    parser.add_argument(
        "--against",
        default="docker",
        metavar="docker|replay:SET|recorded:FOLDER",
        help="the reference: the local engine (docker, the default), replay on another "
        "profile set (replay:DIR), e.g. to hold a recalibrated set against the shipped one, or "
        "the episodes an earlier evaluation recorded in FOLDER (recorded:FOLDER, e.g. the host "
        "side of an earlier validation under --out), which runs nothing on the host",
    )
    parser.add_argument(
        "--host-speed",
        metavar="measure|none|FILE",
        help="hold the host against replay rescaled to the host's speed: measure it first "
        "(measure: each workload alone for about 15 s, in 4 sub-windows; the default against "
        "the engine), reuse a host-speed.json a validation saved (FILE), or hold the profiles "
        "as they are (none; the default against recorded or replay references). Hosts that "
        "report the same CPU model differ in speed by up to 1.6x; the report names the ratios. "
        "A measured speed is measured again after the host episodes, replay (run after them) "
        "is rescaled to the geometric mean of the two probes, and the report warns if they "
        "differ by more than a tenth. The sub-windows' spread gives every ratio an interval; "
        "the report holds the median error unscaled and rescaled to each end of the interval "
        "beside the verdict, says when the verdict is within the probe's noise, and how long a "
        "probe must run for its interval to be narrower than the rescale",
    )
    parser.add_argument(
        "--probe-windows",
        type=sub_windows,
        metavar="N",
        help="sub-windows of about 2 s each that --host-speed measure runs each workload "
        "alone (4); the report says how many an interval narrower than the rescale needs",
    )
    add_evaluation_outputs(
        parser,
        records_help=f"folder of the local records ({DEFAULT_OUT}/<id>/...)",
        no_tracking_help="record nothing: only print the report",
    )
    parser.add_argument(
        "--replay-seeds",
        type=int,
        metavar="M",
        help="seeds replay runs in all, for the outcomes as distributions (a scenario that "
        "draws the same jobs every seed: its seeds are reruns of one episode, and the host's "
        f"spread); default {STOCK_REPLAY_SEEDS} for a stock scenario, else as many as "
        "--episodes",
    )
    parser.add_argument("--no-plots", action="store_true", help="draw and log no plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(handler=run)


def reference_side(against: str, workload_threading: str | None, scenario: Scenario) -> Side:
    """The reference the command line names for ``scenario`` (a docker reference runs its
    workloads with the threading they were profiled with, unless ``workload_threading``).

    Raises:
        BackendError: ``--against`` is none of ``docker``, ``replay:SET`` or
            ``recorded:FOLDER``, or ``--workload-threading`` is given with a reference other
            than docker.
        TrackingError: ``recorded:FOLDER`` names a folder without recorded episodes.
    """
    if against == "docker":
        # imported here: it imports MLflow and matplotlib, which a refused recording does not need
        from dlsched.runs.fidelity.validation_run import scenario_threading

        threading = workload_threading or scenario_threading(scenario)
        return Side("docker", {"workload_threading": threading} if threading != "tuned" else {})
    backend, colon, profile_set = against.partition(":")
    if backend == "recorded" and colon and profile_set:
        if workload_threading is not None:
            raise BackendError(
                f"--workload-threading {workload_threading} applies to a docker reference, not "
                f"--against {against}: a recording keeps the threading it ran with"
            )
        return Side.of_recording(Path(profile_set))
    if backend == "replay" and colon and profile_set:
        if workload_threading is not None:
            raise BackendError(
                f"--workload-threading {workload_threading} applies to a docker reference, not "
                f"--against {against}: replay's threading is its profiles'"
            )
        return Side("replay", {}, profile_set)
    raise BackendError(
        f"--against {against!r}: expected docker, replay:SET with SET a profile set "
        f"({', '.join(profile_set_names())}) or a folder of profiles, or recorded:FOLDER with "
        "FOLDER an evaluation's local records"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched validate`` as ``args`` say; the exit code."""
    out = local_records_folder(args, DEFAULT_OUT)
    scenario = load_scenario(args.scenario)
    # a recording is measured (and refused) first, before MLflow and matplotlib are imported
    reference = reference_side(args.against, args.workload_threading, scenario)
    replay_seeds = _replay_seeds(args.replay_seeds, scenario)  # refused before any probe
    # imported here, so that parsing (and --help) does not wait for MLflow and matplotlib
    from dlsched.runs.fidelity.host_speed import (
        SpeedBracket,
        resolve_host_speed,
        speed_bracket,
        speed_windows,
    )
    from dlsched.runs.fidelity.rescaled_profiles import rescaled_model
    from dlsched.runs.fidelity.validation_run import ValidationRequest, host_warnings
    from dlsched.runs.tracking.target import resolve_tracking_uri

    specs = list(args.policy)
    held_out = tuple(name.strip() for name in args.held_out.split(",") if name.strip())
    target = resolve_tracking_uri(args.tracking_uri)
    policies = tuple(build_policies(specs, parse_settings(args.set, specs), target.uri, [scenario]))
    names = [policy.name for policy in policies]
    # A held-out policy may be named as --policy gave it (a model's path or runs:/ URI).
    named = dict(zip(specs, names, strict=True))
    held_out = tuple(named.get(name, name) for name in held_out)
    unknown = [name for name in held_out if name not in names]
    if unknown:
        raise PolicyError(
            f"--held-out {','.join(unknown)} is not among the policies validated "
            f"({', '.join(names)}); name policies of --policy"
        )
    warnings = host_warnings(scenario, reference)
    speed = resolve_host_speed(args.host_speed, scenario, reference, args.probe_windows)
    with tempfile.TemporaryDirectory(prefix="dlsched-rescaled-") as scratch:
        directory = Path(scratch) / "profiles"
        model: Side | SpeedBracket = REPLAY
        bracket = speed_bracket(
            args.host_speed, scenario, reference, speed, directory, speed_windows(speed)
        )
        if speed is not None:
            said = speed.warning() or speed.note()
            if bracket is not None:
                # said now, before the host episodes; the report names the speed replay is
                # rescaled to once they are done: the mean of this probe and the one after
                print(f"warning: {said}", file=sys.stderr)
                model = bracket
            else:
                model = rescaled_model(speed, directory)
                warnings.append(said)
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        request = ValidationRequest(
            scenario=scenario,
            policies=policies,
            seeds=tuple(range(args.seed, args.seed + args.episodes)),
            reference=reference,
            model=model,
            held_out=held_out,
            host_speed=None if bracket is not None else speed,
            replay_seeds=replay_seeds,
        )
        return _validate(request, args, target, warnings, out)


#: The most seeds ``--replay-seeds`` runs (each a replay episode per policy, kept in memory).
MAX_REPLAY_SEEDS = 10_000


def _replay_seeds(given: int | None, scenario: Scenario) -> int:
    """``--replay-seeds``, or its default for ``scenario``.

    Raises:
        BackendError: a count below 0 or above :data:`MAX_REPLAY_SEEDS`.
    """
    if given is None:
        from dlsched.runs.fidelity.validation_run import scenario_threading

        return STOCK_REPLAY_SEEDS if scenario_threading(scenario) == "stock" else 0
    if not 0 <= given <= MAX_REPLAY_SEEDS:
        raise BackendError(
            f"--replay-seeds {given}: expected 0 to {MAX_REPLAY_SEEDS} (replay's seeds for the "
            "distributions; a few dozen show a spread)"
        )
    return given


def _validate(
    request: ValidationRequest,
    args: argparse.Namespace,
    target: TrackingTarget,
    warnings: list[str],
    out: Path,
) -> int:
    """Run the validation ``request`` describes, tracked unless ``--no-tracking`` (its local
    records under ``out``)."""
    from dlsched.runs.fidelity.validation_run import validate_tracked
    from dlsched.runs.tracking.store import connect

    progress = not args.no_progress
    if args.no_tracking:
        report, _, _ = run_validation(
            request.scenario,
            request.policies,
            request.seeds,
            reference=request.reference,
            model=request.model,
            held_out=request.held_out,
            progress=progress,
            warnings=warnings,
            replay_seeds=request.replay_seeds,
            host_speed=request.host_speed,
        )
        _print(report_data(report) if args.json else render_report(report), args.json)
        return 0
    print(target.describe(), file=sys.stderr)
    client = connect(target)
    outcome = validate_tracked(
        request,
        client,
        target,
        out,
        warnings=warnings,
        experiment=args.experiment,
        plots=not args.no_plots,
        progress=progress,
        warn=lambda message: print(message, file=sys.stderr),
    )
    _print(report_data(outcome.report) if args.json else render_report(outcome.report), args.json)
    print(f"validation records: {outcome.folder.resolve()}", file=sys.stderr)
    if outcome.host_speed is not None:
        print(
            f"host speed: {outcome.host_speed.describe()} (--host-speed "
            f"{outcome.folder.resolve() / 'host-speed.json'} reuses it)",
            file=sys.stderr,
        )
    if outcome.failure is not None:
        raise outcome.failure
    print(f"MLflow: validation run {outcome.run_id} in {target.uri}", file=sys.stderr)
    return 0


def _print(content: object, as_json: bool) -> None:
    print(json.dumps(content, indent=2) if as_json else content)
