"""``dlsched bench replay``: how fast the replay environments run, against real time and CartPole.

:func:`measure_replay_speed` times whole seeded episodes of a scenario through ``gym.make``,
every job at an equal share, and reports environment steps per second and the speed-up over real
time (simulated seconds per wall-clock second): the Docker backend runs at 1, so the ratio is
what replay buys. :func:`measure_vector_speed` times Gymnasium's CartPole-v1, the single replay
environment and the batched one (:mod:`dlsched.envs.scheduling_vector_env`) in the same process,
so that their ratios hold on any machine: steps per second of each, container-steps per second
of the batched one at several batch sizes, and how both scale with the containers per
environment.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.runs.evaluation.runners import ENV_IDS

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


#: Batch sizes the vector benchmark runs by default (the issue's N).
DEFAULT_NUM_ENVS = (1, 16, 256, 1024)
#: Containers per environment of the scaling benchmark: dqoes-varied-burst (1 worker),
#: dqoes-cluster-40 (4 workers), and dqoes-cluster-40 grown to 640 services on 64 workers.
DEFAULT_CONTAINERS = (10, 40, 640)
#: The batch size of the scaling benchmark.
SCALING_NUM_ENVS = 16


@dataclass(frozen=True)
class Throughput:
    """Steps one environment (or batch of them) took in a timed run.

    Attributes:
        label: what ran (``CartPole-v1``, ``single``, ``batched``).
        scenario: the dlsched scenario (empty for CartPole).
        num_envs: environments stepped together (1 for a single environment).
        containers: containers (slots holding a job) per environment; 1 for CartPole.
        env_steps: environment steps taken (``num_envs`` per batched step).
        wall_s: wall-clock seconds they took, resets included.
    """

    label: str
    scenario: str
    num_envs: int
    containers: int
    env_steps: int
    wall_s: float

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.wall_s

    @property
    def container_steps_per_s(self) -> float:
        return self.env_steps_per_s * self.containers


@dataclass(frozen=True)
class VectorBenchmark:
    """CartPole-v1, the single replay environment and the batched one, timed in one process."""

    cartpole: Throughput
    single: Throughput
    batched: tuple[Throughput, ...]
    scaling: tuple[Throughput, ...]

    def ratio(self, figure: Throughput) -> float:
        """Environment steps per second relative to CartPole-v1's in the same run."""
        return figure.env_steps_per_s / self.cartpole.env_steps_per_s

    def report(self) -> str:
        lines = [
            f"CartPole-v1 (gym.make): {self.cartpole.env_steps_per_s:,.0f} steps/s = 1x",
            f"single replay env ({self.single.scenario}, {self.single.containers} containers): "
            f"{self.single.env_steps_per_s:,.0f} steps/s = {self.ratio(self.single):.3f}x",
        ]
        for figure in (*self.batched, *self.scaling):
            lines.append(
                f"{figure.label} N={figure.num_envs} ({figure.scenario}, {figure.containers} "
                f"containers): {figure.env_steps_per_s:,.0f} env-steps/s = "
                f"{self.ratio(figure):.2f}x, {figure.container_steps_per_s:,.0f} container-steps/s"
            )
        return "\n".join(lines)


def scaled_scenario(containers: int) -> Scenario:
    """The scenario of the scaling benchmark with ``containers`` services (see
    :data:`DEFAULT_CONTAINERS`): dqoes-varied-burst for 10, dqoes-cluster-40 with one worker of
    10 slots per 10 services otherwise."""
    if containers == 10:
        return load_scenario(DEFAULT_SCENARIO)
    base = load_scenario("dqoes-cluster-40")
    workers = max(1, -(-containers // base.slots_per_worker))
    group = dataclasses.replace(base.groups[0], count=containers)
    return dataclasses.replace(
        base,
        name=f"dqoes-cluster-{containers}",
        workers=(base.workers[0],) * workers,
        groups=(group,),
    )


def _timed(
    step: Callable[[], int], seconds: float, cycle: int = 1, offset: int = 0
) -> tuple[int, float]:
    """Call ``step`` (which returns the environment steps it took) for about ``seconds``, and on
    to the end of an episode: a call whose count plus ``offset`` is a multiple of ``cycle``.

    A replay episode is dearer where its jobs arrive and start than later on: a window cut at a
    fixed time would hold more of the dear part the slower the environment is, so that its
    figure moved with its own speed. Whole episodes weigh every part alike.
    """
    steps = calls = 0
    started = time.perf_counter()
    while True:
        steps += step()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and (calls + offset) % cycle == 0:
            return steps, elapsed


def _episode_steps(scenario: Scenario) -> int:
    """Steps of every episode of an inference scenario (the horizon cuts it); 1 for training,
    whose episodes end when their jobs do (its windows are cut at any step)."""
    if scenario.kind is JobKind.TRAINING:
        return 1
    return math.ceil(scenario.horizon_s / scenario.interval_s - 1e-9)


def time_cartpole(seconds: float) -> Throughput:
    """Steps per second of ``gym.make("CartPole-v1")`` (the reference), resets included."""
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    action = [0]

    def step() -> int:
        action[0] ^= 1
        _, _, terminated, truncated, _ = env.step(action[0])
        if terminated or truncated:
            env.reset()
        return 1

    steps, wall = _timed(step, seconds)
    env.close()
    return Throughput("CartPole-v1", "", 1, 1, steps, wall)


def time_single(scenario: Scenario, seconds: float) -> Throughput:
    """Steps per second of one replay environment through ``gym.make``, at equal shares."""
    env = gym.make(ENV_IDS[scenario.kind], scenario=scenario)
    env.reset(seed=0)
    slots = len(scenario.workers) * scenario.slots_per_worker
    action = np.full(slots, 1.0 / scenario.slots_per_worker, np.float32)

    def step() -> int:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
        return 1

    steps, wall = _timed(step, seconds, _episode_steps(scenario))
    env.close()
    return Throughput("single", scenario.name, 1, scenario.max_jobs, steps, wall)


def time_batched(scenario: Scenario, num_envs: int, seconds: float) -> Throughput:
    """Environment steps per second of the batched replay environment (autoreset included)."""
    env = gym.make_vec(
        ENV_IDS[scenario.kind],
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        scenario=scenario,
    )
    env.reset(seed=0)
    slots = len(scenario.workers) * scenario.slots_per_worker
    actions = np.full((num_envs, slots), 1.0 / scenario.slots_per_worker, np.float32)

    def step() -> int:
        env.step(actions)
        return num_envs

    # Every episode ends at the same step and the next call resets them (Gymnasium's NEXT_STEP):
    # the first episode takes its steps, every later one a call more.
    if scenario.kind is JobKind.INFERENCE:
        steps, wall = _timed(step, seconds, _episode_steps(scenario) + 1, offset=1)
    else:
        steps, wall = _timed(step, seconds)
    env.close()
    return Throughput("batched", scenario.name, num_envs, scenario.max_jobs, steps, wall)


def measure_vector_speed(
    num_envs: Sequence[int] = DEFAULT_NUM_ENVS,
    containers: Sequence[int] = DEFAULT_CONTAINERS,
    seconds: float = 2.0,
) -> VectorBenchmark:
    """Time CartPole-v1, the single and the batched replay environments in this process.

    Args:
        num_envs: batch sizes of the batched environment on dqoes-varied-burst.
        containers: containers per environment of the scaling runs (see :func:`scaled_scenario`),
            each timed single and batched (``SCALING_NUM_ENVS`` environments).
        seconds: wall-clock seconds per timed run (at least one step each).
    """
    base = load_scenario(DEFAULT_SCENARIO)
    cartpole = time_cartpole(seconds)
    single = time_single(base, seconds)
    batched = tuple(time_batched(base, count, seconds) for count in num_envs)
    scaling: list[Throughput] = []
    for count in containers:
        scenario = scaled_scenario(count)
        scaling.append(time_single(scenario, seconds))
        scaling.append(time_batched(scenario, SCALING_NUM_ENVS, seconds))
    return VectorBenchmark(cartpole, single, batched, tuple(scaling))
