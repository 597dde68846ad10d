"""The batched environments: N episodes of one scenario, one step for all.

``gym.make_vec("dlsched/Inference-v0", num_envs=256, vectorization_mode="vector_entry_point",
scenario=...)`` (and the same for ``dlsched/Training-v0``) returns an
:class:`~dlsched.envs.inference_env.InferenceVectorEnv`
(:class:`~dlsched.envs.training_env.TrainingVectorEnv`): a :class:`gymnasium.vector.VectorEnv`
whose ``num_envs`` episodes are rows of the environment loop (:mod:`dlsched.envs.loop`) on the
replay engine, stepped in one call, the way Gymnasium's ``CartPoleVectorEnv`` steps its poles.
Its spaces are the single environment's, batched; episode ``i`` reset with seed ``s + i`` is the
episode a single environment reset with that seed runs (the same loop, the same engine).

What differs from ``SyncVectorEnv`` over single environments:

- More than one episode needs a backend that runs many at once (:attr:`~dlsched.envs.backend.
  BackendCapabilities.batchable`, the replay backend); on another it raises and names
  ``vectorization_mode="sync"`` as the fix. One episode runs on any backend.
- ``infos`` carries ``satisfied``, ``active`` and ``time_s`` per episode as arrays (with
  Gymnasium's ``_key`` masks). The typed :class:`~dlsched.envs.telemetry.Telemetry` that
  baselines read is built on request only: :meth:`SchedulingVectorEnv.telemetry` for one
  episode, or ``infos["telemetry"]`` for all when made with ``telemetry=True`` (slower: a Python
  object per job per step). :attr:`SchedulingVectorEnv.columns` has the same measurements as
  arrays.
- Migrations, which a single environment takes in a :class:`~dlsched.envs.decision.Decision`,
  are given per episode to :meth:`SchedulingVectorEnv.step_with_migrations`; or whole
  decisions, one per episode, to :meth:`SchedulingVectorEnv.step_decisions` (what baselines
  return; the evaluation harness steps them so).

Autoreset follows Gymnasium 1.x: ``NEXT_STEP`` by default (the step after an episode's last one
resets it, ignoring its action, and returns reward 0), or ``SAME_STEP`` (``autoreset_mode=``):
the episode is reset at once and its last observation and info are in ``infos["final_obs"]`` and
``infos["final_info"]``, as SB3's vector environments expect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from dlsched.envs.arguments import (
    DEFAULT_LIMIT_FLOOR,
    EnvironmentKind,
    check_seed,
    check_vector_arguments,
)
from dlsched.envs.backend import Backend
from dlsched.envs.decision import Decision, Migration
from dlsched.envs.decision_checks import ClipNotice, action_limits, decision_limits
from dlsched.envs.errors import ActionError, ArgumentError, BackendError, require_reset
from dlsched.envs.loop import SchedulingLoop
from dlsched.envs.observation import encode
from dlsched.envs.placement import Placer
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.rewards import RewardFn
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.size_bounds import MAX_BATCH_SLOTS
from dlsched.envs.telemetry import Telemetry
from dlsched.envs.telemetry_columns import TelemetryColumns


class SchedulingVectorEnv(EnvironmentKind, VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """``num_envs`` episodes of one scenario, stepped together; see the module docstring.

    Args:
        num_envs: episodes side by side.
        scenario: as the single environment's (a name, a path or a Scenario).
        backend: by name or object; for more than one episode, one that runs many at once
            (``"replay"``).
        reward: a reward name of :mod:`dlsched.envs.rewards`, or a function ``(now, before)
            -> float`` of one episode's telemetry (slower: typed telemetry every step).
        interval_s: seconds per step, overriding the scenario's.
        placer: where arriving jobs go (default: Docker Swarm's spread).
        limit_floor: the lowest limit, a fraction of a worker in ``(0, 1]``.
        backend_options: keyword arguments of the backend's constructor.
        autoreset_mode: ``NEXT_STEP`` (default) or ``SAME_STEP``.
        telemetry: put every episode's typed Telemetry in ``infos["telemetry"]``.

    Raises:
        ArgumentError, UnknownNameError, ScenarioError, BackendError: bad arguments, each
            naming the value and the fix.
    """

    metadata: dict[str, Any] = {  # noqa: RUF012  (Gymnasium declares it so)
        "render_modes": [],
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        scenario: str | PathLike[str] | Scenario | None = None,
        backend: str | Backend = "replay",
        reward: str | RewardFn | None = None,
        interval_s: float | None = None,
        placer: Placer | None = None,
        limit_floor: float = DEFAULT_LIMIT_FLOOR,
        backend_options: Mapping[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        telemetry: bool = False,
        **unknown: object,
    ) -> None:
        mode = check_vector_arguments(num_envs, autoreset_mode)
        setup = self.resolve_arguments(locals())
        if MAX_BATCH_SLOTS.exceeded(num_envs * setup.slots):
            raise ArgumentError(
                f"num_envs={num_envs:,} episodes x {setup.slots:,} slots of scenario "
                f"{setup.scenario.name!r} = {num_envs * setup.slots:,} slots: expected "
                f"{MAX_BATCH_SLOTS.expected()}; make fewer episodes at once"
            )
        if num_envs > 1 and not setup.backend.capabilities.batchable:
            raise BackendError(
                f"backend {setup.backend.name!r} runs one episode at a time, not {num_envs}; "
                "the batched environment runs many only on a batchable backend (replay). For "
                'this backend use gym.make_vec(..., vectorization_mode="sync"), or num_envs=1'
            )
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.num_envs = num_envs
        self._setup = setup
        self._clip_notice = ClipNotice()
        self.scenario: Scenario = setup.scenario
        self.backend = setup.backend
        self.reward_name = setup.reward_name
        self.limit_floor = setup.limit_floor
        self.with_telemetry = bool(telemetry)
        self.layout = setup.layout
        self.single_observation_space = setup.observation_space()
        self.single_action_space = setup.action_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.render_mode = None
        self._loop = SchedulingLoop(
            self.backend.episode_batch(self.scenario, num_envs), setup.placer
        )
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._ended = np.zeros(num_envs, dtype=bool)
        # Each episode's last telemetry, kept only for a reward function of one's own.
        self._telemetry: list[Telemetry | None] = [None] * num_envs

    # ------------------------------------------------------------------ Gymnasium API

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset episodes; ``seed`` as Gymnasium's vector environments take it.

        Args:
            seed: ``None``; an int ``s`` (episode ``i`` is seeded ``s + i``); or one seed (or
                ``None``) per episode.
            options: ``{"reset_mask": mask}`` resets only the episodes where ``mask`` is set.
        """
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int | np.integer):
            seeds = [int(seed) + index for index in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ArgumentError(
                    f"reset(seed=...) got {len(seeds)} seeds for {self.num_envs} environments; "
                    "give one per environment, an int, or None"
                )
        mask = np.ones(self.num_envs, dtype=bool)
        if options and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"], dtype=bool)
            if mask.shape != (self.num_envs,):
                raise ArgumentError(
                    f"reset_mask has shape {mask.shape}; expected ({self.num_envs},)"
                )
        columns = self._reset_rows(mask, seeds)
        self._ended[mask] = False
        return self._observe(columns), self._infos(columns)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every episode with its row of ``actions`` (limits per slot, as the single env)."""
        return self.step_with_migrations(actions, None)

    def step_with_migrations(
        self, actions: np.ndarray, migrations: Sequence[Sequence[Migration]] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step, moving jobs first: ``migrations[i]`` are episode ``i``'s, in order (as in
        :meth:`~dlsched.envs.scheduling_env.SchedulingEnv.step_decision`).

        Raises:
            ActionError: a wrong shape or a non-finite entry (naming the episode and the slot),
                or a migration the single environment refuses.
        """
        self._columns("step()")
        limits = action_limits(
            actions, self.num_envs, self.layout, self.limit_floor, self._clip_notice
        )
        return self._step(limits, migrations)

    def step_decisions(
        self, decisions: Sequence[Decision]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step with one typed decision per episode, as ``SchedulingEnv.step_decision`` takes it.

        ``decisions[i]`` sets limits by job id in episode ``i`` (jobs it does not name keep the
        limit in force) and its migrations; both are checked as the single environment checks
        them. An episode that restarts at this step (``NEXT_STEP`` autoreset) ignores its
        decision, as it ignores its action row.

        Raises:
            ActionError: not one decision per episode, or a decision the single environment
                refuses (the message names the job; a refused migration names the episode).
        """
        if len(decisions) != self.num_envs:
            raise ActionError(
                f"{len(decisions)} decisions for {self.num_envs} environments; give one "
                "Decision per environment"
            )
        limits = decision_limits(
            decisions,
            self._columns("step_decisions()"),
            self.layout.slots_per_worker,
            self.limit_floor,
        )
        return self._step(limits, [decision.migrations for decision in decisions])

    def set_placer(self, index: int, placer: Placer | None) -> None:
        """Place episode ``index``'s arriving jobs with ``placer`` (``None``: the spread)."""
        self._loop.set_placer(index, placer)

    def incidents(self, index: int) -> tuple[str, ...]:
        """What the backend reported of episode ``index`` that makes its figures doubtful."""
        return self._loop.incidents(index)

    def progress_traces(self, index: int) -> tuple[ProgressTrace, ...]:
        """Episode ``index``'s jobs' progress event by event, where the backend sees the
        workloads' own events (Docker); none on replay."""
        return self._loop.progress_traces(index)

    def close_extras(self, **kwargs: Any) -> None:
        """Release what the backend holds."""
        self._loop.batch.close()
        self.backend.close()

    # ------------------------------------------------------------------ typed views

    @property
    def columns(self) -> TelemetryColumns:
        """The newest telemetry of every episode, as arrays."""
        return self._columns("reading telemetry")

    def telemetry(self, index: int) -> Telemetry:
        """Episode ``index``'s newest telemetry as the single environment's ``info["telemetry"]``
        (built on each call; baselines read it)."""
        columns = self._columns("reading telemetry")
        if not 0 <= index < self.num_envs:
            raise IndexError(f"environment index {index}; expected 0..{self.num_envs - 1}")
        return columns.telemetry(index)

    # ------------------------------------------------------------------ internals

    def _columns(self, call: str) -> TelemetryColumns:
        """The newest measurement, for ``call`` (what the caller did, named if there is none)."""
        return require_reset(self._loop.columns, call, "a batched environment")

    def _step(
        self, limits: np.ndarray, migrations: Sequence[Sequence[Migration]] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if migrations is not None and len(migrations) != self.num_envs:
            raise ActionError(
                f"migrations has {len(migrations)} entries for {self.num_envs} environments; "
                "give one sequence per environment"
            )
        next_step = self.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        restarting = self._ended.copy() if next_step else np.zeros(self.num_envs, dtype=bool)
        live = ~restarting
        self._loop.step(limits, migrations, live)
        if np.count_nonzero(restarting):
            self._reset_rows(restarting, [None] * self.num_envs)
        columns = self._loop.measure(live, self.scenario.interval_s)
        rewards = np.where(live, self._rewards(columns, live), 0.0)
        terminated, truncated = self._loop.ends(live)
        observations = self._observe(columns)
        infos = self._infos(columns)
        ended = terminated | truncated
        if next_step:
            self._ended = ended
        elif np.count_nonzero(ended):
            final_obs = np.empty(self.num_envs, dtype=object)
            final_info = np.empty(self.num_envs, dtype=object)
            for row in np.flatnonzero(ended).tolist():
                final_obs[row] = observations[row]
                final_info[row] = {key: value[row] for key, value in infos.items() if key[0] != "_"}
            columns = self._reset_rows(ended, [None] * self.num_envs)
            observations = self._observe(columns)
            infos = self._infos(columns)
            infos |= {
                "final_obs": final_obs,
                "_final_obs": ended.copy(),
                "final_info": final_info,
                "_final_info": ended.copy(),
            }
        return observations, rewards.astype(np.float64), terminated, truncated, infos

    def _rewards(self, columns: TelemetryColumns, live: np.ndarray) -> np.ndarray:
        if not np.count_nonzero(live):
            return np.zeros(self.num_envs)
        if self._setup.reward is not None:
            return self._setup.reward(columns)
        assert self._setup.custom_reward is not None
        rewards = np.zeros(self.num_envs)
        for row in np.flatnonzero(live).tolist():
            now = columns.telemetry(row)
            before = self._telemetry[row]
            assert before is not None
            rewards[row] = self._setup.custom_reward(now, before)
            self._telemetry[row] = now
        return rewards

    def _reset_rows(self, rows: np.ndarray, seeds: Sequence[int | None]) -> TelemetryColumns:
        """Reset the episodes of ``rows``: each from a generator seeded with its seed, or from
        its own generator's next state."""
        rngs = []
        for row in np.flatnonzero(rows).tolist():
            seed = check_seed(seeds[row])
            if seed is not None or self._rngs[row] is None:
                self._rngs[row], _ = seeding.np_random(seed)
            rng = self._rngs[row]
            assert rng is not None
            rngs.append(rng)
        columns = self._loop.reset(rows, rngs)
        if self._setup.custom_reward is not None:
            for row in np.flatnonzero(rows).tolist():
                self._telemetry[row] = columns.telemetry(row)
        return columns

    def _observe(self, columns: TelemetryColumns) -> np.ndarray:
        return encode(columns, self.layout, self.scenario.horizon_s)

    def _infos(self, columns: TelemetryColumns) -> dict[str, Any]:
        everyone = np.ones(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {
            "satisfied": columns.satisfied_count.copy(),
            "_satisfied": everyone,
            "active": columns.active.sum(axis=1),
            "_active": everyone.copy(),
            "time_s": columns.time_s.copy(),
            "_time_s": everyone.copy(),
        }
        if self.with_telemetry:
            telemetry = np.empty(self.num_envs, dtype=object)
            for index in range(self.num_envs):
                telemetry[index] = columns.telemetry(index)
            infos |= {"telemetry": telemetry, "_telemetry": everyone.copy()}
        return infos
