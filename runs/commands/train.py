"""``dlsched train``: train a learned scheduler with Stable-Baselines3 and track it in MLflow."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import yaml

from dlsched.envs.backend_registry import BACKENDS
from dlsched.envs.errors import ArgumentError, PolicyError, TrackingError
from dlsched.envs.observation import FEATURES
from dlsched.envs.placement import PLACERS
from dlsched.envs.rewards import REWARDS
from dlsched.policies.agent_actions import ActionMode
from dlsched.runs.commands.argument_types import output_folder, seed
from dlsched.runs.commands.options import Subcommands, add_tracking_uri
from dlsched.runs.parser import ListOption
from dlsched.runs.tracking.trajectory import DEFAULT_OUT
from dlsched.runs.training.config import (
    ALGORITHM_NAMES,
    NETWORKS,
    RELATIVE_MAX_STEP,
    SHARE_MAX_STEP,
    HyperValue,
    ImitationConfig,
    RllibConfig,
    TrainingConfig,
    VecEnvKind,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from dlsched.runs.tracking.target import TrackingTarget
    from dlsched.runs.training.harness import TrainingResult

#: The training engines ``--engine`` takes.
ENGINES: tuple[str, ...] = ("sb3", "rllib")
_SB3_DEFAULTS = TrainingConfig(algo="ppo", scenarios=(), timesteps=1)
RLLIB_DEFAULTS = RllibConfig(scenario="", timesteps=1)
IMITATION_DEFAULTS = ImitationConfig(teacher="")
#: Options only ``--engine sb3`` takes, by destination, with their defaults.
SB3_ONLY: Mapping[str, object] = {
    "algo": "ppo",
    "eval_scenario": [],
    "eval_every": _SB3_DEFAULTS.eval_every,
    "eval_episodes": _SB3_DEFAULTS.eval_episodes,
    "patience": _SB3_DEFAULTS.patience,
    "backend": _SB3_DEFAULTS.backend,
    "network": _SB3_DEFAULTS.network,
    "actions": _SB3_DEFAULTS.actions.value,
    "max_step": None,
    "frame_stack": _SB3_DEFAULTS.frame_stack,
    "speed_spread": _SB3_DEFAULTS.speed_spread,
    "slot_agents": False,
    "own_weight": _SB3_DEFAULTS.own_weight,
    "policy_kwarg": [],
    "no_reward_normalization": False,
    "vec_env": _SB3_DEFAULTS.vec_env.value,
    "features": "all",
    "imitate": None,
    "placer": _SB3_DEFAULTS.placer,
}
#: Options only ``--engine rllib`` takes, by destination, with their defaults.
RLLIB_ONLY: Mapping[str, object] = {
    "ray_address": None,
    "env_runners": RLLIB_DEFAULTS.env_runners,
    "num_cpus": RLLIB_DEFAULTS.num_cpus,
}


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
    # an option that sets the TrainingConfig field of its name, by default the field's default
    sb3_option = functools.partial(_add_config_option, parser, defaults)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="sb3",
        help="sb3: Stable-Baselines3 in this process; rllib: PPO on Ray RLlib, on a local Ray or "
        "a cluster (--ray-address), from the extra dlsched[ray] (%(default)s)",
    )
    parser.add_argument("--algo", choices=ALGORITHM_NAMES, default="ppo", help="(ppo)")
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
    parser.add_argument(
        "--reward", choices=tuple(REWARDS), help="reward (default: the environment's)"
    )
    parser.add_argument("--backend", choices=BACKENDS, default=defaults.backend, help="(replay)")
    sb3_option(
        "--network",
        "slot: one network shared by every slot (ppo, a2c); mlp: SB3's MLP; auto: slot when "
        "possible",
        choices=NETWORKS,
    )
    parser.add_argument(
        "--net-arch",
        default=",".join(map(str, defaults.net_arch)),
        metavar="W,W",
        help="hidden layer widths (%(default)s)",
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
    parser.add_argument(
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
    parser.add_argument(
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
    _add_settings_option(parser, "--hp", "the SB3 algorithm", "learning_rate=3e-4")
    _add_settings_option(parser, "--policy-kwarg", "the agent's policy", "log_std_init=-1")
    parser.add_argument(
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
    parser.add_argument(
        "--torch-threads", type=int, default=defaults.torch_threads, help="(%(default)s)"
    )
    parser.add_argument(
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
    imitation = parser.add_argument_group(
        "imitation", "learn a teacher's decisions before PPO: behaviour cloning, then DAgger"
    )
    imitation.add_argument(
        "--imitate",
        metavar="TEACHER",
        help="a handcrafted policy to learn from first (oracle: the privileged one; replay, "
        "the slot network)",
    )
    for name, what in (
        ("rounds", "rounds of gathering and fitting; the first follows the teacher"),
        ("steps", "steps of every environment per round"),
        ("epochs", "passes over every label so far, per round"),
    ):
        imitation.add_argument(
            f"--imitation-{name}",
            type=int,
            default=getattr(IMITATION_DEFAULTS, name),
            help=f"{what} (%(default)s)",
        )
    imitation.add_argument(
        "--imitation-log-std",
        type=float,
        default=IMITATION_DEFAULTS.log_std,
        help="log standard deviation of PPO's actions after imitation (%(default)s)",
    )
    rllib = parser.add_argument_group("rllib", "options of --engine rllib")
    rllib.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="the Ray cluster to train on (HOST:6379, ray://HOST:10001, or auto on one of its "
        "machines; default: a Ray started on 127.0.0.1 for this training)",
    )
    _add_config_option(
        rllib,
        RLLIB_DEFAULTS,
        "--env-runners",
        "Ray actors that sample, each with --n-envs episodes; 0 samples in this process",
        type=int,
    )
    rllib.add_argument(
        "--num-cpus",
        type=int,
        default=RLLIB_DEFAULTS.num_cpus,
        help="CPUs of the local Ray (%(default)s; ignored with --ray-address)",
    )
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
    parser.set_defaults(handler=run)


def _add_config_option(
    parser: argparse._ActionsContainer,
    config: TrainingConfig | RllibConfig,
    flag: str,
    help: str,
    **settings: Any,
) -> None:
    """Add ``flag`` (``settings``: its other ``add_argument`` settings), which sets ``config``'s
    field of the same name (``--eval-every``: ``eval_every``): its default is the field's value
    there (an enum's value), said in brackets after ``help``."""
    default = getattr(config, flag.removeprefix("--").replace("-", "_"))
    parser.add_argument(
        flag, default=getattr(default, "value", default), help=f"{help} (%(default)s)", **settings
    )


def _add_settings_option(
    parser: argparse.ArgumentParser, flag: str, what: str, example: str
) -> None:
    """Add ``flag KEY=VALUE``, repeatable: an argument of ``what``, which :func:`parse_settings`
    reads (``example`` one)."""
    parser.add_argument(
        flag,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"an argument of {what} (repeatable), e.g. {flag} {example}",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``dlsched train`` as ``args`` say; the exit code."""
    if args.engine == "rllib":
        return _run_rllib(args)
    _refuse_options(args, RLLIB_ONLY, "sb3")
    config = TrainingConfig(
        algo=args.algo,
        scenarios=tuple(args.scenario),
        timesteps=args.timesteps,
        n_envs=args.n_envs if args.n_envs is not None else TrainingConfig.n_envs,
        seed=args.seed,
        eval_scenarios=tuple(args.eval_scenario),
        eval_episodes=args.eval_episodes,
        eval_every=args.eval_every,
        patience=args.patience,
        reward=args.reward,
        backend=args.backend,
        network=args.network,
        net_arch=parse_widths(args.net_arch),
        actions=ActionMode(args.actions),
        max_step=args.max_step,
        frame_stack=args.frame_stack,
        speed_spread=args.speed_spread,
        slot_agents=args.slot_agents,
        own_weight=args.own_weight,
        hyperparams=parse_settings(args.hp, "--hp"),
        policy_kwargs=parse_settings(args.policy_kwarg, "--policy-kwarg"),
        normalize_reward=not args.no_reward_normalization,
        vec_env=VecEnvKind(args.vec_env),
        torch_threads=args.torch_threads,
        features=FEATURES if args.features == "all" else tuple(args.features.split(",")),
        imitation=_imitation(args),
        placer=args.placer,
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
    if result.interruption is not None:
        ending = f"interrupted ({result.interruption or 'SIGINT'}); its work is saved"
    elif result.stopped_early:
        ending = "stopped early (no improvement)"
    else:
        ending = "done"
    print(f"training {result.training_id}: {result.timesteps} timesteps, {ending}")
    best = result.best
    if best is not None:
        print(f"best validation score {best.score:.4f} at {best.timesteps} timesteps")
        for key, value in sorted(best.metrics.items()):
            print(f"  {key} = {value:.4f}")
    return _print_outcome(result, target, config.scenarios[0], latest_weights=True)


def _imitation(args: argparse.Namespace) -> ImitationConfig | None:
    """The imitation ``--imitate`` and its options ask for (``None`` without it).

    Raises:
        ArgumentError: an imitation option without ``--imitate``.
    """
    if args.imitate is None:
        given = [
            f"--imitation-{name.replace('_', '-')}"
            for name in ("rounds", "steps", "epochs", "log_std")
            if getattr(args, f"imitation_{name}") != getattr(IMITATION_DEFAULTS, name)
        ]
        if given:
            raise ArgumentError(f"{', '.join(given)} need --imitate TEACHER; add it, or drop them")
        return None
    return ImitationConfig(
        teacher=args.imitate,
        rounds=args.imitation_rounds,
        steps=args.imitation_steps,
        epochs=args.imitation_epochs,
        log_std=args.imitation_log_std,
    )


def _print_outcome(
    result: TrainingResult, target: TrackingTarget | None, scenario: str, latest_weights: bool
) -> int:
    """Print where a training's files, run and model are; re-raise its interruption."""
    print(f"local files: {result.folder.resolve()}")
    if result.run_id is not None and target is not None:
        print(f"MLflow: experiment {result.experiment!r}, run {result.run_id} in {target.uri}")
    print(f"model: {result.model_uri}")
    if latest_weights:
        print(f"latest weights: {result.final_model_uri}")
    if result.registered_uri is not None:
        print(f"registered: {result.registered_uri}")
    print(
        f"evaluate it: dlsched evaluate --scenario {scenario} "
        f"--policy default,{result.model_uri} --seed 100 --episodes 10"
    )
    if result.interruption is not None:
        raise result.interruption
    return 0


def _tracking(args: argparse.Namespace) -> tuple[MlflowClient | None, TrackingTarget | None]:
    """The checked MLflow store the command logs to, unless ``--no-tracking``."""
    from dlsched.runs.tracking.owners import end_orphaned_runs
    from dlsched.runs.tracking.store import connect
    from dlsched.runs.tracking.target import resolve_tracking_uri

    if args.no_tracking:
        return None, None
    target = resolve_tracking_uri(args.tracking_uri)
    print(target.describe(), file=sys.stderr)
    client = connect(target)
    end_orphaned_runs(client, lambda line: print(line, file=sys.stderr))
    return client, target


def _refuse_options(args: argparse.Namespace, options: Mapping[str, object], engine: str) -> None:
    """Refuse options given away from their defaults that ``engine`` does not take."""
    given = [
        f"--{name.replace('_', '-')}"
        for name, default in options.items()
        if getattr(args, name) != default
    ]
    if given:
        raise ArgumentError(
            f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --engine "
            f"{engine}; drop {'it' if len(given) == 1 else 'them'}, or choose the other engine"
        )


def _run_rllib(args: argparse.Namespace) -> int:
    """``dlsched train --engine rllib``."""
    _refuse_options(args, SB3_ONLY, "rllib")
    if args.register_as is not None and args.no_tracking:
        raise TrackingError(
            f"cannot register the model as {args.register_as!r} without tracking; drop "
            "--no-tracking, or drop --register-as"
        )
    if len(args.scenario) != 1:
        raise ArgumentError(
            f"--engine rllib trains on one scenario (its batched environment runs one), got "
            f"{', '.join(args.scenario)}; give one --scenario"
        )
    config = RllibConfig(
        scenario=args.scenario[0],
        timesteps=args.timesteps,
        num_envs=args.n_envs if args.n_envs is not None else RLLIB_DEFAULTS.num_envs,
        env_runners=args.env_runners,
        seed=args.seed,
        reward=args.reward,
        net_arch=parse_widths(args.net_arch),
        hyperparams=parse_settings(args.hp, "--hp"),
        address=args.ray_address,
        num_cpus=args.num_cpus,
        torch_threads=args.torch_threads,
    )
    config.check()
    from dlsched.runs.training.harness import register_model
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
    )
    if result.run_id is not None and args.register_as is not None and client is not None:
        result = dataclasses.replace(
            result, registered_uri=register_model(client, result.run_id, args.register_as)
        )
    ending = (
        f"interrupted ({result.interruption or 'SIGINT'}); its work is saved"
        if result.interruption is not None
        else "done"
    )
    print(f"training {result.training_id}: {result.timesteps} timesteps on RLlib, {ending}")
    return _print_outcome(result, target, config.scenario, latest_weights=False)


def parse_widths(text: str) -> tuple[int, ...]:
    """``"64,64"`` as ``(64, 64)``.

    Raises:
        PolicyError: not a comma-separated list of positive integers.
    """
    try:
        widths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        widths = ()
    if not widths or any(width < 1 for width in widths):
        raise PolicyError(f"--net-arch {text!r} must be positive widths, e.g. 64,64")
    return widths


def parse_settings(settings: Sequence[str], option: str) -> tuple[tuple[str, HyperValue], ...]:
    """``KEY=VALUE`` strings as pairs, values read as YAML scalars (``3e-4`` is a number).

    Args:
        settings: the strings, as given.
        option: the option they came from, for messages.

    Raises:
        PolicyError: a malformed setting, a key given twice, or a value that is not a scalar.
    """
    parsed: dict[str, HyperValue] = {}
    for setting in settings:
        key, equals, text = setting.partition("=")
        key = key.strip()
        if not (equals and key and text.strip()):
            raise PolicyError(f"{option} {setting!r} is not KEY=VALUE; e.g. {option} gamma=0.95")
        if key in parsed:
            raise PolicyError(f"{option} sets {key!r} twice; give each once")
        value = yaml.safe_load(text)
        if isinstance(value, str):
            # YAML 1.1 reads 3e-4 (no dot) as a string; a number is what is meant
            with contextlib.suppress(ValueError):
                value = float(value)
        if not isinstance(value, bool | int | float | str):
            raise PolicyError(
                f"{option} {setting!r}: value {text!r} is not a number, a bool or a string"
            )
        parsed[key] = value
    return tuple(parsed.items())
