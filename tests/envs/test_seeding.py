"""Seeding: one seed, one episode (observations, rewards and infos alike); another seed, another."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from episode_runs import CHECKED, run_episode

import dlsched.envs  # noqa: F401  (registers the ids)


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
