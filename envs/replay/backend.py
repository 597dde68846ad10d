"""The replay backend: simulated time, with progress decided by recorded workload profiles.

Each worker's cores are shared among its running jobs as CFS shares them under quotas
(:func:`dlsched.envs.replay.sharing.water_fill`): a job gets at most its limit and its demand,
and spare cores go max-min fairly to the others. A job's profile turns the cores it gets into units
(batches or iterations) per second, less what it loses to contention where the worker's runnable
threads exceed its cores (:mod:`dlsched.envs.replay.contention`), and progress is integrated over
time: a unit completes when its work has been delivered, whatever the limits did meanwhile. So the
latency a service reports is that of its last completed batch and lags the limits, as a real one
does (DESIGN.md, "Backends").

The integration is exact. Between two events the CPU shares, and therefore every job's rate, are
constant, so progress is linear in time and each unit's completion time is solved for, not
stepped to. The events are the ones that change shares: ``apply`` (limits, placements,
migrations), a job's start-up or migration pause ending, and a training job finishing its last
iteration, whose time is known in advance because every iteration's work is drawn when the job
is placed. So no sub-step length is needed (an interval's end is just one more breakpoint), a
migrated job loses exactly the migration cost, and a job that finishes frees its cores at the
instant it finishes. Each job draws its noise from its own stream, seeded from the episode's
generator when it is placed, so results do not depend on how ``advance`` calls split time.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from dlsched.envs.backend import Backend, Occupancy
from dlsched.envs.decision import Placement
from dlsched.envs.errors import ActionError, BackendError, ScenarioError, UnknownNameError
from dlsched.envs.replay.contention import busy_and_quotas, job_efficiencies, runnable_threads
from dlsched.envs.replay.profile import WorkloadProfile, load_profile_set, load_set_contention
from dlsched.envs.replay.sharing import water_fill
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry, WorkerTelemetry

#: Work (in units) within which a unit counts as complete; absorbs the rounding of solved times.
_WORK_EPS = 1e-9
#: Inference units whose work is drawn at a time (their number is unbounded).
_BATCH_DRAWS = 32


# Where a job is in the replay model, finer than JobState; plain ints, as they index arrays.
_UNPLACED = 0
_STARTING = 1  # placed, its process starts; no demand until its resume time
_RUNNING = 2
_MIGRATING = 3  # paused until its resume time; keeps its progress
_DONE = 4
_BOOTING = 5  # placed, its process starts on the CPU it gets (profiles with startup_cpu_s)
_PHASE_NAMES = ("unplaced", "starting", "running", "migrating", "done", "starting")
#: Phases in which a job holds its slot (the environment's ``active`` jobs).
ACTIVE_PHASES = (_STARTING, _RUNNING, _MIGRATING, _BOOTING)
#: Whether a phase is active, indexed by phase: ``IS_ACTIVE[phase]`` is
#: ``np.isin(phase, ACTIVE_PHASES)`` by one lookup (isin sorts, several times a step).
IS_ACTIVE = np.zeros(max(_UNPLACED, _DONE, *ACTIVE_PHASES) + 1, dtype=bool)
IS_ACTIVE[list(ACTIVE_PHASES)] = True
#: The state seen from outside, by phase (a starting container is running).
_STATE_OF_PHASE: dict[int, JobState] = {
    _STARTING: JobState.RUNNING,
    _RUNNING: JobState.RUNNING,
    _MIGRATING: JobState.MIGRATING,
    _DONE: JobState.DONE,
    _BOOTING: JobState.RUNNING,
}


class ReplayBackend(Backend):
    """Jobs progress in simulated time by their workload profiles.

    Per job, the model follows the profile of its workload from the scenario's profile set
    (:mod:`dlsched.envs.replay.profile`):

    - A placed job first starts up, then runs units back to back. A profile with
      ``startup_cpu_s`` starts up on the CPU it gets: it demands ``startup_cpu_s / startup_s``
      cores, shares them like any job, and starts its first unit once ``startup_cpu_s`` have
      been delivered (``startup_s`` alone, longer on a busy worker). Without it, start-up takes
      ``startup_s`` and no CPU. A unit's work is the profile's average unit times a lognormal
      factor of mean 1 and coefficient of variation ``noise_cv``, drawn from the job's own
      stream.
    - The cores a running job gets come from water-filling its worker (limit times the worker's
      cores, demand ``demand_cores``); its progress rate is the profile's throughput at them,
      times its efficiency under the profile set's contention model where the worker's runnable
      threads exceed its cores (exactly 1 elsewhere).
    - Inference jobs run until the horizon; ``latency_s`` is the duration of the last completed
      batch (``None`` before the first one). Training jobs report iterations done and the loss
      curve at the last one, times that iteration's lognormal factor of mean 1 and coefficient of
      variation ``loss_noise_cv`` (``None`` before the first iteration); after their last
      iteration they are ``DONE`` with ``completed_s``, use no more CPU and leave their slot.
    - A migration pauses the job for the scenario's ``migration_cost_s`` on its new worker; it
      keeps its completed units and the part of its current unit already done.
    - ``cpu_usage`` is the mean over the last ``advance`` call that let time pass;
      ``cpu_seconds`` is cumulative.

    The same generator state and the same calls give the same telemetry (``deterministic``).

    Args:
        loss_noise_cv: coefficient of variation of the loss a training job reports around its
            profile's loss curve; 0 reports the curve itself. Mini-batch losses scatter around
            the trend, and growth-efficiency schedulers (FlowCon) must cope with it.
    """

    name: ClassVar[str] = "replay"
    deterministic: ClassVar[bool] = True

    def __init__(self, loss_noise_cv: float = 0.01) -> None:
        if not (math.isfinite(loss_noise_cv) and 0.0 <= loss_noise_cv < 1.0):
            raise BackendError(
                f"loss_noise_cv={loss_noise_cv!r} must be a coefficient of variation in [0, 1)"
            )
        self.loss_noise_cv = float(loss_noise_cv)
        self._ready = False

    # ------------------------------------------------------------------ Backend API

    def reset(
        self, scenario: Scenario, jobs: Sequence[JobSpec], rng: np.random.Generator
    ) -> Telemetry:
        """Start an empty episode at time 0 with the profiles of ``scenario.profile_set``.

        Args:
            scenario: the workers (cores), slots, migration cost and profile set.
            jobs: the episode's jobs; none is placed until :meth:`apply` places it.
            rng: the episode's generator; every job's noise stream is seeded from it.

        Raises:
            UnknownNameError: a job's workload is not in the profile set (or the set is unknown).
            ScenarioError: a job's kind differs from its workload profile's, its profile's
                threading from the scenario's ``workload_threading``, or job ids repeat.
            ProfileError: a profile of the set is malformed.
        """
        profiles = load_profile_set(scenario.profile_set)
        self._contention = load_set_contention(scenario.profile_set)
        for job in jobs:
            if job.workload not in profiles:
                raise UnknownNameError(
                    f"workload (job {job.job_id}, profile set {scenario.profile_set!r})",
                    job.workload,
                    profiles,
                )
            threading = profiles[job.workload].threading
            if scenario.workload_threading not in (None, threading):
                raise ScenarioError(
                    f"scenario {scenario.name!r} runs {scenario.workload_threading} workloads "
                    f"but workload {job.workload!r} is profiled with {threading} threading in "
                    f"set {scenario.profile_set!r}; use a set profiled with "
                    f"{scenario.workload_threading} threading"
                )
            if profiles[job.workload].kind is not job.kind:
                raise ScenarioError(
                    f"job {job.job_id} is a {job.kind.value} job but workload {job.workload!r} "
                    f"is a {profiles[job.workload].kind.value} profile in set "
                    f"{scenario.profile_set!r}; use a {job.kind.value} workload"
                )
        ordered = sorted(jobs, key=lambda job: (job.arrival_s, job.job_id))
        index = {job.job_id: i for i, job in enumerate(ordered)}
        if len(index) != len(ordered):
            raise ScenarioError(f"job ids must be unique; got {[job.job_id for job in ordered]}")
        count = len(ordered)
        self._jobs: tuple[JobSpec, ...] = tuple(ordered)
        self._index = index
        self._scenario = scenario
        self._rng = rng
        self._now = 0.0
        self._cores = np.array([worker.cores for worker in scenario.workers], dtype=np.float64)
        self._slots = scenario.slots_per_worker

        names = sorted({job.workload for job in ordered})
        self._profiles: list[WorkloadProfile] = [profiles[name] for name in names]
        profile_of = np.array([names.index(job.workload) for job in ordered], dtype=np.int64)
        self._members = [np.flatnonzero(profile_of == p) for p in range(len(names))]
        self._curves = [
            (np.array((0.0, *p.throughput.cores)), np.array((0.0, *p.throughput.units_per_s)))
            for p in self._profiles
        ]
        self._profile_of = profile_of
        self._demand = np.array([self._profiles[p].demand_cores for p in profile_of])
        self._stock = np.array(
            [self._profiles[p].threading == "stock" for p in profile_of], dtype=bool
        )
        self._exponent = np.array(
            [self._contention_exponent(self._profiles[p]) for p in profile_of], dtype=float
        )
        self._floor = np.array(
            [self._profiles[p].contention_floor or 0.0 for p in profile_of], dtype=float
        )
        self._bound_scale = np.array(
            [
                self._contention.bound_scales.get(self._profiles[p].threading, 1.0)
                for p in profile_of
            ],
            dtype=float,
        )
        self._beside_startup = np.array(
            [self._profiles[p].efficiency_beside_startup or 1.0 for p in profile_of], dtype=float
        )
        self._boot_demand = np.array(
            [_boot_demand(self._profiles[p], self._cores.max()) for p in profile_of]
        )
        self._startup_left = np.zeros(count)  # CPU-seconds of start-up still to deliver
        self._any_booting = False
        self._contends = bool((self._exponent > 0).any())
        self._training = np.array([job.kind is JobKind.TRAINING for job in ordered], dtype=bool)
        self._any_training = bool(self._training.any())
        self._total = np.array(
            [_total_iterations(job, profiles[job.workload]) for job in ordered], dtype=np.int64
        )

        self._training_list: list[bool] = self._training.tolist()
        self._templates = [
            job_template(job, total)
            for job, total in zip(ordered, self._total.tolist(), strict=True)
        ]
        self._phase = np.full(count, _UNPLACED, dtype=np.int8)
        self._worker = np.full(count, -1, dtype=np.int64)
        self._slot = np.full(count, -1, dtype=np.int64)
        self._limit = np.ones(count)
        self._resume_s = np.full(count, math.inf)  # end of a start-up or migration pause
        self._next_resume = math.inf
        self._unit_start = np.full(count, math.nan)
        self._work = np.zeros(count)  # units of average work delivered since the first unit
        self._job_rngs: dict[int, np.random.Generator] = {}
        self._bounds: list[np.ndarray] = [np.empty(0) for _ in range(count)]  # cumulative work
        self._losses: list[np.ndarray] = [np.empty(0) for _ in range(count)]  # per iteration
        self._next_bound = np.full(count, math.inf)  # work at which the current unit completes
        self._final_bound = np.full(count, math.inf)  # training: work of all iterations
        self._units = np.zeros(count, dtype=np.int64)
        self._latency = np.full(count, math.nan)
        self._loss = np.full(count, math.nan)
        self._completed = np.full(count, math.nan)
        self._cpu_seconds = np.zeros(count)
        self._usage = np.zeros(count)
        self._share = np.zeros(count)
        self._rate = np.zeros(count)
        # Workers whose shares changed since the last allocation: only theirs are recomputed
        # (a wake-up on one of 64 workers re-filled all 64 before).
        self._stale_workers: set[int] = set(range(len(self._cores)))
        self._ready = True
        return self._telemetry()

    def apply(
        self,
        limits: Mapping[str, float],
        placements: Sequence[Placement] = (),
        migrations: Sequence[Placement] = (),
    ) -> None:
        """Place arriving jobs, move migrating ones, then set limits (all checked first).

        Raises:
            ActionError: an unknown job, a job placed twice, a migration of a job that is not
                running, a worker or slot out of range or taken, or a limit outside ``(0, 1]``.
        """
        self._require_reset()
        placed_now = self._check_moves(placements, migrations) if (placements or migrations) else ()
        limit_indices, limit_values = self._checked_limits(limits, placed_now)
        for placement in placements:
            self._place(self._index[placement.job_id], placement)
        for migration in migrations:
            index = self._index[migration.job_id]
            # It stops using its old worker's cores now and its new one's when it resumes.
            self._stale_workers.update((int(self._worker[index]), migration.worker))
            self._worker[index] = migration.worker
            self._slot[index] = migration.slot
            starting = self._phase[index] == _STARTING
            self._phase[index] = _MIGRATING
            resume = self._now + self._scenario.migration_cost_s
            if starting:
                # A timed start-up resumes no earlier than it would have ended; a start-up on
                # the CPU (booting) has no end time, and goes on after the pause (_wake).
                resume = max(resume, float(self._resume_s[index]))
            self._resume_s[index] = resume
        changed = limit_indices[self._limit[limit_indices] != limit_values]
        self._stale_workers.update(self._worker[changed].tolist())
        self._limit[limit_indices] = limit_values
        if placements or migrations:  # limits alone change no resume time
            self._next_resume = float(self._resume_s.min(initial=math.inf))

    def advance(self, seconds: float) -> Telemetry:
        """Let ``seconds`` of simulated time pass and measure.

        Raises:
            ActionError: ``seconds`` is negative or not finite.
        """
        self._pass(seconds)
        return self._telemetry()

    def advance_to_arrival(self, seconds: float) -> Occupancy:
        """Let ``seconds`` pass as :meth:`advance` does; report where the jobs are, from the
        arrays, without measuring every job.

        Raises:
            ActionError: ``seconds`` is negative or not finite.
        """
        self._pass(seconds)
        active = IS_ACTIVE[self._phase]
        counts = np.bincount(self._worker[active], minlength=len(self._cores))
        ended = np.flatnonzero(self._phase == _DONE).tolist()
        return Occupancy(
            self._now,
            tuple(counts.tolist()),
            tuple((self._jobs[i].job_id, int(self._worker[i]), int(self._slot[i])) for i in ended),
        )

    def _pass(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass (``advance`` without the measurement)."""
        self._require_reset()
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ActionError(f"advance(seconds={seconds!r}); expected a finite number >= 0")
        cpu_before = self._cpu_seconds.copy()
        end = self._now + seconds
        self._wake(self._now)
        while self._now < end:
            if self._stale_workers:
                self._allocate()
            until = self._next_event(end)
            self._integrate(until)
            self._now = until
            self._wake(until)
        self._now = end
        if seconds > 0:
            self._usage = (self._cpu_seconds - cpu_before) / seconds

    def close(self) -> None:
        """Forget the episode; the replay backend holds no outside resources."""
        self._ready = False

    # ------------------------------------------------------------------ actuation

    def _require_reset(self) -> None:
        if not self._ready:
            raise BackendError("the replay backend has no episode; call reset() first")

    def _job_index(self, job_id: str, what: str) -> int:
        if job_id not in self._index:
            raise ActionError(
                f"{what} unknown job {job_id!r}; jobs of this episode: {sorted(self._index)}"
            )
        return self._index[job_id]

    def _check_moves(
        self, placements: Sequence[Placement], migrations: Sequence[Placement]
    ) -> set[str]:
        """Check placements and migrations against the slots in use; the ids being placed."""
        occupied = self._holders(placements, migrations)
        placed_now: set[str] = set()
        for placement in placements:
            index = self._job_index(placement.job_id, "placement of")
            if self._phase[index] != _UNPLACED or placement.job_id in placed_now:
                raise ActionError(
                    f"placement of job {placement.job_id!r}, which is already placed; a job is "
                    "placed once, then moved by migrations"
                )
            self._check_slot(placement, occupied)
            occupied[(placement.worker, placement.slot)] = placement.job_id
            placed_now.add(placement.job_id)
        for migration in migrations:
            index = self._job_index(migration.job_id, "migration of")
            if self._phase[index] not in (_STARTING, _RUNNING, _BOOTING):
                raise ActionError(
                    f"migration of job {migration.job_id!r}, which is "
                    f"{_PHASE_NAMES[self._phase[index]]}; only a running job moves"
                )
            del occupied[(int(self._worker[index]), int(self._slot[index]))]
            self._check_slot(migration, occupied)
            occupied[(migration.worker, migration.slot)] = migration.job_id
        return placed_now

    def _holders(
        self, placements: Sequence[Placement], migrations: Sequence[Placement]
    ) -> dict[tuple[int, int], str]:
        """The job holding each slot that ``placements`` and ``migrations`` go to or leave, by
        ``(worker, slot)``; not every slot's: a step that places one job of 640 looked all up."""
        workers, slots = len(self._cores), self._slots
        wanted = {(move.worker, move.slot) for move in (*placements, *migrations)}
        for migration in migrations:
            index = self._index.get(migration.job_id)
            if index is not None:
                wanted.add((int(self._worker[index]), int(self._slot[index])))
        held = np.flatnonzero(IS_ACTIVE[self._phase])
        holder = np.full(workers * slots, -1, dtype=np.int64)
        holder[self._worker[held] * slots + self._slot[held]] = held
        occupied = {}
        for worker, slot in wanted:
            # Out of range: nobody holds it (the check names the range).
            if 0 <= worker < workers and 0 <= slot < slots:
                index = int(holder[worker * slots + slot])
                if index >= 0:
                    occupied[(worker, slot)] = self._jobs[index].job_id
        return occupied

    def _checked_limits(
        self, limits: Mapping[str, float], placed_now: Collection[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Job indices and values of ``limits``, each checked (placed job, value in (0, 1])."""
        index = self._index
        try:
            positions = [index[job_id] for job_id in limits]
        except KeyError:
            positions = [self._job_index(job_id, "limit of") for job_id in limits]  # names it
        indices = np.array(positions, dtype=np.int64)
        values = np.array(list(limits.values()), dtype=np.float64)
        unplaced = self._phase[indices] == _UNPLACED
        bad_value = ~((values > 0.0) & (values <= 1.0))  # NaN fails both comparisons
        if unplaced.any() or bad_value.any():
            for job_id, limit, not_placed, bad in zip(
                limits, limits.values(), unplaced, bad_value, strict=True
            ):
                if not_placed and job_id not in placed_now:
                    raise ActionError(f"limit of job {job_id!r}, which is not placed yet")
                if bad:
                    raise ActionError(
                        f"limit of job {job_id!r} is {limit!r}; expected a fraction of the "
                        "worker's cores in (0, 1] (1 = no cap)"
                    )
        return indices, values

    def _check_slot(self, placement: Placement, occupied: Mapping[tuple[int, int], str]) -> None:
        workers = len(self._cores)
        if not (0 <= placement.worker < workers and 0 <= placement.slot < self._slots):
            raise ActionError(
                f"job {placement.job_id!r} to worker {placement.worker}, slot {placement.slot}; "
                f"workers are 0..{workers - 1} and slots 0..{self._slots - 1}"
            )
        holder = occupied.get((placement.worker, placement.slot))
        if holder is not None:
            raise ActionError(
                f"job {placement.job_id!r} to worker {placement.worker}, slot {placement.slot}, "
                f"which job {holder!r} holds; choose a free slot"
            )

    def _place(self, index: int, placement: Placement) -> None:
        profile = self._profiles[self._profile_of[index]]
        self._worker[index] = placement.worker
        self._slot[index] = placement.slot
        if self._boot_demand[index] > 0:
            self._phase[index] = _BOOTING
            self._startup_left[index] = profile.startup_cpu_s
            self._any_booting = True
            self._stale_workers.add(placement.worker)
        else:
            self._phase[index] = _STARTING
            self._resume_s[index] = self._now + profile.startup_s
        # Each job draws from its own stream, so its noise does not depend on what other jobs
        # do or on how advance() calls split time.
        job_rng = np.random.default_rng(int(self._rng.integers(2**63)))
        self._job_rngs[index] = job_rng
        if self._training[index]:
            total = int(self._total[index])
            self._bounds[index] = np.cumsum(_lognormal(job_rng, profile.noise_cv, total))
            self._final_bound[index] = self._bounds[index][-1]
            curve = np.asarray(profile.loss_at(np.arange(1, total + 1, dtype=np.float64)))
            self._losses[index] = curve * _lognormal(job_rng, self.loss_noise_cv, total)
        else:
            self._bounds[index] = np.cumsum(_lognormal(job_rng, profile.noise_cv, _BATCH_DRAWS))
        self._next_bound[index] = self._bounds[index][0]

    # ------------------------------------------------------------------ time

    def _wake(self, now: float) -> None:
        """Start the first unit of jobs whose start-up ended, resume migrated ones."""
        if self._any_booting:
            booted = np.flatnonzero((self._phase == _BOOTING) & (self._startup_left <= _WORK_EPS))
            if booted.size:
                self._startup_left[booted] = 0.0
                self._unit_start[booted] = now
                self._phase[booted] = _RUNNING
                self._any_booting = bool((self._phase == _BOOTING).any())
                self._stale_workers.update(self._worker[booted].tolist())
        if now < self._next_resume:
            return
        waking = np.flatnonzero(
            ((self._phase == _STARTING) | (self._phase == _MIGRATING)) & (self._resume_s <= now)
        )
        if waking.size == 0:
            return
        # A job migrated while it was starting up on the CPU finishes its start-up after.
        rebooting = waking[self._startup_left[waking] > 0]
        resumed = waking[self._startup_left[waking] <= 0]
        first = resumed[np.isnan(self._unit_start[resumed])]
        self._unit_start[first] = self._resume_s[first]
        self._phase[resumed] = _RUNNING
        self._phase[rebooting] = _BOOTING
        self._any_booting = self._any_booting or bool(rebooting.size)
        self._resume_s[waking] = math.inf
        self._next_resume = float(self._resume_s.min(initial=math.inf))
        self._stale_workers.update(self._worker[waking].tolist())

    def _allocate(self) -> None:
        """CPU shares of the running and booting jobs of the stale workers by water-filling
        each, and their rates; every other job keeps its share and rate (its worker's jobs,
        limits and phases are as they were, so a new allocation would give the same numbers).
        """
        if self._any_booting:
            booting = self._phase == _BOOTING
            using = (self._phase == _RUNNING) | booting
            demand = np.where(booting, self._boot_demand, self._demand)
        else:  # most steps: no job starts up on the CPU, so no start-up demand to lay out
            booting = np.zeros(len(self._jobs), dtype=bool)
            using = self._phase == _RUNNING
            demand = self._demand
        workers = len(self._cores)
        if 2 * len(self._stale_workers) > workers:  # one grouping of all jobs costs less
            self._share = np.zeros(len(self._jobs))
            if workers < 3:
                each = range(workers)
                on_worker = [(w, np.flatnonzero(using & (self._worker == w))) for w in each]
            else:
                on_worker = _by_worker(np.flatnonzero(using), self._worker)
            for worker, members in on_worker:
                cores = self._cores[worker]
                self._share[members] = water_fill(
                    cores, self._limit[members] * cores, demand[members]
                )
            for members, (cores_points, rate_points) in zip(
                self._members, self._curves, strict=True
            ):
                self._rate[members] = np.interp(self._share[members], cores_points, rate_points)
        else:
            on_worker = []
            for worker in sorted(self._stale_workers):
                here = np.flatnonzero(self._worker == worker)
                members = here[using[here]]
                cores = self._cores[worker]
                # Jobs that stopped using its cores (done, migrating) get 0, as all idle jobs.
                self._share[here] = 0.0
                self._share[members] = water_fill(
                    cores, self._limit[members] * cores, demand[members]
                )
                profile_of = self._profile_of[here]
                for profile in np.unique(profile_of).tolist():
                    cores_points, rate_points = self._curves[profile]
                    jobs = here[profile_of == profile]
                    self._rate[jobs] = np.interp(self._share[jobs], cores_points, rate_points)
                on_worker.append((worker, members))
        if self._any_booting:
            self._rate[booting] = 0.0
        if self._contends:
            for worker, members in on_worker:
                self._contend(float(self._cores[worker]), members, demand, booting)
        self._stale_workers.clear()

    def _contend(
        self, cores: float, members: np.ndarray, demand: np.ndarray, booting: np.ndarray
    ) -> None:
        """Slow the running jobs ``members`` of one worker by their contention efficiency.

        A booting job's start-up is single-threaded: it counts its busy cores among the
        worker's runnable threads, its own start-up is not slowed, and the running jobs keep at
        most their efficiency beside a start-up.
        """
        limits = self._limit[members]
        stock = self._stock[members] & ~booting[members]
        busy, quotas = busy_and_quotas(limits, demand[members], stock, cores)
        runnable = runnable_threads(busy, quotas, cores)
        if runnable > cores:
            kept = job_efficiencies(
                busy[None, :],
                quotas[None, :],
                np.ones((1, len(members)), dtype=bool),
                np.array([runnable]),
                np.array([cores]),
                self._exponent[members][None, :],
                self._floor[members][None, :],
                self._bound_scale[members][None, :],
            )[0]
            if booting[members].any():
                kept = np.minimum(kept, self._beside_startup[members])
            self._rate[members] *= kept

    def _contention_exponent(self, profile: WorkloadProfile) -> float:
        """A workload's exponent: its profile's own, else its set's for its threading."""
        if profile.contention_exponent is not None:
            return profile.contention_exponent
        return self._contention.exponents.get(profile.threading, 0.0)

    def _next_event(self, end: float) -> float:
        """The earliest time before ``end`` at which the shares change."""
        until = min(end, self._next_resume)
        if self._any_booting:
            booting = (self._phase == _BOOTING) & (self._share > 0)
            if booting.any():
                left = self._startup_left[booting] / self._share[booting]
                until = min(until, self._now + float(left.min()))
        if not self._any_training:
            return until
        finishing = (self._phase == _RUNNING) & self._training & (self._rate > 0)
        if finishing.any():
            remaining = (self._final_bound[finishing] - self._work[finishing]).clip(min=0.0)
            until = min(until, self._now + float((remaining / self._rate[finishing]).min()))
        return until

    def _integrate(self, until: float) -> None:
        """Let the constant shares run from now to ``until``; complete the units that finish."""
        span = until - self._now
        work_before = self._work.copy()
        self._cpu_seconds += self._share * span
        self._work += self._rate * span
        if self._any_booting:
            booting = self._phase == _BOOTING
            self._startup_left[booting] -= self._share[booting] * span
        for index in np.flatnonzero(self._work >= self._next_bound - _WORK_EPS):
            self._complete_units(int(index), float(work_before[index]), until)

    def _complete_units(self, index: int, work_before: float, until: float) -> None:
        """Record the units job ``index`` completed between now and ``until``."""
        work = float(self._work[index])
        if not self._training[index]:
            noise_cv = self._profiles[self._profile_of[index]].noise_cv
            while self._bounds[index][-1] <= work + _WORK_EPS:
                extra = np.cumsum(_lognormal(self._job_rngs[index], noise_cv, _BATCH_DRAWS))
                self._bounds[index] = np.concatenate(
                    (self._bounds[index], self._bounds[index][-1] + extra)
                )
        bounds = self._bounds[index]
        completed = int(np.searchsorted(bounds, work + _WORK_EPS, side="right"))
        first_new = int(self._units[index])
        self._units[index] = completed
        if self._training[index]:
            self._loss[index] = self._losses[index][completed - 1]
            if completed >= len(bounds):
                self._phase[index] = _DONE
                self._completed[index] = until
                self._next_bound[index] = math.inf
                self._stale_workers.add(int(self._worker[index]))
                return
        else:
            # The last unit completed ends when the work reached its bound; it began where the
            # unit before it ended, either earlier (stored) or within this span too.
            # In floats, one job at a time: the arithmetic of the arrays, elementwise.
            rate = self._rate[index]
            ended = max(bounds[completed - 1] - work_before, 0.0) / rate
            end = float(min(until, self._now + ended))
            if completed - 1 == first_new:
                start = float(self._unit_start[index])
            else:
                began = max(bounds[completed - 2] - work_before, 0.0) / rate
                start = float(min(until, self._now + began))
            self._latency[index] = end - start
            self._unit_start[index] = end
        self._next_bound[index] = bounds[completed]

    # ------------------------------------------------------------------ measurement

    def _telemetry(self) -> Telemetry:
        placed = np.flatnonzero(self._phase != _UNPLACED)
        if len(self._cores) < 3:
            on_worker = [(w, placed[self._worker[placed] == w]) for w in range(len(self._cores))]
        else:
            on_worker = _by_worker(placed, self._worker)
        usage_of = {worker: self._usage[members].sum() for worker, members in on_worker}
        workers = tuple(
            WorkerTelemetry(index=w, cores=float(cores), cpu_usage=float(usage_of.get(w, 0.0)))
            for w, cores in enumerate(self._cores)
        )
        now = self._now
        jobs = []
        phase = self._phase.tolist()
        worker = self._worker.tolist()
        slot = self._slot.tolist()
        limit = self._limit.tolist()
        usage = self._usage.tolist()
        cpu_seconds = self._cpu_seconds.tolist()
        units = self._units.tolist()
        latency = self._latency.tolist()
        loss = self._loss.tolist()
        completed = self._completed.tolist()
        training = self._training_list
        isnan = math.isnan
        for i in placed.tolist():
            # The job's fields that never change, copied, and those of this measurement set.
            fields = self._templates[i].copy()
            fields.update(
                state=_STATE_OF_PHASE[phase[i]],
                worker=worker[i],
                slot=slot[i],
                age_s=now - fields["arrival_s"],
                limit=limit[i],
                cpu_usage=usage[i],
                cpu_seconds=cpu_seconds[i],
                latency_s=None if isnan(latency[i]) else latency[i],
                loss=None if isnan(loss[i]) else loss[i],
                completed_s=None if isnan(completed[i]) else completed[i],
            )
            fields["iterations" if training[i] else "batches"] = units[i]
            jobs.append(JobTelemetry.from_fields(fields))
        return Telemetry(
            time_s=now, interval_s=self._scenario.interval_s, workers=workers, jobs=tuple(jobs)
        )


def job_template(job: JobSpec, total_iterations: int) -> dict[str, Any]:
    """Every field of ``job``'s :class:`~dlsched.envs.telemetry.JobTelemetry`, in the class's
    order (see ``JobTelemetry.from_fields``): those that stay the same all episode, and
    placeholders for those a measurement sets (state, where the job runs, its age, limit, CPU,
    progress), so that a measurement copies one dict rather than building one."""
    training = job.kind is JobKind.TRAINING
    return {
        "job_id": job.job_id,
        "workload": job.workload,
        "kind": job.kind,
        "state": JobState.RUNNING,
        "worker": None,
        "slot": None,
        "arrival_s": job.arrival_s,
        "age_s": 0.0,
        "limit": 1.0,
        "cpu_usage": 0.0,
        "cpu_seconds": 0.0,
        "target_s": job.target_s,
        "tolerance": job.tolerance,
        "batches": 0,
        "latency_s": None,
        "iterations": 0,
        "total_iterations": total_iterations if training else None,
        "loss": None,
        "completed_s": None,
        "loss_targets": job.loss_targets,
    }


def _by_worker(jobs: np.ndarray, worker: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``jobs`` (ascending indices) grouped by their ``worker``: per worker that has some, in
    ascending order, its jobs in ascending order; one sort, not a scan of all jobs per worker."""
    if jobs.size == 0:
        return []
    workers = worker[jobs]
    order = np.argsort(workers, kind="stable")
    jobs, workers = jobs[order], workers[order]
    starts = np.flatnonzero(np.diff(workers)) + 1
    return list(zip(workers[np.r_[0, starts]].tolist(), np.split(jobs, starts), strict=True))


def _total_iterations(job: JobSpec, profile: WorkloadProfile) -> int:
    """Iterations a training job runs (its own, else its workload's default); 0 for inference."""
    if job.kind is not JobKind.TRAINING:
        return 0
    if job.iterations is not None:
        return job.iterations
    if profile.iterations is None:
        raise ScenarioError(
            f"job {job.job_id} sets no iterations and training workload {profile.workload!r} has "
            "no default; set iterations in the scenario"
        )
    return profile.iterations


def _lognormal(rng: np.random.Generator, cv: float, count: int) -> np.ndarray:
    """``count`` lognormal factors of mean 1 and coefficient of variation ``cv``."""
    if cv == 0.0:
        return np.ones(count)
    sigma = _lognormal_sigma(cv)
    return np.exp(sigma * rng.standard_normal(count) - 0.5 * sigma * sigma)


def _lognormal_sigma(cv: float) -> float:
    """The sigma of the normal whose exponential has mean 1 and coefficient of variation ``cv``."""
    return math.sqrt(math.log1p(cv * cv))


def _boot_demand(profile: WorkloadProfile, cores: float) -> float:
    """Cores a profile's start-up keeps busy (0: start-up uses no CPU)."""
    if not profile.startup_cpu_s or profile.startup_s <= 0:
        return 0.0
    return min(profile.startup_cpu_s / profile.startup_s, cores)
