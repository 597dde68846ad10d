"""The environments an agent trains in: one or several scenarios, actions in [-1, 1], vectorised.

Each training environment is the registered ``dlsched/Inference-v0`` or ``dlsched/Training-v0``
(the same one ``dlsched evaluate`` runs), wrapped, innermost first, in

- :class:`~dlsched.runs.training.padded_layout.PaddedLayout` when the scenarios have several
  layouts (workers x slots per worker), which only the slot network of one agent reads: each
  environment is observed in the layout enclosing them all, its absent rows NaN;
- :class:`ScenarioMix` when several scenarios are given: every episode runs one of them, drawn
  from the episode's seed, so the agent learns the whole set;
- :class:`~dlsched.policies.agent_actions.AgentActions`, which gives the agent actions in
  ``[-1, 1]`` (SB3's convention for continuous actions) and turns them into limits by an
  :class:`~dlsched.policies.agent_actions.ActionMapping`, as the learned policy does later;
- ``stable_baselines3.common.monitor.Monitor``, which reports episode returns and lengths to the
  training log.

Those environments run side by side in a ``DummyVecEnv`` (one process) or a ``SubprocVecEnv``
(one process each); on the replay backend they are instead the episodes of natively batched
environments, one per scenario, behind :class:`~dlsched.runs.training.batched_vec_env.
BatchedVecEnv` (``VecEnvKind.BATCHED``, what ``auto`` picks there), each scenario with its share
of the environments (:func:`environment_shares`). The vector is wrapped in the per-feature
observation normaliser of :mod:`dlsched.policies.normalization`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecMonitor

import dlsched.envs  # noqa: F401  (registers the environment ids)
from dlsched.envs.backend_registry import backend_class
from dlsched.envs.errors import ScenarioError
from dlsched.envs.inference_env import InferenceEnv
from dlsched.envs.observation import ObservationLayout, enclosing_layout
from dlsched.envs.placement import placer_named
from dlsched.envs.rewards import telemetry_reward
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.envs.scheduling_vector_env import SchedulingVectorEnv
from dlsched.envs.training_env import TrainingEnv
from dlsched.policies.agent_actions import ActionMapping, AgentActions
from dlsched.policies.learned import describe_layout
from dlsched.runs.evaluation.runners import ENV_IDS
from dlsched.runs.training.batched_vec_env import BatchedVecEnv
from dlsched.runs.training.config import VecEnvKind
from dlsched.runs.training.padded_layout import PaddedLayout
from dlsched.runs.training.slot_agents import SlotAgentVecEnv


def layout_of(scenario: Scenario) -> ObservationLayout:
    """The observation layout an environment of ``scenario`` has."""
    return ObservationLayout(len(scenario.workers), scenario.slots_per_worker)


def check_compatible(
    scenarios: Sequence[Scenario], role: str = "training", any_layout: bool = False
) -> None:
    """Check that one model can act in every scenario: same job kind, and, unless the model
    acts on ``any_layout`` (the slot network of one agent), same observation layout.

    Args:
        scenarios: the scenarios, the first one being the reference.
        role: how the message names them (``training``, ``evaluation``).
        any_layout: whether the model acts on any layout of its features.

    Raises:
        ScenarioError: naming the first scenario that differs, and both values.
    """
    if not scenarios:
        raise ScenarioError(f"no {role} scenario given; pass at least one --scenario")
    first = scenarios[0]
    for other in scenarios[1:]:
        if other.kind is not first.kind:
            raise ScenarioError(
                f"{role} scenario {other.name!r} has {other.kind.value} jobs but "
                f"{first.name!r} has {first.kind.value} jobs: {other.kind.value} != "
                f"{first.kind.value}; one model schedules one kind of job"
            )
        if not any_layout and layout_of(other) != layout_of(first):
            raise ScenarioError(
                f"{role} scenario {other.name!r} has observation layout "
                f"[{describe_layout(layout_of(other))}] != [{describe_layout(layout_of(first))}] "
                f"of {first.name!r}; only the slot network of one agent (--network slot or "
                "auto, without --slot-agents) reads several layouts, so train that one, or give "
                "every scenario the same workers count and slots_per_worker"
            )


class ScenarioMix(gym.Env[np.ndarray, np.ndarray]):
    """Several environments of one kind and one observation shape (their layout's, or one
    enclosing theirs: :class:`~dlsched.runs.training.padded_layout.PaddedLayout`); each
    episode runs one, drawn uniformly.

    The draw and the chosen environment's own ``reset`` seed both come from this environment's
    ``np_random``, so ``reset(seed=s)`` replays the same scenario and the same episode.

    Args:
        envs: the environments (same spaces), typically one per scenario.
    """

    metadata = {"render_modes": []}  # noqa: RUF012  (Gymnasium declares it so)

    def __init__(self, envs: Sequence[gym.Env[np.ndarray, np.ndarray]]) -> None:
        if not envs:
            raise ScenarioError("ScenarioMix needs at least one environment")
        self.envs = list(envs)
        check_compatible([_scheduling_env(env).scenario for env in self.envs], any_layout=True)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        for env in self.envs[1:]:
            if env.observation_space != self.observation_space:
                raise ScenarioError(
                    f"ScenarioMix needs environments of one shape: {env.observation_space} "
                    f"!= {self.observation_space}; pad them to one layout (PaddedLayout)"
                )
        self.active = self.envs[0]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.active = self.envs[int(self.np_random.integers(len(self.envs)))]
        episode_seed = int(self.np_random.integers(2**31 - 1))
        return self.active.reset(seed=episode_seed, options=options)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.active.step(action)
        return observation, float(reward), terminated, truncated, info

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _scheduling_env(env: gym.Env[np.ndarray, np.ndarray]) -> SchedulingEnv:
    unwrapped = env.unwrapped
    if not isinstance(unwrapped, SchedulingEnv):
        raise TypeError(f"expected a dlsched environment, got {type(unwrapped).__name__}")
    return unwrapped


def make_training_env(
    scenarios: Sequence[Scenario],
    actions: ActionMapping | None,
    backend: str = "replay",
    reward: str | None = None,
    backend_options: Mapping[str, object] | None = None,
    placer: str = "spread",
) -> gym.Env[np.ndarray, np.ndarray]:
    """One training environment: the scenario's (or a :class:`ScenarioMix`), actions in [-1, 1],
    observed in the layout enclosing every scenario's
    (:func:`~dlsched.envs.observation.enclosing_layout`).

    Args:
        scenarios: the scenarios (compatible, see :func:`check_compatible`).
        actions: how the agent's actions become limits; ``None`` keeps limits as actions (per-slot
            agents map them themselves, see :mod:`dlsched.runs.training.slot_agents`).
        backend: the backend's registered name.
        reward: the reward's name; ``None`` takes the environment's default.
        backend_options: keyword arguments of the backend's constructor.
        placer: the placer of arriving jobs, by name (:data:`~dlsched.envs.placement.PLACERS`).
    """
    layouts = [layout_of(scenario) for scenario in scenarios]
    enclosing = enclosing_layout(layouts)
    envs: list[gym.Env[np.ndarray, np.ndarray]] = []
    for scenario, layout in zip(scenarios, layouts, strict=True):
        made = gym.make(
            ENV_IDS[scenario.kind],
            scenario=scenario,
            backend=backend,
            reward=reward,
            backend_options=backend_options,
            placer=placer_named(placer),
        )
        envs.append(made if layout == enclosing else PaddedLayout(made, layout, enclosing))
    env: gym.Env[np.ndarray, np.ndarray] = envs[0] if len(envs) == 1 else ScenarioMix(envs)
    if actions is None:
        return Monitor(env)
    return Monitor(AgentActions(env, actions, enclosing))


def resolve_vec_env_kind(
    kind: VecEnvKind,
    n_envs: int,
    backend: str,
    scenarios: int = 1,
    slot_agents: bool = False,
) -> VecEnvKind:
    """``auto`` made concrete, and ``batched`` checked.

    On a batchable backend (replay) the batched environment
    (:class:`~dlsched.envs.scheduling_vector_env.SchedulingVectorEnv`) steps all environments of
    a scenario in one call, the same episodes as ``dummy`` for the same seed; several scenarios
    each step their share of the environments so (at least one each), with whole-agent actions,
    so per-slot agents, or fewer environments than scenarios, step ``dummy`` environments instead.
    A replay step takes well under a millisecond, less than sending it to another process and
    back, so replay never runs in subprocesses by default. A Docker step waits for wall-clock
    time, so Docker environments run in one process each.

    Raises:
        ScenarioError: ``batched`` asked for where it cannot run, naming why and the fix.
    """
    capabilities = backend_class(backend).capabilities
    batchable = capabilities.batchable and n_envs >= scenarios and not slot_agents
    if kind is VecEnvKind.BATCHED and not batchable:
        raise ScenarioError(
            f"--vec-env batched runs at least one environment per scenario on a batchable "
            f"backend (replay) with whole-agent actions; got backend {backend!r}, {n_envs} "
            f"environments for {scenarios} scenarios, slot agents {slot_agents}; use --vec-env "
            "dummy, or --n-envs of at least the scenarios' number"
        )
    if kind is not VecEnvKind.AUTO:
        return kind
    if batchable:
        return VecEnvKind.BATCHED
    wall_clock = not capabilities.simulated_time
    return VecEnvKind.SUBPROC if n_envs > 1 and wall_clock else VecEnvKind.DUMMY


def environment_shares(n_envs: int, scenarios: int) -> list[int]:
    """How many of ``n_envs`` batched environments each of ``scenarios`` steps: as even as can
    be, the first scenarios taking one more where they do not divide."""
    return [n_envs // scenarios + (index < n_envs % scenarios) for index in range(scenarios)]


def make_vec_env(
    scenarios: Sequence[Scenario],
    n_envs: int,
    actions: ActionMapping,
    kind: VecEnvKind = VecEnvKind.AUTO,
    backend: str = "replay",
    reward: str | None = None,
    slot_agents: bool = False,
    own_weight: float = 0.5,
    backend_options: Mapping[str, object] | None = None,
    placer: str = "spread",
) -> VecEnv:
    """``n_envs`` training environments side by side (not yet normalised or seeded).

    Args:
        scenarios: the training scenarios.
        n_envs: how many environments.
        actions: how the agent's actions become limits.
        kind: how they are stepped; see :class:`VecEnvKind`.
        backend: the backend's registered name.
        reward: the reward's name (``None``: the environment's default).
        slot_agents: make every slot an agent (:mod:`dlsched.runs.training.slot_agents`).
        own_weight: with per-slot agents, the weight of an agent's own job in its reward.
        backend_options: keyword arguments of the backend's constructor.
        placer: the placer of arriving jobs, by name (:data:`~dlsched.envs.placement.PLACERS`).
    """
    resolved = resolve_vec_env_kind(kind, n_envs, backend, len(scenarios), slot_agents)
    if resolved is VecEnvKind.BATCHED:
        vectors = []
        for scenario, share in zip(
            scenarios, environment_shares(n_envs, len(scenarios)), strict=True
        ):
            batched = gym.make_vec(
                ENV_IDS[scenario.kind],
                num_envs=share,
                vectorization_mode="vector_entry_point",
                scenario=scenario,
                reward=reward,
                backend_options=backend_options,
                autoreset_mode=AutoresetMode.SAME_STEP,
                placer=placer_named(placer),
            )
            vector = batched.unwrapped
            if not isinstance(vector, SchedulingVectorEnv):
                raise TypeError(
                    f"expected dlsched's batched replay env, got {type(vector).__name__}"
                )
            vectors.append(vector)
        return VecMonitor(BatchedVecEnv(vectors, actions))
    factory: Callable[[], gym.Env[np.ndarray, np.ndarray]] = partial(
        make_training_env,
        tuple(scenarios),
        None if slot_agents else actions,
        backend,
        reward,
        backend_options,
        placer,
    )
    venv: VecEnv
    if resolved is VecEnvKind.SUBPROC:
        venv = SubprocVecEnv([factory] * n_envs)
    else:
        venv = DummyVecEnv([factory] * n_envs)
    if not slot_agents:
        return venv
    reward_fn = telemetry_reward(reward or default_reward(scenarios[0].kind))
    return SlotAgentVecEnv(venv, actions, layout_of(scenarios[0]), reward_fn, own_weight)


def default_reward(kind: JobKind) -> str:
    """The reward an environment of ``kind`` uses unless told otherwise."""
    return InferenceEnv.default_reward if kind is JobKind.INFERENCE else TrainingEnv.default_reward
