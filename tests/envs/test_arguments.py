"""``gym.make`` and ``reset`` given bad arguments: each is refused with one message naming the
argument, what was expected and, for a misspelling, the name meant; the environment stays usable.
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest
from repo_paths import SCENARIO_BIG

import dlsched.envs  # registers the environments
from dlsched.envs.errors import (
    ArgumentError,
    DlschedError,
    ResetNeededError,
    ScenarioError,
    UnexpectedArgumentError,
    UnknownNameError,
)
from dlsched.envs.scenarios import JobKind, WorkerSpec, load_scenario


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"interval_s": "10"}, "interval_s='10' (str): expected a number of seconds > 0"),
        ({"backend_options": {"bogus": 1}}, "the replay backend takes no option 'bogus'"),
        ({"scenario": 123}, "scenario=123 (int): expected a shipped scenario's name"),
        ({"scenaro": "dqoes-varied-burst"}, "'scenaro' (did you mean 'scenario'?)"),
        ({"limit_floor": 0}, "limit_floor=0 (int): expected a fraction of a worker in (0, 1]"),
        ({"reward": 5}, "reward=5 (int): expected a reward name or a function"),
        ({"placer": "spread"}, "placer='spread' (str): expected a dlsched.envs.Placer"),
        ({"backend_options": {"loss_noise_cv": "x"}}, "loss_noise_cv='x' (str) for the replay"),
        (
            {"backend": "docker", "backend_options": {"workload_threadin": "stock"}},
            "did you mean 'workload_threading'?",
        ),
    ],
)
def test_gym_make_refuses_bad_keyword_arguments(arguments, named):
    with pytest.raises(ArgumentError) as caught:
        gym.make("dlsched/Inference-v0", **arguments)
    assert named in str(caught.value)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kwargs: gym.make("dlsched/Inference-v0", **kwargs),
        lambda **kwargs: gym.make("dlsched/Training-v0", **kwargs),
        lambda **kwargs: gym.make_vec(
            "dlsched/Inference-v0", 2, vectorization_mode="vector_entry_point", **kwargs
        ),
        lambda **kwargs: gym.make_vec(
            "dlsched/Training-v0", 2, vectorization_mode="sync", **kwargs
        ),
    ],
    ids=["single", "single-training", "vector", "sync-vector"],
)
def test_an_unknown_keyword_is_a_type_error_worded_as_python_words_it(make):
    # TorchRL's GymEnv passes frameskip, and drops it on a TypeError that says this
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'frameskip'") as caught:
        make(frameskip=1)
    assert isinstance(caught.value, UnexpectedArgumentError)
    assert isinstance(caught.value, ArgumentError) and isinstance(caught.value, DlschedError)
    assert "its keyword arguments are scenario, backend, reward" in str(caught.value)


def test_gym_make_names_an_unknown_backend():
    with pytest.raises(UnknownNameError, match="Did you mean 'replay'"):
        gym.make("dlsched/Inference-v0", backend="replya")


def test_an_interval_override_is_held_to_the_step_limit():
    with pytest.raises(dlsched.envs.ScenarioError, match="MAX_STEPS"):
        gym.make("dlsched/Inference-v0", interval_s=1e-9)


def test_a_refused_seed_leaves_the_environment_usable():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
    with pytest.raises(ArgumentError, match=r"seed=-1 \(int\): expected None or a whole number"):
        env.reset(seed=-1)
    observation, _ = env.reset(seed=np.int64(0))  # a numpy seed is a seed too
    env.step(env.action_space.sample())  # Gymnasium's passive checker failed here
    assert observation.shape == env.observation_space.shape
    with pytest.raises(ArgumentError, match=r"seed=1\.5 \(float\)"):
        env.reset(seed=1.5)


def test_a_scenario_may_be_given_as_a_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(SCENARIO_BIG.read_text())
    env = gym.make("dlsched/Inference-v0", scenario=path)
    assert env.unwrapped.scenario.name == "big"


@pytest.mark.parametrize("num_envs", [10**8, 2**63])
def test_a_batched_environment_beyond_the_slot_limit_is_refused_before_it_allocates(num_envs):
    # once: numpy's MemoryError for a (10**8, 160) observation array
    with pytest.raises(ArgumentError) as caught:
        gym.make_vec("dlsched/Inference-v0", num_envs, vectorization_mode="vector_entry_point")
    message = str(caught.value)
    assert f"num_envs={num_envs:,} episodes x 10 slots" in message
    assert "MAX_BATCH_SLOTS" in message and "DLSCHED_MAX_BATCH_SLOTS=N" in message


def _burst(**change):
    """``dqoes-resnet50-burst-target20`` as a Scenario object, with fields replaced."""
    return dataclasses.replace(load_scenario("dqoes-resnet50-burst-target20"), **change)


def _first_group(**change):
    scenario = _burst()
    return _burst(groups=(dataclasses.replace(scenario.groups[0], **change),))


@pytest.mark.parametrize(
    ("scenario", "named"),
    [  # each once ran an endless episode, ran, or failed deep inside (issue 44, item 3)
        (_burst(interval_s=math.nan), "interval_s = nan: expected a finite number of seconds > 0"),
        (_burst(interval_s=0), "interval_s = 0: expected a number of seconds > 0"),
        (_burst(interval_s=-5), "interval_s = -5: expected a number of seconds > 0"),
        (_burst(workers=(WorkerSpec(cores=-2.0),)), "workers.cores = -2: expected a number of"),
        (_burst(workers=(WorkerSpec(cores=math.nan),)), "workers.cores = nan: expected a finite"),
        (_burst(groups=()), "jobs = []: expected a non-empty list of job groups"),
        (_burst(migration_cost_s=math.nan), "migration_cost_s = nan: expected a finite number"),
        (_burst(slots_per_worker=-1), "slots_per_worker = -1: expected a whole number >= 1"),
        (_burst(kind=5), "kind = 5: expected one of training, inference"),
        (_burst(workers=None), "workers = None: expected a mapping {count: N, cores: C}"),
        (_first_group(count="3"), "jobs[0].count = '3': expected a whole number >= 1"),
        (_first_group(targets_s=()), "jobs[0].targets_s is missing; expected latency targets"),
        (_first_group(iterations=300), "jobs[0].iterations: only for training scenarios"),
        (_first_group(worker=1), "jobs[0].worker = 1: expected a worker index from 0 to 0"),
    ],
)
def test_a_scenario_object_is_held_to_the_rules_of_a_scenario_file(scenario, named):
    with pytest.raises(ScenarioError) as caught:
        gym.make("dlsched/Inference-v0", scenario=scenario)
    message = str(caught.value)
    assert message.startswith("invalid scenario 'dqoes-resnet50-burst-target20' (a Scenario object")
    assert named in message, message


def test_a_scenario_object_runs_as_its_file_gives_it():
    """Values of the right meaning in another type (a kind by its name, numpy numbers, lists)
    are taken as a file would give them: what runs is of the dataclasses' own types."""
    scenario = _burst(kind="inference", interval_s=np.float64(5.0), slots_per_worker=np.int64(10))
    env = gym.make("dlsched/Inference-v0", scenario=scenario)
    checked = env.unwrapped.scenario
    assert checked == scenario and checked.kind is JobKind.INFERENCE
    assert type(checked.interval_s) is float and type(checked.slots_per_worker) is int


@pytest.mark.parametrize("kind", ["dlsched/Inference-v0", "dlsched/Training-v0"])
def test_a_step_before_reset_says_the_environment_was_not_reset(kind):
    env = gym.make(kind).unwrapped  # without Gymnasium's OrderEnforcing, which says it first
    with pytest.raises(ResetNeededError) as caught:
        env.step(env.action_space.sample())
    assert isinstance(caught.value, gym.error.ResetNeeded)  # what Gymnasium's callers catch
    message = str(caught.value)
    assert "not reset" in message and "call reset() before step()" in message
    with pytest.raises(ResetNeededError, match=r"call reset\(\) before reading telemetry"):
        _ = env.telemetry
    vector = gym.make_vec(kind, num_envs=2, vectorization_mode="vector_entry_point").unwrapped
    with pytest.raises(ResetNeededError, match=r"not reset.*call reset\(\) before step\(\)"):
        vector.step(vector.action_space.sample())
