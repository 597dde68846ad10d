"""The natively batched replay environments: N episodes in arrays, one step for all.

``gym.make_vec("dlsched/Inference-v0", num_envs=256, vectorization_mode="vector_entry_point",
scenario=...)`` (and the same for ``dlsched/Training-v0``) returns an
:class:`InferenceVectorEnv` (:class:`TrainingVectorEnv`): a :class:`gymnasium.vector.VectorEnv`
whose ``num_envs`` episodes run in the arrays of a :class:`~dlsched.envs.replay.batch.ReplayBatch`
and step in one call, the way Gymnasium's ``CartPoleVectorEnv`` does. Its spaces are the single
environment's, batched; its episodes are those of ``num_envs`` single replay environments reset
with the same seeds and stepped with the same actions (:class:`~dlsched.envs.scheduling_env.
SchedulingEnv` is the reference, and ``tests/test_replay_vector.py`` holds the two equal step by
step over whole episodes).

What differs from ``SyncVectorEnv`` over single environments:

- Only the replay backend, Docker Swarm's spread placement and the named rewards of
  :mod:`dlsched.envs.rewards` run batched; anything else raises and names ``vectorization_mode=
  "sync"`` as the fix.
- ``infos`` carries ``satisfied``, ``active`` and ``time_s`` per episode as arrays (with
  Gymnasium's ``_key`` masks). The typed :class:`~dlsched.envs.telemetry.Telemetry` that
  baselines read is built on request only: :meth:`ReplayVectorEnv.telemetry` for one episode, or
  ``infos["telemetry"]`` for all when made with ``telemetry=True`` (slower: a Python object per
  job per step). :attr:`ReplayVectorEnv.columns` has the same measurements as arrays.
- Migrations, which a single environment takes in a :class:`~dlsched.envs.decision.Decision`,
  are given per episode to :meth:`ReplayVectorEnv.step_with_migrations`; or whole decisions,
  one per episode, to :meth:`ReplayVectorEnv.step_decisions` (what baselines return; the
  evaluation harness steps them so).

Autoreset follows Gymnasium 1.x: ``NEXT_STEP`` by default (the step after an episode's last one
resets it, ignoring its action, and returns reward 0), or ``SAME_STEP`` (``autoreset_mode=``):
the episode is reset at once and its last observation and info are in ``infos["final_obs"]`` and
``infos["final_info"]``, as SB3's vector environments expect.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from dlsched.envs.decision import Decision, Migration
from dlsched.envs.decision_checks import check_decision, check_migration, checked_limits
from dlsched.envs.errors import ActionError, BackendError, ScenarioError
from dlsched.envs.observation import ObservationLayout
from dlsched.envs.placement import Placer, SpreadPlacer, SpreadQueue
from dlsched.envs.replay.backend import _DONE, _MIGRATING, _STATE_OF_PHASE, _UNPLACED, IS_ACTIVE
from dlsched.envs.replay.batch import ReplayBatch
from dlsched.envs.replay.columns import TelemetryColumns, column_reward, encode_columns
from dlsched.envs.scenarios.limits import check_scenario_limits
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.scenarios.resolution import DEFAULT_LIMIT_FLOOR, resolve_scenario
from dlsched.envs.telemetry import JobTelemetry, Telemetry, WorkerTelemetry, waiting_job

__all__ = ["BATCHED_BACKEND_OPTIONS", "InferenceVectorEnv", "ReplayVectorEnv", "TrainingVectorEnv"]

#: Time within which a job counts as arrived (the single environment's tolerance).
_ARRIVED_EPS = 1e-9
#: The replay backend's options the batched environment takes.
BATCHED_BACKEND_OPTIONS = ("loss_noise_cv",)


class ReplayVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """``num_envs`` replay episodes of one scenario, stepped together; see the module docstring.

    Args:
        num_envs: episodes side by side.
        scenario: as the single environment's (a name, a path or a Scenario).
        backend: only ``"replay"``.
        reward: a reward name of :mod:`dlsched.envs.rewards` (default: the environment's).
        interval_s: seconds per step, overriding the scenario's.
        placer: only ``None`` or a :class:`~dlsched.envs.placement.SpreadPlacer`.
        limit_floor: the lowest limit, a fraction of a worker in ``(0, 1]``.
        backend_options: keyword arguments of the replay backend (``loss_noise_cv``).
        autoreset_mode: ``NEXT_STEP`` (default) or ``SAME_STEP``.
        telemetry: put every episode's typed Telemetry in ``infos["telemetry"]``.

    Raises:
        ScenarioError, ActionError, BackendError: bad arguments, each naming the value and the fix.
    """

    metadata: dict[str, Any] = {  # noqa: RUF012  (Gymnasium declares it so)
        "render_modes": [],
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    kind: ClassVar[JobKind]
    env_id: ClassVar[str]
    default_scenario: ClassVar[str]
    default_reward: ClassVar[str]

    def __init__(
        self,
        num_envs: int = 1,
        scenario: str | PathLike[str] | Scenario | None = None,
        backend: str = "replay",
        reward: str | None = None,
        interval_s: float | None = None,
        placer: Placer | None = None,
        limit_floor: float = DEFAULT_LIMIT_FLOOR,
        backend_options: Mapping[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        telemetry: bool = False,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ScenarioError(f"num_envs={num_envs!r}; expected an integer >= 1")
        if backend != "replay":
            raise BackendError(
                f"backend={backend!r}: the batched environment runs the replay backend only; "
                f'for another backend use gym.make_vec(..., vectorization_mode="sync")'
            )
        if not isinstance(reward, str | None):
            raise ScenarioError(
                f"reward={reward!r}: the batched environment takes a reward name; for a reward "
                'function use gym.make_vec(..., vectorization_mode="sync")'
            )
        if placer is not None and type(placer) is not SpreadPlacer:
            raise ScenarioError(
                f"placer={type(placer).__name__}: the batched environment places as SpreadPlacer; "
                'for another placer use gym.make_vec(..., vectorization_mode="sync")'
            )
        options = dict(backend_options or {})
        unknown = sorted(set(options) - set(BATCHED_BACKEND_OPTIONS))
        if unknown:
            raise BackendError(
                f"backend_options {unknown} unknown to the replay backend; it takes "
                f"{', '.join(BATCHED_BACKEND_OPTIONS)}"
            )
        loss_noise_cv = float(options.get("loss_noise_cv", 0.01))
        if not (np.isfinite(loss_noise_cv) and 0.0 <= loss_noise_cv < 1.0):
            raise BackendError(
                f"loss_noise_cv={loss_noise_cv!r} must be a coefficient of variation in [0, 1)"
            )
        resolved = resolve_scenario(scenario or self.default_scenario, self.kind, self.env_id)
        if interval_s is not None:
            if not interval_s > 0:
                raise ScenarioError(f"interval_s={interval_s!r} must be a number of seconds > 0")
            resolved = dataclasses.replace(resolved, interval_s=float(interval_s))
        check_scenario_limits(resolved)
        if not 0.0 < limit_floor <= 1.0:
            raise ActionError(f"limit_floor={limit_floor!r} must be in (0, 1]")
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ScenarioError(
                f"autoreset_mode={autoreset_mode!r}; expected one of "
                f"{[AutoresetMode.NEXT_STEP.value, AutoresetMode.SAME_STEP.value]}"
            ) from None
        if mode is AutoresetMode.DISABLED:
            raise ScenarioError(
                f"autoreset_mode={mode.value!r} is not supported; use NextStep or SameStep"
            )
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.num_envs = num_envs
        self.scenario: Scenario = resolved
        self.reward_name = reward or self.default_reward
        self._reward = column_reward(self.reward_name)
        self.limit_floor = float(limit_floor)
        self.with_telemetry = bool(telemetry)
        self.layout = ObservationLayout(len(resolved.workers), resolved.slots_per_worker)
        self.single_observation_space = gym.spaces.Box(
            0.0, 1.0, self.layout.shape, dtype=np.float32
        )
        slots = len(resolved.workers) * resolved.slots_per_worker
        self.single_action_space = gym.spaces.Box(0.0, 1.0, (slots,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.render_mode = None
        self._batch = ReplayBatch(resolved, num_envs, loss_noise_cv)
        jobs = self._batch.jobs
        self._pending = np.zeros((num_envs, jobs), dtype=bool)
        self._slot_job = np.full((num_envs, slots), -1, dtype=np.int64)
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._cpu_before = np.zeros((num_envs, jobs))
        self._iterations_before = np.zeros((num_envs, jobs), dtype=np.int64)
        self._first_loss = np.full((num_envs, jobs), np.nan)
        self._measured_usage = np.zeros((num_envs, jobs))
        self._counts_before = np.zeros((num_envs, len(resolved.workers)), dtype=np.int64)
        self._ended = np.zeros(num_envs, dtype=bool)
        # Whether a job may be pinned to a worker (placed as the placer's exception).
        self._pins = any(group.worker is not None for group in resolved.groups)
        self._columns: TelemetryColumns | None = None

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
                raise ScenarioError(
                    f"reset(seed=...) got {len(seeds)} seeds for {self.num_envs} environments; "
                    "give one per environment, an int, or None"
                )
        mask = np.ones(self.num_envs, dtype=bool)
        if options and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"], dtype=bool)
            if mask.shape != (self.num_envs,):
                raise ScenarioError(
                    f"reset_mask has shape {mask.shape}; expected ({self.num_envs},)"
                )
        self._reset_rows(mask, seeds)
        self._ended[mask] = False
        return self._observe(), self._infos()

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
        if self._columns is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        limits = self._checked_actions(actions)
        if migrations is not None and len(migrations) != self.num_envs:
            raise ActionError(
                f"migrations has {len(migrations)} entries for {self.num_envs} environments; "
                "give one sequence per environment"
            )
        next_step = self.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        restarting = self._ended.copy() if next_step else np.zeros(self.num_envs, dtype=bool)
        live = ~restarting
        before = self._columns
        batch = self._batch
        # Limits go to the jobs the action's slots hold before any migration moves them.
        holding = live[:, None] & IS_ACTIVE[batch.phase]
        position = batch.worker * batch.slots + batch.slot
        batch.set_limits(
            np.where(holding, np.take_along_axis(limits, position, axis=1), batch.limit)
        )
        if migrations is not None:
            for row in np.flatnonzero(live).tolist():
                self._migrate(row, migrations[row], before)
        self._advance_step(live)
        if restarting.any():
            self._reset_rows(restarting, [None] * self.num_envs)
        columns = self._measure_all(live)
        rewards = np.where(live, self._reward(columns) if live.any() else 0.0, 0.0)
        terminated, truncated = self._ends(live)
        observations = self._observe()
        infos = self._infos()
        ended = terminated | truncated
        if next_step:
            self._ended = ended
        elif ended.any():
            final_obs = np.empty(self.num_envs, dtype=object)
            final_info = np.empty(self.num_envs, dtype=object)
            for row in np.flatnonzero(ended).tolist():
                final_obs[row] = observations[row]
                final_info[row] = {key: value[row] for key, value in infos.items() if key[0] != "_"}
            self._reset_rows(ended, [None] * self.num_envs)
            observations = self._observe()
            infos = self._infos()
            infos |= {
                "final_obs": final_obs,
                "_final_obs": ended.copy(),
                "final_info": final_info,
                "_final_info": ended.copy(),
            }
        return observations, rewards.astype(np.float64), terminated, truncated, infos

    def step_decisions(
        self, decisions: Sequence[Decision]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step with one typed decision per episode, as ``SchedulingEnv.step_decision`` takes it.

        ``decisions[i]`` sets limits by job id in episode ``i`` (jobs it does not name keep the
        limit in force) and its migrations; both are checked as the single environment checks
        them. The limits go to the step as float64, unrounded, as the single environment applies
        a decision's limits. An episode that restarts at this step (``NEXT_STEP`` autoreset)
        ignores its decision, as it ignores its action row.

        Raises:
            ActionError: not one decision per episode, or a decision the single environment
                refuses (the message names the job; :meth:`step_with_migrations` names the
                episode of a refused migration).
        """
        if len(decisions) != self.num_envs:
            raise ActionError(
                f"{len(decisions)} decisions for {self.num_envs} environments; give one "
                "Decision per environment"
            )
        columns = self.columns
        batch = self._batch
        # Every slot a job holds keeps its limit unless the decision names the job.
        limits = np.ones((self.num_envs, batch.workers * batch.slots))
        rows, jobs = np.nonzero(columns.active)
        held = batch.worker[rows, jobs] * batch.slots + batch.slot[rows, jobs]
        limits[rows, held] = batch.limit[rows, jobs]
        for row, decision in enumerate(decisions):
            check_decision(decision)
            if decision.limits:
                specs = batch.specs[row]
                present = columns.present[row].tolist()
                active = columns.active[row].tolist()
                arrived = {spec.job_id: active[j] for j, spec in enumerate(specs) if present[j]}
                checked = checked_limits(decision.limits, arrived, self.limit_floor)
                job_of = {spec.job_id: j for j, spec in enumerate(specs)} if checked else {}
                for job_id, limit in checked.items():
                    job = job_of[job_id]
                    position = int(batch.worker[row, job]) * batch.slots + int(batch.slot[row, job])
                    limits[row, position] = limit
            for migration in decision.migrations:
                check_migration(migration)
        return self.step_with_migrations(limits, [decision.migrations for decision in decisions])

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the replay model holds no outside resources."""

    # ------------------------------------------------------------------ typed views

    @property
    def columns(self) -> TelemetryColumns:
        """The newest telemetry of every episode, as arrays."""
        if self._columns is None:
            raise gym.error.ResetNeeded("call reset() before reading telemetry")
        return self._columns

    def telemetry(self, index: int) -> Telemetry:
        """Episode ``index``'s newest telemetry as the single environment's ``info["telemetry"]``
        (built on each call; baselines read it)."""
        columns = self.columns
        batch = self._batch
        if not 0 <= index < self.num_envs:
            raise IndexError(f"environment index {index}; expected 0..{self.num_envs - 1}")
        now = float(batch.now[index])
        # One row of each array as Python numbers, then one object per job built from its fields
        # (JobTelemetry.from_fields): what the single replay backend does, and the cost of a
        # baseline's step on the batched path.
        phase = batch.phase[index].tolist()
        waiting = columns.waiting[index].tolist()
        worker = batch.worker[index].tolist()
        slot = batch.slot[index].tolist()
        limit = batch.limit[index].tolist()
        usage = self._measured_usage[index].tolist()
        cpu_seconds = batch.cpu_seconds[index].tolist()
        units = batch.units[index].tolist()
        latency = batch.latency[index].tolist()
        loss = batch.loss[index].tolist()
        completed = batch.completed[index].tolist()
        total = batch.total[index].tolist()
        jobs = []
        for job, spec in enumerate(batch.specs[index]):
            if phase[job] == _UNPLACED:
                if waiting[job]:
                    jobs.append(waiting_job(spec, now))
                continue
            training = spec.kind is JobKind.TRAINING
            # Every field, in the dataclass's order (see JobTelemetry.from_fields).
            jobs.append(
                JobTelemetry.from_fields(
                    {
                        "job_id": spec.job_id,
                        "workload": spec.workload,
                        "kind": spec.kind,
                        "state": _STATE_OF_PHASE[phase[job]],
                        "worker": worker[job],
                        "slot": slot[job],
                        "arrival_s": spec.arrival_s,
                        "age_s": now - spec.arrival_s,
                        "limit": limit[job],
                        "cpu_usage": usage[job],
                        "cpu_seconds": cpu_seconds[job],
                        "target_s": spec.target_s,
                        "tolerance": spec.tolerance,
                        "batches": 0 if training else units[job],
                        "latency_s": None if math.isnan(latency[job]) else latency[job],
                        "iterations": units[job] if training else 0,
                        "total_iterations": total[job] if training else None,
                        "loss": None if math.isnan(loss[job]) else loss[job],
                        "completed_s": None if math.isnan(completed[job]) else completed[job],
                        "loss_targets": spec.loss_targets,
                    }
                )
            )
        workers = tuple(
            WorkerTelemetry(w, float(batch.cores[w]), float(columns.worker_usage[index, w]))
            for w in range(batch.workers)
        )
        return Telemetry(
            time_s=now, interval_s=self.scenario.interval_s, workers=workers, jobs=tuple(jobs)
        )

    # ------------------------------------------------------------------ episodes

    def _reset_rows(self, rows: np.ndarray, seeds: Sequence[int | None]) -> None:
        """Reset the episodes of ``rows`` as ``SchedulingEnv.reset`` does, then measure them."""
        batch = self._batch
        indices = np.flatnonzero(rows)
        episodes = []
        backend_rngs = []
        for row in indices.tolist():
            seed = seeds[row]
            if seed is not None or self._rngs[row] is None:
                self._rngs[row], _ = seeding.np_random(seed)
            rng = self._rngs[row]
            assert rng is not None
            jobs_rng, backend_rng = rng.spawn(2)
            episodes.append(self.scenario.realise(jobs_rng))
            backend_rngs.append(backend_rng)
        batch.reset_rows(indices.tolist(), episodes, backend_rngs)
        self._pending[indices] = batch.exists[indices]
        self._slot_job[indices] = -1
        self._first_loss[indices] = np.nan
        self._cpu_before[indices] = 0.0
        self._iterations_before[indices] = 0
        self._measured_usage[indices] = 0.0
        self._counts_before[indices] = 0
        self._place_first(indices)
        batch.advance(rows, np.zeros(self.num_envs))
        self._measure(rows, 0.0)

    def _place_first(self, rows: np.ndarray) -> None:
        """Place the jobs that arrive at time 0 in the episodes ``rows`` just reset.

        On empty workers the spread placer deals the arrivals round the workers in arrival
        order (fewest jobs, then lowest index): the ``k``-th goes to worker ``k % workers``,
        slot ``k // workers``, until the slots run out. A scenario that pins jobs to workers
        places each episode as ``_place_arrivals`` does.
        """
        batch = self._batch
        if self._pins:
            zeros = np.zeros(batch.workers, dtype=np.int64)
            self._place({row: self._place_arrivals(row, 0.0, zeros) for row in rows.tolist()})
            return
        arrived = self._pending[rows] & (batch.arrival[rows] <= _ARRIVED_EPS)
        rank = np.cumsum(arrived, axis=1) - 1
        placed = arrived & (rank < batch.workers * batch.slots)
        at, jobs = np.nonzero(placed)
        rank = rank[at, jobs]
        rows = rows[at]
        workers, slots = rank % batch.workers, rank // batch.workers
        self._slot_job[rows, workers * batch.slots + slots] = jobs
        self._pending[rows, jobs] = False
        batch.place(rows, jobs, workers, slots)

    def _checked_actions(self, actions: np.ndarray) -> np.ndarray:
        """Limits per slot from the actions: clipped to the box, then raised to the floor."""
        array = np.asarray(actions, dtype=np.float64)
        expected = (self.num_envs, self.layout.workers * self.layout.slots_per_worker)
        if array.shape != expected:
            raise ActionError(
                f"actions of shape {array.shape}; expected (num_envs, workers x slots_per_worker) "
                f"= {expected}"
            )
        bad = ~np.isfinite(array)
        if bad.any():
            env, slot = (int(i) for i in np.argwhere(bad)[0])
            raise ActionError(
                f"actions of environment {env} have a non-finite value at slot {slot}: "
                f"{float(array[env, slot])!r} ({int(bad.sum())} non-finite in all); every entry "
                "must be a limit in [0, 1]"
            )
        return np.minimum(np.maximum(np.clip(array, 0.0, 1.0), self.limit_floor), 1.0)

    def _migrate(self, row: int, migrations: Sequence[Migration], before: TelemetryColumns) -> None:
        """Move jobs of episode ``row`` as ``SchedulingEnv._migrate`` does (same checks)."""
        batch = self._batch
        specs = batch.specs[row]
        index = {spec.job_id: job for job, spec in enumerate(specs)}
        for migration in migrations:
            job = index.get(migration.job_id)
            if job is None or not before.present[row, job]:
                present = [specs[j].job_id for j in np.flatnonzero(before.present[row])]
                raise ActionError(
                    f"migration of unknown job {migration.job_id!r} in environment {row}; jobs "
                    f"present: {present}"
                )
            running = before.active[row, job] and not before.migrating[row, job]
            if not running:
                state = "waiting" if before.waiting[row, job] else "done"
                if before.migrating[row, job]:
                    state = "migrating"
                raise ActionError(
                    f"cannot migrate job {migration.job_id!r} in state {state} (environment "
                    f"{row}); only running jobs move"
                )
            if not 0 <= migration.worker < batch.workers:
                raise ActionError(
                    f"migration of {migration.job_id!r} to worker {migration.worker} "
                    f"(environment {row}); workers are 0..{batch.workers - 1}"
                )
            current = int(batch.worker[row, job])
            if migration.worker == current:
                continue
            slot = self._free_slot(row, migration.worker)
            if slot is None:
                raise ActionError(
                    f"migration of {migration.job_id!r} to worker {migration.worker} (environment "
                    f"{row}), which has no free slot ({batch.slots} in use)"
                )
            self._slot_job[row, current * batch.slots + int(batch.slot[row, job])] = -1
            self._slot_job[row, migration.worker * batch.slots + slot] = job
            batch.migrate(row, job, migration.worker, slot)

    # ------------------------------------------------------------------ time

    def _advance_step(self, live: np.ndarray) -> None:
        """One interval of every live episode, as ``SchedulingEnv.step_decision`` runs it."""
        batch = self._batch
        start = batch.now.copy()
        end = start + self.scenario.interval_s
        due = live[:, None] & self._pending & (batch.arrival <= end[:, None])
        stages = {
            int(row): sorted(set(batch.arrival[row][due[row]].tolist()))
            for row in np.flatnonzero(due.any(axis=1))
        }
        moved = np.zeros(self.num_envs, dtype=bool)
        counts_moved = np.zeros_like(self._counts_before)
        depth = max((len(times) for times in stages.values()), default=0)
        for stage in range(depth):
            arrival = np.full(self.num_envs, np.nan)
            for row, times in stages.items():
                if stage < len(times):
                    arrival[row] = times[stage]
            with np.errstate(invalid="ignore"):
                behind = arrival > batch.now
            if behind.any():
                batch.advance(behind, np.where(behind, arrival - batch.now, 0.0))
                self._free_finished(behind)
                moved |= behind
                counts_moved[behind] = self._active_counts()[behind]
            placements = {}
            for row in np.flatnonzero(~np.isnan(arrival)).tolist():
                view = counts_moved[row] if moved[row] else self._counts_before[row]
                placements[row] = self._place_arrivals(row, float(arrival[row]), view.copy())
            self._place(placements)
        remaining = np.maximum(end - batch.now, 0.0)
        batch.advance(live, remaining)
        self._free_finished(live)
        waiting = live[:, None] & self._pending & (batch.arrival <= end[:, None] + _ARRIVED_EPS)
        if waiting.any():
            counts = self._active_counts()
            placed = np.zeros(self.num_envs, dtype=bool)
            placements = {}
            for row in np.flatnonzero(waiting.any(axis=1)).tolist():
                placements[row] = self._place_arrivals(row, float(end[row]), counts[row].copy())
                placed[row] = bool(placements[row])
            self._place(placements)
            if placed.any():
                batch.advance(placed, np.zeros(self.num_envs))

    def _free_slot(self, row: int, worker: int) -> int | None:
        slots = self._batch.slots
        free = np.flatnonzero(self._slot_job[row, worker * slots : (worker + 1) * slots] < 0)
        return int(free[0]) if free.size else None

    def _free_finished(self, rows: np.ndarray) -> None:
        """Free the slots of jobs that finished (``SchedulingEnv._free_finished``)."""
        batch = self._batch
        row, job = np.nonzero(rows[:, None] & (batch.phase == _DONE))
        position = batch.worker[row, job] * batch.slots + batch.slot[row, job]
        held = self._slot_job[row, position] == job
        self._slot_job[row[held], position[held]] = -1

    def _active_counts(self, active: np.ndarray | None = None) -> np.ndarray:
        """Per episode and worker, the active jobs (``Telemetry.on_worker``'s length); ``active``
        is the mask of active jobs if the caller has it."""
        batch = self._batch
        if active is None:
            active = IS_ACTIVE[batch.phase]
        return self._per_worker(active, None).astype(np.int64)

    def _per_worker(self, jobs: np.ndarray, values: np.ndarray | None) -> np.ndarray:
        """Per episode and worker, the sum of ``values`` (or the count) of the ``jobs`` there.

        One ``bincount`` over (episode, worker) cells: it adds each cell's values in job order,
        from 0, as ``np.add.at`` and the single environment's loop add them.
        """
        batch = self._batch
        at = np.flatnonzero(jobs)
        cells = at // batch.jobs * batch.workers + batch.worker.reshape(-1)[at]
        weights = None if values is None else values.reshape(-1)[at]
        sums = np.bincount(cells, weights, minlength=self.num_envs * batch.workers)
        return sums.reshape(self.num_envs, batch.workers)

    def _place_arrivals(
        self, row: int, now_s: float, counts: np.ndarray
    ) -> list[tuple[int, int, int]]:
        """The arrived, unplaced jobs of ``row`` that find a free slot, in arrival order, each
        on the worker with the fewest active jobs (``SchedulingEnv._place_arrivals`` with the
        spread placer), as ``(job, worker, slot)``; their slots are taken here, and
        :meth:`_place` starts them."""
        batch = self._batch
        arrived = self._pending[row] & (batch.arrival[row] <= now_s + _ARRIVED_EPS)
        if not arrived.any():
            return []
        empty = self._slot_job[row].reshape(batch.workers, batch.slots) < 0
        queue = SpreadQueue(counts.tolist(), empty.sum(axis=1).tolist())
        # Each worker's free slots, lowest first: the slot _free_slot would find, job by job.
        free_slots: dict[int, list[int]] = {}
        placements = []
        for job in np.flatnonzero(arrived).tolist():
            pinned = batch.specs[row][job].worker
            if pinned is not None:
                worker = pinned if queue.has_free_slot(pinned) else None
            else:
                worker = queue.choose()
            if worker is None:
                continue  # it waits for a slot
            queue.took(worker)
            if worker not in free_slots:
                free_slots[worker] = np.flatnonzero(empty[worker]).tolist()
            slot = free_slots[worker].pop(0)
            self._slot_job[row, worker * batch.slots + slot] = job
            self._pending[row, job] = False
            placements.append((job, worker, slot))
        return placements

    def _place(self, placements: Mapping[int, Sequence[tuple[int, int, int]]]) -> None:
        """Start the ``(job, worker, slot)`` placements of every row, in one call."""
        rows = [row for row, placed in placements.items() for _ in placed]
        if rows:
            jobs, workers, slots = (
                np.array(part, dtype=np.int64)
                for part in zip(*(p for placed in placements.values() for p in placed), strict=True)
            )
            self._batch.place(np.array(rows, dtype=np.int64), jobs, workers, slots)

    # ------------------------------------------------------------------ measurement

    def _measure_all(self, live: np.ndarray) -> TelemetryColumns:
        self._measure(live, self.scenario.interval_s)
        return self.columns

    def _measure(self, rows: np.ndarray, span_s: float) -> None:
        """The telemetry of ``rows`` after ``span_s`` (``SchedulingEnv._measure``)."""
        batch = self._batch
        mask = rows[:, None]
        placed = batch.exists & (batch.phase != _UNPLACED)
        age = batch.now[:, None] - batch.arrival
        if span_s > 0:
            covered = np.minimum(span_s, age)
            covered = np.where(covered == 0, span_s, covered)
            used = np.maximum(batch.cpu_seconds - self._cpu_before, 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                usage = np.where(placed, used / covered, 0.0)
        else:
            usage = np.where(placed, batch.usage, 0.0)
        previous = self._columns
        self._measured_usage = np.where(mask, usage, self._measured_usage)
        new_loss = mask & placed & ~np.isnan(batch.loss) & np.isnan(self._first_loss)
        self._first_loss[new_loss] = batch.loss[new_loss]
        active = batch.exists & IS_ACTIVE[batch.phase]
        worker_usage = self._per_worker(active, self._measured_usage)
        iterations = batch.units if batch.training else np.zeros_like(batch.units)
        iterations_before = (
            self._iterations_before
            if previous is not None
            else np.zeros_like(self._iterations_before)
        )
        # An episode just reset has no telemetry before (the observation's rates start at 0).
        iterations_before = np.where(mask & (span_s == 0), 0, iterations_before)
        waiting = self._pending & (batch.arrival <= batch.now[:, None] + _ARRIVED_EPS)
        columns = TelemetryColumns(
            time_s=batch.now.copy(),
            present=placed | waiting,
            waiting=waiting,
            active=active,
            migrating=active & (batch.phase == _MIGRATING),
            done=batch.exists & (batch.phase == _DONE),
            worker=batch.worker.copy(),
            slot=batch.slot.copy(),
            limit=batch.limit.copy(),
            cpu_usage=self._measured_usage.copy(),
            age_s=age,
            target_s=batch.target.copy(),
            tolerance=batch.tolerance.copy(),
            latency_s=batch.latency.copy(),
            iterations=iterations.copy(),
            iterations_before=iterations_before,
            total_iterations=batch.total.copy() if batch.training else np.zeros_like(batch.total),
            loss=batch.loss.copy(),
            first_loss=self._first_loss.copy(),
            worker_usage=worker_usage,
            worker_jobs=self._active_counts(active),
        )
        if previous is not None and not rows.all():
            # Rows not measured now keep the columns they had.
            for field in dataclasses.fields(columns):
                value = getattr(columns, field.name)
                old = getattr(previous, field.name)
                keep = rows if value.ndim == 1 else mask
                setattr(columns, field.name, np.where(keep, value, old))
        self._columns = columns
        self._cpu_before = np.where(mask, batch.cpu_seconds, self._cpu_before)
        self._iterations_before = np.where(mask, iterations, self._iterations_before)
        self._counts_before = np.where(rows[:, None], columns.worker_jobs, self._counts_before)

    def _ends(self, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        batch = self._batch
        if batch.training:
            finished = (~batch.exists | (batch.phase == _DONE)).all(axis=1)
            terminated = live & ~self._pending.any(axis=1) & finished
        else:
            terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = live & ~terminated & (batch.now >= self.scenario.horizon_s - 1e-9)
        return terminated, truncated

    def _observe(self) -> np.ndarray:
        return encode_columns(self.columns, self.layout, self._batch.cores, self.scenario.horizon_s)

    def _infos(self) -> dict[str, Any]:
        columns = self.columns
        everyone = np.ones(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {
            "satisfied": columns.satisfied_count(),
            "_satisfied": everyone,
            "active": columns.active.sum(axis=1),
            "_active": everyone.copy(),
            "time_s": columns.time_s.copy(),
            "_time_s": everyone.copy(),
        }
        if self.with_telemetry:
            telemetry = np.empty(self.num_envs, dtype=object)
            for index in range(self.num_envs):
                telemetry[index] = self.telemetry(index)
            infos |= {"telemetry": telemetry, "_telemetry": everyone.copy()}
        return infos


class InferenceVectorEnv(ReplayVectorEnv):
    """``dlsched/Inference-v0``'s batched replay twin (see :class:`ReplayVectorEnv`)."""

    kind: ClassVar[JobKind] = JobKind.INFERENCE
    env_id: ClassVar[str] = "dlsched/Inference-v0"
    default_scenario: ClassVar[str] = "dqoes-varied-burst"
    default_reward: ClassVar[str] = "satisfied"


class TrainingVectorEnv(ReplayVectorEnv):
    """``dlsched/Training-v0``'s batched replay twin (see :class:`ReplayVectorEnv`)."""

    kind: ClassVar[JobKind] = JobKind.TRAINING
    env_id: ClassVar[str] = "dlsched/Training-v0"
    default_scenario: ClassVar[str] = "flowcon-10-random"
    default_reward: ClassVar[str] = "active_jobs"
