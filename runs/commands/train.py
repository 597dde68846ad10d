"""``dlsched train``: train a learned scheduler with Stable-Baselines3 and track it in MLflow.

This module parses and prints: the training is :func:`dlsched.runs.training.harness.train`'s
(``--engine rllib``: :func:`dlsched.runs.training.rllib.train_rllib`'s), the text settings are
read by :mod:`dlsched.runs.training.settings_text`, and what the command prints at the end is
:func:`dlsched.runs.training.summary.training_summary`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import TYPE_CHECKING

from dlsched.envs.backend_registry import BACKENDS
from dlsched.envs.errors import ArgumentError
from dlsched.envs.observation import FEATURES
from dlsched.envs.placement import PLACERS
from dlsched.envs.rewards import REWARDS
from dlsched.policies.agent_actions import ActionMode
from dlsched.runs.commands.argument_types import output_folder, seed
from dlsched.runs.commands.options import (
    Subcommands,
    add_config_option,
    add_settings_option,
    add_tracking_uri,
)
from dlsched.runs.commands.train_groups import (
    RLLIB_DEFAULTS,
    add_imitation_options,
    add_rllib_options,
    imitation_config,
    rllib_config,
)
from dlsched.runs.parser import ListOption, given_options, option_defaults, same_named
from dlsched.runs.tracking.trajectory import DEFAULT_OUT
from dlsched.runs.training.config import (
    ALGORITHM_NAMES,
    NETWORKS,
    RELATIVE_MAX_STEP,
    SHARE_MAX_STEP,
    TrainingConfig,
    VecEnvKind,
)
from dlsched.runs.training.settings_text import parse_settings, parse_widths

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from dlsched.runs.tracking.target import TrackingTarget
    from dlsched.runs.training.harness import TrainingResult

#: The training engines ``--engine`` takes.
ENGINES: tuple[str, ...] = ("sb3", "rllib")
_SB3_DEFAULTS = TrainingConfig(algo="ppo", scenarios=(), timesteps=1)


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched train`` to the CLI."""
    defaults = _SB3_DEFAULTS
    parser = subparsers.add_parser(
        "train",
        help="train a learned scheduler (Stable-Baselines3) and log it to MLflow",
        description=(
            "Train an agent on one or several scenarios (each may be a distribution), validate "
            "it on held-out seeds with the metrics of `dlsched evaluate`, keep the best model "
            "and log it to MLflow; evaluate it with `dlsched evaluate --policy "
            "runs:/<run_id>/model`."
        ),
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="sb3",
        help="sb3: Stable-Baselines3 in this process; rllib: PPO on Ray RLlib, on a local Ray or "
        "a cluster (--ray-address), from the extra dlsched[ray] (%(default)s)",
    )
    parser.add_argument(
        "--scenario",
        action=ListOption,
        required=True,
        metavar="S[,S...]",
        help="training scenarios, shipped names or YAML paths, repeatable or comma-separated; "
        "several are mixed (one kind of job; the slot network trains across their layouts)",
    )
    parser.add_argument("--timesteps", type=int, required=True, help="environment steps")
    parser.add_argument(
        "--n-envs",
        type=int,
        help=f"environments stepped side by side; with rllib, episodes per env runner "
        f"({defaults.n_envs}; rllib: {RLLIB_DEFAULTS.num_envs})",
    )
    parser.add_argument("--seed", type=seed, default=defaults.seed, help="(%(default)s)")
    parser.add_argument(
        "--reward", choices=tuple(REWARDS), help="reward (default: the environment's)"
    )
    parser.add_argument(
        "--net-arch",
        default=",".join(map(str, defaults.net_arch)),
        metavar="W,W",
        help="hidden layer widths (%(default)s)",
    )
    add_settings_option(parser, "--hp", "the SB3 algorithm", "learning_rate=3e-4")
    parser.add_argument(
        "--torch-threads", type=int, default=defaults.torch_threads, help="(%(default)s)"
    )
    sb3 = parser.add_argument_group("sb3", "options of --engine sb3 (the default)")
    # an option that sets the TrainingConfig field of its name, by default the field's default
    sb3_option = functools.partial(add_config_option, sb3, defaults)
    sb3.add_argument("--algo", choices=ALGORITHM_NAMES, default="ppo", help="(ppo)")
    sb3.add_argument(
        "--eval-scenario",
        action=ListOption,
        default=[],
        metavar="E[,E...]",
        help="validation scenarios, repeatable or comma-separated (default: the training "
        "scenarios)",
    )
    sb3_option("--eval-every", "timesteps between validations, 0 for none", type=int)
    sb3_option("--eval-episodes", "held-out seeds per validation scenario", type=int)
    sb3_option(
        "--patience", "validations without improvement that stop training, 0 for never", type=int
    )
    sb3.add_argument("--backend", choices=BACKENDS, default=defaults.backend, help="(replay)")
    sb3_option(
        "--network",
        "slot: one network shared by every slot (ppo, a2c); mlp: SB3's MLP; auto: slot when "
        "possible",
        choices=NETWORKS,
    )
    sb3_option(
        "--actions",
        "how an action becomes a limit: absolute sets the limit; relative scales the limit in "
        "force by up to --max-step per interval; usage scales the job's last CPU usage by up to "
        "--max-step, as DQoES moves limits; share gives each worker away whole, its jobs' "
        "shares in proportion to weights from 1/--max-step to --max-step; share-idle the same, "
        "but holds part of the worker back where the weights add up to less than 1",
        choices=[mode.value for mode in ActionMode],
    )
    sb3.add_argument(
        "--max-step",
        type=float,
        help="largest factor of one relative action; in the share modes the weights span "
        f"1/MAX_STEP to MAX_STEP ({RELATIVE_MAX_STEP}; {SHARE_MAX_STEP:g} for share and "
        "share-idle)",
    )
    sb3_option("--frame-stack", "consecutive observations the agent sees at once", type=int)
    sb3_option(
        "--speed-spread",
        "on replay, each workload's speed drawn per training episode with this coefficient of "
        "variation (0.1-0.2 spans the drift between hosts that validate's speed probes measure)",
        type=float,
    )
    sb3.add_argument(
        "--slot-agents",
        action="store_true",
        help="every slot is an agent of one shared policy, rewarded for its own job too "
        "(timesteps count slot steps)",
    )
    sb3_option(
        "--own-weight",
        "with --slot-agents, the weight of an agent's own job in its reward",
        type=float,
    )
    add_settings_option(sb3, "--policy-kwarg", "the agent's policy", "log_std_init=-1")
    sb3.add_argument(
        "--no-reward-normalization",
        action="store_true",
        help="train on raw rewards (default: scaled by the running deviation of returns)",
    )
    sb3_option(
        "--vec-env",
        "how the environments are stepped: batched (replay: one natively batched environment "
        "per scenario, each with its share of --n-envs), dummy (one after the other in this "
        "process, the path before the batched one), subproc (one process each), auto (batched "
        "on replay with at least one environment per scenario and without --slot-agents, else "
        "dummy on replay and subproc on Docker)",
        choices=[kind.value for kind in VecEnvKind],
    )
    sb3.add_argument(
        "--features",
        default="all",
        metavar="F[,F...]",
        help="the observation's features the agent reads, comma-separated, or all (%(default)s: "
        + ", ".join(FEATURES)
        + ")",
    )
    sb3_option(
        "--placer",
        "where arriving jobs go, in training and wherever the model runs: spread (Docker "
        "Swarm's, the fewest containers) or least-work (the least work left per core, from "
        "telemetry)",
        choices=tuple(PLACERS),
    )
    sb3.add_argument(
        "--init-from",
        metavar="MODEL",
        help="start from a trained model's weights and observation statistics: a folder that "
        "`dlsched train` wrote, a runs:/<run_id>/model URI or pretrained:<name> (to fine-tune "
        "it under another --reward or on other scenarios); its algorithm, network, actions, "
        "frame stack, features and widths must be the training's",
    )
    sb3_option(
        "--critic-warmup",
        "timesteps whose updates train the critic alone, the actor held (ppo, a2c): for a "
        "model started from imitation or --init-from, whose critic does not yet value its "
        "returns",
        type=int,
    )
    imitation = add_imitation_options(parser)
    rllib = add_rllib_options(parser)
    add_tracking_uri(parser)
    parser.add_argument("--experiment", help="MLflow experiment (default <scenario>-training)")
    parser.add_argument(
        "--register-as",
        metavar="NAME",
        help="register the best model in MLflow's Model Registry under NAME (a new version if "
        "NAME exists); evaluate it with --policy models:/NAME/<version>",
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=DEFAULT_OUT,
        help=f"parent folder of the run's local files ({DEFAULT_OUT}/<training id>/)",
    )
    parser.add_argument(
        "--no-tracking", action="store_true", help="no MLflow: only the local folder"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    # the options that apply only with --engine sb3, --engine rllib, or --imitate
    only = {"sb3": option_defaults(sb3, imitation), "rllib": option_defaults(rllib)}
    only["imitate"] = {k: v for k, v in option_defaults(imitation).items() if k != "imitate"}
    parser.set_defaults(handler=run, only_with=only)


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched train`` as ``args`` say; the exit code."""
    if args.engine == "rllib":
        return _run_rllib(args)
    _refuse_the_other_engine(args, "sb3")
    config = TrainingConfig(
        **same_named(
            args,
            TrainingConfig,
            scenarios=tuple(args.scenario),
            n_envs=args.n_envs if args.n_envs is not None else TrainingConfig.n_envs,
            eval_scenarios=tuple(args.eval_scenario),
            net_arch=parse_widths(args.net_arch),
            actions=ActionMode(args.actions),
            hyperparams=parse_settings(args.hp, "--hp"),
            policy_kwargs=parse_settings(args.policy_kwarg, "--policy-kwarg"),
            normalize_reward=not args.no_reward_normalization,
            vec_env=VecEnvKind(args.vec_env),
            features=FEATURES if args.features == "all" else tuple(args.features.split(",")),
            imitation=imitation_config(args),
        )
    )
    config.check_size()
    # imported here, so that parsing, --help and a refused size do not wait for torch, SB3 and
    # MLflow
    from dlsched.runs.training.harness import train

    client, target = _tracking(args)
    result = train(
        config,
        args.out,
        client,
        target,
        experiment=args.experiment,
        progress=not args.no_progress,
        register_as=args.register_as,
    )
    return _print_outcome(result, target, config.scenarios[0], "sb3")


def _print_outcome(
    result: TrainingResult, target: TrackingTarget | None, scenario: str, engine: str
) -> int:
    """Print what a training produced and where; re-raise its interruption."""
    from dlsched.runs.training.summary import training_summary

    uri = target.uri if target is not None else None
    print("\n".join(training_summary(result, scenario, uri, engine)))
    if result.interruption is not None:
        raise result.interruption
    return 0


def _tracking(args: argparse.Namespace) -> tuple[MlflowClient | None, TrackingTarget | None]:
    """The checked MLflow store the command logs to, unless ``--no-tracking``."""
    from dlsched.runs.tracking.store import open_store
    from dlsched.runs.tracking.target import resolve_tracking_uri

    if args.no_tracking:
        return None, None
    target = resolve_tracking_uri(args.tracking_uri)
    return open_store(target, lambda line: print(line, file=sys.stderr)), target


def _refuse_the_other_engine(args: argparse.Namespace, engine: str) -> None:
    """Refuse the options only the engine other than ``engine`` takes, where given."""
    given = given_options(args, args.only_with["rllib" if engine == "sb3" else "sb3"])
    if given:
        one = len(given) == 1
        raise ArgumentError(
            f"{', '.join(given)} {'does' if one else 'do'} not apply to --engine {engine}; drop "
            f"{'it' if one else 'them'}, or choose the other engine"
        )


def _run_rllib(args: argparse.Namespace) -> int:
    """``dlsched train --engine rllib``."""
    _refuse_the_other_engine(args, "rllib")
    config = rllib_config(args)
    from dlsched.runs.training.rllib import require_ray, train_rllib

    # before the store is touched: a missing extra is the first thing to say
    require_ray(local=config.address is None)
    client, target = _tracking(args)
    result = train_rllib(
        config,
        args.out,
        client,
        target,
        experiment=args.experiment,
        report=None if args.no_progress else lambda line: print(line, file=sys.stderr),
        register_as=args.register_as,
    )
    return _print_outcome(result, target, config.scenario, "rllib")
