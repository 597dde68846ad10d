"""A pickled environment, mid-episode, continues as the original does."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from episode_runs import ENV_IDS

import dlsched.envs  # noqa: F401  (registers the ids)


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
