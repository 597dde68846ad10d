"""SB3's view of the batched environment: a thin ``VecEnv`` adapter.

Stable-Baselines3 steps a :class:`~stable_baselines3.common.vec_env.VecEnv`, not a Gymnasium
vector environment. :class:`BatchedVecEnv` gives it
:class:`~dlsched.envs.scheduling_vector_env.SchedulingVectorEnv` (``SAME_STEP`` autoreset,
which is SB3's convention) with what the single-environment path adds around each environment
(:func:`dlsched.runs.training.environments.make_training_env`): the agent's actions in
``[-1, 1]`` turned into limits by the same :class:`~dlsched.policies.agent_actions.ActionMapping`,
``terminal_observation`` and ``TimeLimit.truncated`` in the infos, and (through
``VecMonitor``, applied by the caller) the episode returns and lengths of ``Monitor``.

Several scenarios train side by side too, each on a batched environment of its own holding its
share of the SB3 environments (the first ones for the first scenario, and so on). Where their
layouts (workers x slots per worker) differ, every observation is padded to the layout enclosing
them all, as :class:`~dlsched.runs.training.padded_layout.PaddedLayout` pads a single
environment's: its own rows where its workers' slots are, the rest absent (NaN), and the actions
of absent slots never reach it. Unlike the single environments' ``ScenarioMix``, which draws a
scenario per episode, each scenario keeps its share of the environments for the whole training.

Seeding follows ``DummyVecEnv``: ``seed(s)`` then ``reset()`` starts environment ``i`` from
``s + i``, so the same training seed gives the same episodes on both paths (for one scenario).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

from dlsched.envs.errors import ActionError, require_reset
from dlsched.envs.observation import enclosing_layout
from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv
from dlsched.policies.agent_actions import AGENT_HIGH, AGENT_LOW, ActionMapping


@dataclass(frozen=True)
class _Part:
    """One batched environment among the SB3 environments.

    Attributes:
        env: the batched environment.
        envs: the SB3 environment indices its episodes are.
        rows: the rows of the (padded) observation that hold its own, in its order.
        padded: whether its layout is smaller than the observation's.
    """

    env: SchedulingVectorEnv
    envs: slice
    rows: np.ndarray
    padded: bool


class BatchedVecEnv(VecEnv):
    """The episodes of ``envs`` as SB3 environments acting in ``[-1, 1]``, observed in the layout
    enclosing theirs.

    Args:
        envs: the batched environments, one per scenario, each made with
            ``autoreset_mode="SameStep"``; their episodes are the SB3 environments, in order.
        actions: how the agent's actions become limits.

    Raises:
        ValueError: no environment, or one that resets on the next step (SB3 needs the
            same-step convention).
    """

    def __init__(self, envs: Sequence[SchedulingVectorEnv], actions: ActionMapping) -> None:
        if not envs:
            raise ValueError("BatchedVecEnv needs at least one batched environment")
        for env in envs:
            if env.metadata["autoreset_mode"] is not AutoresetMode.SAME_STEP:
                raise ValueError(
                    f"BatchedVecEnv needs autoreset_mode=SameStep, got "
                    f"{env.metadata['autoreset_mode']}; make the environment with "
                    'autoreset_mode="SameStep"'
                )
        self.layout = enclosing_layout([env.layout for env in envs])
        self.parts: list[_Part] = []
        start = 0
        for env in envs:
            self.parts.append(
                _Part(
                    env,
                    slice(start, start + env.num_envs),
                    env.layout.rows_within(self.layout),
                    env.layout != self.layout,
                )
            )
            start += env.num_envs
        self.mapping = actions
        single = envs[0].single_observation_space
        assert isinstance(single, gym.spaces.Box)
        observation_space = gym.spaces.Box(
            float(single.low.min()), float(single.high.max()), self.layout.shape, np.float32
        )
        action_space = gym.spaces.Box(AGENT_LOW, AGENT_HIGH, (self.layout.shape[0],), np.float32)
        super().__init__(start, observation_space, action_space)
        #: each part's last observation, unpadded (the actions' mapping reads it)
        self._observations: list[np.ndarray] | None = None
        self._actions: np.ndarray | None = None

    @property
    def raw_observations(self) -> list[np.ndarray]:
        """Each batched environment's newest observation, in its own layout (unpadded), as its
        actions' mapping reads it.

        Raises:
            ResetNeededError: before the first reset.
        """
        return require_reset(self._observations, "reading observations", "a BatchedVecEnv")

    def reset(self) -> np.ndarray:
        self._observations = []
        self.reset_infos = []
        for part in self.parts:
            seeds = self._seeds[part.envs]
            observations, infos = part.env.reset(
                seed=seeds if any(seed is not None for seed in seeds) else None
            )
            self._observations.append(observations)
            self.reset_infos += _split(infos, part.env.num_envs)
        self._reset_seeds()
        self._reset_options()
        return self._padded(self._observations)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        observed_before = require_reset(self._observations, "step_wait()", "a BatchedVecEnv")
        if self._actions is None:
            raise ActionError(
                "step_wait() without actions to step; call step_async(actions) before step_wait()"
            )
        observations, rewards, dones, per_env = [], [], [], []
        for part, before in zip(self.parts, observed_before, strict=True):
            actions = self._actions[part.envs][:, part.rows]
            limits = self.mapping.to_limits(actions, before, part.env.layout)
            observed, reward, terminated, truncated, infos = part.env.step(limits)
            done = terminated | truncated
            part_infos = _split(infos, part.env.num_envs)
            for index in np.flatnonzero(done).tolist():
                # SB3's info of a last step is that step's, not the next episode's first.
                part_infos[index] = _split_one(infos["final_info"][index])
                part_infos[index]["terminal_observation"] = self._padded_one(
                    part, infos["final_obs"][index]
                )
                part_infos[index]["TimeLimit.truncated"] = bool(
                    truncated[index] and not terminated[index]
                )
            observations.append(observed)
            rewards.append(reward)
            dones.append(done)
            per_env += part_infos
        self._observations = observations
        return (
            self._padded(observations),
            np.concatenate(rewards).astype(np.float32),
            np.concatenate(dones),
            per_env,
        )

    def _padded(self, observations: Sequence[np.ndarray]) -> np.ndarray:
        """The parts' observations as one array of the enclosing layout, absent rows NaN."""
        if len(self.parts) == 1 and not self.parts[0].padded:
            return observations[0]
        padded = np.full((self.num_envs, *self.layout.shape), np.nan, dtype=np.float32)
        for part, observed in zip(self.parts, observations, strict=True):
            padded[part.envs, part.rows] = observed
        return padded

    def _padded_one(self, part: _Part, observation: np.ndarray) -> np.ndarray:
        """One episode's observation of ``part`` in the enclosing layout."""
        if not part.padded:
            return observation
        padded = np.full(self.layout.shape, np.nan, dtype=np.float32)
        padded[part.rows] = observation
        return padded

    def close(self) -> None:
        for part in self.parts:
            part.env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of the batched environment of each environment index."""
        return [getattr(self._part_of(index).env, attr_name) for index in self._indices(indices)]

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

    def _part_of(self, index: int) -> _Part:
        """The part whose episodes include SB3 environment ``index``."""
        for part in self.parts:
            if part.envs.start <= index < part.envs.stop:
                return part
        raise IndexError(f"environment index {index} not in 0..{self.num_envs - 1}")

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
