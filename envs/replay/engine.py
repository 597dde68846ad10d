"""The replay model: simulated time, with progress decided by recorded workload profiles.

This is the replay physics, written once, for any number of episodes at a time (one row each).
Per job, the model follows the profile of its workload (:mod:`dlsched.envs.replay.profile`):

- A placed job first starts up, then runs units back to back. A profile with ``startup_cpu_s``
  starts up on the CPU it gets: it demands ``startup_cpu_s / startup_s`` cores, shares them
  like any job, and starts its first unit once ``startup_cpu_s`` have been delivered
  (``startup_s`` alone, longer on a busy worker). Without it, start-up takes ``startup_s`` and
  no CPU. A unit's work is drawn from the job's own stream (:mod:`dlsched.envs.replay.unit_work`).
- The cores a running job gets come from water-filling its worker (its limit times the worker's
  cores, its demand ``demand_cores``); its progress rate is the profile's throughput at them,
  times its efficiency under the profile set's contention model where the worker's runnable
  threads exceed its cores, exactly 1 elsewhere (:mod:`dlsched.envs.replay.allocation`).
- Services run until the horizon; a service's ``latency`` is the duration of its last completed
  batch (NaN before the first). Training jobs report iterations done and the loss of the last
  one (NaN before the first); after their last iteration they are ``DONE`` at ``completed``, use
  no more CPU and leave their slot.
- A migration pauses the job for the scenario's ``migration_cost_s`` on its new worker; it keeps
  its completed units and the part of its current unit already done.
- ``usage`` is the mean over the last :meth:`ReplayEngine.advance` that let time pass;
  ``cpu_seconds`` is cumulative.
- ``throttle_ratio`` of a job under a quota is the mean over the last
  :meth:`ReplayEngine.advance` that let time pass of its ratio at each moment's shares (its
  pressure on the quota, :mod:`dlsched.envs.replay.throttling`), over the time it ran under a
  quota, as the kernel counts the periods in which a job ran; NaN where it never did, once it is
  done, or in a profile set without a throttling model.

The integration is exact. Between two events the CPU shares, and therefore every job's rate,
are constant, so progress is linear in time and each unit's completion time is solved for, not
stepped to. The events are the ones that change shares: :meth:`~ReplayEngine.apply` and
:meth:`~ReplayEngine.place`, a job's start-up or migration pause ending, and a training job
finishing its last iteration, whose time is known in advance because every iteration's work is
drawn when the job is placed. So no sub-step length is needed, a migrated job loses exactly the
migration cost, and a job that finishes frees its cores at the instant it finishes. Latency
therefore lags the limits as a real service's does (docs/replay-model.md).

Each row runs to its own next event, and an :meth:`~ReplayEngine.advance` loops until every row
has reached its end; only rows whose shares changed (``stale``) are allocated again. (Whether a
mask has any set entry is asked as ``np.count_nonzero``: ``mask.any()`` costs four times as much
on the small arrays of a single environment, several times an event.)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from dlsched.envs.episode_batch import (
    BOOTING,
    DONE,
    MIGRATING,
    RUNNING,
    STARTING,
    EpisodeBatch,
    EpisodeJobs,
    Generators,
    Move,
)
from dlsched.envs.errors import ScenarioError
from dlsched.envs.replay.allocation import allocate
from dlsched.envs.replay.engine_arrays import PhysicsArrays
from dlsched.envs.replay.profile_table import ProfileTable, lognormal
from dlsched.envs.replay.race import RaceChains
from dlsched.envs.replay.unit_work import HEAD, WINDOW, UnitWork
from dlsched.envs.scenarios.model import JobKind, Scenario

__all__ = ["ReplayEngine"]

#: The second word of the seed of an episode's speed stream (see ``speed_spread``).
SPEED_STREAM = 0x5EED
#: Work (in units) within which a unit counts as complete; absorbs the rounding of solved times.
WORK_EPS = 1e-9
#: Offsets of the bounds a completion looks at first, after the units done.
_HEAD_RANGE = np.arange(HEAD)[None, :]
#: The order of an episode's jobs (its columns): by arrival, then id.
_ARRIVAL_ORDER = operator.attrgetter("arrival_s", "job_id")


class ReplayEngine(EpisodeBatch):
    """The replay model of ``episodes`` episodes of one scenario (see the module docstring).

    Args:
        scenario: the scenario every row runs (its workers, slots, profile set, costs).
        episodes: rows.
        loss_noise_cv: coefficient of variation of the loss a training job reports around its
            profile's loss curve; 0 reports the curve itself.
        speed_spread: coefficient of variation of each workload's speed in an episode (a
            lognormal factor of mean 1 on its throughput, the same for all its jobs in the
            episode, drawn from a stream seeded by the episode's first job); 0 draws nothing.
        workloads: the workloads its episodes' jobs run; by default the scenario's.
        jobs: the most jobs an episode has; by default the scenario's.

    Raises:
        UnknownNameError: a workload of the scenario is not in its profile set.
        ScenarioError: a workload's kind or threading differs from the scenario's.
    """

    def __init__(
        self,
        scenario: Scenario,
        episodes: int,
        loss_noise_cv: float,
        workloads: Sequence[str] | None = None,
        jobs: int | None = None,
        speed_spread: float = 0.0,
    ) -> None:
        super().__init__(scenario, episodes, jobs)
        self.table = ProfileTable(scenario, workloads)
        self.training = scenario.kind is JobKind.TRAINING
        self.physics = PhysicsArrays.allocate(episodes, self.jobs)
        self.units_of_work = UnitWork(
            self.table, episodes, self.jobs, self.training, float(loss_noise_cv)
        )
        self.speed_spread = speed_spread
        #: Per row whose episode has placed a job, its workloads' speed factors (``speed_spread``).
        self._speeds: dict[int, np.ndarray] = {}
        #: The racing jobs' chains, where the scenario's profile set has a race (else ``None``:
        #: the deterministic model, untouched).
        self.races = RaceChains(self.table.races) if self.table.racing else None
        #: Rows whose shares changed since their last allocation: only theirs are recomputed.
        self.stale = np.ones(episodes, dtype=bool)
        # Kept so that most events look at no array for them: whether any job starts up on the
        # CPU, and the earliest end of a start-up or migration pause (inf: none).
        self._any_booting = False
        self._next_resume = math.inf

    # ------------------------------------------------------------------ episodes

    def reset_rows(self, rows: Sequence[int], episodes: EpisodeJobs, rngs: Generators) -> None:
        """Start an empty episode at time 0 in each of ``rows`` (see
        :meth:`EpisodeBatch.reset_rows <dlsched.envs.episode_batch.EpisodeBatch.reset_rows>`).

        Raises:
            ScenarioError: an episode has more jobs than the scenario allows, repeated ids, or
                a training job without iterations whose workload has no default.
        """
        ordered_rows = [tuple(sorted(jobs, key=_ARRIVAL_ORDER)) for jobs in episodes]
        for ordered in ordered_rows:
            if len(ordered) > self.jobs:
                raise ScenarioError(
                    f"episode has {len(ordered)} jobs but scenario {self.scenario.name!r} allows "
                    f"at most {self.jobs}"
                )
            if len({job.job_id for job in ordered}) != len(ordered):
                raise ScenarioError(
                    f"job ids must be unique; got {[job.job_id for job in ordered]}"
                )
        totals = [[self.table.total_iterations(job) for job in ordered] for ordered in ordered_rows]
        # Every episode checked: no row changes if one is refused.
        reset = np.asarray(rows, dtype=np.int64)
        state = self.state
        at = state.describe(reset, ordered_rows)
        self.physics.reset(reset)
        self.units_of_work.reset_rows(reset.tolist(), rngs)
        if self.races is not None:
            self.races.reset_rows(reset.tolist())
        for row in reset.tolist():
            self._speeds.pop(row, None)
        for row, ordered in zip(reset.tolist(), ordered_rows, strict=True):
            self.set_jobs(row, ordered)
        every = [job for ordered in ordered_rows for job in ordered]
        profile_of = np.array([self.table.index[job.workload] for job in every], dtype=np.int64)
        state.total[at] = [total for row in totals for total in row]
        physics, table = self.physics, self.table
        physics.profile_of[at] = profile_of
        for name in (
            "demand",
            "stock",
            "exponent",
            "floor",
            "bound_scale",
            "beside_startup",
            "boot_demand",
        ):
            getattr(physics, name)[at] = getattr(table, name)[profile_of]
        self.now[reset] = 0.0
        self.stale[reset] = True
        self._paused_or_booting_changed()

    # ------------------------------------------------------------------ actuation

    def place(
        self, rows: np.ndarray, jobs: np.ndarray, workers: np.ndarray, slots: np.ndarray
    ) -> None:
        """Start job ``jobs[i]`` of row ``rows[i]`` on ``workers[i]``/``slots[i]`` for every
        ``i``, a row's jobs in the order given.

        Each job's noise stream is seeded from its row's generator in that order; its first
        units of work (and, for a training job, all of them and its losses) are drawn from it
        and windowed at once.
        """
        if not len(rows):
            return
        state, physics = self.state, self.physics
        profile_of = physics.profile_of[rows, jobs]
        state.worker[rows, jobs] = workers
        state.slot[rows, jobs] = slots
        booting = physics.boot_demand[rows, jobs] > 0
        state.phase[rows, jobs] = np.where(booting, BOOTING, STARTING)
        self.stale[rows[booting]] = True  # a start-up on the CPU takes cores at once
        physics.startup_left[rows[booting], jobs[booting]] = self.table.startup_cpu_s[
            profile_of[booting]
        ]
        timed = ~booting
        physics.resume_s[rows[timed], jobs[timed]] = (
            self.now[rows[timed]] + self.table.startup_s[profile_of[timed]]
        )
        first, last = self.units_of_work.draw(rows, jobs, profile_of, state.total[rows, jobs])
        physics.next_bound[rows, jobs] = first
        physics.final_bound[rows, jobs] = last
        if self.speed_spread > 0:
            physics.speed[rows, jobs] = self._episode_speeds(rows, jobs)[
                np.arange(len(rows)), profile_of
            ]
        if self.races is not None:
            seeds = self.units_of_work.seeds[rows, jobs]
            for row, job, level, holding, model in self.races.start(rows, jobs, profile_of, seeds):
                physics.race_level[row, job] = level
                physics.race_full_at[row, job] = model.full_at
                physics.race_fade[row, job] = model.fade
                physics.race_switch_s[row, job] = self.now[row] + holding
        self._paused_or_booting_changed()

    def _episode_speeds(self, rows: np.ndarray, jobs: np.ndarray) -> np.ndarray:
        """Per job just placed, its episode's speed factor of every workload: drawn at the
        episode's first placement from a stream of its own (seeded by that job's noise seed and
        :data:`SPEED_STREAM`, so the units of work stay those drawn without it)."""
        factors = []
        for row, job in zip(rows.tolist(), jobs.tolist(), strict=True):
            if row not in self._speeds:
                stream = np.random.default_rng(
                    (int(self.units_of_work.seeds[row, job]), SPEED_STREAM)
                )
                self._speeds[row] = lognormal(stream, self.speed_spread, len(self.table.names))
            factors.append(self._speeds[row])
        return np.asarray(factors)

    def apply(self, limits: np.ndarray, migrations: Sequence[Move]) -> None:
        """Put ``limits`` in force, then move the jobs of ``migrations`` (each pauses for the
        scenario's migration cost on its new worker)."""
        state, physics = self.state, self.physics
        self.stale |= (limits != state.limit).any(axis=1)
        state.limit = limits
        for move in migrations:
            row, job = move.row, move.job
            self.stale[row] = True
            state.worker[row, job] = move.worker
            state.slot[row, job] = move.slot
            starting = state.phase[row, job] == STARTING
            state.phase[row, job] = MIGRATING
            resume = self.now[row] + self.scenario.migration_cost_s
            if starting:
                # A timed start-up resumes no earlier than it would have ended; a start-up on
                # the CPU (booting) has no end time, and goes on after the pause (_wake).
                resume = max(resume, float(physics.resume_s[row, job]))
            physics.resume_s[row, job] = resume
        if migrations:
            self._paused_or_booting_changed()

    def _paused_or_booting_changed(self) -> None:
        """Note anew whether a job starts up on the CPU and when the next pause ends."""
        self._any_booting = bool(np.count_nonzero(self.state.phase == BOOTING))
        self._next_resume = float(self.physics.resume_s.min())

    # ------------------------------------------------------------------ time

    def advance(self, rows: np.ndarray, seconds: np.ndarray) -> None:
        """Let ``seconds[r]`` of simulated time pass in every row ``r`` where ``rows`` is set.

        Args:
            rows: boolean mask of the rows to advance.
            seconds: per row, seconds to let pass (finite, >= 0); ignored where ``rows`` is not.
        """
        state = self.state
        every = np.count_nonzero(rows) == len(rows)
        end = self.now + seconds if every else np.where(rows, self.now + seconds, self.now)
        cpu_before = state.cpu_seconds.copy()
        throttles = self.table.throttles
        if throttles:
            physics = self.physics
            if every:
                physics.throttled_s.fill(0.0)
                physics.quota_s.fill(0.0)
            else:
                physics.throttled_s[rows] = 0.0
                physics.quota_s[rows] = 0.0
        self._wake(rows)
        moving = self.now < end if every else rows & (self.now < end)
        cells = None  # jobs keep their worker and slot while time passes: found once, if needed
        while np.count_nonzero(moving):
            if np.count_nonzero(self.stale):
                if cells is None:
                    cells = state.worker * self.slots + state.slot
                stale = np.flatnonzero(self.stale)
                if self.races is not None:
                    self._catch_up_races(stale)
                allocate(stale, cells, state, self.physics, self.table, self.cores, self.slots)
                self.stale[:] = False
            until = self._next_event(end, moving)
            self._integrate(until, moving)
            self.now = np.where(moving, until, self.now)
            self._wake(moving)
            if self.races is not None:
                self._switch_races(moving)
            moving &= self.now < end
        self.now = end if every else np.where(rows, end, self.now)
        timed = seconds > 0 if every else rows & (seconds > 0)
        count = np.count_nonzero(timed)
        if count == len(timed):
            state.usage = (state.cpu_seconds - cpu_before) / seconds[:, None]
        elif count:
            spent = (state.cpu_seconds - cpu_before)[timed]
            state.usage[timed] = spent / seconds[timed][:, None]
        if throttles and count:
            self._throttle_ratios(None if count == len(timed) else timed)

    def _throttle_ratios(self, rows: np.ndarray | None) -> None:
        """The throttle ratio of every job of ``rows`` (a mask; ``None``: every row) over the
        advance just ended. Gathering and scattering by a mask costs more than the division,
        so every row timed (every step of an environment that is not batched) takes neither."""
        physics, state = self.physics, self.state
        every = rows is None
        quota_s = physics.quota_s if every else physics.quota_s[rows]
        throttled_s = physics.throttled_s if every else physics.throttled_s[rows]
        phase = state.phase if every else state.phase[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where((quota_s > 0) & (phase != DONE), throttled_s / quota_s, np.nan)
        np.minimum(ratio, 1.0, out=ratio)
        if every:
            state.throttle_ratio = ratio
        else:
            state.throttle_ratio[rows] = ratio

    def _wake(self, rows: np.ndarray) -> None:
        """Start the first unit of jobs whose start-up ended, resume migrated ones."""
        state, physics = self.state, self.physics
        mask = rows[:, None]
        phase = state.phase
        if self._any_booting:
            booted = mask & (phase == BOOTING) & (physics.startup_left <= WORK_EPS)
            if np.count_nonzero(booted):
                self.stale |= booted.any(axis=1)
                physics.startup_left[booted] = 0.0
                physics.unit_start[booted] = np.broadcast_to(self.now[:, None], booted.shape)[
                    booted
                ]
                phase[booted] = RUNNING
                self._any_booting = bool(np.count_nonzero(phase == BOOTING))
        # Only a starting or migrating job has a resume time (others have inf): most calls
        # find none due and look at no array.
        if self._next_resume == math.inf or self._next_resume > self.now.max():
            return
        paused = (phase == STARTING) | (phase == MIGRATING)
        waking = mask & paused & (physics.resume_s <= self.now[:, None])
        if not np.count_nonzero(waking):
            return
        self.stale |= waking.any(axis=1)
        # A job migrated while it was starting up on the CPU finishes its start-up after.
        rebooting = waking & (physics.startup_left > 0)
        resumed = waking & (physics.startup_left <= 0)
        first = resumed & np.isnan(physics.unit_start)
        physics.unit_start[first] = physics.resume_s[first]
        phase[resumed] = RUNNING
        phase[rebooting] = BOOTING
        physics.resume_s[waking] = math.inf
        self._paused_or_booting_changed()

    def _switch_races(self, rows: np.ndarray) -> None:
        """Move every job of ``rows`` whose race changes its rate and whose level's time is up
        to its next level; its row is allocated again."""
        due = rows[:, None] & self.physics.race_active
        due &= self.physics.race_switch_s <= self.now[:, None]
        if np.count_nonzero(due):
            self.stale |= due.any(axis=1)
            self._advance_races(due)

    def _catch_up_races(self, rows: np.ndarray) -> None:
        """Bring the races of ``rows`` (indices) to the present before they are allocated: a
        job whose race did not change its rate (its threads fit) switched levels unseen, and
        is not split at its switches, so that its progress is what it is without a race."""
        due = np.zeros(len(self.now), dtype=bool)
        due[rows] = True
        self._advance_races(due[:, None] & (self.physics.race_switch_s <= self.now[:, None]))

    def _advance_races(self, due: np.ndarray) -> None:
        """Move the ``due`` jobs' races through every switch up to now (a finished job's race
        ends)."""
        assert self.races is not None
        state, physics = self.state, self.physics
        for row, job in zip(*np.nonzero(due), strict=True):
            if state.phase[row, job] == DONE:
                physics.race_switch_s[row, job] = math.inf
                continue
            profile = int(physics.profile_of[row, job])
            while physics.race_switch_s[row, job] <= self.now[row]:
                level, holding = self.races.switch(int(row), int(job), profile)
                physics.race_level[row, job] = level
                physics.race_switch_s[row, job] += holding

    def _next_event(self, end: np.ndarray, moving: np.ndarray) -> np.ndarray:
        """Per row, the earliest time before its end at which the shares change."""
        state, physics = self.state, self.physics
        until = (
            end if self._next_resume == math.inf else np.minimum(end, physics.resume_s.min(axis=1))
        )
        if self.races is not None:
            switches = np.where(physics.race_active, physics.race_switch_s, math.inf)
            until = np.minimum(until, switches.min(axis=1))
        booting = (state.phase == BOOTING) & (physics.share > 0) if self._any_booting else None
        if booting is not None and np.count_nonzero(booting):
            left = np.full(physics.share.shape, math.inf)
            left[booting] = physics.startup_left[booting] / physics.share[booting]
            left = left.min(axis=1)
            until = np.minimum(until, np.where(booting.any(axis=1), self.now + left, math.inf))
        if self.training:
            finishing = (state.phase == RUNNING) & (physics.rate > 0)
            if np.count_nonzero(finishing):
                remaining = np.full(physics.rate.shape, math.inf)
                remaining[finishing] = (
                    physics.final_bound[finishing] - physics.work[finishing]
                ).clip(min=0.0) / physics.rate[finishing]
                remaining = remaining.min(axis=1)
                until = np.minimum(
                    until, np.where(finishing.any(axis=1), self.now + remaining, math.inf)
                )
        return np.where(moving, until, self.now)

    def _integrate(self, until: np.ndarray, moving: np.ndarray) -> None:
        """Let each moving row's constant shares run to ``until``; complete finished units."""
        state, physics = self.state, self.physics
        span = np.where(moving, until - self.now, 0.0)[:, None]
        work_before = physics.work.copy()
        state.cpu_seconds += physics.share * span
        physics.work += physics.rate * span
        if self.table.throttles:
            physics.throttled_s += physics.throttle_rate * span
            physics.quota_s += physics.throttle_weight * span
        if self._any_booting:
            booting = state.phase == BOOTING
            physics.startup_left[booting] -= (physics.share * span)[booting]
        crossed = moving[:, None] & (physics.work >= physics.next_bound - WORK_EPS)
        if np.count_nonzero(crossed):
            self._complete(crossed, work_before, until)

    # ------------------------------------------------------------------ units

    def _complete(self, crossed: np.ndarray, work_before: np.ndarray, until: np.ndarray) -> None:
        """Record the units the ``crossed`` jobs completed, for all of them at once from their
        windows, per job where a window falls short (:meth:`_complete_units`).

        The jobs are addressed by their flat index ``row * jobs + job`` in the (C-contiguous)
        arrays: a gather or a scatter by one index costs a third of one by two.
        """
        state, physics, work = self.state, self.physics, self.units_of_work
        cells = crossed.ravel().nonzero()[0]
        rows = cells // self.jobs
        windows = work.bound_window.reshape(-1, WINDOW)
        threshold = (physics.work.reshape(-1)[cells] + WORK_EPS)[:, None]
        start = work.window_start.reshape(-1)[cells]
        first_new = state.units.reshape(-1)[cells]
        # The bounds ascend and those of the units done were reached: the count in the whole
        # window is theirs and the count in the HEAD bounds after them, unless every one of
        # those was reached (a job that completed many units at once: count them all).
        done = first_new - start
        ahead = windows[cells[:, None], done[:, None] + _HEAD_RANGE]
        count = done + (ahead <= threshold).sum(axis=1)
        far = count == done + HEAD
        if np.count_nonzero(far):
            count[far] = (windows[cells[far]] <= threshold[far]).sum(axis=1)
        completed = start + count
        # A window that ends before the last unit completed, or that lacks the unit before a
        # service's last one when it needs it, leaves the job to the per-job path.
        short = count >= WINDOW
        if not self.training:
            short |= (completed - 1 != first_new) & (completed - 2 < start)
        refill: list[tuple[int, int]] = []
        if short.any():  # rare: most steps complete every job from its window
            refill += zip(rows[short].tolist(), (cells[short] % self.jobs).tolist(), strict=True)
            for row, job in refill:
                self._complete_units(row, job, float(work_before[row, job]), until)
            fast = ~short
            cells, rows = cells[fast], rows[fast]
            start, completed, first_new = start[fast], completed[fast], first_new[fast]
        state.units.reshape(-1)[cells] = completed
        end_s = until[rows]
        if self.training:
            state.loss.reshape(-1)[cells] = work.loss_window.reshape(-1, WINDOW)[
                cells, completed - 1 - start
            ]
            finished = completed >= state.total.reshape(-1)[cells]
            done = cells[finished]
            self.ended_jobs += len(done)
            self.stale[done // self.jobs] = True
            state.phase.reshape(-1)[done] = DONE
            state.completed.reshape(-1)[done] = end_s[finished]
            physics.next_bound.reshape(-1)[done] = math.inf
            going = ~finished
            physics.next_bound.reshape(-1)[cells[going]] = windows[
                cells[going], (completed - start)[going]
            ]
        else:
            now = self.now[rows]
            rate = physics.rate.reshape(-1)[cells]
            before = work_before.reshape(-1)[cells]
            last = windows[cells, completed - 1 - start]
            finish = np.minimum(end_s, now + np.maximum(last - before, 0.0) / rate)
            previous = windows[cells, np.maximum(completed - 2 - start, 0)]
            reached = np.minimum(end_s, now + np.maximum(previous - before, 0.0) / rate)
            unit_start = physics.unit_start.reshape(-1)
            began = np.where(completed - 1 == first_new, unit_start[cells], reached)
            state.latency.reshape(-1)[cells] = finish - began
            unit_start[cells] = finish
            physics.next_bound.reshape(-1)[cells] = windows[cells, completed - start]
        low = (completed - start > WINDOW // 2) & (state.phase.reshape(-1)[cells] != DONE)
        if np.count_nonzero(low):
            refill += zip(rows[low].tolist(), (cells[low] % self.jobs).tolist(), strict=True)
        work.refill(refill, state.units, physics.profile_of)

    def _complete_units(self, row: int, job: int, work_before: float, until: np.ndarray) -> None:
        """Record the units one job completed, from its whole bounds."""
        state, physics = self.state, self.physics
        end_s = float(until[row])
        now = float(self.now[row])
        work = float(physics.work[row, job])
        profile = int(physics.profile_of[row, job])
        bounds = self.units_of_work.bounds_through(row, job, profile, work + WORK_EPS)
        completed = int(np.searchsorted(bounds, work + WORK_EPS, side="right"))
        first_new = int(state.units[row, job])
        state.units[row, job] = completed
        if self.training:
            state.loss[row, job] = self.units_of_work.loss(row, job, completed)
            if completed >= len(bounds):
                self.ended_jobs += 1
                self.stale[row] = True
                state.phase[row, job] = DONE
                state.completed[row, job] = end_s
                physics.next_bound[row, job] = math.inf
                return
        else:
            last_two = bounds[max(completed - 2, 0) : completed]
            reached = np.minimum(
                end_s, now + np.maximum(last_two - work_before, 0.0) / physics.rate[row, job]
            )
            finish = float(reached[-1])
            began = physics.unit_start[row, job] if completed - 1 == first_new else reached[0]
            state.latency[row, job] = finish - float(began)
            physics.unit_start[row, job] = finish
        physics.next_bound[row, job] = bounds[completed]
