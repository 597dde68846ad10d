"""``python -m dlsched_workloads <workload> [options]``: run one workload, printing JSON lines.

Inside the image the package is the top-level ``dlsched_workloads``; in the project it is
``dlsched.envs.workloads`` and runs the same way (``python -m dlsched.envs.workloads``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .catalog import WORKLOADS
from .cpu_quota import THREADINGS


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; expected 0 or more")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive; expected 1 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line of the workload programs."""
    parser = argparse.ArgumentParser(
        prog="python -m dlsched_workloads",
        description="Run a deep-learning workload on the CPU, one JSON line per unit of work.",
    )
    parser.add_argument("workload", choices=sorted(WORKLOADS), help="the workload to run")
    parser.add_argument(
        "--iterations",
        type=_positive,
        help="training: total iterations (default: the workload's); "
        "inference: stop after this many batches (default: serve until stopped)",
    )
    parser.add_argument(
        "--start-iteration",
        type=_non_negative,
        default=0,
        help="iterations (or batches) already done: the count continues from here",
    )
    parser.add_argument(
        "--batch-size",
        type=_positive,
        help="samples per iteration or images per batch (default: the workload's)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="training: save the state here when stopped (SIGTERM) and resume from it if present",
    )
    parser.add_argument(
        "--threading",
        choices=THREADINGS,
        default="tuned",
        help="tuned (default): threads follow the CPU quota and wait passively; stock: torch's "
        "and OpenMP's own defaults, as an unmodified program runs",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the workload the command line names; return the exit status."""
    args = build_parser().parse_args(argv)
    spec = WORKLOADS[args.workload]
    if args.threading == "tuned":
        # Containers share cores: OpenMP threads that spin while waiting for a descheduled
        # partner burn their own quota and others' CPU (`dlsched bench contention` measures it).
        # Read when torch loads OpenMP, so it is set before the import below.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Imported here so that --help and argument errors do not wait for torch.
    from .stopping import StopRequest

    stop = StopRequest()
    stop.install()
    batch_size = args.batch_size or spec.batch_size
    if spec.kind == "training":
        from .training import run_training

        assert spec.iterations is not None
        return run_training(
            spec,
            iterations=args.iterations or spec.iterations,
            start_iteration=args.start_iteration,
            batch_size=batch_size,
            seed=args.seed,
            checkpoint=args.checkpoint,
            stop=stop,
            threading=args.threading,
        )
    from .inference import run_inference

    return run_inference(
        spec,
        batches=args.iterations,
        start_batch=args.start_iteration,
        batch_size=batch_size,
        seed=args.seed,
        stop=stop,
        threading=args.threading,
    )


if __name__ == "__main__":
    sys.exit(main())
