"""The environment machinery shared by the inference and the training environments.

:class:`SchedulingEnv` owns simulated or wall-clock time as the backend reports it, the arrival
of jobs, their placement on workers and slots, and the translation between action arrays and
limits. The subclasses in :mod:`dlsched.envs.inference_env` and :mod:`dlsched.envs.training_env`
fix the job kind, the default scenario and reward, and document the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from dlsched.envs.arguments import check_env_arguments, check_seed
from dlsched.envs.backend import Backend, Occupancy
from dlsched.envs.backends import make_backend
from dlsched.envs.decision import Decision, Placement
from dlsched.envs.decision_checks import (
    check_decision,
    check_migration,
    checked_limits,
    clip_limit,
)
from dlsched.envs.errors import ActionError, ArgumentError
from dlsched.envs.observation import ObservationLayout, encode
from dlsched.envs.placement import Placer, SpreadPlacer, SpreadQueue
from dlsched.envs.rendering import RENDER_FPS, RENDER_MODES, FrameRenderer, render_ansi
from dlsched.envs.rewards import RewardFn, reward_function
from dlsched.envs.scenarios.limits import check_scenario_limits
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.scenarios.resolution import DEFAULT_LIMIT_FLOOR, resolve_scenario
from dlsched.envs.telemetry import (
    JobState,
    JobTelemetry,
    QoEClass,
    Telemetry,
    WorkerTelemetry,
    waiting_job,
)
from dlsched.envs.values import is_number, shown


class SchedulingEnv(gym.Env[np.ndarray, np.ndarray]):
    """Base of the dlsched environments; see the subclasses for the documentation."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}  # noqa: RUF012  (Gymnasium declares it so)

    #: The kind of job the environment runs.
    kind: ClassVar[JobKind]
    #: Registered id, for messages.
    env_id: ClassVar[str]
    default_scenario: ClassVar[str]
    default_reward: ClassVar[str]

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
        check_env_arguments(
            self.env_id,
            scenario=scenario,
            backend=backend,
            reward=reward,
            interval_s=interval_s,
            placer=placer,
            limit_floor=limit_floor,
            backend_options=backend_options,
            unknown=unknown,
        )
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ArgumentError(
                f"render_mode={render_mode!r}: expected one of {', '.join(RENDER_MODES)}, or "
                "None to render nothing"
            )
        self.render_mode = render_mode
        resolved = resolve_scenario(scenario or self.default_scenario, self.kind, self.env_id)
        if interval_s is not None:
            resolved = dataclasses.replace(resolved, interval_s=float(interval_s))
        check_scenario_limits(resolved)
        self.scenario: Scenario = resolved
        self.backend: Backend = (
            make_backend(backend, **dict(backend_options or {}))
            if isinstance(backend, str)
            else backend
        )
        self.reward_name = (
            reward
            if isinstance(reward, str)
            else (getattr(reward, "__name__", "custom") if reward else self.default_reward)
        )
        self.reward_fn: RewardFn = (
            reward if callable(reward) else reward_function(reward or self.default_reward)
        )
        self.placer: Placer = placer or SpreadPlacer()
        self.limit_floor = float(limit_floor)
        self.layout = ObservationLayout(len(resolved.workers), resolved.slots_per_worker)
        self.observation_space = gym.spaces.Box(0.0, 1.0, self.layout.shape, dtype=np.float32)
        slots = len(resolved.workers) * resolved.slots_per_worker
        self.action_space = gym.spaces.Box(0.0, 1.0, (slots,), dtype=np.float32)
        self._jobs: tuple[JobSpec, ...] = ()
        self._pending: list[JobSpec] = []  # arrived or not, not yet placed, in arrival order
        self._slots: list[list[str | None]] = []
        self._telemetry: Telemetry | None = None
        self._first_loss: dict[str, float] = {}
        # The episode's snapshots, kept only for rgb_array frames (its panels span the episode).
        self._history: list[Telemetry] = []
        self._frames = FrameRenderer() if render_mode == "rgb_array" else None

    # ------------------------------------------------------------------ Gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=check_seed(seed))
        jobs_rng, backend_rng = self.np_random.spawn(2)
        self._jobs = self.scenario.realise(jobs_rng)
        self._pending = list(self._jobs)
        self._slots = [[None] * self.scenario.slots_per_worker for _ in self.scenario.workers]
        self._first_loss = {}
        backend_telemetry = self.backend.reset(self.scenario, self._jobs, backend_rng)
        self._telemetry = self._with_waiting(backend_telemetry)
        self._place_arrivals(0.0)
        now = self._measure(self.backend.advance(0.0), self._telemetry, 0.0)
        self._telemetry = now
        self._history = [now] if self._frames is not None else []
        return encode(now, None, self._first_loss, self.layout, self.scenario.horizon_s), (
            self._info(now)
        )

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self.step_decision(Decision(limits=self.action_to_limits(action)))

    def render(self) -> str | np.ndarray | None:
        """The current step as ``render_mode`` asks (see :mod:`dlsched.envs.rendering`).

        ``ansi``: a text table of the jobs; ``rgb_array``: the latency (or loss) and limit panels
        of the episode so far, ``uint8`` of shape ``(480, 720, 3)``; ``None`` without a mode.
        """
        if self.render_mode == "ansi":
            return render_ansi(self._telemetry, self.kind)
        if self._frames is not None:
            return self._frames.frame(self._history, self.kind)
        return None

    def close(self) -> None:
        if self._frames is not None:
            self._frames.close()
        self.backend.close()

    # ------------------------------------------------------------------ decisions

    @property
    def telemetry(self) -> Telemetry:
        """The newest telemetry snapshot (what ``info["telemetry"]`` carried)."""
        if self._telemetry is None:
            raise gym.error.ResetNeeded("call reset() before reading telemetry")
        return self._telemetry

    def action_to_limits(self, action: np.ndarray) -> dict[str, float]:
        """Limits by job id from an action array, by the clipping rule of the class docstring."""
        array = _action_array(action)
        if array.shape != self.action_space.shape:
            raise ActionError(
                f"action shape {array.shape} does not match the action space "
                f"{self.action_space.shape} (workers x slots_per_worker = "
                f"{len(self.scenario.workers)} x {self.scenario.slots_per_worker})"
            )
        finite = np.isfinite(array)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise ActionError(
                f"action has non-finite values at indices {bad.tolist()}: "
                f"{array[bad].tolist()}; every entry must be a limit in [0, 1]"
            )
        # An agent's raw output may leave the box; a typed Decision may not (it is refused).
        # (np.clip's own wrapper costs more than the two ufuncs it calls.)
        clipped = np.minimum(np.maximum(array, 0.0), 1.0).tolist()
        limits = {}
        row = 0  # self.layout.row(worker, slot): the slots of each worker in turn
        for slots in self._slots:
            for job_id in slots:
                if job_id is not None:
                    limits[job_id] = clipped[row]
                row += 1
        return limits

    def decision_to_action(self, decision: Decision) -> np.ndarray:
        """The action array that sets ``decision``'s limits (others keep the limit in force)."""
        self._checked_limits(decision.limits, self.telemetry)  # NaN or negative: refused here
        action = np.zeros(self.layout.workers * self.layout.slots_per_worker, dtype=np.float32)
        for job in self.telemetry.active_jobs:
            if job.worker is not None and job.slot is not None:
                limit = decision.limits.get(job.job_id, job.limit)
                action[self.layout.row(job.worker, job.slot)] = self._clip(limit)
        return action

    def step_decision(
        self, decision: Decision
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Step with a typed decision: limits by job id, and migrations."""
        before = self.telemetry
        check_decision(decision)
        limits = self._checked_limits(decision.limits, before)
        migrations = self._migrate(decision, before)
        self.backend.apply(limits, (), migrations)
        clock = before.time_s
        end = clock + self.scenario.interval_s
        # The spread placer needs only where the jobs are: no full measurement per arrival.
        spread = type(self.placer) is SpreadPlacer
        where: Telemetry | Occupancy | None = None  # None: as `before` shows
        for arrival in sorted({job.arrival_s for job in self._pending if job.arrival_s <= end}):
            if arrival > clock:
                if spread:
                    where = self.backend.advance_to_arrival(arrival - clock)
                    self._free_ended(where.ended)
                else:
                    where = self.backend.advance(arrival - clock)
                    self._free_ended(Occupancy.of(where).ended)
                clock = where.time_s
            self._place_arrivals(arrival, where)
        backend_now = self.backend.advance(max(end - clock, 0.0))
        occupancy = Occupancy.of(backend_now)
        self._free_ended(occupancy.ended)
        # A freed slot may take a waiting job.
        if self._place_arrivals(end, occupancy if spread else backend_now):
            backend_now = self.backend.advance(0.0)
        now = self._measure(backend_now, before, self.scenario.interval_s)
        self._telemetry = now
        if self._frames is not None:
            self._history.append(now)
        reward = float(self.reward_fn(now, before))
        terminated = (
            self.kind is JobKind.TRAINING
            and not self._pending
            and all(job.state in (JobState.DONE, JobState.FAILED) for job in now.jobs)
        )
        truncated = not terminated and now.time_s >= self.scenario.horizon_s - 1e-9
        observation = encode(now, before, self._first_loss, self.layout, self.scenario.horizon_s)
        return observation, reward, terminated, truncated, self._info(now)

    # ------------------------------------------------------------------ internals

    def _clip(self, limit: float) -> float:
        return clip_limit(limit, self.limit_floor)

    def _checked_limits(self, limits: Mapping[str, float], before: Telemetry) -> dict[str, float]:
        arrived = {job.job_id: job.active for job in before.jobs}
        return checked_limits(limits, arrived, self.limit_floor)

    def _migrate(self, decision: Decision, before: Telemetry) -> list[Placement]:
        moves = []
        for migration in decision.migrations:
            check_migration(migration)
            try:
                job = before.job(migration.job_id)
            except KeyError:
                raise ActionError(
                    f"migration of unknown job {migration.job_id!r}; jobs present: "
                    f"{[j.job_id for j in before.jobs]}"
                ) from None
            if job.state is not JobState.RUNNING or job.worker is None:
                raise ActionError(
                    f"cannot migrate job {job.job_id!r} in state {job.state.value}; only "
                    "running jobs move"
                )
            if not 0 <= migration.worker < len(self._slots):
                raise ActionError(
                    f"migration of {job.job_id!r} to worker {migration.worker}; workers are "
                    f"0..{len(self._slots) - 1}"
                )
            if migration.worker == job.worker:
                continue
            slot = self._free_slot(migration.worker)
            if slot is None:
                raise ActionError(
                    f"migration of {job.job_id!r} to worker {migration.worker}, which has no "
                    f"free slot ({self.scenario.slots_per_worker} in use)"
                )
            assert job.slot is not None
            self._slots[job.worker][job.slot] = None
            self._slots[migration.worker][slot] = job.job_id
            moves.append(Placement(job.job_id, migration.worker, slot))
        return moves

    def _free_slot(self, worker: int) -> int | None:
        for slot, occupant in enumerate(self._slots[worker]):
            if occupant is None:
                return slot
        return None

    def _free_ended(self, ended: Sequence[tuple[str, int, int]]) -> None:
        """Free the slots of the ``(job_id, worker, slot)`` jobs that ended."""
        for job_id, worker, slot in ended:
            slots = self._slots[worker]
            if slots[slot] == job_id:
                slots[slot] = None

    def _place_arrivals(self, now_s: float, where: Telemetry | Occupancy | None = None) -> bool:
        """Place every arrived, unplaced job that finds a free slot; whether any was placed.

        ``where`` is the backend at ``now_s`` (``None``: as the last measurement showed it); the
        spread placer reads only its occupancy, any other placer a telemetry snapshot.
        """
        arrived = [job for job in self._pending if job.arrival_s <= now_s + 1e-9]
        if not arrived:  # most steps: the placer's view would be built for nothing
            return False
        if type(self.placer) is SpreadPlacer:
            if not isinstance(where, Occupancy):
                where = Occupancy.of(where if where is not None else self.telemetry)
            return self._spread_arrivals(arrived, where.active_per_worker)
        assert not isinstance(where, Occupancy), "only the spread placer places from an occupancy"
        view = self._with_waiting(where) if where is not None else self.telemetry
        placements = []
        for job in arrived:
            if job.worker is not None:
                candidates = [job.worker] if self._free_slot(job.worker) is not None else []
            else:
                candidates = [w for w in range(len(self._slots)) if self._free_slot(w) is not None]
            if not candidates:
                continue  # it waits for a slot
            worker = (
                self.placer.place(job, view, candidates) if len(candidates) > 1 else (candidates[0])
            )
            if worker not in candidates:
                raise ActionError(
                    f"placer {type(self.placer).__name__} chose worker {worker} for "
                    f"{job.job_id!r}; expected one of {candidates}"
                )
            slot = self._free_slot(worker)
            assert slot is not None
            self._slots[worker][slot] = job.job_id
            self._pending.remove(job)
            placements.append(Placement(job.job_id, worker, slot))
            view = _with_placed(view, job, worker, slot)
        if placements:
            self.backend.apply({}, placements, ())
        return bool(placements)

    def _spread_arrivals(self, arrived: Sequence[JobSpec], counts: Sequence[int]) -> bool:
        """``_place_arrivals`` with the spread placer, ``counts`` the active jobs per worker: the
        same placements, found in time linear in the jobs
        (:class:`~dlsched.envs.placement.SpreadQueue`)."""
        queue = SpreadQueue(
            counts,
            [sum(occupant is None for occupant in slots) for slots in self._slots],
        )
        placements = []
        for job in arrived:
            if job.worker is not None:
                worker = job.worker if queue.has_free_slot(job.worker) else None
            else:
                worker = queue.choose()
            if worker is None:
                continue  # it waits for a slot
            slot = self._free_slot(worker)
            assert slot is not None
            self._slots[worker][slot] = job.job_id
            self._pending.remove(job)
            placements.append(Placement(job.job_id, worker, slot))
            queue.took(worker)
        if placements:
            self.backend.apply({}, placements, ())
        return bool(placements)

    def _with_waiting(self, telemetry: Telemetry) -> Telemetry:
        """Add arrived jobs still waiting for a slot, which no backend knows of yet."""
        waiting = [
            waiting_job(job, telemetry.time_s)
            for job in self._pending
            if job.arrival_s <= telemetry.time_s + 1e-9
        ]
        if not waiting:
            return telemetry
        jobs = sorted((*telemetry.jobs, *waiting), key=lambda j: (j.arrival_s, j.job_id))
        return dataclasses.replace(telemetry, jobs=tuple(jobs))

    def _measure(self, backend_now: Telemetry, before: Telemetry, span_s: float) -> Telemetry:
        """Telemetry with CPU usage averaged over the whole step, and waiting jobs added."""
        seconds_before = {job.job_id: job.cpu_seconds for job in before.jobs}
        jobs = []
        # Per worker, its active jobs' usage added in job order from 0, as sum() adds it.
        usage: dict[int, float] = {worker.index: 0 for worker in backend_now.workers}
        for job in backend_now.jobs:
            if span_s > 0:
                covered = min(span_s, job.age_s) or span_s
                used = job.cpu_seconds - seconds_before.get(job.job_id, 0.0)
                cpu_usage = max(used, 0.0) / covered
                # A backend that measured over the same span reports the same float: the
                # (immutable) measurement is kept; a zero is copied, as 0.0 and -0.0 are equal.
                if not (cpu_usage == job.cpu_usage and cpu_usage and type(job.cpu_usage) is float):
                    job = job.with_cpu_usage(cpu_usage)
            if job.loss is not None and job.job_id not in self._first_loss:
                self._first_loss[job.job_id] = job.loss
            if job.active and job.worker in usage:
                usage[job.worker] += job.cpu_usage
            jobs.append(job)
        workers = tuple(
            WorkerTelemetry(w.index, w.cores, usage[w.index]) for w in backend_now.workers
        )
        return self._with_waiting(
            Telemetry(
                time_s=backend_now.time_s,
                interval_s=backend_now.interval_s,
                workers=workers,
                jobs=tuple(jobs),
            )
        )

    def _info(self, telemetry: Telemetry) -> dict[str, Any]:
        return {
            "telemetry": telemetry,
            "satisfied": telemetry.count(QoEClass.S),
            "active": len(telemetry.active_jobs),
            "time_s": telemetry.time_s,
        }


def _with_placed(telemetry: Telemetry, job: JobSpec, worker: int, slot: int) -> Telemetry:
    """The placer's view after ``job`` was placed, so a burst spreads over the workers."""
    placed = dataclasses.replace(
        waiting_job(job, telemetry.time_s), state=JobState.RUNNING, worker=worker, slot=slot
    )
    others: Sequence[JobTelemetry] = [j for j in telemetry.jobs if j.job_id != job.job_id]
    return dataclasses.replace(telemetry, jobs=(*others, placed))


def _action_array(action: object) -> np.ndarray:
    """``action`` as an array of float64, if it holds only real numbers: a numpy array of
    integers or floats, a (nested) list or tuple of Python or numpy numbers, a tensor.

    Raises:
        ActionError: a ragged sequence, or values that are not real numbers (strings, None,
            booleans, complex numbers, objects); numpy would convert ``"0.5"`` and ``True``
            without a word, or fail deep inside with a ``TypeError``.
    """
    try:
        array = np.asarray(action)
    except (ValueError, TypeError) as error:
        raise ActionError(
            f"action {shown(action)} is not an array of numbers ({error}); expected a flat "
            "array of limits in [0, 1], one per slot"
        ) from None
    if array.dtype.kind == "O" and all(is_number(value) for value in array.flat):
        try:  # an object array of numbers (Python ints beyond int64 make one) is numbers
            array = array.astype(np.float64)
        except OverflowError:
            raise ActionError(
                f"action {shown(action)} holds a number beyond a float's range; expected "
                "limits in [0, 1], one per slot"
            ) from None
    if array.dtype.kind not in "iuf":
        raise ActionError(
            f"action {shown(action)} holds {array.dtype} values; expected numbers (limits in "
            "[0, 1], one per slot), e.g. a float32 array"
        )
    return array.astype(np.float64, copy=False)
