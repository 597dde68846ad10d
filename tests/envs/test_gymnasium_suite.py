"""Gymnasium's own environment tests (its ``tests/envs/test_envs.py``), run on both ids.

Gymnasium holds every environment it ships to these: the checker with its render checks, two
environments seeded alike stepping through the same rollout, a pickled environment continuing
as the original, and every declared render mode rendering. The checker with render checks is in
``test_rendering.py``; the rest follows here, in Gymnasium's form (``data_equivalence`` on every
value the environments return, the action space seeded for the rollout).
"""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.rendering import FRAME_SHAPE

#: A small scenario of each id (the same as ``test_rendering.py``'s).
SCENARIOS = {
    "dlsched/Inference-v0": "dqoes-resnet50-burst-target20",
    "dlsched/Training-v0": "flowcon-10-random",
}
SEED = 0
ROLLOUT_STEPS = 20
#: The render modes tested below; a mode declared but missing here fails the last test.
TESTED_MODES = ("human", "ansi", "rgb_array")


def _make(env_id: str, **kwargs: Any) -> gym.Env[np.ndarray, np.ndarray]:
    return gym.make(env_id, scenario=SCENARIOS[env_id], disable_env_checker=True, **kwargs)


def _same_step(first: tuple[Any, ...], second: tuple[Any, ...], what: str, step: int) -> None:
    names = ("observation", "reward", "terminated", "truncated", "info")
    for name, a, b in zip(names, first, second, strict=True):
        assert data_equivalence(a, b), f"{what}: {name} differs at step {step}"


@pytest.mark.parametrize("env_id", sorted(SCENARIOS))
def test_env_determinism_rollout(env_id: str) -> None:
    """Two environments reset with one seed and fed one action sequence stay identical."""
    env_1, env_2 = _make(env_id), _make(env_id)
    env_1.action_space.seed(SEED)
    observation_1, info_1 = env_1.reset(seed=SEED)
    observation_2, info_2 = env_2.reset(seed=SEED)
    assert data_equivalence(observation_1, observation_2)
    assert data_equivalence(info_1, info_2)
    assert env_1.unwrapped.np_random.bit_generator.state == (
        env_2.unwrapped.np_random.bit_generator.state
    )
    for step in range(ROLLOUT_STEPS):
        action = env_1.action_space.sample()
        first, second = env_1.step(action), env_2.step(action)
        _same_step(first, second, "rollout", step)
        if first[2] or first[3]:
            break
    env_1.close()
    env_2.close()


@pytest.mark.parametrize("env_id", sorted(SCENARIOS))
def test_pickle_env(env_id: str) -> None:
    """A pickled environment (wrappers included) resets and steps as the original."""
    env = _make(env_id)
    clone = pickle.loads(pickle.dumps(env))
    reset_env, reset_clone = env.reset(seed=SEED), clone.reset(seed=SEED)
    assert data_equivalence(reset_env, reset_clone)
    env.action_space.seed(SEED)
    for step in range(ROLLOUT_STEPS // 2):
        action = env.action_space.sample()
        _same_step(env.step(action), clone.step(action), "pickled", step)
    env.close()
    clone.close()


@pytest.mark.parametrize("env_id", sorted(SCENARIOS))
@pytest.mark.parametrize("render_mode", TESTED_MODES)
def test_render_modes(env_id: str, render_mode: str) -> None:
    """Every declared mode renders after reset and after a step, in the mode's type."""
    env = _make(env_id, render_mode=render_mode)
    assert render_mode in env.metadata["render_modes"]
    env.reset(seed=SEED)
    frames = [env.render()]
    env.step(env.action_space.sample())
    frames.append(env.render())
    env.close()
    for frame in frames:
        if render_mode == "human":  # printed, as test_rendering checks
            assert frame is None
        elif render_mode == "ansi":
            assert isinstance(frame, str) and frame.strip()
        else:
            assert isinstance(frame, np.ndarray)
            assert frame.shape == (*FRAME_SHAPE, 3) and frame.dtype == np.uint8


@pytest.mark.parametrize("env_id", sorted(SCENARIOS))
def test_every_declared_mode_is_tested(env_id: str) -> None:
    assert set(_make(env_id).metadata["render_modes"]) == set(TESTED_MODES)
