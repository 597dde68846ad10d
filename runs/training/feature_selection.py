"""The columns of the observation an agent reads.

The environments observe every feature of :data:`~dlsched.envs.observation.FEATURES`; an agent
reads the ones its configuration names (:attr:`~dlsched.runs.training.config.TrainingConfig.
features`), in that order, and its model card records them, so that
:class:`~dlsched.policies.learned.LearnedPolicy` picks the same columns when it acts.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from dlsched.envs.observation import FEATURES
from dlsched.policies.learned import feature_columns


class SelectFeatures(VecEnvWrapper):
    """``venv``'s observations ``(..., features)`` reduced to the columns of ``read``.

    Args:
        venv: environments observing :data:`~dlsched.envs.observation.FEATURES` in their last
            axis (a per-slot agent's views too).
        read: the features the agent reads, in its order.
    """

    def __init__(self, venv: VecEnv, read: Sequence[str]) -> None:
        columns = feature_columns(FEATURES, read)
        self.columns = np.arange(len(FEATURES)) if columns is None else columns
        space = venv.observation_space
        assert isinstance(space, gym.spaces.Box) and space.shape is not None
        shape = (*space.shape[:-1], len(self.columns))
        selected = gym.spaces.Box(
            float(space.low.min()), float(space.high.max()), shape, np.float32
        )
        super().__init__(venv, observation_space=selected)

    def reset(self) -> VecEnvObs:
        return self._select(self.venv.reset())

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            if "terminal_observation" in info:
                info["terminal_observation"] = self._select(info["terminal_observation"])
        return self._select(observations), rewards, dones, infos

    def _select(self, observations: VecEnvObs) -> np.ndarray:
        return np.asarray(observations)[..., self.columns]
