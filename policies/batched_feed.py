"""Handcrafted policies on the batched replay environment: one copy of the policy per episode.

:class:`~dlsched.policies.feed.TelemetryFeed` gives one single environment's ``info["telemetry"]``
to its policy. :class:`BatchedTelemetryFeed` does the same for every episode of a
:class:`~dlsched.envs.replay.vector.ReplayVectorEnv`: it builds episode ``i``'s typed
:class:`~dlsched.envs.telemetry.Telemetry` (only for the episodes still running), gives it to the
``i``-th copy of the policy, and steps the batch with every copy's whole decision, limits and
migrations (:meth:`~dlsched.envs.replay.vector.ReplayVectorEnv.step_decisions`). Each episode
is then the one its policy would have run on a single environment with the same seed.

What it cannot run, :func:`batched_refusal` says, and the caller runs on single environments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlsched.envs.decision import Decision
from dlsched.envs.errors import PolicyError
from dlsched.envs.placement import SpreadPlacer
from dlsched.envs.replay.vector import ReplayVectorEnv
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.telemetry import Telemetry
from dlsched.policies.policy import HandcraftedPolicy, Policy


def batched_refusal(policy: Policy, scenario: Scenario) -> str | None:
    """Why ``policy`` cannot run on the batched replay environment of ``scenario``; ``None`` if
    it can (its episodes there are those of single environments)."""
    if not isinstance(policy, HandcraftedPolicy):
        return (
            f"policy {policy.name!r} is not a handcrafted policy (a learned model's predict over "
            "a batch is not held equal to its predict on one observation)"
        )
    if policy.reads_environment:
        return f"policy {policy.name!r} reads its environment object, which a batch has not"
    placer = policy.placer
    # A placer chooses between workers only: on one worker every placer places as the spread.
    if placer is not None and type(placer) is not SpreadPlacer and len(scenario.workers) > 1:
        return (
            f"policy {policy.name!r} places jobs with {type(placer).__name__}; the batched "
            "environment places as SpreadPlacer"
        )
    return None


@dataclass(frozen=True)
class BatchedStep:
    """What one step of a :class:`BatchedTelemetryFeed` returns.

    Attributes:
        rewards: per episode, the reward of the step.
        terminated: per episode, whether it ended (training: every job finished).
        truncated: per episode, whether the horizon cut it.
        telemetry: per episode, its telemetry after the step; ``None`` for an episode that was
            not running (it had ended before).
    """

    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    telemetry: tuple[Telemetry | None, ...]


class BatchedTelemetryFeed:
    """Drives ``env``'s episodes with one copy of ``policy`` each; see the module docstring.

    Args:
        env: the batched replay environment.
        policy: the policy; it is copied (:meth:`~dlsched.policies.policy.HandcraftedPolicy.
            unbound_copy`), never stepped itself.

    Raises:
        PolicyError: the batched environment cannot run the policy (:func:`batched_refusal`), or
            the policy refuses the scenario.
    """

    def __init__(self, env: ReplayVectorEnv, policy: Policy) -> None:
        refusal = batched_refusal(policy, env.scenario)
        if refusal is not None:
            raise PolicyError(f"{refusal}; run it on single environments (TelemetryFeed)")
        assert isinstance(policy, HandcraftedPolicy)  # batched_refusal said so
        self.env = env
        self.policies = [policy.unbound_copy() for _ in range(env.num_envs)]
        for copy in self.policies:
            copy.bind_scenario(env.scenario)
        self._telemetry: list[Telemetry | None] = [None] * env.num_envs

    def reset(self, seeds: Sequence[int]) -> tuple[Telemetry, ...]:
        """Reset episode ``i`` with ``seeds[i]`` and its policy; every episode's telemetry."""
        self.env.reset(seed=list(seeds))
        self._telemetry = [self.env.telemetry(index) for index in range(self.env.num_envs)]
        for policy in self.policies:
            policy.reset()
        return tuple(telemetry for telemetry in self._telemetry if telemetry is not None)

    def step(self, running: np.ndarray) -> BatchedStep:
        """Step every episode with its policy's decision from its newest telemetry.

        Args:
            running: per episode, whether it still runs; the others get an empty decision (they
                restart, or run on unwatched), and no telemetry is built for them.
        """
        decisions = []
        for index, policy in enumerate(self.policies):
            telemetry = self._telemetry[index]
            if not running[index] or telemetry is None:
                decisions.append(Decision())
                continue
            decisions.append(policy.act(telemetry))
        _, rewards, terminated, truncated, _ = self.env.step_decisions(decisions)
        self._telemetry = [
            self.env.telemetry(index) if running[index] else None
            for index in range(self.env.num_envs)
        ]
        return BatchedStep(rewards, terminated, truncated, tuple(self._telemetry))
