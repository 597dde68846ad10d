"""A feature added to the observation after a model was trained changes nothing it does: the
shipped models read their features by name, and act the same whatever a later one holds."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.envs.observation import FEATURES
from dlsched.policies.learned import LearnedPolicy
from dlsched.runs import resolve_policy


@pytest.mark.parametrize("name", ["ppo-inference", "ppo-training"])
def test_a_shipped_model_ignores_the_throttle_ratio(name: str) -> None:
    policy = resolve_policy(f"pretrained:{name}")
    assert isinstance(policy, LearnedPolicy)
    assert "throttle_ratio" not in policy.card.features
    rng = np.random.default_rng(0)
    rows, features = policy.layout.shape
    assert features == len(FEATURES)  # it is given every feature, and picks its own
    observation = rng.random((rows, features), dtype=np.float32)
    observation[:, FEATURES.index("active")] = 1.0
    column = FEATURES.index("throttle_ratio")
    observation[:, column] = 0.0
    unthrottled, _ = policy.predict(observation, deterministic=True)
    observation[:, column] = rng.random(rows, dtype=np.float32)
    policy.reset()  # a model that stacks frames reads the call before as the step before
    throttled, _ = policy.predict(observation, deterministic=True)
    assert np.array_equal(unthrottled, throttled)
