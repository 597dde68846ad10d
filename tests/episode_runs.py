"""What several test modules of the environments share: the registered ids, the scenarios the
checkers run on, and a whole episode under a fixed or given action."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.scenarios.file_format import load_scenario

ENV_IDS = ("dlsched/Inference-v0", "dlsched/Training-v0")
CHECKED = [
    ("dlsched/Inference-v0", "dqoes-resnet50-burst-target20"),
    ("dlsched/Inference-v0", "dqoes-varied-fixed50"),
    ("dlsched/Inference-v0", "dqoes-cluster-40"),
    ("dlsched/Training-v0", "flowcon-poc-3"),
    ("dlsched/Training-v0", "flowcon-cluster-20"),
    ("dlsched/Training-v0", "specon-20"),
]


def env_id_for(scenario: str) -> str:
    kind = load_scenario(scenario).kind.value
    return "dlsched/Inference-v0" if kind == "inference" else "dlsched/Training-v0"


def run_episode(env: gym.Env, seed: int, policy=None, max_steps: int = 10_000):
    """Observations, rewards and infos of a whole episode under ``policy(obs) -> action``."""
    observation, info = env.reset(seed=seed)
    trace = [(observation, None, info)]
    for _ in range(max_steps):
        action = policy(observation) if policy else np.full(env.action_space.shape, 0.5)
        observation, reward, terminated, truncated, info = env.step(action)
        trace.append((observation, reward, info))
        if terminated or truncated:
            return trace
    raise AssertionError(f"episode did not end within {max_steps} steps")
