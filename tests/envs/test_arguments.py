"""``gym.make`` and ``reset`` given bad arguments: each is refused with one message naming the
argument, what was expected and, for a misspelling, the name meant; the environment stays usable.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from repo_paths import SCENARIO_BIG

import dlsched.envs  # registers the environments
from dlsched.envs.errors import ArgumentError, ResetNeededError, UnknownNameError


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
