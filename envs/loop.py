"""The scheduling environments' loop: what happens to every episode in one step.

:class:`SchedulingLoop` drives the episodes of an
:class:`~dlsched.envs.episode_batch.EpisodeBatch`, one episode for a single environment
(:mod:`dlsched.envs.scheduling_env`), many for a batched one
(:mod:`dlsched.envs.scheduling_vector_env`). It owns what an environment adds to the backend:

- **episodes**: each reset draws its jobs from the episode's generator
  (:meth:`~dlsched.envs.scenarios.model.Scenario.realise`) and hands the backend the rest of it;
- **slots**: which job holds each slot; a job that ends frees its slot;
- **arrivals**: a step stops at every arrival within it, and the arrived jobs that find a free
  slot are placed there (by Docker Swarm's spread, the worker with the fewest active jobs, or
  by the loop's :class:`~dlsched.envs.placement.Placer`); the others wait for a slot;
- **actuation**: the limits of the jobs that hold slots, and migrations, checked against the
  slots;
- **measurement**: every job's CPU usage over the whole step, waiting jobs, first losses, as
  :class:`~dlsched.envs.telemetry_columns.TelemetryColumns`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.envs.decision import Migration
from dlsched.envs.episode_batch import (
    HAS_ENDED,
    IS_ACTIVE,
    STATE_OF_PHASE,
    UNPLACED,
    EpisodeBatch,
    Move,
)
from dlsched.envs.errors import ActionError, require_reset
from dlsched.envs.placement import Placer, SpreadPlacer, SpreadQueue
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import JobKind, JobSpec
from dlsched.envs.telemetry import JobState, Telemetry, waiting_job
from dlsched.envs.telemetry_columns import TelemetryColumns, columns_of

#: Time within which a job counts as arrived (absorbs the rounding of summed intervals).
ARRIVED_EPS = 1e-9


class SchedulingLoop:
    """Steps the episodes of ``batch`` (see the module docstring).

    Args:
        batch: the backend's episodes.
        placer: where arriving jobs go in every episode; ``None`` or a
            :class:`~dlsched.envs.placement.SpreadPlacer` places as Docker Swarm's spread, in
            time linear in the jobs.

    Attributes:
        placers: per episode, its placer (``None``: the spread); a policy that places jobs
            sets its own episode's.
    """

    def __init__(self, batch: EpisodeBatch, placer: Placer | None = None) -> None:
        self.batch = batch
        self.scenario = batch.scenario
        self.placers: list[Placer | None] = [_unless_spread(placer)] * batch.episodes
        episodes, jobs = batch.episodes, batch.jobs
        self.episodes = episodes
        self._pending = np.zeros((episodes, jobs), dtype=bool)  # arrived or not, not placed
        self._slot_job = np.full((episodes, batch.workers * batch.slots), -1, dtype=np.int64)
        self._cpu_before = np.zeros((episodes, jobs))
        self._iterations_before = np.zeros((episodes, jobs), dtype=np.int64)
        self._first_loss = np.full((episodes, jobs), np.nan)
        self._measured_usage = np.zeros((episodes, jobs))
        self._counts_before = np.zeros((episodes, batch.workers), dtype=np.int64)
        self._training = self.scenario.kind is JobKind.TRAINING
        # Whether a job may be pinned to a worker (placed as the placer's exception).
        self._pins = any(group.worker is not None for group in self.scenario.groups)
        self._columns: TelemetryColumns | None = None
        self._ended_seen = 0  # the batch's ended_jobs when the loop last freed slots
        self._rows = np.arange(episodes)[:, None]

    @property
    def columns(self) -> TelemetryColumns | None:
        """The newest telemetry of every episode (``None`` before the first reset)."""
        return self._columns

    def set_placer(self, row: int, placer: Placer | None) -> None:
        """Place episode ``row``'s arrivals with ``placer`` (``None``: the spread)."""
        self.placers[row] = _unless_spread(placer)

    # ------------------------------------------------------------------ episodes

    def reset(self, rows: np.ndarray, rngs: Sequence[np.random.Generator]) -> TelemetryColumns:
        """Start a new episode in every row that ``rows`` (a mask) sets and measure it.

        Args:
            rows: the rows to reset.
            rngs: the generators of those rows, in order: each episode's jobs and backend
                draw from generators it spawns.
        """
        batch = self.batch
        indices = np.flatnonzero(rows)
        episodes = []
        backend_rngs = []
        for rng in rngs:
            jobs_rng, backend_rng = episode_generators(rng)
            episodes.append(self.scenario.realise(jobs_rng))
            backend_rngs.append(backend_rng)
        batch.reset_rows(indices.tolist(), episodes, backend_rngs)
        self._pending[indices] = batch.state.exists[indices]
        self._slot_job[indices] = -1
        self._first_loss[indices] = np.nan
        self._cpu_before[indices] = 0.0
        self._iterations_before[indices] = 0
        self._measured_usage[indices] = 0.0
        self._counts_before[indices] = 0
        self._place_first(indices)
        batch.advance(rows, np.zeros(self.episodes))
        return self.measure(rows, 0.0)

    def _place_first(self, rows: np.ndarray) -> None:
        """Place the jobs that arrive at time 0 in the episodes ``rows`` just reset.

        On empty workers the spread placer deals the arrivals round the workers in arrival
        order (fewest jobs, then lowest index): the ``k``-th goes to worker ``k % workers``,
        slot ``k // workers``, until the slots run out. A scenario that pins jobs to workers,
        or another placer, places each episode as :meth:`_place_arrivals` does.
        """
        batch = self.batch
        if self._pins or any(placer is not None for placer in self.placers):
            zeros = np.zeros(batch.workers, dtype=np.int64)
            self._place({row: self._place_arrivals(row, 0.0, zeros) for row in rows.tolist()})
            return
        arrived = self._pending[rows] & (batch.state.arrival[rows] <= ARRIVED_EPS)
        rank = np.cumsum(arrived, axis=1) - 1
        placed = arrived & (rank < batch.workers * batch.slots)
        at, jobs = np.nonzero(placed)
        rank = rank[at, jobs]
        rows = rows[at]
        workers, slots = rank % batch.workers, rank // batch.workers
        self._slot_job[rows, workers * batch.slots + slots] = jobs
        self._pending[rows, jobs] = False
        batch.place(rows, jobs, workers, slots)

    # ------------------------------------------------------------------ a step

    def step(
        self,
        limits: np.ndarray,
        migrations: Sequence[Sequence[Migration]] | None,
        live: np.ndarray,
    ) -> None:
        """One interval of every episode that ``live`` (a mask) sets; then :meth:`measure`.

        Args:
            limits: per row, the limit of the job in each slot (``(episodes, workers x
                slots_per_worker)``, checked: in ``[floor, 1]``); empty slots' are ignored.
            migrations: per row, its migrations in order (checked here against the slots), or
                ``None`` for none.
            live: the rows to step.

        Raises:
            ActionError: a migration of a job that is not running, to a worker out of range or
                without a free slot (nothing was stepped).
        """
        batch = self.batch
        state = batch.state
        moves: list[Move] = []
        if migrations is not None:
            taken = self._slot_job.copy()
            try:
                for row in np.flatnonzero(live).tolist():
                    moves += self._moves(row, migrations[row])
            except ActionError:
                self._slot_job = taken  # a refused decision changes nothing
                raise
        # Limits go to the jobs the slots hold before any migration moves them.
        holding = live[:, None] & IS_ACTIVE[state.phase]
        given = limits[self._rows, state.worker * batch.slots + state.slot]
        in_force = np.where(holding, given, state.limit)
        batch.apply(in_force, moves)
        self._advance_step(live)

    def _moves(self, row: int, migrations: Sequence[Migration]) -> list[Move]:
        """Row ``row``'s migrations, checked and given slots (the slots are taken here)."""
        if not migrations:
            return []
        batch = self.batch
        columns = require_reset(self._columns, "step()", "an environment loop")
        specs = batch.specs[row]
        index = {spec.job_id: job for job, spec in enumerate(specs)}
        here = f" (environment {row})" if self.episodes > 1 else ""
        moves = []
        for migration in migrations:
            job = index.get(migration.job_id)
            if job is None or not columns.present[row, job]:
                present = [specs[j].job_id for j in np.flatnonzero(columns.present[row])]
                raise ActionError(
                    f"migration of unknown job {migration.job_id!r}{here}; jobs present: {present}"
                )
            if not (columns.active[row, job] and not columns.migrating[row, job]):
                state = (
                    JobState.WAITING
                    if columns.waiting[row, job]
                    else STATE_OF_PHASE[int(columns.phase[row, job])]
                )
                raise ActionError(
                    f"cannot migrate job {migration.job_id!r} in state {state.value}{here}; "
                    "only running jobs move"
                )
            if not 0 <= migration.worker < batch.workers:
                raise ActionError(
                    f"migration of {migration.job_id!r} to worker {migration.worker}{here}; "
                    f"workers are 0..{batch.workers - 1}"
                )
            current = int(batch.state.worker[row, job])
            if migration.worker == current:
                continue
            slot = self._free_slot(row, migration.worker)
            if slot is None:
                raise ActionError(
                    f"migration of {migration.job_id!r} to worker {migration.worker}{here}, "
                    f"which has no free slot ({batch.slots} in use)"
                )
            self._slot_job[row, current * batch.slots + int(batch.state.slot[row, job])] = -1
            self._slot_job[row, migration.worker * batch.slots + slot] = job
            moves.append(Move(row, job, migration.worker, slot))
        return moves

    def _advance_step(self, live: np.ndarray) -> None:
        """One interval of every live episode: up to each arrival, whose jobs are placed, then
        to the interval's end, where a job may take a slot another freed."""
        batch = self.batch
        state = batch.state
        end = batch.now + self.scenario.interval_s
        if np.count_nonzero(self._pending):
            self._stop_at_arrivals(live, end)
        remaining = np.maximum(end - batch.now, 0.0)
        batch.advance(live, remaining)
        self._free_ended(live)
        if not np.count_nonzero(self._pending):
            return
        waiting = live[:, None] & self._pending & (state.arrival <= end[:, None] + ARRIVED_EPS)
        if np.count_nonzero(waiting):
            counts = self._active_counts()
            placed = np.zeros(self.episodes, dtype=bool)
            placements = {}
            for row in np.flatnonzero(waiting.any(axis=1)).tolist():
                placements[row] = self._place_arrivals(row, float(end[row]), counts[row].copy())
                placed[row] = bool(placements[row])
            self._place(placements)
            if placed.any():
                batch.advance(placed, np.zeros(self.episodes))

    def _stop_at_arrivals(self, live: np.ndarray, end: np.ndarray) -> None:
        """Let each live episode's time pass to each of its arrivals before ``end`` in turn, and
        place the arrived jobs there (every episode's ``k``-th arrival time in one call)."""
        batch = self.batch
        state = batch.state
        due = live[:, None] & self._pending & (state.arrival <= end[:, None])
        if not np.count_nonzero(due):
            return
        stages = {
            int(row): sorted(set(state.arrival[row][due[row]].tolist()))
            for row in np.flatnonzero(due.any(axis=1))
        }
        moved = np.zeros(self.episodes, dtype=bool)
        counts_moved = np.zeros_like(self._counts_before)
        depth = max(len(times) for times in stages.values())
        for stage in range(depth):
            arrival = np.full(self.episodes, np.nan)
            for row, times in stages.items():
                if stage < len(times):
                    arrival[row] = times[stage]
            with np.errstate(invalid="ignore"):
                behind = arrival > batch.now
            if np.count_nonzero(behind):
                batch.advance(behind, np.where(behind, arrival - batch.now, 0.0))
                self._free_ended(behind)
                moved |= behind
                counts_moved[behind] = self._active_counts()[behind]
            placements = {}
            for row in np.flatnonzero(~np.isnan(arrival)).tolist():
                view = counts_moved[row] if moved[row] else self._counts_before[row]
                placements[row] = self._place_arrivals(row, float(arrival[row]), view.copy())
            self._place(placements)

    # ------------------------------------------------------------------ slots

    def _free_slot(self, row: int, worker: int) -> int | None:
        slots = self.batch.slots
        free = np.flatnonzero(self._slot_job[row, worker * slots : (worker + 1) * slots] < 0)
        return int(free[0]) if free.size else None

    def _free_ended(self, rows: np.ndarray) -> None:
        """Free the slots of the jobs of ``rows`` that ended (finished or failed)."""
        if self.batch.ended_jobs == self._ended_seen:
            return
        self._ended_seen = self.batch.ended_jobs
        state = self.batch.state
        row, job = np.nonzero(rows[:, None] & HAS_ENDED[state.phase])
        position = state.worker[row, job] * self.batch.slots + state.slot[row, job]
        held = self._slot_job[row, position] == job
        self._slot_job[row[held], position[held]] = -1

    def _active_counts(self) -> np.ndarray:
        """Per episode and worker, its active jobs."""
        return self.batch.per_worker(IS_ACTIVE[self.batch.state.phase])

    def _place_arrivals(
        self, row: int, now_s: float, counts: np.ndarray
    ) -> list[tuple[int, int, int]]:
        """The arrived, unplaced jobs of ``row`` that find a free slot, in arrival order, as
        ``(job, worker, slot)``; their slots are taken here, and :meth:`_place` starts them.

        A job pinned to a worker goes there if it has a free slot; the others go where the
        placer says: the spread placer's choice is the worker with the fewest active jobs
        (``counts``, then the lowest index).
        """
        batch = self.batch
        arrived = self._pending[row] & (batch.state.arrival[row] <= now_s + ARRIVED_EPS)
        if not arrived.any():
            return []
        empty = self._slot_job[row].reshape(batch.workers, batch.slots) < 0
        queue = SpreadQueue(counts.tolist(), empty.sum(axis=1).tolist())
        placer = self.placers[row]
        view = None if placer is None else self._placer_view(row)
        # Each worker's free slots, lowest first: the slot _free_slot would find, job by job.
        free_slots: dict[int, list[int]] = {}
        placements = []
        for job in np.flatnonzero(arrived).tolist():
            spec = batch.specs[row][job]
            if spec.worker is not None:
                worker = spec.worker if queue.has_free_slot(spec.worker) else None
            elif placer is None or view is None:
                worker = queue.choose()
            else:
                worker = _placer_choice(placer, spec, view, queue)
            if worker is None:
                continue  # it waits for a slot
            queue.took(worker)
            if worker not in free_slots:
                free_slots[worker] = np.flatnonzero(empty[worker]).tolist()
            slot = free_slots[worker].pop(0)
            self._slot_job[row, worker * batch.slots + slot] = job
            self._pending[row, job] = False
            placements.append((job, worker, slot))
            if view is not None:
                view = _with_placed(view, spec, worker, slot)
        return placements

    def _placer_view(self, row: int) -> Telemetry:
        """What a placer sees of ``row`` now: every job as the backend last measured it (CPU
        usage over its last advance), waiting ones included."""
        batch = self.batch
        state = batch.state
        waiting = self._pending & (state.arrival <= batch.now[:, None] + ARRIVED_EPS)
        usage = np.where(state.exists & (state.phase != UNPLACED), state.usage, 0.0)
        columns = columns_of(batch, usage, self._first_loss, waiting, rows=np.array([row]))
        return columns.telemetry(0)

    def _place(self, placements: Mapping[int, Sequence[tuple[int, int, int]]]) -> None:
        """Start the ``(job, worker, slot)`` placements of every row, in one call."""
        rows = [row for row, placed in placements.items() for _ in placed]
        if rows:
            jobs, workers, slots = (
                np.array(part, dtype=np.int64)
                for part in zip(*(p for placed in placements.values() for p in placed), strict=True)
            )
            self.batch.place(np.array(rows, dtype=np.int64), jobs, workers, slots)

    # ------------------------------------------------------------------ measurement

    def measure(self, rows: np.ndarray, span_s: float) -> TelemetryColumns:
        """The telemetry of ``rows`` after ``span_s`` (the other rows keep theirs): CPU usage
        over the whole span, waiting jobs added, first losses kept."""
        batch = self.batch
        state = batch.state
        every = np.count_nonzero(rows) == len(rows)
        mask = rows[:, None]
        placed = state.exists & (state.phase != UNPLACED)
        if span_s > 0:
            # A job that arrived within the span is measured over its age (a padding column's
            # age is -inf, and its usage 0).
            covered = np.minimum(span_s, batch.now[:, None] - state.arrival)
            covered[covered == 0] = span_s
            used = np.maximum(state.cpu_seconds - self._cpu_before, 0.0)
            usage = np.where(placed, used / covered, 0.0)
        else:
            usage = np.where(placed, state.usage, 0.0)
        self._measured_usage = usage if every else np.where(mask, usage, self._measured_usage)
        if self._training:
            new_loss = mask & placed & ~np.isnan(state.loss) & np.isnan(self._first_loss)
            self._first_loss[new_loss] = state.loss[new_loss]
        # An episode just reset has no telemetry before (the observation's rates start at 0).
        before = self._iterations_before if span_s > 0 else None
        waiting = self._pending & (state.arrival <= batch.now[:, None] + ARRIVED_EPS)
        columns = columns_of(batch, self._measured_usage, self._first_loss, waiting, before)
        previous = self._columns
        if previous is not None and not every:
            # Rows not measured now keep the columns they had.
            for field in dataclasses.fields(columns):
                value = getattr(columns, field.name)
                if not isinstance(value, np.ndarray) or field.name == "cores":
                    continue
                keep = rows if value.ndim == 1 else mask
                setattr(columns, field.name, np.where(keep, value, getattr(previous, field.name)))
            columns.specs = [
                batch.specs[row] if rows[row] else previous.specs[row]
                for row in range(self.episodes)
            ]
            columns.templates = [
                batch.templates[row] if rows[row] else previous.templates[row]
                for row in range(self.episodes)
            ]
        self._columns = columns
        if every:
            self._cpu_before = state.cpu_seconds.copy()
            self._iterations_before = columns.iterations
            self._counts_before = columns.worker_jobs
        else:
            self._cpu_before = np.where(mask, state.cpu_seconds, self._cpu_before)
            self._iterations_before = np.where(mask, columns.iterations, self._iterations_before)
            self._counts_before = np.where(mask, columns.worker_jobs, self._counts_before)
        return columns

    def ends(self, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row, whether its episode terminated (a training episode whose jobs all arrived
        and ended) or was truncated (its horizon reached), among the ``live`` rows."""
        horizon = self.batch.now >= self.scenario.horizon_s - 1e-9
        if not self._training:  # services run until the horizon
            return np.zeros(self.episodes, dtype=bool), live & horizon
        state = self.batch.state
        finished = (~state.exists | HAS_ENDED[state.phase]).all(axis=1)
        terminated = live & ~self._pending.any(axis=1) & finished
        return terminated, live & ~terminated & horizon

    def telemetry(self, row: int) -> Telemetry:
        """Episode ``row``'s newest telemetry as a typed snapshot (built on each call)."""
        return require_reset(self._columns, "reading telemetry", "an environment loop").telemetry(
            row
        )

    def incidents(self, row: int) -> tuple[str, ...]:
        """What the backend reported of row ``row``'s episode that makes it doubtful."""
        return self.batch.incidents(row)

    def progress_traces(self, row: int) -> tuple[ProgressTrace, ...]:
        """Row ``row``'s jobs' progress event by event, where the backend sees it."""
        return self.batch.progress_traces(row)


def episode_generators(
    rng: np.random.Generator,
) -> tuple[np.random.Generator, np.random.Generator]:
    """The two generators an episode's own (the one ``reset(seed=)`` makes) spawns, as
    :meth:`SchedulingLoop.reset` uses them: the first draws the episode's jobs
    (:meth:`~dlsched.envs.scenarios.model.Scenario.realise`), the second goes to its backend.
    What a seed's episode holds before any policy acts (its jobs, their noise) is read from
    them alone (:mod:`dlsched.runs.evaluation.bounds`)."""
    jobs_rng, backend_rng = rng.spawn(2)
    return jobs_rng, backend_rng


def _unless_spread(placer: Placer | None) -> Placer | None:
    """``placer``, or ``None`` for Docker Swarm's spread (placed by its fast path)."""
    return None if placer is None or type(placer) is SpreadPlacer else placer


def _placer_choice(placer: Placer, job: JobSpec, view: Telemetry, queue: SpreadQueue) -> int | None:
    """``placer``'s worker for ``job`` among those with a free slot (``None``: none has)."""
    candidates = [w for w in range(len(queue.free)) if queue.has_free_slot(w)]
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    worker = placer.place(job, view, candidates)
    if worker not in candidates:
        raise ActionError(
            f"placer {type(placer).__name__} chose worker {worker} for {job.job_id!r}; "
            f"expected one of {candidates}"
        )
    return worker


def _with_placed(telemetry: Telemetry, job: JobSpec, worker: int, slot: int) -> Telemetry:
    """The placer's view after ``job`` was placed, so a burst spreads over the workers."""
    placed = dataclasses.replace(
        waiting_job(job, telemetry.time_s), state=JobState.RUNNING, worker=worker, slot=slot
    )
    others = [j for j in telemetry.jobs if j.job_id != job.job_id]
    return dataclasses.replace(telemetry, jobs=(*others, placed))
