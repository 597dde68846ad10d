"""How a learned agent's actions, one number in ``[-1, 1]`` per slot, become CPU limits.

SB3's continuous-action agents act in ``[-1, 1]`` (SAC and TD3 squash to it, PPO and A2C are
initialised around 0 with unit noise). Three mappings onto the environment's limits in ``[0, 1]``:

- ``absolute``: ``a`` maps linearly onto the limit range, ``-1`` to the lowest limit and ``1``
  to no cap; an untrained agent (``a`` near 0) gives every job half a worker.
- ``relative``: ``a`` scales the limit in force (the observation's ``limit`` column) by
  ``max_step ** a``, so 0 keeps it, 1 multiplies it by ``max_step`` and -1 divides it. This is
  the form of the papers' feedback controllers (DQoES, journal Section IV, Alg. 1, moves limits
  by steps from where they are): a batch latency reflects the limits over the whole batch, which
  spans several intervals, and small relative moves let the measurements catch up. Exploration
  noise is then a relative change, the same for a job that needs a tenth of a core as for one
  that needs four.
- ``usage``: as ``relative``, but from the CPU the job used over the last interval (the
  ``cpu_usage`` column) instead of its limit. Jobs start uncapped, so ``relative`` begins from
  no cap at all, while ``usage`` begins from the share the job actually gets: an untrained
  agent caps every job at what it uses, which is Docker's default sharing without overcommit,
  and every move is relative to the CPU the latency was measured under.

:class:`AgentActions` applies the mapping in the training environments, and
:class:`~dlsched.policies.learned.LearnedPolicy` applies the same one when it acts, from the
:class:`ActionMapping` saved in the model card.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import gymnasium as gym
import numpy as np

from dlsched.envs.errors import PolicyError, ResetNeededError
from dlsched.envs.observation import ObservationLayout

#: The interval the agent acts in.
AGENT_LOW, AGENT_HIGH = -1.0, 1.0


class ActionMode(StrEnum):
    """How an agent's action becomes a limit; see the module docstring."""

    ABSOLUTE = "absolute"
    RELATIVE = "relative"
    USAGE = "usage"


@dataclass(frozen=True)
class ActionMapping:
    """The map from agent actions to limits.

    Attributes:
        mode: absolute or relative.
        max_step: the largest factor one relative action changes a limit by (``> 1``).
        low: the lowest limit produced (the environment raises it to its floor anyway).
        high: the highest limit produced (1: no cap).
    """

    mode: ActionMode = ActionMode.ABSOLUTE
    max_step: float = 2.0
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.low < self.high:
            raise PolicyError(
                f"action limits low={self.low} and high={self.high}: need 0 <= low < high"
            )
        if self.mode is not ActionMode.ABSOLUTE and not self.max_step > 1.0:
            raise PolicyError(f"max_step={self.max_step} of relative actions must be > 1")

    def to_limits(
        self, action: np.ndarray, observation: np.ndarray, layout: ObservationLayout
    ) -> np.ndarray:
        """The limits for ``action`` (``(..., slots)``), given the raw ``observation``
        (``(..., slots, features)``, not normalised) it answers."""
        clipped = np.clip(np.asarray(action, dtype=np.float64), AGENT_LOW, AGENT_HIGH)
        if self.mode is ActionMode.ABSOLUTE:
            share = (clipped - AGENT_LOW) / (AGENT_HIGH - AGENT_LOW)
            limits = self.low + share * (self.high - self.low)
        else:
            base = "limit" if self.mode is ActionMode.RELATIVE else "cpu_usage"
            current = np.asarray(observation)[..., layout.features.index(base)]
            limits = np.clip(current * self.max_step**clipped, self.low, self.high)
        return limits.astype(np.float32)

    def to_data(self) -> dict[str, object]:
        return {
            "mode": self.mode.value,
            "max_step": self.max_step,
            "low": self.low,
            "high": self.high,
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ActionMapping:
        return cls(
            mode=ActionMode(data["mode"]),
            max_step=float(data["max_step"]),
            low=float(data["low"]),
            high=float(data["high"]),
        )


class AgentActions(gym.Wrapper[np.ndarray, np.ndarray, np.ndarray, np.ndarray]):
    """Gives an environment of dlsched the agent's action space ``Box(-1, 1)``.

    Args:
        env: a dlsched environment (or a wrapper of one) with observations of ``layout``.
        mapping: how actions become limits.
        layout: the environment's observation layout.
    """

    def __init__(
        self,
        env: gym.Env[np.ndarray, np.ndarray],
        mapping: ActionMapping,
        layout: ObservationLayout,
    ) -> None:
        super().__init__(env)
        self.mapping = mapping
        self.layout = layout
        shape = env.action_space.shape
        assert shape is not None
        self.action_space = gym.spaces.Box(AGENT_LOW, AGENT_HIGH, shape, dtype=np.float32)
        self._observation: np.ndarray | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self._observation = observation
        return observation, info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._observation is None:
            raise ResetNeededError(
                "step() on an environment that was not reset: it has no observation to map the "
                "action from yet; call reset() before step()"
            )
        limits = self.mapping.to_limits(action, self._observation, self.layout)
        observation, reward, terminated, truncated, info = self.env.step(limits)
        self._observation = observation
        return observation, float(reward), terminated, truncated, info
