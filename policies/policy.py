"""The policy interface shared by handcrafted baselines and learned schedulers.

Every policy answers Stable-Baselines3's ``predict(observation, state, episode_start,
deterministic)``, so :func:`stable_baselines3.common.evaluation.evaluate_policy` and dlsched's own
evaluation treat them alike. Handcrafted policies decide from the typed telemetry snapshot
(:meth:`HandcraftedPolicy.act`); a feed (:mod:`dlsched.policies.feed`) gives it to them and steps
their decisions, the same path on every backend.
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
    from dlsched.envs.backend import BackendCapabilities
    from dlsched.envs.scenarios.model import Scenario

ParamValue = float | int | str | bool


class Policy(ABC):
    """A scheduler: maps what it sees to one CPU limit per slot."""

    #: Registered name (``dlsched.baselines.make`` and tracking use it).
    name: ClassVar[str] = "policy"

    #: Whether :meth:`predict` takes a batch of observations ``(n, slots, features)`` of ``n``
    #: episodes and returns their limits ``(n, slots)``, each row what it would return for that
    #: observation alone up to rounding: a learned model does
    #: (:class:`~dlsched.policies.feed.BatchedModelFeed`).
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

    def bind(self, scenario: Scenario, backend: BackendCapabilities) -> None:
        """Learn the scenario it schedules and what its backend can do, before the first reset
        places any job; refuse a scenario it cannot schedule (:meth:`check_scenario`).

        The feeds (:mod:`dlsched.policies.feed`) call it when they take the policy.
        """
        self.check_scenario(scenario)

    def observe(self, telemetry: Telemetry) -> None:  # noqa: B027
        """Receive the newest telemetry; learned policies need only the observation."""

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

    A feed (:mod:`dlsched.policies.feed`) gives it every step's telemetry and steps its whole
    decision, migrations included; on a batched environment each episode has a copy of its own
    (:meth:`copy`), so :meth:`act` reads only the telemetry and what :meth:`bind` told it.
    """

    def __init__(self) -> None:
        self._telemetry: Telemetry | None = None
        self._scenario: Scenario | None = None
        self._backend: BackendCapabilities | None = None

    @abstractmethod
    def act(self, telemetry: Telemetry) -> Decision:
        """Decide the limits (and migrations) for the next interval."""

    def bind(self, scenario: Scenario, backend: BackendCapabilities) -> None:
        super().bind(scenario, backend)
        self._scenario = scenario
        self._backend = backend

    def copy(self) -> Self:
        """A copy with its own state (its scenario is shared, not copied)."""
        return copy.deepcopy(self, {id(self._scenario): self._scenario})

    def observe(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def decide(self) -> Decision:
        """Its decision from the newest telemetry it observed.

        Raises:
            PolicyError: it has observed none (it was not given to a feed).
        """
        if self._telemetry is None:
            raise PolicyError(
                f"policy {self.name!r} decides from telemetry but has received none; wrap the "
                "environment with dlsched.policies.TelemetryFeed(env, policy) before stepping it"
            )
        return self.act(self._telemetry)

    def predict(
        self,
        observation: np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict`` for a :class:`~dlsched.policies.feed.TelemetryFeed`: the limits in
        force, per slot.

        A handcrafted policy decides from telemetry, not from the observation: the feed it
        runs in calls :meth:`act` and steps that decision whatever action it is given, so
        SB3's ``evaluate_policy(policy, TelemetryFeed(env, policy))`` runs it as it is
        (migrations included). The action returned here leaves every limit as it is.

        Raises:
            PolicyError: it has received no telemetry (no feed), or a batch of more than one
                observation.
        """
        if self._telemetry is None or self._scenario is None:
            raise PolicyError(
                f"policy {self.name!r} decides from telemetry but has received none; wrap the "
                "environment with dlsched.policies.TelemetryFeed(env, policy) before stepping it"
            )
        observation = np.asarray(observation)
        batched = observation.ndim == 3
        if batched and observation.shape[0] != 1:
            raise PolicyError(
                f"policy {self.name!r} reads one environment's telemetry, but predict() got "
                f"{observation.shape[0]} observations; evaluate it with n_envs=1"
            )
        slots = self._scenario.slots_per_worker
        action = np.zeros(len(self._scenario.workers) * slots, dtype=np.float32)
        for job in self._telemetry.active_jobs:
            if job.worker is not None and job.slot is not None:
                action[job.worker * slots + job.slot] = job.limit
        return (action[None] if batched else action), state


def describe(policy: Policy) -> dict[str, Any]:
    """Name and parameters of a policy, as tracking records them."""
    return {"policy": policy.name, **{f"policy.{k}": v for k, v in policy.params().items()}}
