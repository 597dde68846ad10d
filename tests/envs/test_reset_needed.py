"""A call before the first reset raises one error, wherever it is made.

Gymnasium's callers catch ``gym.error.ResetNeeded``; every part of dlsched that holds an episode
(the environments, their loop, a policy feed, a controlled episode) raises
:class:`~dlsched.envs.errors.ResetNeededError`, which is one, with the same words: what was
called, on what, and that ``reset()`` comes first.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest

from dlsched.baselines.registry import make
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.errors import ResetNeededError
from dlsched.envs.inference_env import InferenceEnv, InferenceVectorEnv
from dlsched.envs.loop import SchedulingLoop
from dlsched.envs.replay.backend import ReplayBackend
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.policies.feed import BatchedModelFeed

SCENARIO = "dqoes-varied-burst"


def _single_step() -> None:
    env = InferenceEnv(scenario=SCENARIO)
    env.step(np.full(env.action_space.shape, 0.5, np.float32))


def _single_telemetry() -> None:
    _ = InferenceEnv(scenario=SCENARIO).telemetry


def _vector_telemetry() -> None:
    InferenceVectorEnv(num_envs=2, scenario=SCENARIO).telemetry(0)


def _loop_telemetry() -> None:
    scenario = load_scenario(SCENARIO)
    SchedulingLoop(ReplayBackend().episode_batch(scenario, 1)).telemetry(0)


def _feed_step() -> None:
    env = InferenceVectorEnv(num_envs=1, scenario=SCENARIO)
    BatchedModelFeed(env, make("default")).step(np.ones(1, dtype=bool))


def _controlled_advance() -> None:
    ControlledEpisode(ReplayBackend(), load_scenario(SCENARIO)).advance(1.0)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (_single_step, "step() on an environment"),
        (_single_telemetry, "reading telemetry on an environment"),
        (_vector_telemetry, "reading telemetry on a batched environment"),
        (_loop_telemetry, "reading telemetry on an environment loop"),
        (_feed_step, "step() on a policy feed"),
        (_controlled_advance, "advance() on a controlled episode"),
    ],
    ids=["env step", "env telemetry", "vector telemetry", "loop", "feed", "controlled episode"],
)
def test_a_call_before_reset_raises_gymnasiums_reset_needed(
    call: Callable[[], None], words: str
) -> None:
    with pytest.raises(ResetNeededError) as raised:
        call()
    assert isinstance(raised.value, gym.error.ResetNeeded)
    message = str(raised.value)
    assert message.startswith(words), message
    assert "that was not reset: it has no episode yet; call reset() before" in message
