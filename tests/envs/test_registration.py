"""The environments' ids: registered with Gymnasium, and a scenario of the other kind refused
with the id that takes it."""

from __future__ import annotations

import gymnasium as gym
import pytest
from episode_runs import ENV_IDS

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.errors import ScenarioError


def test_every_id_is_registered():
    for env_id in ENV_IDS:
        assert env_id in gym.registry


def test_scenario_of_the_wrong_kind_names_the_right_environment():
    with pytest.raises(ScenarioError, match="make dlsched/Training-v0 with it instead"):
        gym.make("dlsched/Inference-v0", scenario="flowcon-poc-3")
