"""``dlsched calibrate``: measure the replay model's numbers on the local Docker engine.

Without ``--contention`` it measures the profile of each workload named
(:mod:`dlsched.runs.fidelity.calibration`); with it, the contention grid and the fitted
contention term (:mod:`dlsched.runs.fidelity.contention_measurement`, fitted by
:mod:`dlsched.runs.fidelity.contention_fit`). This module parses and prints.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dlsched.envs.errors import ArgumentError
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading
from dlsched.runs.commands.argument_types import (
    cpu_limits,
    fraction,
    job_counts,
    known_name_list,
    output_folder,
    positive_seconds,
    profile_set_pair,
    threading_names,
    workload_names,
)
from dlsched.runs.commands.options import Subcommands, add_command_as_written
from dlsched.runs.fidelity import calibration, contention_measurement, race_fit, rate_precision
from dlsched.runs.fidelity.contention_fit import write_contention
from dlsched.runs.fidelity.quiet_host import QUIET_CORES
from dlsched.runs.fidelity.throttle_fit import fit_throttling_from

_DESCRIPTION = """\
Measure the replay model's numbers on the local Docker engine, on a quiet host.

Profiles (the default): each workload runs alone in one container per CPU limit (by default
0.1, 0.25, 0.5, 0.75 of the host and uncapped); its throughput against the cores it got, its
uncapped demand, noise and (training) loss curve, its start-up (time and CPU, from the engine's
create call) and its own contention curve (2 to 6 copies of a training together, 2 and 3 of a
service) become
<output-dir>/<workload>.json. --only measures some of these parts again in existing profiles.

Contention (--contention): copies of one training workload run together, 2 to 4 of them, under
free, equal, favoured and halved limits, with tuned and with stock threading; the exponent of
the replay model's contention term is fitted per threading and written, with the measurements,
to <output-dir>/contention.json.

Crowding and race (--race-from FOLDER): from host episodes already recorded (the host side of
`dlsched validate --out DIR`, or `dlsched evaluate --backend docker --out DIR`), fit how stock
trainings fare when they crowd a worker in a mix, against the profiles of <output-dir>: first
each workload's crowding curve (the mean progress per CPU-second it keeps, written into its
profile), then the race around that mean (the pace levels they visit, how long they stay, where
they go next), written as that threading's race into <output-dir>/contention.json; runs nothing
on the host. A new <output-dir> starts as the set the episodes ran on, rescaled to the host's
speed (--host-speed FILE, by default the host-speed.json of the validation whose --out folder
--race-from names). --race-like SET
copies SET's race into <output-dir> with its levels divided by their long-run mean: the race's
spread, keeping the mean contention of a set fitted elsewhere (the paper set's).

Throttling (--throttling-from FOLDER): from host episodes already recorded (as --race-from),
fit per workload how often a job under a quota is throttled (the fraction of CFS periods it
used its whole quota in) against its pressure on the quota, written to
<output-dir>/throttling.json; runs nothing on the host. A new <output-dir> starts as the set the
episodes ran on.

Every run waits for a quiet host (no other container, other processes using at most
--quiet-cores) and records the load it saw; a calibration on a busy host is refused unless
--force. A run whose rate is not known to half of --tolerance (95%, from the spread of its
sub-windows) is measured again, longer, so that two calibrations of a quiet host agree within
--tolerance; --compare A,B says whether two sets do. Use the result with
`profile_set: <output-dir>` in a scenario.
"""


def register(subparsers: Subcommands) -> None:
    """Add ``calibrate`` to the ``dlsched`` parser."""
    parser = add_command_as_written(
        subparsers,
        "calibrate",
        "measure replay profiles (or the contention term) on the local Docker engine",
        _DESCRIPTION,
    )
    parser.add_argument(
        "--workload",
        type=workload_names,
        help=f"comma-separated workloads, or 'all' ({', '.join(sorted(WORKLOADS))}); with "
        f"--contention one training workload (default: {contention_measurement.DEFAULT_WORKLOAD})",
    )
    parser.add_argument(
        "--contention",
        action="store_true",
        help="measure co-located jobs and fit the contention term instead of profiles",
    )
    parser.add_argument(
        "--race-from",
        type=Path,
        action="append",
        metavar="FOLDER",
        help="fit the crowding curves and the race from the Docker episodes of this evaluation "
        "folder (repeatable) instead of measuring; --threading names the one threading fitted "
        "(default: stock)",
    )
    parser.add_argument(
        "--throttling-from",
        type=Path,
        action="append",
        metavar="FOLDER",
        help="fit the throttling curves (the throttle ratio of a job under a quota against its "
        "pressure on it) from the Docker episodes of this evaluation folder (repeatable) "
        "instead of measuring, into <output-dir>/throttling.json",
    )
    parser.add_argument(
        "--host-speed",
        type=Path,
        metavar="FILE",
        help="with --race-from and a new --output-dir: start it as the episodes' profile set "
        "rescaled to this speed probe (default: the host-speed.json of the dlsched validate "
        "whose --out folder --race-from names, if it holds one)",
    )
    parser.add_argument(
        "--race-like",
        metavar="SET",
        help="copy SET's race (a shipped set's name or a folder) into --output-dir, its levels "
        "divided by their long-run mean (its spread, not its mean)",
    )
    parser.add_argument(
        "--threading",
        type=threading_names,
        default=None,
        help="how the workloads size their thread pools: tuned (follow the quota) or stock "
        "(one thread per core, as unmodified frameworks); profiles take one (default: tuned), "
        "--contention a comma-separated list (default: tuned,stock)",
    )
    parser.add_argument(
        "--limits",
        type=cpu_limits,
        default=calibration.DEFAULT_LIMITS,
        help="comma-separated CPU limits of the profiles, as fractions of the host's cores; 1 "
        "(uncapped) is always measured (default: 0.1,0.25,0.5,0.75,1)",
    )
    parser.add_argument(
        "--only",
        type=_part_list,
        default=calibration.PARTS,
        metavar="PART[,PART...]",
        help=f"profiles: measure only these parts ({', '.join(calibration.PARTS)}) of profiles "
        "that exist in --output-dir, keeping the rest (default: all)",
    )
    parser.add_argument(
        "--job-counts",
        type=job_counts,
        default=None,
        help="how many copies run together: for each workload's own contention curve "
        "(default: 2,3,4,6 for trainings, 2,3 for services), or with --contention "
        "(default: 2,3,4)",
    )
    parser.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="seconds each capped run measures after warm-up (default: 60; the uncapped run of "
        "a training workload trains its whole default job), and at most the window of each "
        "co-location cell of a workload's contention exponent (15 s training, 40 s services); "
        "with --contention the window of each cell (default: 15)",
    )
    parser.add_argument(
        "--settle",
        type=positive_seconds,
        default=5.0,
        help="seconds after each change of limits before measuring, with --contention and in a "
        "workload's own contention cells (default: 5)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="before each run, wait up to this long for the host to be quiet: no other "
        "container, other processes using at most --quiet-cores (default: 600)",
    )
    parser.add_argument(
        "--quiet-cores",
        type=float,
        default=QUIET_CORES,
        metavar="CORES",
        help=f"cores other processes may use while the host counts as quiet (default: "
        f"{QUIET_CORES:g})",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=1,
        help="measure a run again (keeping the cleanest) when the host was not quiet during it "
        "(default: 1)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="measure and write even when the host is busy (the load is recorded)",
    )
    parser.add_argument(
        "--tolerance",
        type=fraction,
        default=rate_precision.DEFAULT_TOLERANCE,
        help="how far apart (a fraction of a rate) two calibrations of a quiet host may be: a "
        "run whose rate is known to less than half of it is measured again, longer (up to 4x "
        "--duration); with --compare, the agreement asked for (default: "
        f"{rate_precision.DEFAULT_TOLERANCE:g})",
    )
    parser.add_argument(
        "--compare",
        type=profile_set_pair,
        metavar="SET_A,SET_B",
        help="measure nothing: each workload's speed in SET_B against SET_A (shipped set names "
        "or folders, e.g. two calibrations run back to back), at SET_A's measured cores, and "
        "whether they agree within --tolerance (exit 1 where they do not)",
    )
    parser.add_argument(
        "--output-dir",
        type=output_folder,
        default=calibration.DEFAULT_OUTPUT_DIR,
        help=f"the profile set's folder: <workload>.json or contention.json is written there "
        f"(default: ./{calibration.DEFAULT_OUTPUT_DIR})",
    )
    parser.set_defaults(handler=run)


def _part_list(text: str) -> tuple[str, ...]:
    parts = known_name_list(
        text, "part", calibration.PARTS, f"some of {', '.join(calibration.PARTS)}"
    )
    return tuple(part for part in calibration.PARTS if part in parts)


def run(args: argparse.Namespace) -> int:
    """Calibrate what the command line asks for and say where it was written.

    Raises:
        ArgumentError: options that do not go together.
    """
    started = time.monotonic()
    if args.host_speed is not None and not args.race_from:
        raise ArgumentError(
            f"--host-speed {args.host_speed} is for --race-from: it rescales the set the "
            "recorded episodes are fitted against"
        )
    if args.compare:
        return _run_compare(args)
    if args.throttling_from:
        return _run_throttling(args)
    if args.race_from or args.race_like:
        return _run_race(args)
    if args.contention:
        return _run_contention(args, started)
    if args.workload is None:
        raise ArgumentError("--workload is required (or pass --contention); e.g. --workload all")
    threadings = args.threading or ("tuned",)
    if len(threadings) != 1:
        raise ArgumentError(
            f"--threading {','.join(threadings)}: a profile set holds one threading; calibrate "
            "each into its own --output-dir"
        )
    settings = calibration.CalibrationSettings(
        limits=args.limits,
        duration_s=args.duration or 60.0,
        wait_quiet_s=args.wait_quiet,
        quiet_cores=args.quiet_cores,
        retries=args.retries,
        threading="stock" if threadings[0] == "stock" else "tuned",
        force=args.force,
        parts=args.only,
        job_counts=args.job_counts,
        tolerance=args.tolerance,
        settle_s=args.settle,
    )
    written = calibration.calibrate(args.workload, settings, args.output_dir)
    print(
        f"wrote {len(written)} profile(s) to {args.output_dir} in "
        f"{time.monotonic() - started:.0f} s; use them with `profile_set: {args.output_dir}`"
    )
    return 0


def _run_throttling(args: argparse.Namespace) -> int:
    fitted = fit_throttling_from(args.throttling_from, args.output_dir)
    if fitted.started_from is not None:
        print(f"started {args.output_dir} as profile set {fitted.started_from!r}")
    for line in fitted.model.fit.residuals if fitted.model.fit else ():
        print(f"  {line}")
    print(f"wrote the throttling curves to {fitted.path}")
    return 0


def _run_compare(args: argparse.Namespace) -> int:
    first, second = args.compare
    agreements = rate_precision.compare_sets(first, second, args.workload)
    print("\n".join(rate_precision.agreement_report(first, second, agreements, args.tolerance)))
    return 0 if all(agreement.agrees(args.tolerance) for agreement in agreements) else 1


def _run_contention(args: argparse.Namespace, started: float) -> int:
    workloads = args.workload or (contention_measurement.DEFAULT_WORKLOAD,)
    if len(workloads) != 1 or workloads[0] not in contention_measurement.TRAINING_WORKLOADS:
        raise ArgumentError(
            f"--contention measures one training workload; got {','.join(workloads)}, expected "
            f"one of {', '.join(contention_measurement.TRAINING_WORKLOADS)}"
        )
    settings = contention_measurement.ContentionSettings(
        workload=workloads[0],
        threadings=args.threading or THREADINGS,
        job_counts=args.job_counts or contention_measurement.DEFAULT_JOB_COUNTS,
        window_s=args.duration or 15.0,
        settle_s=args.settle,
        wait_quiet_s=args.wait_quiet,
        quiet_cores=args.quiet_cores,
        force=args.force,
    )
    path = write_contention(args.output_dir, contention_measurement.calibrate_contention(settings))
    print(f"wrote {path} in {time.monotonic() - started:.0f} s")
    return 0


def _run_race(args: argparse.Namespace) -> int:
    threadings: tuple[Threading, ...] = args.threading or ("stock",)
    if len(threadings) != 1:
        raise ArgumentError(
            f"--threading {','.join(threadings)}: --race-from fits one threading's race at a "
            "time; e.g. --threading stock"
        )
    if args.race_from and args.race_like:
        raise ArgumentError(
            "--race-from and --race-like both given: fit a race from episodes, or copy one's "
            "spread from another set, not both"
        )
    if args.race_like:
        race = race_fit.race_spread(args.race_like, threadings[0])
        path = race_fit.write_race(args.output_dir, threadings[0], race)
        lines = race_fit.race_report(race, threadings[0], path)
    else:
        speed = race_fit.host_speed_of(args.race_from, args.host_speed)
        fitted = race_fit.fit_crowding_and_race(
            args.race_from, args.output_dir, threadings[0], speed
        )
        lines = fitted.report(args.output_dir, threadings[0])
    print("\n".join(lines))
    return 0
