"""How a policy receives telemetry and steps an environment with its decisions.

A handcrafted policy decides from the typed telemetry (:meth:`~dlsched.policies.policy.
HandcraftedPolicy.act`), a learned one from the observation (``predict``). A feed gives each
what it reads after every reset and step, and steps the environment with what it decides:

- :class:`TelemetryFeed` wraps one environment (``gym.make``), as a Gymnasium wrapper, so that
  a user, or SB3's ``evaluate_policy``, steps it as any environment: a handcrafted policy's
  whole decision (migrations included) is stepped whatever action the step is given.
- :class:`BatchedTelemetryFeed` drives every episode of a batched environment (``gym.make_vec``)
  with a copy of a handcrafted policy each: episode ``i`` is the episode its policy runs on a
  single environment with the same seed.
- :class:`BatchedModelFeed` drives every episode of a batched environment with one policy that
  predicts from the observations of all of them at once (a learned model), where its caller
  accepts a batched forward pass's rounding: a matrix product over many rows need not round as
  one over a single row does (measured: limits that differ in their last bits in 15 to 47 of 50
  batches, on one thread or two). A validation during training takes it (a score that ranks
  checkpoints); ``evaluate`` gives a learned model one episode at a time.

What a batch cannot run :func:`batched_refusal` says, and the caller runs it one episode at a
time.

A batched feed times the policy's call that decides each step (:attr:`BatchedStep.decision_s`),
so that an evaluation reports what a decision costs beside what it achieves.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from dlsched.envs.decision import Decision
from dlsched.envs.errors import PolicyError, require_reset
from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv
from dlsched.envs.telemetry import Telemetry
from dlsched.policies.policy import HandcraftedPolicy, Policy


class TelemetryFeed(gym.Wrapper[np.ndarray, np.ndarray, np.ndarray, np.ndarray]):
    """Feeds ``info["telemetry"]`` to ``policy`` after every reset and step of ``env``.

    It binds the policy to the environment's scenario and backend, installs the policy's placer,
    and resets the policy with the environment. Stepping it with a handcrafted policy steps the
    policy's decision (:meth:`~dlsched.policies.policy.HandcraftedPolicy.act`, migrations
    included), whatever action it is given; with any other policy, the action.
    """

    def __init__(self, env: gym.Env[np.ndarray, np.ndarray], policy: Policy) -> None:
        super().__init__(env)
        self.policy = policy
        unwrapped = env.unwrapped
        if not isinstance(unwrapped, SchedulingEnv):
            raise TypeError(f"TelemetryFeed wraps dlsched environments, got {type(unwrapped)}")
        self.scheduling_env: SchedulingEnv = unwrapped
        policy.bind(unwrapped.scenario, unwrapped.backend.capabilities)
        if policy.placer is not None:
            unwrapped.placer = policy.placer

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.policy.reset()
        self.policy.observe(info["telemetry"])
        return observation, info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        result: tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]
        if isinstance(self.policy, HandcraftedPolicy):
            result = self.scheduling_env.step_decision(self.policy.decide())
        else:
            result = self.env.step(action)
        observation, reward, terminated, truncated, info = result
        self.policy.observe(info["telemetry"])
        return observation, float(reward), terminated, truncated, info


def batched_refusal(policy: Policy, batched_predict: bool = False) -> str | None:
    """Why ``policy`` cannot run many episodes of a batched environment at once; ``None`` if
    it can (its episodes there are those of single environments).

    Args:
        policy: the policy.
        batched_predict: accept a policy that predicts over a batch (:class:`BatchedModelFeed`),
            whose episodes equal single environments' up to the rounding of its batched predict.
    """
    if isinstance(policy, HandcraftedPolicy) or (batched_predict and policy.predicts_batches):
        return None
    return (
        f"policy {policy.name!r} is not a handcrafted policy (a learned model's predict over "
        "a batch is not held equal to its predict on one observation)"
    )


def batched_feed(
    env: SchedulingVectorEnv, policy: Policy
) -> BatchedTelemetryFeed | BatchedModelFeed:
    """The feed that runs ``policy`` on ``env``: one copy per episode of a handcrafted policy,
    one batched ``predict`` per step otherwise.

    Raises:
        PolicyError: the policy refuses the scenario, or does not predict over a batch of
            observations where ``env`` holds more than one episode.
    """
    if isinstance(policy, HandcraftedPolicy):
        return BatchedTelemetryFeed(env, policy)
    return BatchedModelFeed(env, policy)


@dataclass(frozen=True)
class BatchedStep:
    """What one step of a batched feed returns.

    Attributes:
        rewards: per episode, the reward of the step.
        terminated: per episode, whether it ended (training: every job finished).
        truncated: per episode, whether the horizon cut it.
        telemetry: per episode, its telemetry after the step; ``None`` for an episode that was
            not running (it had ended before).
        decision_s: per episode, the wall time in seconds of the policy's call that decided
            the step (a handcrafted copy's ``decide``, which calls ``act``; a learned policy's
            ``predict``), nothing of the environment; a predict over a batch decides every
            episode at once, and each is given the batch's time; NaN for an episode that was
            not running.
    """

    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    telemetry: tuple[Telemetry | None, ...]
    decision_s: np.ndarray


class BatchedTelemetryFeed:
    """Drives ``env``'s episodes with one copy of ``policy`` each; see the module docstring.

    Args:
        env: the batched environment.
        policy: the policy; it is copied (:meth:`~dlsched.policies.policy.HandcraftedPolicy.
            copy`) once per episode, never stepped itself. A copy's placer places its own
            episode's arrivals.

    Raises:
        PolicyError: the policy refuses the scenario.
    """

    def __init__(self, env: SchedulingVectorEnv, policy: HandcraftedPolicy) -> None:
        self.env = env
        self.policies = [policy.copy() for _ in range(env.num_envs)]
        for index, copy in enumerate(self.policies):
            copy.bind(env.scenario, env.backend.capabilities)
            if copy.placer is not None:
                env.set_placer(index, copy.placer)
        self._telemetry: list[Telemetry | None] = [None] * env.num_envs

    def reset(self, seeds: Sequence[int]) -> tuple[Telemetry, ...]:
        """Reset episode ``i`` with ``seeds[i]`` and its policy; every episode's telemetry."""
        self.env.reset(seed=list(seeds))
        telemetry = tuple(self.env.telemetry(index) for index in range(self.env.num_envs))
        for policy, now in zip(self.policies, telemetry, strict=True):
            policy.reset()
            policy.observe(now)
        self._telemetry = list(telemetry)
        return telemetry

    def step(self, running: np.ndarray) -> BatchedStep:
        """Step every episode with its policy's decision from its newest telemetry.

        Args:
            running: per episode, whether it still runs; the others get an empty decision (they
                restart, or run on unwatched), and no telemetry is built for them.
        """
        decisions = []
        decision_s = np.full(self.env.num_envs, np.nan)
        for index, policy in enumerate(self.policies):
            if running[index] and self._telemetry[index] is not None:
                started = time.perf_counter()
                decisions.append(policy.decide())
                decision_s[index] = time.perf_counter() - started
            else:
                decisions.append(Decision())
        _, rewards, terminated, truncated, _ = self.env.step_decisions(decisions)
        self._telemetry = [
            self.env.telemetry(index) if running[index] else None
            for index in range(self.env.num_envs)
        ]
        for policy, now in zip(self.policies, self._telemetry, strict=True):
            if now is not None:
                policy.observe(now)
        return BatchedStep(rewards, terminated, truncated, tuple(self._telemetry), decision_s)


class BatchedModelFeed:
    """Drives every episode of ``env`` with one policy that predicts from the observations of
    all of them at once (see the module docstring).

    Args:
        env: the batched environment.
        policy: a policy whose ``predict`` takes a batch of observations
            (:attr:`~dlsched.policies.policy.Policy.predicts_batches`), or any policy where
            ``env`` holds one episode; it is reset with the episodes, and with frame stacking it
            stacks each episode's own frames.

    Raises:
        PolicyError: the policy does not predict over a batch (and ``env`` holds more than one
            episode), or it refuses the scenario.
    """

    def __init__(self, env: SchedulingVectorEnv, policy: Policy) -> None:
        if env.num_envs > 1 and not policy.predicts_batches:
            raise PolicyError(
                f"policy {policy.name!r} does not predict over a batch of observations; run it "
                "one episode at a time"
            )
        policy.bind(env.scenario, env.backend.capabilities)
        if policy.placer is not None:
            for index in range(env.num_envs):
                env.set_placer(index, policy.placer)
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

        Raises:
            ResetNeededError: before :meth:`reset`.
        """
        observations = require_reset(self._observations, "step()", "a policy feed")
        started = time.perf_counter()
        if self.policy.predicts_batches:
            limits, _ = self.policy.predict(observations, deterministic=True)
        else:  # one episode: the observation as a single environment gives it
            action, _ = self.policy.predict(observations[0], deterministic=True)
            limits = np.asarray(action)[None]
        elapsed = time.perf_counter() - started
        self._observations, rewards, terminated, truncated, _ = self.env.step(limits)
        telemetry = tuple(
            self.env.telemetry(index) if running[index] else None
            for index in range(self.env.num_envs)
        )
        decision_s = np.where(running, elapsed, np.nan)
        return BatchedStep(rewards, terminated, truncated, telemetry, decision_s)
