"""The wrapper through which a policy receives telemetry and hands back full decisions."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.policies.policy import HandcraftedPolicy, Policy


class TelemetryFeed(gym.Wrapper[np.ndarray, np.ndarray, np.ndarray, np.ndarray]):
    """Feeds ``info["telemetry"]`` to ``policy`` after every reset and step.

    It also installs the policy's placer, resets the policy with the environment, and forwards a
    handcrafted policy's whole decision (migrations included) instead of the bare limits array.
    """

    def __init__(self, env: gym.Env[np.ndarray, np.ndarray], policy: Policy) -> None:
        super().__init__(env)
        self.policy = policy
        unwrapped = env.unwrapped
        if not isinstance(unwrapped, SchedulingEnv):
            raise TypeError(f"TelemetryFeed wraps dlsched environments, got {type(unwrapped)}")
        self.scheduling_env: SchedulingEnv = unwrapped
        policy.bind(unwrapped)
        if policy.placer is not None:
            self.scheduling_env.placer = policy.placer

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.policy.reset()
        self.policy.observe(info["telemetry"], self.scheduling_env)
        return observation, info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        pending = self.policy.take_pending() if isinstance(self.policy, HandcraftedPolicy) else None
        result: tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]
        if pending is not None:
            result = self.scheduling_env.step_decision(pending)
        else:
            result = self.env.step(action)
        observation, reward, terminated, truncated, info = result
        self.policy.observe(info["telemetry"], self.scheduling_env)
        return observation, float(reward), terminated, truncated, info
