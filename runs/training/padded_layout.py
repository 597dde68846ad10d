"""An environment of one layout seen as one of a larger layout, so that environments of several
layouts train one model side by side.

SB3 keeps a rollout of observations of one shape. Training on scenarios of several layouts
(workers x slots per worker) therefore pads each environment's observation to the layout that
encloses them all (:func:`~dlsched.envs.observation.enclosing_layout`): its own rows go where
its workers' slots are in the larger layout, and every other row is absent, NaN throughout. The
slot network leaves absent rows out of its pooling and its action distribution
(:mod:`dlsched.policies.slot_network`), the normaliser out of its statistics
(:mod:`dlsched.policies.normalization`), and the actions of absent slots are dropped here before
they reach the environment.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from dlsched.envs.observation import ObservationLayout


class PaddedLayout(gym.Wrapper[np.ndarray, np.ndarray, np.ndarray, np.ndarray]):
    """``env``, of observations of ``layout``, acting and observed in ``enclosing``.

    Its observation space keeps the environment's bounds although absent rows are NaN: the
    space tells SB3 the shape the rollout stores, and no check of dlsched's or SB3's reads
    the bounds of a training environment's observations.

    Args:
        env: a dlsched environment (or a wrapper of one), its actions one per slot.
        layout: its observation layout.
        enclosing: the layout it is padded to; it holds ``layout``.
    """

    def __init__(
        self,
        env: gym.Env[np.ndarray, np.ndarray],
        layout: ObservationLayout,
        enclosing: ObservationLayout,
    ) -> None:
        super().__init__(env)
        #: the rows of the padded observation that hold the environment's, in its order
        self.rows = layout.rows_within(enclosing)
        self.shape = enclosing.shape
        observations, actions = env.observation_space, env.action_space
        assert isinstance(observations, gym.spaces.Box) and isinstance(actions, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(
            float(observations.low.min()), float(observations.high.max()), self.shape, np.float32
        )
        self.action_space = gym.spaces.Box(
            float(actions.low.min()), float(actions.high.max()), (self.shape[0],), np.float32
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        return self._padded(observation), info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(
            np.asarray(action)[self.rows]
        )
        return self._padded(observation), float(reward), terminated, truncated, info

    def _padded(self, observation: np.ndarray) -> np.ndarray:
        padded = np.full(self.shape, np.nan, dtype=np.float32)
        padded[self.rows] = observation
        return padded
