"""How a learned agent's actions, one number in ``[-1, 1]`` per slot, become CPU limits.

SB3's continuous-action agents act in ``[-1, 1]`` (SAC and TD3 squash to it, PPO and A2C are
initialised around 0 with unit noise). Five mappings onto the environment's limits in ``[0, 1]``:

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
- ``share``: each active job of a worker gets the weight ``max_step ** a``, and its limit is its
  weight over the sum of its worker's weights: the worker is given away whole, always. An
  untrained agent (``a`` near 0) gives every job an equal share, and a job alone gets the whole
  worker whatever its action. A limit is a fraction of the worker, so an action means the same
  on 2 cores and on 16, and no step of an episode leaves part of the worker idle because limits
  were grown from small ones. Training jobs, which all use whatever CPU they get, are
  scheduled so.
- ``share-idle``: as ``share``, but where a worker's weights sum to less than 1 they are the
  limits themselves, and what they leave stays idle: the worker is given away whole unless every
  job's weight is low. A service given more than its target needs answers faster than its band,
  which is not satisfied either, so an inference scheduler needs to hold CPU back.

In both share modes a job's share is its weight over the others', so a teacher's limits are
learned as weights (:meth:`ActionMapping.to_actions`): where the teacher cannot be told apart
from telemetry (two training jobs, neither measured yet, one of them the shorter), ``share``
splits the worker between them where ``share-idle`` would leave part of it idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import gymnasium as gym
import numpy as np

from dlsched.envs.errors import PolicyError, require_reset
from dlsched.envs.observation import ObservationLayout

#: The interval the agent acts in.
AGENT_LOW, AGENT_HIGH = -1.0, 1.0


class ActionMode(StrEnum):
    """How an agent's action becomes a limit; see the module docstring."""

    ABSOLUTE = "absolute"
    RELATIVE = "relative"
    USAGE = "usage"
    SHARE = "share"
    SHARE_IDLE = "share-idle"

    @property
    def shares(self) -> bool:
        """Whether actions are shares of a worker (``share``, ``share-idle``)."""
        return self in (ActionMode.SHARE, ActionMode.SHARE_IDLE)


@dataclass(frozen=True)
class ActionMapping:
    """The map from agent actions to limits.

    Attributes:
        mode: see :class:`ActionMode`.
        max_step: the largest factor one relative action changes a limit by (``> 1``); in
            the share modes, the largest weight (the smallest is its inverse).
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
        elif self.mode.shares:
            limits = self._shares(clipped, observation, layout)
        else:
            current = self._base(observation, layout)
            limits = np.clip(current * self.max_step**clipped, self.low, self.high)
        return limits.astype(np.float32)

    def to_actions(
        self, limits: np.ndarray, observation: np.ndarray, layout: ObservationLayout
    ) -> np.ndarray:
        """The actions in ``[-1, 1]`` that come closest to setting ``limits`` (``(...,
        slots)``) from the raw ``observation``: :meth:`to_limits`' inverse where it has one
        (a teacher's limits become the labels a student learns, :mod:`dlsched.runs.training.
        imitation`). In the share modes the weights are the limits, but for a worker
        ``share-idle`` gives away whole (its limits sum to 1): twice its limits, whose shares
        they are, away from the edge where lower weights leave part of it idle."""
        wanted = np.clip(np.asarray(limits, dtype=np.float64), 1e-9, None)
        if self.mode is ActionMode.ABSOLUTE:
            share = (np.clip(wanted, self.low, self.high) - self.low) / (self.high - self.low)
            actions = AGENT_LOW + share * (AGENT_HIGH - AGENT_LOW)
        elif self.mode is ActionMode.SHARE_IDLE:
            # A worker given away whole is given so by any weights summing to at least 1: set
            # them to twice its limits, so that an action a little low still gives it away whole
            # (the limits themselves sit on the edge, where the same action leaves part idle).
            whole = self._worker_totals(wanted, observation, layout) >= 1.0 - 1e-6
            weights = np.where(whole, 2.0 * wanted, wanted)
            actions = np.log(weights) / np.log(self.max_step)
        elif self.mode is ActionMode.SHARE:
            actions = np.log(wanted) / np.log(self.max_step)
        else:
            current = np.maximum(self._base(observation, layout), 1e-9)
            actions = np.log(wanted / current) / np.log(self.max_step)
        return np.clip(actions, AGENT_LOW, AGENT_HIGH).astype(np.float32)

    def _base(self, observation: np.ndarray, layout: ObservationLayout) -> np.ndarray:
        """The limit (``relative``) or CPU usage (``usage``) column a relative action scales."""
        base = "limit" if self.mode is ActionMode.RELATIVE else "cpu_usage"
        return np.asarray(observation)[..., layout.features.index(base)].astype(np.float64)

    @staticmethod
    def _worker_totals(
        values: np.ndarray, observation: np.ndarray, layout: ObservationLayout
    ) -> np.ndarray:
        """Per slot, the sum of ``values`` over the active slots of its worker."""
        active = np.asarray(observation)[..., layout.features.index("active")] > 0.5
        per_worker = (*values.shape[:-1], layout.workers, layout.slots_per_worker)
        total = np.where(active, values, 0.0).reshape(per_worker).sum(axis=-1, keepdims=True)
        return np.broadcast_to(total, per_worker).reshape(values.shape)

    def _shares(
        self, clipped: np.ndarray, observation: np.ndarray, layout: ObservationLayout
    ) -> np.ndarray:
        """The share modes' limits: each active slot's weight over its worker's weights (in
        ``share-idle``, over 1 where they sum to less); an empty slot's limit is its weight
        (ignored)."""
        weights = self.max_step**clipped
        total = self._worker_totals(weights, observation, layout)
        if self.mode is ActionMode.SHARE_IDLE:
            total = np.maximum(total, 1.0)
        return np.clip(weights / np.where(total > 0, total, 1.0), self.low, self.high)

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
        observation = require_reset(self._observation, "step()", "an environment")
        limits = self.mapping.to_limits(action, observation, self.layout)
        observation, reward, terminated, truncated, info = self.env.step(limits)
        self._observation = observation
        return observation, float(reward), terminated, truncated, info
