"""Per-slot agents: every slot of every training environment is one agent of a shared policy.

With one agent for the whole worker, the reward (say, the fraction of satisfied services) is a
sum over the jobs, and PPO has to find out from it which of ten limits helped: the advantage of
every slot's action carries the noise of the nine others. Here each slot is an agent in its own
right (parameter sharing, as in Gupta et al., "Cooperative multi-agent control using deep
reinforcement learning", 2017): it sees the worker's observation with its own row first, sets
its own job's limit, and is rewarded for its own job and for all of them,

    reward_i = own_weight * r(job in slot i alone) + (1 - own_weight) * r(all jobs),

where ``r`` is the environment's named reward (:mod:`dlsched.envs.rewards`) evaluated on the
telemetry of that job only, or of every job. A slot without a job gets the shared part only.
Every slot's action comes from the same network, so one trained model schedules any slot, and
:class:`~dlsched.policies.learned.LearnedPolicy` evaluates it once per slot in the same way.

Measured on train-inference-mix (PPO, the other settings of the README recipe): after 50k
environment steps the held-out satisfied fraction was 0.40 with per-slot agents against 0.24
with one agent, but each environment step costs about four times as much compute (ten
network evaluations and ten rewards), so on the replay backend one agent learns more per
second. Per-slot agents pay off where environment steps are what is scarce.

SB3 sees a vector of ``n_envs * slots`` environments with one-number actions; its timesteps count
agent steps, ``slots`` per environment step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn

from dlsched.envs.observation import ObservationLayout
from dlsched.envs.rewards import RewardFn
from dlsched.envs.telemetry import Telemetry
from dlsched.policies.agent_actions import AGENT_HIGH, AGENT_LOW, ActionMapping
from dlsched.policies.slot_network import own_rows_first


def job_alone(telemetry: Telemetry, job_id: str) -> Telemetry:
    """``telemetry`` as if ``job_id`` were the only job (for a per-job reward)."""
    jobs = tuple(job for job in telemetry.jobs if job.job_id == job_id)
    return dataclasses.replace(telemetry, jobs=jobs)


class SlotAgentVecEnv(VecEnv):
    """The slots of the environments of ``venv`` as agents; see the module docstring.

    Args:
        venv: dlsched environments that take limits as actions (``DummyVecEnv`` or
            ``SubprocVecEnv``), all of ``layout``; their ``info`` carries the telemetry.
        mapping: how an agent's action becomes its job's limit.
        layout: their observation layout.
        reward_fn: their reward function, evaluated per job for the agents' own part.
        own_weight: the weight of the agent's own job in its reward, in ``[0, 1]``.
    """

    def __init__(
        self,
        venv: VecEnv,
        mapping: ActionMapping,
        layout: ObservationLayout,
        reward_fn: RewardFn,
        own_weight: float = 0.5,
    ) -> None:
        self.venv = venv
        self.mapping = mapping
        self.layout = layout
        self.reward_fn = reward_fn
        self.own_weight = own_weight
        self.slots = layout.workers * layout.slots_per_worker
        single = gym.spaces.Box(AGENT_LOW, AGENT_HIGH, (1,), dtype=np.float32)
        super().__init__(venv.num_envs * self.slots, venv.observation_space, single)
        self._observations = np.zeros((venv.num_envs, *layout.shape), dtype=np.float32)
        self._telemetry: list[Telemetry] = []
        self._actions = np.zeros((self.num_envs, 1), dtype=np.float32)

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed the inner environments (``seed + k`` for environment ``k``)."""
        return self.venv.seed(seed)

    def reset(self) -> np.ndarray:
        observations = self.venv.reset()
        assert isinstance(observations, np.ndarray)
        self._observations = observations
        self._telemetry = [info["telemetry"] for info in self.venv.reset_infos]
        return self._views(observations)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, 1)

    def step_wait(self) -> VecEnvStepReturn:
        agent_actions = self._actions.reshape(self.venv.num_envs, self.slots)
        limits = self.mapping.to_limits(agent_actions, self._observations, self.layout)
        observations, shared, dones, env_infos = self.venv.step(limits)
        assert isinstance(observations, np.ndarray)
        rewards = np.zeros((self.venv.num_envs, self.slots), dtype=np.float32)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for index, info in enumerate(env_infos):
            now: Telemetry = info["telemetry"]
            rewards[index] = self._rewards(float(shared[index]), now, self._telemetry[index])
            first = index * self.slots
            infos[first] = info  # the environment's own info (episode statistics), once
            if dones[index]:
                views = own_rows_first(info["terminal_observation"])
                truncated = info.get("TimeLimit.truncated", False)
                for slot in range(self.slots):
                    infos[first + slot] = {
                        **infos[first + slot],
                        "terminal_observation": views[slot],
                        "TimeLimit.truncated": truncated,
                    }
                self._telemetry[index] = self.venv.reset_infos[index]["telemetry"]
            else:
                self._telemetry[index] = now
        self._observations = observations
        return (
            self._views(observations),
            rewards.reshape(-1),
            np.repeat(dones, self.slots),
            infos,
        )

    def _views(self, observations: np.ndarray) -> np.ndarray:
        return own_rows_first(observations).reshape(self.num_envs, *self.layout.shape)

    def _rewards(self, shared: float, now: Telemetry, before: Telemetry) -> np.ndarray:
        rewards = np.full(self.slots, (1.0 - self.own_weight) * shared, dtype=np.float32)
        for job in now.active_jobs:
            if job.worker is None or job.slot is None:
                continue
            own = self.reward_fn(job_alone(now, job.job_id), job_alone(before, job.job_id))
            rewards[self.layout.row(job.worker, job.slot)] += self.own_weight * own
        return rewards

    def close(self) -> None:
        self.venv.close()

    # -------------------------------------------------- VecEnv plumbing, by environment

    def _env_indices(self, indices: VecEnvIndices) -> list[int]:
        return sorted({agent // self.slots for agent in self._get_indices(indices)})

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self.venv.get_attr(attr_name, self._env_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self.venv.set_attr(attr_name, value, self._env_indices(indices))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **kwargs: Any
    ) -> list[Any]:
        return self.venv.env_method(
            method_name, *method_args, indices=self._env_indices(indices), **kwargs
        )

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]], indices: VecEnvIndices = None
    ) -> list[bool]:
        return self.venv.env_is_wrapped(wrapper_class, self._env_indices(indices))
