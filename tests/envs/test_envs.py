"""The environments: Gymnasium and SB3 conformance, determinism, pickling, actions, episodes."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.decision import Decision, Migration
from dlsched.envs.errors import ActionError, ScenarioError
from dlsched.envs.scenarios.file_format import load_scenario, scenario_names
from dlsched.envs.telemetry import JobState, QoEClass

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


def test_every_id_is_registered():
    for env_id in ENV_IDS:
        assert env_id in gym.registry


@pytest.mark.parametrize(("env_id", "scenario"), CHECKED)
def test_gymnasium_check_env(env_id, scenario):
    env = gym.make(env_id, scenario=scenario)
    gym_check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize(("env_id", "scenario"), CHECKED)
def test_sb3_check_env(env_id, scenario):
    sb3_check_env(gym.make(env_id, scenario=scenario).unwrapped, warn=True)


@pytest.mark.parametrize(("env_id", "scenario"), CHECKED[::2])
def test_same_seed_same_episode_other_seed_differs(env_id, scenario):
    first = run_episode(gym.make(env_id, scenario=scenario), seed=7)
    second = run_episode(gym.make(env_id, scenario=scenario), seed=7)
    assert len(first) == len(second)
    for (obs_a, reward_a, info_a), (obs_b, reward_b, info_b) in zip(first, second, strict=True):
        np.testing.assert_array_equal(obs_a, obs_b)
        assert reward_a == reward_b
        assert info_a == info_b  # telemetry snapshots are frozen dataclasses: compared by value
    other = run_episode(gym.make(env_id, scenario=scenario), seed=8)
    differs = any(not np.array_equal(a[0], b[0]) for a, b in zip(first, other, strict=False))
    assert differs or len(first) != len(other)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickled_environment_continues_identically(env_id):
    env = gym.make(env_id)
    env.reset(seed=3)
    for _ in range(3):
        env.step(env.action_space.sample())
    clone = pickle.loads(pickle.dumps(env))
    action = np.full(env.action_space.shape, 0.3, dtype=np.float32)
    for _ in range(3):
        expected = env.step(action)
        got = clone.step(action)
        np.testing.assert_array_equal(expected[0], got[0])
        assert expected[1:] == got[1:]


@pytest.mark.parametrize("scenario", scenario_names())
def test_every_shipped_scenario_runs_a_whole_episode(scenario):
    env = gym.make(env_id_for(scenario), scenario=scenario)
    trace = run_episode(env, seed=0)
    last_telemetry = trace[-1][2]["telemetry"]
    assert last_telemetry.time_s > 0
    if env_id_for(scenario) == "dlsched/Training-v0":
        states = {job.state for job in last_telemetry.jobs}
        assert states <= {JobState.DONE}, f"{scenario}: unfinished jobs at the end: {states}"


def test_equal_limits_on_resnet50_target20_leave_all_unsatisfied_near_31_6_s():
    """DQoES journal, Section V-B-1: evenly shared, ten ResNet-50 answer in 31.61 s (std 0.35)."""
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
    env.reset(seed=0)
    action = np.full(env.action_space.shape, 0.1, dtype=np.float32)
    for _ in range(35):  # t = 350 s, the paper's reading
        _, reward, _, _, info = env.step(action)
    telemetry = info["telemetry"]
    latencies = [job.latency_s for job in telemetry.active_jobs]
    assert len(latencies) == 10
    assert all(job.qoe_class is QoEClass.B for job in telemetry.active_jobs)
    assert reward == 0.0 and info["satisfied"] == 0
    assert np.mean(latencies) == pytest.approx(31.61, abs=1.0)


def test_actions_nan_and_wrong_shape_are_refused_with_their_values():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
    env.reset(seed=0)
    bad = np.full(env.action_space.shape, 0.5, dtype=np.float32)
    bad[3] = np.nan
    with pytest.raises(ActionError, match=r"non-finite values at indices \[3\]: \[nan\]"):
        env.step(bad)
    with pytest.raises(ActionError, match=r"action shape \(4,\) does not match .*\(10,\)"):
        env.step(np.zeros(4, dtype=np.float32))


def test_actions_are_clipped_to_one_and_raised_to_the_floor():
    env = gym.make(
        "dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20", limit_floor=0.05
    )
    env.reset(seed=0)
    action = np.linspace(-1.0, 2.0, env.action_space.shape[0]).astype(np.float32)
    _, _, _, _, info = env.step(action)
    limits = {job.slot: job.limit for job in info["telemetry"].active_jobs}
    for slot, value in enumerate(action):
        assert limits[slot] == pytest.approx(min(max(float(value), 0.05), 1.0))


def test_decisions_naming_unknown_jobs_or_negative_limits_are_refused():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20").unwrapped
    env.reset(seed=0)
    with pytest.raises(ActionError, match="'nope', which has not arrived"):
        env.step_decision(Decision(limits={"nope": 0.5}))
    with pytest.raises(ActionError, match=r"limit of job 'j00' is -0\.5"):
        env.step_decision(Decision(limits={"j00": -0.5}))
    with pytest.raises(ActionError, match="limit of job 'j00' is nan"):
        env.step_decision(Decision(limits={"j00": float("nan")}))
    with pytest.raises(ActionError, match=r"to worker 3; workers are 0\.\.0"):
        env.step_decision(Decision(migrations=(Migration("j00", 3),)))


def test_scenario_of_the_wrong_kind_names_the_right_environment():
    with pytest.raises(ScenarioError, match="make dlsched/Training-v0 with it instead"):
        gym.make("dlsched/Inference-v0", scenario="flowcon-poc-3")


def test_cluster_arrivals_are_spread_like_docker_swarm():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-cluster-40")
    env.reset(seed=0)
    for _ in range(40):
        _, _, _, _, info = env.step(np.ones(env.action_space.shape, dtype=np.float32))
    per_worker = [len(info["telemetry"].on_worker(w)) for w in range(4)]
    assert sum(per_worker) == 40
    assert max(per_worker) - min(per_worker) <= 1


def test_migration_through_the_environment_moves_the_job_and_keeps_its_progress():
    env = gym.make("dlsched/Training-v0", scenario="flowcon-cluster-20").unwrapped
    env.reset(seed=0)
    for _ in range(10):
        env.step(np.ones(env.action_space.shape, dtype=np.float32))
    job = next(j for j in env.telemetry.active_jobs if j.iterations > 0)
    destination = (job.worker + 1) % len(env.scenario.workers)
    _, _, _, _, info = env.step_decision(Decision(migrations=(Migration(job.job_id, destination),)))
    moved = info["telemetry"].job(job.job_id)
    assert moved.worker == destination
    assert moved.iterations >= job.iterations
