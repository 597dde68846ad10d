"""The option groups of ``dlsched train`` that only part of it takes: ``--imitate``'s and
``--engine rllib``'s, each declared and read into its configuration here.

:mod:`dlsched.runs.commands.train` owns the command (its shared options and the SB3 engine's,
the tracking and what it prints).
"""

from __future__ import annotations

import argparse

from dlsched.envs.errors import ArgumentError
from dlsched.runs.commands.options import add_config_option
from dlsched.runs.parser import given_options
from dlsched.runs.training.config import ImitationConfig, RllibConfig
from dlsched.runs.training.settings_text import parse_settings, parse_widths

#: The defaults of the RLlib engine's options.
RLLIB_DEFAULTS = RllibConfig(scenario="", timesteps=1)
#: The defaults of the imitation options.
IMITATION_DEFAULTS = ImitationConfig(teacher="")


def add_rllib_options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add the options of ``--engine rllib`` to ``dlsched train``'s ``parser``, as their group."""
    rllib = parser.add_argument_group("rllib", "options of --engine rllib")
    rllib.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="the Ray cluster to train on (HOST:6379, ray://HOST:10001, or auto on one of its "
        "machines; default: a Ray started on 127.0.0.1 for this training)",
    )
    add_config_option(
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
    return rllib


def rllib_config(args: argparse.Namespace) -> RllibConfig:
    """The RLlib training ``dlsched train --engine rllib`` asks for, checked.

    Raises:
        ArgumentError: more than one scenario, or a setting out of its range.
    """
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
    return config


def add_imitation_options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add ``--imitate`` and its options to ``dlsched train``'s ``parser``, as their group."""
    imitation = parser.add_argument_group(
        "imitation", "learn a teacher's decisions before PPO: behaviour cloning, then DAgger"
    )
    imitation.add_argument(
        "--imitate",
        metavar="TEACHER",
        help="a handcrafted policy to learn from first (oracle: the privileged one; replay, "
        "the slot network)",
    )
    imitation.add_argument(
        "--teacher-set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="set a parameter of the teacher (repeatable), e.g. --teacher-set frugal=true",
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
    return imitation


def imitation_config(args: argparse.Namespace) -> ImitationConfig | None:
    """The imitation ``--imitate`` and its options ask for (``None`` without it).

    Raises:
        ArgumentError: an imitation option without ``--imitate``.
    """
    if args.imitate is None:
        given = given_options(args, args.only_with["imitate"])
        if given:
            raise ArgumentError(f"{', '.join(given)} need --imitate TEACHER; add it, or drop them")
        return None
    return ImitationConfig(
        teacher=args.imitate,
        teacher_params=parse_settings(args.teacher_set, "--teacher-set"),
        rounds=args.imitation_rounds,
        steps=args.imitation_steps,
        epochs=args.imitation_epochs,
        log_std=args.imitation_log_std,
    )
