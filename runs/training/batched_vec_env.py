"""SB3's view of the batched environment: a thin ``VecEnv`` adapter.

Stable-Baselines3 steps a :class:`~stable_baselines3.common.vec_env.VecEnv`, not a Gymnasium
vector environment. :class:`BatchedVecEnv` gives it
:class:`~dlsched.envs.scheduling_vector_env.SchedulingVectorEnv` (``SAME_STEP`` autoreset,
which is SB3's convention) with what the single-environment path adds around each environment
(:func:`dlsched.runs.training.environments.make_training_env`): the agent's actions in
``[-1, 1]`` turned into limits by the same :class:`~dlsched.policies.agent_actions.ActionMapping`,
``terminal_observation`` and ``TimeLimit.truncated`` in the infos, and (through
``VecMonitor``, applied by the caller) the episode returns and lengths of ``Monitor``.

Seeding follows ``DummyVecEnv``: ``seed(s)`` then ``reset()`` starts environment ``i`` from
``s + i``, so the same training seed gives the same episodes on both paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv
from dlsched.policies.agent_actions import AGENT_HIGH, AGENT_LOW, ActionMapping


class BatchedVecEnv(VecEnv):
    """``env``'s episodes as SB3 environments acting in ``[-1, 1]``.

    Args:
        env: the batched environment; made with ``autoreset_mode="SameStep"``.
        actions: how the agent's actions become limits.

    Raises:
        ValueError: ``env`` resets on the next step (SB3 needs the same-step convention).
    """

    def __init__(self, env: SchedulingVectorEnv, actions: ActionMapping) -> None:
        if env.metadata["autoreset_mode"] is not AutoresetMode.SAME_STEP:
            raise ValueError(
                f"BatchedVecEnv needs autoreset_mode=SameStep, got "
                f"{env.metadata['autoreset_mode']}; make the environment with "
                'autoreset_mode="SameStep"'
            )
        self.env = env
        self.mapping = actions
        slots = env.single_action_space.shape
        action_space = gym.spaces.Box(AGENT_LOW, AGENT_HIGH, slots, dtype=np.float32)
        super().__init__(env.num_envs, env.single_observation_space, action_space)
        self._observations: np.ndarray | None = None
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        seeds = self._seeds if any(seed is not None for seed in self._seeds) else None
        observations, infos = self.env.reset(seed=seeds)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = _split(infos, self.num_envs)
        self._observations = observations
        return observations

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        if self._observations is None or self._actions is None:
            raise gym.error.ResetNeeded("call reset() and step_async() before step_wait()")
        limits = self.mapping.to_limits(self._actions, self._observations, self.env.layout)
        observations, rewards, terminated, truncated, infos = self.env.step(limits)
        dones = terminated | truncated
        per_env = _split(infos, self.num_envs)
        for index in np.flatnonzero(dones).tolist():
            # SB3's info of a last step is that step's, not the next episode's first.
            per_env[index] = _split_one(infos["final_info"][index])
            per_env[index]["terminal_observation"] = infos["final_obs"][index]
            per_env[index]["TimeLimit.truncated"] = bool(truncated[index] and not terminated[index])
        self._observations = observations
        return observations, rewards.astype(np.float32), dones, per_env

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of the batched environment, once per environment index."""
        return [getattr(self.env, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(
            f"cannot set {attr_name!r} per environment: the environments share one batched "
            "environment"
        )

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **kwargs: Any
    ) -> list[Any]:
        raise AttributeError(
            f"cannot call {method_name!r} per environment: the environments share one batched "
            "environment"
        )

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        return [False] * len(self._indices(indices))

    def _indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return list(indices)


def _split(infos: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Gymnasium's vector infos (arrays with ``_key`` masks) as SB3's list of dicts."""
    per_env: list[dict[str, Any]] = [{} for _ in range(count)]
    for key, values in infos.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        present = infos.get(f"_{key}")
        items = _python_values(values)
        for index in range(count) if present is None else np.flatnonzero(present).tolist():
            per_env[index][key] = items[index]
    return per_env


def _python_values(values: Any) -> list[Any]:
    """One value per environment, numpy scalars as Python numbers (``item()``).

    A numeric vector becomes Python numbers in one ``tolist()`` call: converting each value
    apart cost more than the rest of the split, every step.
    """
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype != object:
        return values.tolist()
    return [_python(value) for value in values]


def _split_one(info: dict[str, Any]) -> dict[str, Any]:
    return {key: _python(value) for key, value in info.items()}


def _python(value: Any) -> Any:
    """A numpy scalar as a Python number; anything else as it is."""
    return value.item() if isinstance(value, np.generic) else value
