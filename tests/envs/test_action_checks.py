"""Actions and decisions through the environment: NaN and a wrong shape refused with their
values, limits clipped to one and raised to the floor, decisions naming unknown jobs, negative
or NaN limits, or a worker out of range refused."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.decision import Decision, Migration
from dlsched.envs.errors import ActionError


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
