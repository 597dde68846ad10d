"""The policy interface shared by handcrafted baselines and learned schedulers.

Every policy answers Stable-Baselines3's ``predict(observation, state, episode_start,
deterministic)``, so :func:`stable_baselines3.common.evaluation.evaluate_policy` and dlsched's own
evaluation treat them alike. Handcrafted policies decide from the typed telemetry snapshot
(:meth:`HandcraftedPolicy.act`); they receive it through :class:`TelemetryFeed`, a wrapper around
the environment, which is the same path on every backend.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dlsched.envs.decision import Decision
from dlsched.envs.errors import PolicyError
from dlsched.envs.placement import Placer
from dlsched.envs.telemetry import Telemetry

if TYPE_CHECKING:
    from dlsched.envs.scenarios.model import Scenario
    from dlsched.envs.scheduling_env import SchedulingEnv

ParamValue = float | int | str | bool


class Policy(ABC):
    """A scheduler: maps what it sees to one CPU limit per slot."""

    #: Registered name (``dlsched.baselines.make`` and tracking use it).
    name: ClassVar[str] = "policy"

    #: Whether :meth:`predict` takes a batch of observations ``(n, slots, features)`` of ``n``
    #: episodes and returns their limits ``(n, slots)``, each row what it would return for that
    #: observation alone up to rounding: a learned model does
    #: (:class:`~dlsched.policies.batched_feed.BatchedModelFeed`).
    predicts_batches: ClassVar[bool] = False

    @property
    def placer(self) -> Placer | None:
        """The placer this policy brings for arriving jobs; ``None`` keeps the environment's."""
        return None

    def params(self) -> dict[str, ParamValue]:
        """Every parameter of the policy, for tracking (name to value)."""
        return {}

    def reset(self) -> None:  # noqa: B027
        """Forget the last episode (called at every environment reset)."""

    def bind(self, env: SchedulingEnv) -> None:  # noqa: B027
        """Learn the environment this policy drives, before its first reset places any job.

        A policy whose placer needs the environment (the oracle's reads the replay profiles)
        gets it here; :class:`TelemetryFeed` calls it when it wraps the environment.
        """

    def observe(self, telemetry: Telemetry, env: SchedulingEnv) -> None:  # noqa: B027
        """Receive the newest telemetry of ``env``; learned policies need only the observation."""

    def check_scenario(self, scenario: Scenario) -> None:  # noqa: B027
        """Refuse a scenario this policy cannot schedule, before any episode of it runs.

        Raises:
            PolicyError: naming the policy, the scenario and why (a learned policy refuses
                another job kind or observation layout than its model's).
        """

    @abstractmethod
    def predict(
        self,
        observation: np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Stable-Baselines3's signature: the action for ``observation`` and the next state."""


class HandcraftedPolicy(Policy):
    """A policy that decides from the telemetry snapshot, as the papers' schedulers do.

    Subclasses implement :meth:`act`. Policies that run less often than every interval keep
    their own clock and return the limits in force between their runs.

    A policy whose :meth:`act` reads only the telemetry and its scenario also runs on the batched
    replay environment, one copy per episode (:class:`~dlsched.policies.batched_feed.
    BatchedTelemetryFeed`); one that reads its environment object says so with
    :attr:`reads_environment`.
    """

    #: Whether :meth:`act` (or the placer) reads the environment object itself, beyond its
    #: scenario (the oracle reads the replay model's profiles through it): such a policy runs on
    #: single environments only.
    reads_environment: ClassVar[bool] = False

    def __init__(self) -> None:
        self._telemetry: Telemetry | None = None
        self._env: SchedulingEnv | None = None
        self._scenario: Scenario | None = None
        self._pending: Decision | None = None

    @abstractmethod
    def act(self, telemetry: Telemetry) -> Decision:
        """Decide the limits (and migrations) for the next interval."""

    def bind(self, env: SchedulingEnv) -> None:
        self._env = env
        self._scenario = env.scenario

    def bind_scenario(self, scenario: Scenario) -> None:
        """Learn the scenario it schedules without an environment object: one copy of the policy
        per episode of a batched replay environment, which has no single environment to bind."""
        self._env = None
        self._scenario = scenario

    def unbound_copy(self) -> Self:
        """A copy with its own state, bound to no environment (the environment is not copied)."""
        return copy.deepcopy(self, {id(self._env): None, id(self._scenario): self._scenario})

    def observe(self, telemetry: Telemetry, env: SchedulingEnv) -> None:
        self._telemetry = telemetry
        self._env = env
        self._scenario = env.scenario

    def take_pending(self) -> Decision | None:
        """The decision behind the last ``predict`` (with its migrations), once."""
        pending, self._pending = self._pending, None
        return pending

    def predict(
        self,
        observation: np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        if self._telemetry is None or self._env is None:
            raise PolicyError(
                f"policy {self.name!r} decides from telemetry but has received none; wrap the "
                "environment with dlsched.policies.TelemetryFeed(env, policy) before stepping it"
            )
        observation = np.asarray(observation)
        batched = observation.ndim == len(self._env.observation_space.shape or ()) + 1
        if batched and observation.shape[0] != 1:
            raise PolicyError(
                f"policy {self.name!r} reads one environment's telemetry, but predict() got "
                f"{observation.shape[0]} observations; evaluate it with n_envs=1"
            )
        decision = self.act(self._telemetry)
        self._pending = decision
        action = self._env.decision_to_action(decision)
        return (action[None] if batched else action), state


def describe(policy: Policy) -> dict[str, Any]:
    """Name and parameters of a policy, as tracking records them."""
    return {"policy": policy.name, **{f"policy.{k}": v for k, v in policy.params().items()}}
