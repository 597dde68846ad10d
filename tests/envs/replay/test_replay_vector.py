"""The replay engine, batched, against the readable reference model, step by step.

The reference (:mod:`replay_reference`) writes the replay model one job at a time. Every
conformance test here resets N single environments on the reference backend (through the
one-episode adapter the Docker backend takes) with seeds ``s, s + 1, ...`` and the batched
environment on the replay engine with ``seed=s``, gives both the same actions (and migrations),
and requires the same observations, rewards, terminations, satisfied counts and telemetry at
every step of whole episodes, across the autoreset into a second episode.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.vector import AutoresetMode
from replay_reference import ReferenceReplay

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.baselines import make as make_baseline
from dlsched.envs.decision import Decision, Migration
from dlsched.envs.episode_batch import BOOTING
from dlsched.envs.errors import ActionError, ArgumentError, BackendError, ScenarioError
from dlsched.envs.inference_env import InferenceEnv, InferenceVectorEnv
from dlsched.envs.replay.profile import (
    PROFILES_DIR,
    load_set_contention,
    profile_set_directory,
)
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv
from dlsched.envs.telemetry import JobState, Telemetry
from dlsched.envs.training_env import TrainingEnv, TrainingVectorEnv

ENV_IDS = {JobKind.INFERENCE: "dlsched/Inference-v0", JobKind.TRAINING: "dlsched/Training-v0"}
SINGLE = {JobKind.INFERENCE: InferenceEnv, JobKind.TRAINING: TrainingEnv}

#: What a decider returns for one environment: its action row and its migrations.
Decider = Callable[[int, Telemetry, np.random.Generator], tuple[np.ndarray, tuple[Migration, ...]]]


@dataclasses.dataclass
class Coverage:
    """What the episodes exercised, so a test can insist on it."""

    steps: int = 0
    resets: int = 0
    migrations: int = 0
    waited: bool = False
    finished_mid_interval: bool = False
    booted: bool = False


def assert_same_telemetry(batched: Telemetry, single: Telemetry, where: str) -> None:
    assert math.isclose(batched.time_s, single.time_s, rel_tol=1e-12), where
    assert [j.job_id for j in batched.jobs] == [j.job_id for j in single.jobs], where
    for ours, theirs in zip(batched.jobs, single.jobs, strict=True):
        for field in dataclasses.fields(theirs):
            a, b = getattr(ours, field.name), getattr(theirs, field.name)
            if isinstance(b, float) and isinstance(a, float):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (where, ours, theirs)
            else:
                assert a == b, (where, field.name, a, b)
    for ours, theirs in zip(batched.workers, single.workers, strict=True):
        assert math.isclose(ours.cpu_usage, theirs.cpu_usage, rel_tol=1e-9, abs_tol=1e-9), where


def conform(
    scenario: Scenario,
    decide: Decider,
    num_envs: int = 3,
    seed: int = 7,
    episodes: int = 2,
) -> Coverage:
    """Run both for ``episodes`` episodes of every environment; assert equality at every step
    (on a copy of the scenario's profile set without races, which the reference has not)."""
    scenario = race_free(scenario)
    vec = gym.make_vec(
        ENV_IDS[scenario.kind],
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        scenario=scenario,
    )
    batched = vec.unwrapped
    assert isinstance(batched, SchedulingVectorEnv)
    singles: list[SchedulingEnv] = [
        SINGLE[scenario.kind](scenario=scenario, backend=ReferenceReplay()) for _ in range(num_envs)
    ]
    observations, infos = vec.reset(seed=seed)
    for index, env in enumerate(singles):
        observation, info = env.reset(seed=seed + index)
        np.testing.assert_array_equal(observations[index], observation)
        assert infos["satisfied"][index] == info["satisfied"]
    coverage = Coverage()
    finished = [0] * num_envs
    restart = [False] * num_envs
    rng = np.random.default_rng(seed)
    while min(finished) < episodes:
        actions = np.zeros(batched.action_space.shape, dtype=np.float32)
        migrations: list[tuple[Migration, ...]] = []
        for index, env in enumerate(singles):
            telemetry = batched.telemetry(index)
            assert_same_telemetry(telemetry, env.telemetry, f"env {index} step {coverage.steps}")
            actions[index], moves = decide(index, telemetry, rng)
            migrations.append(() if restart[index] else moves)
            coverage.waited |= any(job.state is JobState.WAITING for job in telemetry.jobs)
        observations, rewards, terminated, truncated, infos = batched.step_with_migrations(
            actions, migrations
        )
        coverage.steps += 1
        coverage.booted |= bool((batched._loop.batch.state.phase == BOOTING).any())
        for index, env in enumerate(singles):
            where = f"env {index} step {coverage.steps}"
            if restart[index]:
                observation, info = env.reset()
                reward, ended_now, cut_now = 0.0, False, False
                restart[index] = False
                coverage.resets += 1
            elif migrations[index]:
                decision = Decision(
                    limits=limits_of(env.telemetry, actions[index]), migrations=migrations[index]
                )
                observation, reward, ended_now, cut_now, info = env.step_decision(decision)
            else:
                observation, reward, ended_now, cut_now, info = env.step(actions[index])
            if not restart[index]:
                coverage.migrations += len(migrations[index])
                coverage.finished_mid_interval |= any(
                    job.completed_s is not None
                    and not math.isclose(job.completed_s % scenario.interval_s, 0.0, abs_tol=1e-6)
                    for job in info["telemetry"].jobs
                )
            np.testing.assert_allclose(
                observations[index], observation, rtol=0, atol=1e-6, err_msg=where
            )
            assert math.isclose(rewards[index], reward, rel_tol=1e-9, abs_tol=1e-9), where
            assert (bool(terminated[index]), bool(truncated[index])) == (ended_now, cut_now), where
            assert infos["satisfied"][index] == info["satisfied"], where
            assert infos["active"][index] == info["active"], where
            if ended_now or cut_now:
                finished[index] += 1
                restart[index] = True
    vec.close()
    return coverage


def limits_of(telemetry: Telemetry, action: np.ndarray) -> dict[str, float]:
    """The limits by job id that an action array sets (clipped to the box)."""
    slots = len(action) // len(telemetry.workers)
    return {
        job.job_id: float(np.clip(action[job.worker * slots + job.slot], 0.0, 1.0))
        for job in telemetry.active_jobs
        if job.worker is not None and job.slot is not None
    }


def random_limits(index: int, telemetry: Telemetry, rng: np.random.Generator):
    """Limits anywhere, outside the box too (the clipping rule is part of the contract)."""
    slots = (len(telemetry.workers) * SLOTS[0],)
    return rng.uniform(-0.2, 1.2, slots).astype(np.float32), ()


SLOTS = [10]


def with_random_limits(scenario: Scenario) -> Decider:
    SLOTS[0] = scenario.slots_per_worker
    return random_limits


@pytest.mark.parametrize(
    "name",
    [
        "dqoes-varied-burst",  # inference, one worker
        "dqoes-cluster-40",  # inference, many workers
        "train-inference-mix",  # an inference training distribution
        "flowcon-10-random",  # training: jobs finish mid-interval
        "train-training-mix",  # a training distribution
        "docker-training-4-stock",  # stock threading: contention
    ],
)
def test_batched_equals_single_envs_step_by_step(name):
    scenario = load_scenario(name)
    coverage = conform(scenario, with_random_limits(scenario))
    assert coverage.resets >= 3  # every environment went on into a second episode
    if scenario.kind is JobKind.TRAINING:
        assert coverage.finished_mid_interval


def test_batched_equals_single_envs_when_arrivals_wait_for_a_slot():
    scenario = dataclasses.replace(load_scenario("flowcon-10-random"), slots_per_worker=3)
    coverage = conform(scenario, with_random_limits(scenario))
    assert coverage.waited


def test_batched_equals_single_envs_under_specon_migrations():
    """SpeCon decides from the batched environment's typed telemetry and migrates jobs."""
    scenario = load_scenario("specon-20")
    policies = [make_baseline("specon") for _ in range(3)]
    env = TrainingEnv(scenario=scenario)  # the layout only
    for policy in policies:
        policy.bind(scenario, env.backend.capabilities)

    def specon(index, telemetry, rng):
        policy = policies[index]
        decision = policy.act(telemetry)
        action = np.ones(env.action_space.shape, dtype=np.float32)
        for job in telemetry.active_jobs:
            limit = decision.limits.get(job.job_id, job.limit)
            action[env.layout.row(job.worker, job.slot)] = limit
        return action, decision.migrations

    coverage = conform(scenario, specon, episodes=1)
    assert coverage.migrations > 0


@pytest.mark.parametrize(
    ("name", "seeds"),
    [
        ("specon-20", (3, 13, 23, 33)),  # issue 44 item 8: one ulp of usage at steps 97, 113, 137
        ("flowcon-cluster-60-homogeneous", (0, 1, 2)),  # eight workers, contention
        ("docker-training-4-stock", (0, 5)),  # stock threading, one worker
        ("dqoes-cluster-40", (1, 2, 3)),  # inference, many workers
        ("train-training-mix", (4, 9)),
    ],
)
def test_the_batched_engine_is_bit_identical_to_single_replay_envs(name, seeds):
    """The single replay environment is the engine holding one episode: a batch of episodes
    gives each what it alone gives, bit for bit (the conformance tests above hold the engine to
    the reference within rounding). Random limits, so that some workers' jobs are throttled and
    others' not, to each episode's end."""
    scenario = load_scenario(name)
    env_id = ENV_IDS[scenario.kind]
    vec = gym.make_vec(
        env_id, num_envs=len(seeds), vectorization_mode="vector_entry_point", scenario=scenario
    )
    singles = [gym.make(env_id, scenario=scenario) for _ in seeds]
    observations, _ = vec.reset(seed=list(seeds))
    for index, (env, seed) in enumerate(zip(singles, seeds, strict=True)):
        np.testing.assert_array_equal(observations[index], env.reset(seed=seed)[0])
    rng = np.random.default_rng(0)
    running = set(range(len(seeds)))
    step = 0
    while running:
        step += 1
        actions = rng.uniform(0.0, 1.0, vec.action_space.shape).astype(np.float32)
        observations, rewards, *_ = vec.step(actions)
        for index in sorted(running):
            observation, reward, ended, cut, info = singles[index].step(actions[index])
            where = f"episode of seed {seeds[index]}, step {step}"
            np.testing.assert_array_equal(observations[index], observation, err_msg=where)
            assert rewards[index] == reward, where
            assert vec.unwrapped.telemetry(index) == info["telemetry"], where
            if ended or cut:
                running.discard(index)
    vec.close()


def _without_race(source: Path, folder: Path) -> Path:
    """The profile set in ``source`` copied to ``folder`` without its races: the reference is
    the deterministic physics (the race's single and batched draws are held equal in
    ``test_race.py``)."""
    shutil.copytree(source, folder)
    path = folder / "contention.json"
    if path.exists():
        data = json.loads(path.read_text())
        data.pop("races", None)
        path.write_text(json.dumps(data))
    return folder


#: The race-free copies of the sets :func:`conform` met, by set; "/" is their parent folder.
RACE_FREE: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def race_free_sets(tmp_path_factory) -> Iterator[dict[str, str]]:
    """Per profile set, a copy without its races, made when a test first needs it."""
    RACE_FREE.clear()
    RACE_FREE["/"] = str(tmp_path_factory.mktemp("race-free"))
    yield RACE_FREE
    RACE_FREE.clear()


def race_free(scenario: Scenario) -> Scenario:
    """``scenario`` on a copy of its profile set without races, if its set has one."""
    if not load_set_contention(scenario.profile_set).races:
        return scenario
    if scenario.profile_set not in RACE_FREE:
        folder = Path(RACE_FREE["/"]) / f"set-{len(RACE_FREE)}"
        RACE_FREE[scenario.profile_set] = str(
            _without_race(profile_set_directory(scenario.profile_set), folder)
        )
    return dataclasses.replace(scenario, profile_set=RACE_FREE[scenario.profile_set])


@pytest.fixture(scope="module")
def booting_profiles(tmp_path_factory) -> Path:
    """measured-stock (without its race) with CPU-consuming start-ups and per-workload
    exponents."""
    folder = _without_race(
        PROFILES_DIR / "measured-stock", tmp_path_factory.mktemp("profiles") / "booting"
    )
    for index, path in enumerate(sorted(folder.glob("*.json"))):
        if path.name in ("contention.json", "throttling.json"):
            continue
        data = json.loads(path.read_text())
        data["startup_s"] = 4.0
        data["startup_cpu_s"] = 3.0 + index % 2
        if index % 2:
            data["contention_exponent"] = 0.4 + 0.2 * index
        path.write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("name", ["docker-training-4-stock", "docker-inference-3-stock"])
def test_batched_equals_single_envs_with_cpu_start_ups(booting_profiles, name):
    scenario = dataclasses.replace(load_scenario(name), profile_set=str(booting_profiles))
    coverage = conform(scenario, with_random_limits(scenario))
    assert coverage.booted


# ---------------------------------------------------------------------------- Gymnasium


@pytest.mark.parametrize(
    ("env_id", "scenario"),
    [("dlsched/Inference-v0", "dqoes-cluster-40"), ("dlsched/Training-v0", "specon-20")],
)
def test_make_vec_returns_the_batched_env_with_the_single_envs_spaces(env_id, scenario):
    vec = gym.make_vec(env_id, num_envs=4, scenario=scenario)
    single = gym.make(env_id, scenario=scenario)
    assert isinstance(vec.unwrapped, SchedulingVectorEnv)
    assert vec.single_observation_space == single.observation_space
    assert vec.single_action_space == single.action_space
    assert vec.observation_space.shape == (4, *single.observation_space.shape)
    assert vec.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    gym_check_env(single.unwrapped)
    observations, _ = vec.reset(seed=3)
    assert vec.observation_space.contains(observations)
    observations, *_ = vec.step(vec.action_space.sample())
    assert vec.observation_space.contains(observations)


def test_reset_seeds_follow_gymnasium():
    vec = InferenceVectorEnv(num_envs=3, scenario="train-inference-mix")
    by_int, _ = vec.reset(seed=5)
    by_list, _ = vec.reset(seed=[5, 6, 7])
    np.testing.assert_array_equal(by_int, by_list)
    other, _ = vec.reset(seed=[5, 99, 7])
    np.testing.assert_array_equal(other[0], by_int[0])
    assert not np.array_equal(other[1], by_int[1])
    with pytest.raises(ArgumentError, match="2 seeds for 3 environments"):
        vec.reset(seed=[1, 2])


def test_same_step_autoreset_returns_the_last_observation_in_infos():
    scenario = load_scenario("docker-smoke-training")
    vec = TrainingVectorEnv(num_envs=2, scenario=scenario, autoreset_mode="SameStep")
    reference = TrainingEnv(scenario=scenario)
    vec.reset(seed=[1, 1])
    reference.reset(seed=1)
    action = np.full((2, vec.single_action_space.shape[0]), 0.5, np.float32)
    for _ in range(100):
        observations, _, terminated, truncated, infos = vec.step(action)
        last, _, single_end, single_cut, _ = reference.step(action[0])
        if terminated[0] or truncated[0]:
            assert (single_end, single_cut) == (bool(terminated[0]), bool(truncated[0]))
            np.testing.assert_array_equal(infos["final_obs"][0], last)
            assert infos["_final_obs"].tolist() == [True, True]
            first, _ = reference.reset()
            np.testing.assert_array_equal(observations[0], first)
            return
    pytest.fail("the episode never ended")


def test_pickled_batched_env_continues_identically():
    vec = InferenceVectorEnv(num_envs=2, scenario="dqoes-varied-burst")
    vec.reset(seed=0)
    action = np.full((2, vec.single_action_space.shape[0]), 0.3, np.float32)
    vec.step(action)
    copy = pickle.loads(pickle.dumps(vec))
    for _ in range(5):
        ours = vec.step(action)
        theirs = copy.step(action)
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_array_equal(ours[1], theirs[1])


def test_bad_actions_name_the_environment_and_the_slot():
    vec = InferenceVectorEnv(num_envs=3, scenario="dqoes-varied-burst")
    vec.reset(seed=0)
    slots = vec.single_action_space.shape[0]
    with pytest.raises(ActionError, match=r"shape \(3, 9\); expected .* \(3, 10\)"):
        vec.step(np.zeros((3, slots - 1)))
    action = np.full((3, slots), 0.5)
    action[2, 4] = np.nan
    with pytest.raises(ActionError, match=r"environment 2 .* slot 4: nan"):
        vec.step(action)


def test_what_the_batched_env_cannot_run_is_refused_with_the_fix():
    with pytest.raises(
        BackendError, match=r'docker.*one episode at a time.*vectorization_mode="sync"'
    ):
        InferenceVectorEnv(num_envs=2, backend="docker")
    with pytest.raises(ScenarioError, match=r"training jobs.*dlsched/Training-v0"):
        InferenceVectorEnv(num_envs=2, scenario="flowcon-10-random")


def test_a_reward_function_of_ones_own_runs_batched_as_on_single_envs():
    def usage(now: Telemetry, before: Telemetry) -> float:
        return sum(worker.cpu_usage for worker in now.workers) - before.time_s / 1000

    vec = InferenceVectorEnv(num_envs=2, scenario="dqoes-varied-burst", reward=usage)
    singles = [InferenceEnv(scenario="dqoes-varied-burst", reward=usage) for _ in range(2)]
    vec.reset(seed=4)
    for index, env in enumerate(singles):
        env.reset(seed=4 + index)
    action = np.full((2, vec.single_action_space.shape[0]), 0.2, np.float32)
    for _ in range(5):
        _, rewards, *_ = vec.step(action)
        assert rewards.tolist() == [env.step(action[0])[1] for env in singles]


def test_infos_carry_typed_telemetry_on_request():
    vec = InferenceVectorEnv(num_envs=2, scenario="dqoes-varied-burst", telemetry=True)
    _, infos = vec.reset(seed=0)
    assert isinstance(infos["telemetry"][1], Telemetry)
    assert infos["telemetry"][1] == vec.telemetry(1)
