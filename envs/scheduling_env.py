"""The single environment shared by the inference and the training environments.

:class:`SchedulingEnv` is one episode of the environment loop (:mod:`dlsched.envs.loop`) on its
backend's :class:`~dlsched.envs.episode_batch.EpisodeBatch` (the replay engine holding one
episode, or a Docker host), behind Gymnasium's ``Env`` API: it turns actions and decisions into
limits (:mod:`dlsched.envs.decision_checks`), and the measurement after each step into the
observation (:mod:`dlsched.envs.observation`), the reward (:mod:`dlsched.envs.rewards`) and the
info, whose ``telemetry`` is the typed snapshot baselines read. The subclasses in
:mod:`dlsched.envs.inference_env` and :mod:`dlsched.envs.training_env` fix the job kind, the
default scenario and reward, and document the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import Any

import gymnasium as gym
import numpy as np

from dlsched.envs.arguments import DEFAULT_LIMIT_FLOOR, EnvironmentKind, check_seed
from dlsched.envs.backend import Backend
from dlsched.envs.decision import Decision
from dlsched.envs.decision_checks import (
    ClipNotice,
    action_limits,
    check_decision,
    decision_limits,
)
from dlsched.envs.errors import require_reset
from dlsched.envs.loop import SchedulingLoop
from dlsched.envs.observation import encode
from dlsched.envs.placement import Placer
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.rendering import RENDER_FPS, RENDER_MODES, FrameRenderer, render_ansi
from dlsched.envs.rewards import RewardFn
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.telemetry import Telemetry
from dlsched.envs.telemetry_columns import TelemetryColumns

#: The one episode of a single environment, as a row mask.
_ONE = np.ones(1, dtype=bool)
#: What a call before the first reset was made on, in its message.
_SUBJECT = "an environment"


class SchedulingEnv(EnvironmentKind, gym.Env[np.ndarray, np.ndarray]):
    """Base of the dlsched environments; see the subclasses for the documentation."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}  # noqa: RUF012  (Gymnasium declares it so)

    def __init__(
        self,
        scenario: str | PathLike[str] | Scenario | None = None,
        backend: str | Backend = "replay",
        reward: str | RewardFn | None = None,
        interval_s: float | None = None,
        placer: Placer | None = None,
        limit_floor: float = DEFAULT_LIMIT_FLOOR,
        backend_options: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **unknown: object,  # refused, with the closest name: gym.make passes misspellings here
    ) -> None:
        setup = self.resolve_arguments(locals())
        self._setup = setup
        self._clip_notice = ClipNotice()
        self.render_mode = render_mode
        self.scenario: Scenario = setup.scenario
        self.backend: Backend = setup.backend
        self.reward_name = setup.reward_name
        self.limit_floor = setup.limit_floor
        self.layout = setup.layout
        self.observation_space = setup.observation_space()
        self.action_space = setup.action_space()
        self._loop = SchedulingLoop(self.backend.episode_batch(self.scenario, 1), setup.placer)
        self._telemetry: Telemetry | None = None
        # The episode's snapshots, kept only for rgb_array frames (its panels span the episode).
        self._history: list[Telemetry] = []
        self._frames = FrameRenderer() if render_mode == "rgb_array" else None

    @property
    def placer(self) -> Placer | None:
        """Where arriving jobs go; ``None`` places as Docker Swarm's spread."""
        return self._loop.placers[0]

    @placer.setter
    def placer(self, placer: Placer | None) -> None:
        self._loop.set_placer(0, placer)

    # ------------------------------------------------------------------ Gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=check_seed(seed))
        columns = self._loop.reset(_ONE, [self.np_random])
        now = columns.telemetry(0)
        self._telemetry = now
        self._history = [now] if self._frames is not None else []
        if self.render_mode == "human":
            self.render()
        return self._observe(columns), self._info(columns, now)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._columns("step()")
        return self._step(
            action_limits(action, None, self.layout, self.limit_floor, self._clip_notice), None
        )

    def step_decision(
        self, decision: Decision
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Step with a typed decision: limits by job id (the others keep theirs), and
        migrations."""
        check_decision(decision)
        limits = decision_limits(
            [decision],
            self._columns("step_decision()"),
            self.layout.slots_per_worker,
            self.limit_floor,
        )
        return self._step(limits, [decision.migrations])

    def render(self) -> str | np.ndarray | None:
        """The current step as ``render_mode`` asks (see :mod:`dlsched.envs.rendering`).

        ``ansi``: a text table of the jobs; ``human``: that table printed (each ``reset`` and
        ``step`` renders it by itself); ``rgb_array``: the latency (or loss) and limit panels
        of the episode so far, ``uint8`` of shape ``(480, 720, 3)``; ``None`` without a mode.
        """
        if self.render_mode == "ansi":
            return render_ansi(self._telemetry, self.kind)
        if self.render_mode == "human":
            print(render_ansi(self._telemetry, self.kind), flush=True)
            return None
        if self._frames is not None:
            return self._frames.frame(self._history, self.kind)
        return None

    def close(self) -> None:
        if self._frames is not None:
            self._frames.close()
        self._loop.batch.close()
        self.backend.close()

    # ------------------------------------------------------------------ decisions

    @property
    def telemetry(self) -> Telemetry:
        """The newest telemetry snapshot (what ``info["telemetry"]`` carried)."""
        return require_reset(self._telemetry, "reading telemetry", _SUBJECT)

    def incidents(self) -> tuple[str, ...]:
        """What the backend reported of this episode that makes its figures doubtful."""
        return self._loop.incidents(0)

    def progress_traces(self) -> tuple[ProgressTrace, ...]:
        """Each job's progress event by event in this episode, where the backend sees the
        workloads' own events (Docker); none on replay."""
        return self._loop.progress_traces(0)

    def decision_to_action(self, decision: Decision) -> np.ndarray:
        """The action array that sets ``decision``'s limits (others keep the limit in force;
        empty slots 0).

        Raises:
            ActionError: a decision :meth:`step_decision` refuses for its limits.
        """
        columns = self._columns("decision_to_action()")
        limits = decision_limits([decision], columns, self.layout.slots_per_worker, 0.0)[0]
        held = np.zeros(self._setup.slots, dtype=bool)
        active = columns.active[0]
        held[columns.worker[0][active] * self.layout.slots_per_worker + columns.slot[0][active]] = (
            True
        )
        action = np.where(held, np.maximum(limits, self.limit_floor), 0.0)
        return action.astype(np.float32)

    # ------------------------------------------------------------------ internals

    def _columns(self, call: str) -> TelemetryColumns:
        """The newest measurement, for ``call`` (what the caller did, named if there is none)."""
        return require_reset(self._loop.columns, call, _SUBJECT)

    def _step(
        self, limits: np.ndarray, migrations: list[tuple[Any, ...]] | None
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        before = self.telemetry
        self._loop.step(limits, migrations, _ONE)
        columns = self._loop.measure(_ONE, self.scenario.interval_s)
        now = columns.telemetry(0)
        self._telemetry = now
        if self._frames is not None:
            self._history.append(now)
        if self._setup.reward is not None:
            reward = float(self._setup.reward(columns)[0])
        else:
            assert self._setup.custom_reward is not None
            reward = float(self._setup.custom_reward(now, before))
        terminated, truncated = self._loop.ends(_ONE)
        if self.render_mode == "human":
            self.render()
        return (
            self._observe(columns),
            reward,
            bool(terminated[0]),
            bool(truncated[0]),
            self._info(columns, now),
        )

    def _observe(self, columns: TelemetryColumns) -> np.ndarray:
        return encode(columns, self.layout, self.scenario.horizon_s)[0]

    def _info(self, columns: TelemetryColumns, telemetry: Telemetry) -> dict[str, Any]:
        return {
            "telemetry": telemetry,
            "satisfied": int(columns.satisfied_count[0]),
            "active": int(columns.active[0].sum()),
            "time_s": telemetry.time_s,
        }
