"""``dlsched calibrate``: measure the replay profiles of real workloads on the local engine.

The measurement itself is :mod:`dlsched.runs.fidelity.calibration`; this module parses the
command line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from dlsched.envs.errors import UnknownNameError
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.runs.fidelity import calibration
from dlsched.runs.fidelity.calibration import (
    DEFAULT_LIMITS,
    DEFAULT_OUTPUT_DIR,
    QUIET_CORES,
    CalibrationSettings,
    calibrate,
)


def register(subparsers: Any) -> None:
    """Add ``calibrate`` to the ``dlsched`` parser."""
    parser = subparsers.add_parser(
        "calibrate",
        help="measure replay profiles of the real workloads on the local Docker engine",
        description=calibration.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workload",
        required=True,
        type=_workload_list,
        help=f"comma-separated workloads, or 'all' ({', '.join(sorted(WORKLOADS))})",
    )
    parser.add_argument(
        "--limits",
        type=_limit_list,
        default=DEFAULT_LIMITS,
        help="comma-separated CPU limits, as fractions of the host's cores; 1 (uncapped) is "
        "always measured (default: 0.25,0.5,1.0)",
    )
    parser.add_argument(
        "--duration",
        type=_positive_seconds,
        default=60.0,
        help="seconds each capped run measures after warm-up (default: 60); the uncapped run "
        "of a training workload trains its whole default job",
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
        help="cores other processes may use while the host counts as quiet "
        f"(default: {QUIET_CORES:g})",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=1,
        help="measure a run again (keeping the cleanest) when the host was not quiet during it "
        "(default: 1)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        help=f"where <workload>.json is written (default: {DEFAULT_OUTPUT_DIR})",
    )
    parser.set_defaults(handler=run)


def _workload_list(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if names == ("all",):
        return tuple(sorted(WORKLOADS))
    for name in names:
        if name not in WORKLOADS:
            raise argparse.ArgumentTypeError(str(UnknownNameError("workload", name, WORKLOADS)))
    if not names:
        raise argparse.ArgumentTypeError("no workload given; expected e.g. mlp-digits,vgg-svc")
    return names


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from error
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{seconds:g} s is not positive; give seconds > 0")
    return seconds


def _limit_list(text: str) -> tuple[float, ...]:
    try:
        limits = tuple(float(part) for part in text.split(","))
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"limits {text!r} are not comma-separated numbers; expected e.g. 0.25,0.5,1.0"
        ) from error
    for limit in limits:
        if not 0 < limit <= 1:
            raise argparse.ArgumentTypeError(
                f"limit {limit} is outside (0, 1]; a limit is a fraction of the host's cores"
            )
    return limits


def run(args: argparse.Namespace) -> int:
    """Calibrate every workload named on the command line; write one profile each."""
    settings = CalibrationSettings(
        limits=args.limits,
        duration_s=args.duration,
        wait_quiet_s=args.wait_quiet,
        quiet_cores=args.quiet_cores,
        retries=args.retries,
    )
    started = time.monotonic()
    calibrate(args.workload, settings, args.output_dir)
    print(f"calibration took {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0
