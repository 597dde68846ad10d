"""``dlsched bench replay``: how fast the replay environment runs, against real time.

It times whole seeded episodes of a scenario through ``gym.make``, every job at an equal share,
and reports environment steps per second and the speed-up over real time (simulated seconds
per wall-clock second): the Docker backend runs at 1, so the ratio is what replay buys.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind

DEFAULT_SCENARIO = "dqoes-varied-burst"


@dataclass(frozen=True)
class ReplaySpeed:
    """What ``episodes`` episodes of ``scenario`` cost on this machine."""

    scenario: str
    episodes: int
    steps: int
    wall_s: float
    simulated_s: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s

    @property
    def real_time_ratio(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.simulated_s / self.wall_s


def measure_replay_speed(scenario_name: str, episodes: int) -> ReplaySpeed:
    """Time ``episodes`` episodes (seeds 0, 1, ...) of ``scenario_name`` at equal shares."""
    scenario = load_scenario(scenario_name)
    training = scenario.kind is JobKind.TRAINING
    env = gym.make("dlsched/Training-v0" if training else "dlsched/Inference-v0", scenario=scenario)
    slots = len(scenario.workers) * scenario.slots_per_worker
    action = np.full(slots, 1.0 / scenario.slots_per_worker, np.float32)
    steps = 0
    simulated_s = 0.0
    started = time.perf_counter()
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(action)
            steps += 1
            done = terminated or truncated
        simulated_s += info["time_s"]
    wall_s = time.perf_counter() - started
    env.close()
    return ReplaySpeed(scenario_name, episodes, steps, wall_s, simulated_s)
