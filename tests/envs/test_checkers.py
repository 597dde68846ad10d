"""Gymnasium's and SB3's environment checkers on scenarios of both kinds, one worker and many."""

from __future__ import annotations

import gymnasium as gym
import pytest
from episode_runs import CHECKED
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import dlsched.envs  # noqa: F401  (registers the ids)


@pytest.mark.parametrize(("env_id", "scenario"), CHECKED)
def test_gymnasium_check_env(env_id, scenario):
    env = gym.make(env_id, scenario=scenario)
    gym_check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize(("env_id", "scenario"), CHECKED)
def test_sb3_check_env(env_id, scenario):
    sb3_check_env(gym.make(env_id, scenario=scenario).unwrapped, warn=True)
