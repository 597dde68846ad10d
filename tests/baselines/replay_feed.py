"""The replay environment the baselines' tests run a policy on."""

from __future__ import annotations

import gymnasium as gym

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched.baselines.base import Baseline
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.policies import TelemetryFeed


def replay_feed(policy: Baseline, scenario: Scenario) -> TelemetryFeed:
    """A replay environment of ``scenario`` whose every step ``policy`` decides, through the
    :class:`~dlsched.policies.TelemetryFeed` any evaluation takes."""
    env_id = "dlsched/Training-v0" if scenario.kind is JobKind.TRAINING else "dlsched/Inference-v0"
    return TelemetryFeed(gym.make(env_id, scenario=scenario, backend="replay"), policy)
