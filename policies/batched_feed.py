"""Handcrafted policies on the batched replay environment: one copy of the policy per episode.

:class:`~dlsched.policies.feed.TelemetryFeed` gives one single environment's ``info["telemetry"]``
to its policy. :class:`BatchedTelemetryFeed` does the same for every episode of a
:class:`~dlsched.envs.replay.vector.ReplayVectorEnv`: it builds episode ``i``'s typed
:class:`~dlsched.envs.telemetry.Telemetry` (only for the episodes still running), gives it to the
``i``-th copy of the policy, and steps the batch with every copy's whole decision, limits and
migrations (:meth:`~dlsched.envs.replay.vector.ReplayVectorEnv.step_decisions`). Each episode
is then the one its policy would have run on a single environment with the same seed.

A policy that predicts from observations alone over a batch (a learned model,
:attr:`~dlsched.policies.policy.Policy.predicts_batches`) runs there only when its caller accepts
a batched forward pass's rounding (``batched_predict``): :class:`BatchedModelFeed` makes one
``predict`` per step for every episode, where a single environment makes one per episode, and a
matrix product over many rows need not round as one over a single row does (measured: limits
that differ in their last bits in 15 to 47 of 50 batches, on one thread or two; the episodes'
scores alike). A validation during training takes it (a score that ranks checkpoints);
``evaluate``, the reference, does not.

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


def batched_refusal(
    policy: Policy, scenario: Scenario, batched_predict: bool = False
) -> str | None:
    """Why ``policy`` cannot run on the batched replay environment of ``scenario``; ``None`` if
    it can (its episodes there are those of single environments).

    Args:
        policy: the policy.
        scenario: the scenario.
        batched_predict: accept a policy that predicts over a batch (:class:`BatchedModelFeed`),
            whose episodes equal single environments' up to the rounding of its batched predict.
    """
    if batched_predict and policy.predicts_batches:
        return None
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


def batched_feed(
    env: ReplayVectorEnv, policy: Policy, batched_predict: bool = False
) -> BatchedTelemetryFeed | BatchedModelFeed:
    """The feed that runs ``policy`` on ``env`` (:func:`batched_refusal` with the same arguments
    says whether one does).

    Raises:
        PolicyError: no feed runs the policy there, or the policy refuses the scenario.
    """
    if batched_predict and policy.predicts_batches:
        return BatchedModelFeed(env, policy)
    return BatchedTelemetryFeed(env, policy)


@dataclass(frozen=True)
class BatchedStep:
    """What one step of a batched feed returns.

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


class BatchedModelFeed:
    """Drives every episode of ``env`` with one policy that predicts from the observations of
    all of them at once (see the module docstring).

    Args:
        env: the batched replay environment.
        policy: a policy whose ``predict`` takes a batch of observations
            (:attr:`~dlsched.policies.policy.Policy.predicts_batches`); it is reset with the
            episodes, and with frame stacking it stacks each episode's own frames.

    Raises:
        PolicyError: the policy does not predict over a batch, or it refuses the scenario.
    """

    def __init__(self, env: ReplayVectorEnv, policy: Policy) -> None:
        if not policy.predicts_batches:
            raise PolicyError(
                f"policy {policy.name!r} does not predict over a batch of observations; run it "
                "with BatchedTelemetryFeed or on single environments"
            )
        policy.check_scenario(env.scenario)
        self.env = env
        self.policy = policy
        self._observations: np.ndarray | None = None

    def reset(self, seeds: Sequence[int]) -> tuple[Telemetry, ...]:
        """Reset episode ``i`` with ``seeds[i]``, and the policy; every episode's telemetry."""
        self._observations, _ = self.env.reset(seed=list(seeds))
        self.policy.reset()
        return tuple(self.env.telemetry(index) for index in range(self.env.num_envs))

    def step(self, running: np.ndarray) -> BatchedStep:
        """Step every episode with the limits the policy predicts from its newest observation.

        Args:
            running: per episode, whether it still runs; the others are stepped too (the
                policy's batch keeps its shape) but no telemetry is built for them.
        """
        if self._observations is None:
            raise PolicyError("call reset(seeds) before step()")
        limits, _ = self.policy.predict(self._observations, deterministic=True)
        self._observations, rewards, terminated, truncated, _ = self.env.step(limits)
        telemetry = tuple(
            self.env.telemetry(index) if running[index] else None
            for index in range(self.env.num_envs)
        )
        return BatchedStep(rewards, terminated, truncated, telemetry)
