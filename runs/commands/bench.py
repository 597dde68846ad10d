"""``dlsched bench <name>``: measure how fast a part of dlsched is, on this machine.

Each benchmark is a library module of :mod:`dlsched.runs.bench`; this module only parses its
options and prints its figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import THREADINGS
from dlsched.runs.bench.colocated_progress import TRAINING_WORKLOADS, measure_contention
from dlsched.runs.bench.contention_mix import measure_mix
from dlsched.runs.bench.defaults import TRACKING_POLICIES, TRACKING_SCENARIO, TRAINING_SCENARIO
from dlsched.runs.bench.docker_steps import DOCKER_STEP_TARGET_S, bench_docker
from dlsched.runs.bench.replay import (
    DEFAULT_CONTAINERS,
    DEFAULT_NUM_ENVS,
    measure_replay_speed,
    measure_vector_speed,
)
from dlsched.runs.bench.replay import DEFAULT_SCENARIO as REPLAY_SCENARIO
from dlsched.runs.commands.argument_types import positive_float, positive_int, positive_ints
from dlsched.runs.commands.options import Subcommands, add_command_with_actions, add_tracking_uri
from dlsched.runs.parser import ListOption


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched bench`` and its benchmarks to the CLI."""
    benchmarks = add_command_with_actions(
        subparsers,
        "bench",
        "measure the speed of parts of dlsched on this machine",
        "Measure the speed of parts of dlsched on this machine.",
        dest="benchmark",
        metavar="BENCHMARK",
    )
    _register_docker(benchmarks)
    _register_tracking(benchmarks)
    _register_replay(benchmarks)
    _register_training(benchmarks)
    _register_contention(benchmarks)
    _register_mix(benchmarks)


def _register_docker(benchmarks: Subcommands) -> None:
    parser = benchmarks.add_parser(
        "docker",
        help="telemetry and actuation time per step of the Docker backend",
        description=(
            "Start CONTAINERS inference containers on the local engine (needs the workload image, "
            "`dlsched image build --offline`), time STEPS steps of limit changes plus "
            "measurement, then time docker-py's container.stats(stream=False) for the same "
            f"containers. Target: {DOCKER_STEP_TARGET_S * 1000:.0f} ms per step for 10."
        ),
    )
    parser.add_argument(
        "--containers", type=positive_int, default=10, help="containers to run (default: 10)"
    )
    parser.add_argument(
        "--steps", type=positive_int, default=20, help="steps to time (default: 20)"
    )
    services = sorted(name for name, spec in WORKLOADS.items() if spec.kind == "inference")
    parser.add_argument(
        "--workload",
        choices=services,
        default="resnet-svc",
        help="the service the containers run (default: resnet-svc)",
    )
    _add_engine_options(parser, image_help="the workload image (default: dlsched's own)")
    parser.set_defaults(handler=run_docker)


def run_docker(args: argparse.Namespace) -> int:
    """Run the Docker benchmark as ``args`` say; print the figures; the exit code (0)."""
    result = bench_docker(args.containers, args.steps, args.workload, args.endpoint, args.image)
    return _print_figures(result, args.json)


def _register_tracking(benchmarks: Subcommands) -> None:
    """Add ``dlsched bench tracking`` to the ``bench`` subcommands."""
    parser = benchmarks.add_parser(
        "tracking",
        help="time an evaluation tracked in MLflow against the same untracked",
        description=(
            "Evaluate POLICIES on SCENARIO (replay backend) for EPISODES seeds four times: "
            "untracked, tracked as `dlsched evaluate` tracks by default, tracked without plots, "
            "tracked with every episode's plots (--episode-plots); print the times and their "
            "ratios to the untracked run."
        ),
    )
    parser.add_argument("--scenario", default=TRACKING_SCENARIO, help=f"({TRACKING_SCENARIO})")
    parser.add_argument(
        "--policy",
        action=ListOption,
        default=list(TRACKING_POLICIES),
        metavar="P[,P...]",
        help=f"repeatable or comma-separated ({','.join(TRACKING_POLICIES)})",
    )
    parser.add_argument("--episodes", type=positive_int, default=3, help="seeds per policy (3)")
    add_tracking_uri(parser, help="the store to time (default: a new sqlite file in a temp folder)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(handler=run_tracking)


def run_tracking(args: argparse.Namespace) -> int:
    """Run the tracking benchmark as ``args`` say; print the figures; the exit code (0)."""
    from dlsched.runs.bench.tracking import bench_tracking  # imports MLflow

    policies = tuple(args.policy)
    result = bench_tracking(args.scenario, policies, args.episodes, args.tracking_uri)
    return _print_figures(result, args.json)


def _register_replay(benchmarks: Subcommands) -> None:
    """Add ``dlsched bench replay`` to the ``bench`` subcommands."""
    parser = benchmarks.add_parser(
        "replay",
        help="replay environment steps per second, against real time and CartPole-v1",
        description=(
            "Run EPISODES seeded episodes of SCENARIO on the replay backend at equal shares; "
            "print steps per second and simulated seconds per wall-clock second. Then time, in "
            "the same process for SECONDS each (and on to the end of an episode, whose start "
            "costs more than its rest), Gymnasium's CartPole-v1, the single replay "
            "environment and the natively batched one at each NUM_ENVS (dqoes-varied-burst), "
            "and both at each CONTAINERS per environment; print steps per second as ratios to "
            "CartPole-v1's and container-steps per second."
        ),
    )
    parser.add_argument("--scenario", default=REPLAY_SCENARIO, help=f"({REPLAY_SCENARIO})")
    parser.add_argument("--episodes", type=positive_int, default=20, help="episodes (20)")
    parser.add_argument(
        "--num-envs",
        type=positive_ints,
        default=DEFAULT_NUM_ENVS,
        metavar="N[,N...]",
        help=f"batch sizes ({','.join(map(str, DEFAULT_NUM_ENVS))})",
    )
    parser.add_argument(
        "--containers",
        type=positive_ints,
        default=DEFAULT_CONTAINERS,
        metavar="C[,C...]",
        help=f"containers per environment to scale to ({','.join(map(str, DEFAULT_CONTAINERS))})",
    )
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=2.0,
        help="seconds per timed run, then to the end of an episode (2)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(handler=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    """Run the replay benchmarks as ``args`` say; print the figures; the exit code (0)."""
    speed = measure_replay_speed(args.scenario, args.episodes)
    vector = measure_vector_speed(args.num_envs, args.containers, args.seconds)
    if args.json:
        throughput = [
            asdict(figure)
            | {
                "env_steps_per_s": figure.env_steps_per_s,
                "container_steps_per_s": figure.container_steps_per_s,
                "cartpole_ratio": vector.ratio(figure),
            }
            for figure in (vector.cartpole, vector.single, *vector.batched, *vector.scaling)
        ]
        figures = asdict(speed) | {
            "steps_per_s": speed.steps_per_s,
            "real_time_ratio": speed.real_time_ratio,
            "throughput": throughput,
        }
        print(json.dumps(figures, indent=2))
        return 0
    print(
        f"{speed.scenario}: {speed.episodes} episodes, {speed.steps} steps in "
        f"{speed.wall_s:.2f} s: {speed.steps_per_s:,.0f} steps/s, "
        f"{speed.real_time_ratio:,.0f}x real time"
    )
    print(vector.report())
    return 0


def _register_training(benchmarks: Subcommands) -> None:
    """Add ``dlsched bench train`` to the ``bench`` subcommands."""
    parser = benchmarks.add_parser(
        "train",
        help="PPO training steps per second on replay, against PPO on CartPole-v1",
        description=(
            "Time TIMESTEPS steps of PPO (N_ENVS environments, N_STEPS per rollout, the same "
            "settings each) on CartPole-v1 and on SCENARIO by dlsched train's two replay paths "
            "(the batched environment, single ones in a DummyVecEnv); print steps per second "
            "and their ratios to CartPole-v1's."
        ),
    )
    parser.add_argument("--scenario", default=TRAINING_SCENARIO, help=f"({TRAINING_SCENARIO})")
    parser.add_argument("--timesteps", type=positive_int, default=16384, help="(16384)")
    parser.add_argument("--n-envs", type=positive_int, default=8, help="(8)")
    parser.add_argument("--n-steps", type=positive_int, default=256, help="(256)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(handler=run_training)


def run_training(args: argparse.Namespace) -> int:
    """Run the training benchmark as ``args`` say; print the figures; the exit code (0)."""
    from dlsched.runs.bench.training import bench_training  # imports torch and SB3

    result = bench_training(args.scenario, args.timesteps, args.n_envs, args.n_steps)
    speeds = {
        f"{name}_steps_per_s": getattr(result, name).steps_per_s
        for name in ("cartpole", "batched", "dummy")
    }
    return _print_figures(result, args.json, speeds)


def _register_contention(benchmarks: Subcommands) -> None:
    """Add ``dlsched bench contention`` to the ``bench`` subcommands."""
    parser = benchmarks.add_parser(
        "contention",
        help="total progress of co-located training jobs under free, equal and favoured limits",
        description=(
            "Run JOBS copies of a training workload on the local engine (needs the workload "
            "image, `dlsched image build --offline`) and measure their iterations per second "
            "alone, in free competition, at equal limits and with one job favoured, with the "
            "workloads' tuned and stock threading. Each threading takes 4 x (SETTLE + WINDOW) "
            "seconds plus the start-ups: about 2 minutes with the defaults."
        ),
    )
    parser.add_argument(
        "--workload", choices=TRAINING_WORKLOADS, default="mlp-digits", help="(default: mlp-digits)"
    )
    parser.add_argument("--jobs", type=positive_int, default=3, help="jobs together (3)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds per rate (20)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after a change (5)")
    parser.add_argument(
        "--threading",
        choices=(*THREADINGS, "both"),
        default="both",
        help="the workloads' threading to measure (default: both)",
    )
    _add_engine_options(parser)
    parser.set_defaults(handler=run_contention)


def run_contention(args: argparse.Namespace) -> int:
    """Run the benchmark as ``args`` say; print the figures; the exit code (0)."""
    threadings = THREADINGS if args.threading == "both" else (args.threading,)
    result = measure_contention(
        args.workload,
        args.jobs,
        args.window,
        args.settle,
        threadings,
        args.endpoint,
        args.image,
    )
    return _print_figures(result, args.json)


def _register_mix(benchmarks: Subcommands) -> None:
    """Add ``dlsched bench mix`` to the ``bench`` subcommands."""
    parser = benchmarks.add_parser(
        "mix",
        help="a mix of different training workloads on one worker: contention on the host "
        "against the replay model's",
        description=(
            "Run one job of each named training workload together on the local engine (needs "
            "the workload image, `dlsched image build --offline`): each alone while the others "
            "are parked at the smallest limit, then all in free competition and at equal "
            "limits; then the same on the replay model. Prints each job's efficiency (its "
            "iterations/s over its own alone at the cores it used) on both. About (n + 2) x "
            "(SETTLE + WINDOW) seconds plus the start-ups: 2 minutes for 3 workloads."
        ),
    )
    parser.add_argument(
        "--workloads",
        action=ListOption,
        default=["cnn-digits", "gru-digits", "vae-digits"],
        metavar="W,W[,W...]",
        help="training workloads, one job each, repeatable or comma-separated (default: "
        "cnn-digits,gru-digits,vae-digits)",
    )
    parser.add_argument(
        "--threading",
        choices=THREADINGS,
        default="stock",
        help="the workloads' threading (default: stock)",
    )
    parser.add_argument("--window", type=positive_float, default=15.0, help="seconds per rate (15)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after a change (5)")
    _add_engine_options(parser)
    parser.set_defaults(handler=run_mix)


def run_mix(args: argparse.Namespace) -> int:
    """Run the benchmark as ``args`` say; print the figures; the exit code (0)."""
    result = measure_mix(
        args.workloads,
        args.threading,
        args.window,
        args.settle,
        args.endpoint,
        args.image,
        say=lambda message: print(f"[mix] {message}", file=sys.stderr, flush=True),
    )
    return _print_figures(result, args.json)


def _print_figures(result: Any, as_json: bool, derived: Mapping[str, Any] | None = None) -> int:
    """Print a benchmark's ``result`` (a dataclass with a ``report()``): its fields as JSON, with
    the ``derived`` figures beside them, or its report; the exit code (0)."""
    if as_json:
        print(json.dumps(asdict(result) | dict(derived or {}), indent=2))
    else:
        print(result.report())
    return 0


def _add_engine_options(
    parser: argparse.ArgumentParser,
    image_help: str = "the workload image (default: dlsched's)",
) -> None:
    """The options of a benchmark that runs workloads on an engine: which engine and image, and
    JSON output."""
    parser.add_argument(
        "--endpoint", metavar="URL", help="engine URL (default: DOCKER_HOST or the local socket)"
    )
    parser.add_argument("--image", metavar="TAG", help=image_help)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
