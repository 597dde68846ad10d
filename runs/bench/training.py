"""``dlsched bench train``: PPO's environment steps per second on replay, against CartPole-v1.

It times ``PPO.learn`` for the same number of steps with the same settings (environments,
``n_steps``, ``batch_size``, epochs, network widths) on Gymnasium's CartPole-v1 in a
``DummyVecEnv`` (the reference) and on a replay scenario through both of
``dlsched train``'s replay paths: the natively batched environment and single environments in a
``DummyVecEnv``. The ratio to CartPole's steps per second holds across machines; what is left of
the gap is the network (a slot network over ``slots x features`` inputs) and the environment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.policies.agent_actions import ActionMapping, ActionMode
from dlsched.policies.normalization import slot_normalizer
from dlsched.policies.slot_network import SlotActorCriticPolicy
from dlsched.runs.bench.defaults import TRAINING_SCENARIO
from dlsched.runs.training.environments import VecEnvKind, make_vec_env

DEFAULT_SCENARIO = TRAINING_SCENARIO


@dataclass(frozen=True)
class TrainingSpeed:
    """Timesteps per second of ``PPO.learn`` on one environment setup."""

    label: str
    timesteps: int
    wall_s: float

    @property
    def steps_per_s(self) -> float:
        return self.timesteps / self.wall_s


@dataclass(frozen=True)
class TrainingBenchmark:
    """PPO on CartPole-v1 and on a replay scenario by both paths, with the same settings."""

    scenario: str
    n_envs: int
    n_steps: int
    cartpole: TrainingSpeed
    batched: TrainingSpeed
    dummy: TrainingSpeed

    def report(self) -> str:
        lines = [
            f"PPO, {self.n_envs} environments, n_steps {self.n_steps}, same settings:",
            f"  CartPole-v1 (DummyVecEnv): {self.cartpole.steps_per_s:,.0f} steps/s = 1x",
        ]
        for figure in (self.batched, self.dummy):
            ratio = figure.steps_per_s / self.cartpole.steps_per_s
            lines.append(
                f"  {self.scenario}, {figure.label}: {figure.steps_per_s:,.0f} steps/s = "
                f"{ratio:.3f}x"
            )
        return "\n".join(lines)


def _time_learn(venv: VecEnv, policy: object, timesteps: int, n_steps: int, seed: int) -> float:
    model = PPO(
        policy,  # type: ignore[arg-type]
        venv,
        n_steps=n_steps,
        batch_size=n_steps,
        n_epochs=2,
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    # SB3's own logger makes a folder in the temporary directory per run, and this logs nothing
    model.set_logger(Logger(None, []))
    started = time.perf_counter()
    model.learn(total_timesteps=timesteps)
    wall = time.perf_counter() - started
    venv.close()
    return wall


def bench_training(
    scenario_name: str = DEFAULT_SCENARIO,
    timesteps: int = 16384,
    n_envs: int = 8,
    n_steps: int = 256,
    seed: int = 0,
) -> TrainingBenchmark:
    """Time ``timesteps`` of PPO on CartPole-v1 and on ``scenario_name`` by both replay paths.

    Args:
        scenario_name: the replay scenario (one scenario, so the batched path applies).
        timesteps: steps each run learns for.
        n_envs: environments side by side.
        n_steps: steps per environment per rollout (also the minibatch size).
        seed: the algorithms' seed.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as dlsched train's default --torch-threads
    try:
        return _bench(scenario_name, timesteps, n_envs, n_steps, seed)
    finally:
        torch.set_num_threads(threads)


def _bench(
    scenario_name: str, timesteps: int, n_envs: int, n_steps: int, seed: int
) -> TrainingBenchmark:
    cartpole = DummyVecEnv([lambda: gym.make("CartPole-v1")] * n_envs)
    reference = TrainingSpeed(
        "CartPole-v1", timesteps, _time_learn(cartpole, "MlpPolicy", timesteps, n_steps, seed)
    )
    scenario = load_scenario(scenario_name)
    mapping = ActionMapping(ActionMode.USAGE, max_step=1.5)
    speeds = []
    for kind in (VecEnvKind.BATCHED, VecEnvKind.DUMMY):
        venv = slot_normalizer(
            make_vec_env([scenario], n_envs, mapping, kind), gamma=0.99, normalize_reward=True
        )
        wall = _time_learn(venv, SlotActorCriticPolicy, timesteps, n_steps, seed)
        speeds.append(TrainingSpeed(kind.value, timesteps, wall))
    return TrainingBenchmark(scenario_name, n_envs, n_steps, reference, speeds[0], speeds[1])
