"""The replay model of many episodes at once: the physics of :mod:`.backend`, held in arrays.

:class:`ReplayBatch` holds ``episodes x jobs`` arrays (one row per episode, one column per job of
that episode, in the backend's order: by arrival, then id) and advances any subset of its rows
in one call. It is the state behind :class:`dlsched.envs.replay.vector.ReplayVectorEnv`.

The single :class:`~dlsched.envs.replay.backend.ReplayBackend` is the reference: this module
applies the same formulas in the same order (water-filling per worker, the largest fixed point of
the runnable threads, ``f + (1 - f) R ** -a``, start-up on the CPU it gets, exact integration
between events) and draws every job's noise from a stream seeded the same way, so an episode
here and the same episode there agree to the last bits where the arithmetic is the same, and to
1e-9 where only the order of a sum differs (``tests/test_replay_vector.py`` holds them to it).
What the reference does per job in Python is done here for all rows and jobs at once:

- shares: every worker of every episode is water-filled at once over a ``(episodes, workers,
  slots)`` array, empty slots counting as jobs capped at 0 (which changes no level);
- contention: the fixed point of every oversubscribed worker is found by evaluating all segments
  of its piecewise-linear function at once and taking the first that holds it;
- events: each row runs to its own next event (a start-up or migration pause ending, a training
  job finishing), and a step loops until every row has reached its end;
- resets and placements: the rows reset (and the jobs placed) in one step are written at once,
  and the new jobs' first units of work are turned into bounds and windows together.

Only what needs a job's own stream is per job in Python: drawing its numbers from it (its seed
is drawn from its row's generator in placement order, as the reference draws it, and its
starting state computed for all jobs at once by :mod:`.streams`), and a migration.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlsched.envs.errors import ScenarioError, UnknownNameError
from dlsched.envs.replay.backend import (
    _BATCH_DRAWS,
    _BOOTING,
    _DONE,
    _MIGRATING,
    _RUNNING,
    _STARTING,
    _UNPLACED,
    _WORK_EPS,
    _boot_demand,
    _lognormal,
    _lognormal_sigma,
    _total_iterations,
)
from dlsched.envs.replay.contention import FIXED_POINT_TOLERANCE, job_efficiencies
from dlsched.envs.replay.profile import WorkloadProfile, load_profile_set, load_set_contention
from dlsched.envs.replay.streams import pcg64_states
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario

__all__ = ["ReplayBatch"]

#: The backend's order of an episode's jobs: by arrival, then id.
_ARRIVAL_ORDER = operator.attrgetter("arrival_s", "job_id")
#: Unit bounds (and losses) of each job kept in arrays for the vectorised completions.
_WINDOW = 64
#: Bounds of a window compared first when counting the units a job completed (most complete one
#: or two a step; comparing all 64 of every job cost more than the rest of the completions).
_HEAD = 8


@dataclass(frozen=True)
class _Layout:
    """Where the jobs that get CPU in the rows being allocated sit in ``(rows, workers, slots)``
    arrays of those rows alone, found once per allocation (water-filling, contention and their
    results read it)."""

    #: The rows laid out, ascending.
    episodes: np.ndarray
    #: Per job, the position of its row in ``episodes``.
    rows: np.ndarray
    #: Per job, its flat index ``row * jobs + job`` in the ``(episodes, jobs)`` arrays.
    at: np.ndarray
    #: Per job, its worker.
    workers: np.ndarray
    #: Per job, its flat index ``(position * workers + worker) * slots + slot``.
    cells: np.ndarray


class ReplayBatch:
    """The replay model of ``episodes`` episodes of one scenario, as arrays.

    Arrays are ``(episodes, jobs)`` with ``jobs = scenario.max_jobs``; the columns beyond an
    episode's drawn jobs are padding (``exists`` False) and never take part.

    Args:
        scenario: the scenario every row runs (its workers, slots, profile set, costs).
        episodes: rows.
        loss_noise_cv: as :class:`~dlsched.envs.replay.backend.ReplayBackend`'s.

    Raises:
        UnknownNameError: a workload of the scenario is not in its profile set.
        ScenarioError: a workload's kind or threading differs from the scenario's.
    """

    def __init__(self, scenario: Scenario, episodes: int, loss_noise_cv: float) -> None:
        profiles = load_profile_set(scenario.profile_set)
        contention = load_set_contention(scenario.profile_set)
        names = scenario.workload_names()
        for name in names:
            if name not in profiles:
                raise UnknownNameError(
                    f"workload (profile set {scenario.profile_set!r})", name, profiles
                )
            profile = profiles[name]
            if scenario.workload_threading not in (None, profile.threading):
                raise ScenarioError(
                    f"scenario {scenario.name!r} runs {scenario.workload_threading} workloads "
                    f"but workload {name!r} is profiled with {profile.threading} threading in "
                    f"set {scenario.profile_set!r}; use a set profiled with "
                    f"{scenario.workload_threading} threading"
                )
            if profile.kind is not scenario.kind:
                raise ScenarioError(
                    f"workload {name!r} is a {profile.kind.value} profile in set "
                    f"{scenario.profile_set!r} but scenario {scenario.name!r} runs "
                    f"{scenario.kind.value} jobs; use a {scenario.kind.value} workload"
                )
        self.scenario = scenario
        self.loss_noise_cv = float(loss_noise_cv)
        self.episodes = episodes
        self.jobs = max(scenario.max_jobs, 1)
        self.training = scenario.kind is JobKind.TRAINING
        self.cores = np.array([worker.cores for worker in scenario.workers], dtype=np.float64)
        self.workers = len(self.cores)
        self.slots = scenario.slots_per_worker
        self._whole = np.maximum(1.0, np.floor(self.cores))
        self.profile_names = names
        self.profiles: list[WorkloadProfile] = [profiles[name] for name in names]
        self._curves = [
            (np.array((0.0, *p.throughput.cores)), np.array((0.0, *p.throughput.units_per_s)))
            for p in self.profiles
        ]
        exponents = [
            p.contention_exponent
            if p.contention_exponent is not None
            else contention.exponents.get(p.threading, 0.0)
            for p in self.profiles
        ]
        max_cores = float(self.cores.max())
        self._by_profile = {
            "demand": np.array([p.demand_cores for p in self.profiles] + [0.0]),
            "stock": np.array([p.threading == "stock" for p in self.profiles] + [False]),
            "exponent": np.array([*exponents, 0.0]),
            "floor": np.array([p.contention_floor or 0.0 for p in self.profiles] + [0.0]),
            "bound_scale": np.array(
                [contention.bound_scales.get(p.threading, 1.0) for p in self.profiles] + [1.0]
            ),
            "beside": np.array([p.efficiency_beside_startup or 1.0 for p in self.profiles] + [1.0]),
            "boot": np.array([_boot_demand(p, max_cores) for p in self.profiles] + [0.0]),
        }
        self._startup_s = np.array([p.startup_s for p in self.profiles] + [0.0])
        self._startup_cpu_s = np.array([p.startup_cpu_s or 0.0 for p in self.profiles] + [0.0])
        # A profile with noise draws its unit factors; one without draws nothing (factors 1).
        self._noisy = np.array([p.noise_cv != 0.0 for p in self.profiles] + [False])
        self._sigma = np.array(
            [_lognormal_sigma(p.noise_cv) if p.noise_cv != 0.0 else 0.0 for p in self.profiles]
            + [0.0]
        )
        # A training workload's loss curve at iterations 1..total, by (profile, total).
        self._loss_curves: dict[tuple[int, int], np.ndarray] = {}
        # The reference contends where a job of its episode has an exponent; here where one of
        # the scenario's workloads has (the same where none has, and _contend then changes no
        # rate: R ** -0 is 1 and no profile sets a start-up efficiency without an exponent).
        self._contends = bool((self._by_profile["exponent"] > 0).any())
        shape = (episodes, self.jobs)
        self.specs: list[tuple[JobSpec, ...]] = [() for _ in range(episodes)]
        self.exists = np.zeros(shape, dtype=bool)
        self.arrival = np.full(shape, math.inf)
        self.target = np.full(shape, math.nan)  # a service's latency target; NaN for training
        self.tolerance = np.full(shape, 0.1)
        self.profile_of = np.full(shape, len(self.profiles), dtype=np.int64)
        self.total = np.zeros(shape, dtype=np.int64)
        self.demand = np.zeros(shape)
        self.stock = np.zeros(shape, dtype=bool)
        self.exponent = np.zeros(shape)
        self.floor = np.zeros(shape)
        self.bound_scale = np.ones(shape)
        self.beside_startup = np.ones(shape)
        self.boot_demand = np.zeros(shape)
        self.phase = np.full(shape, _UNPLACED, dtype=np.int8)
        self.worker = np.zeros(shape, dtype=np.int64)
        self.slot = np.zeros(shape, dtype=np.int64)
        self.limit = np.ones(shape)
        self.resume_s = np.full(shape, math.inf)
        self.startup_left = np.zeros(shape)
        self.unit_start = np.full(shape, math.nan)
        self.work = np.zeros(shape)
        self.next_bound = np.full(shape, math.inf)
        self.final_bound = np.full(shape, math.inf)
        self.units = np.zeros(shape, dtype=np.int64)
        self.latency = np.full(shape, math.nan)
        self.loss = np.full(shape, math.nan)
        self.completed = np.full(shape, math.nan)
        self.cpu_seconds = np.zeros(shape)
        self.usage = np.zeros(shape)
        self.share = np.zeros(shape)
        self.rate = np.zeros(shape)
        # Rows whose shares changed since their last allocation (``ReplayBackend``'s stale
        # workers, by row): only theirs are recomputed.
        self.stale = np.ones(episodes, dtype=bool)
        self.now = np.zeros(episodes)
        self._rngs: list[np.random.Generator | None] = [None] * episodes
        # Every service's noise stream: a state of its generator (the generator
        # np.random.default_rng(seed) would be) and the normals already drawn after it; its
        # draws are made on one shared generator set to that state (building a generator per
        # job cost more than its draws, reading its state back after them a third of them).
        self._job_states: list[dict[int, tuple[Mapping[str, Any], int]]] = [
            {} for _ in range(episodes)
        ]
        self._stream = np.random.Generator(np.random.PCG64(0))
        self._bounds: list[list[np.ndarray]] = [[] for _ in range(episodes)]
        self._losses: list[list[np.ndarray]] = [[] for _ in range(episodes)]
        # A window of every job's cumulative unit bounds (and losses) from unit ``window_start``,
        # so that completing units is array work; refilled from the lists above when it runs low.
        self.window_start = np.zeros(shape, dtype=np.int64)
        self.bound_window = np.full((*shape, _WINDOW), math.inf)
        self.loss_window = np.full((*shape, _WINDOW), math.nan)

    # ------------------------------------------------------------------ episodes

    def reset_rows(
        self,
        rows: Sequence[int],
        episodes: Sequence[Sequence[JobSpec]],
        rngs: Sequence[np.random.Generator],
    ) -> None:
        """Start an empty episode at time 0 in each of ``rows`` (as ``ReplayBackend.reset``):
        ``episodes[i]`` are row ``rows[i]``'s jobs, ``rngs[i]`` its generator.

        Raises:
            ScenarioError: an episode has more jobs than the scenario allows, or repeated ids.
        """
        ordered_rows = []
        for jobs in episodes:
            ordered = tuple(sorted(jobs, key=_ARRIVAL_ORDER))
            if len(ordered) > self.jobs:
                raise ScenarioError(
                    f"episode has {len(ordered)} jobs but scenario {self.scenario.name!r} allows "
                    f"at most {self.jobs}"
                )
            if len({job.job_id for job in ordered}) != len(ordered):
                raise ScenarioError(
                    f"job ids must be unique; got {[job.job_id for job in ordered]}"
                )
            ordered_rows.append(ordered)
        # Every episode checked: no row changes if one is refused.
        for row, ordered, rng in zip(rows, ordered_rows, rngs, strict=True):
            self.specs[row] = ordered
            self._rngs[row] = rng
            self._job_states[row] = {}
            self._bounds[row] = [np.empty(0)] * self.jobs
            self._losses[row] = [np.empty(0)] * self.jobs
        reset = np.asarray(rows, dtype=np.int64)
        # Every job of the episodes, row by row, and where it goes.
        every = [job for ordered in ordered_rows for job in ordered]
        counts = np.array([len(ordered) for ordered in ordered_rows], dtype=np.int64)
        starts = np.cumsum(counts) - counts
        at = (np.repeat(reset, counts), np.arange(len(every)) - np.repeat(starts, counts))
        index = {name: i for i, name in enumerate(self.profile_names)}
        profile_of = [index[job.workload] for job in every]
        self.exists[reset] = False
        self.exists[at] = True
        self.arrival[reset] = math.inf
        self.arrival[at] = [job.arrival_s for job in every]
        self.target[reset] = math.nan
        self.target[at] = [math.nan if job.target_s is None else job.target_s for job in every]
        self.tolerance[reset] = 0.1
        self.tolerance[at] = [job.tolerance for job in every]
        self.profile_of[reset] = len(self.profiles)
        self.profile_of[at] = profile_of
        self.total[reset] = 0
        if self.training:
            self.total[at] = [
                _total_iterations(job, self.profiles[profile])
                for job, profile in zip(every, profile_of, strict=True)
            ]
        profiles = self.profile_of[reset]
        for name, values in (
            ("demand", self.demand),
            ("stock", self.stock),
            ("exponent", self.exponent),
            ("floor", self.floor),
            ("bound_scale", self.bound_scale),
            ("beside", self.beside_startup),
            ("boot", self.boot_demand),
        ):
            values[reset] = self._by_profile[name][profiles]
        self.phase[reset] = _UNPLACED
        self.worker[reset] = 0
        self.slot[reset] = 0
        self.limit[reset] = 1.0
        self.resume_s[reset] = math.inf
        self.startup_left[reset] = 0.0
        self.unit_start[reset] = math.nan
        self.work[reset] = 0.0
        self.next_bound[reset] = math.inf
        self.final_bound[reset] = math.inf
        self.units[reset] = 0
        self.latency[reset] = math.nan
        self.loss[reset] = math.nan
        self.completed[reset] = math.nan
        self.cpu_seconds[reset] = 0.0
        self.usage[reset] = 0.0
        self.share[reset] = 0.0
        self.rate[reset] = 0.0
        self.now[reset] = 0.0
        self.window_start[reset] = 0
        self.bound_window[reset] = math.inf
        self.loss_window[reset] = math.nan
        self.stale[reset] = True

    # ------------------------------------------------------------------ actuation

    def place(
        self, rows: np.ndarray, jobs: np.ndarray, workers: np.ndarray, slots: np.ndarray
    ) -> None:
        """Start job ``jobs[i]`` of row ``rows[i]`` on ``workers[i]``/``slots[i]`` for every
        ``i`` (as ``ReplayBackend._place`` each), a row's jobs in the order given.

        Each job's noise stream is seeded from its row's generator in that order, as the
        reference seeds them one placement at a time; its first units of work (and, for a
        training job, all of them and its losses) are drawn from it and windowed at once.
        """
        if not len(rows):
            return
        profile_of = self.profile_of[rows, jobs]
        self.worker[rows, jobs] = workers
        self.slot[rows, jobs] = slots
        booting = self.boot_demand[rows, jobs] > 0
        self.phase[rows, jobs] = np.where(booting, _BOOTING, _STARTING)
        self.stale[rows[booting]] = True  # a start-up on the CPU takes cores at once
        self.startup_left[rows[booting], jobs[booting]] = self._startup_cpu_s[profile_of[booting]]
        timed = ~booting
        self.resume_s[rows[timed], jobs[timed]] = (
            self.now[rows[timed]] + self._startup_s[profile_of[timed]]
        )
        # The reference draws a seed per placement from the row's generator: one call per row
        # draws the same numbers (a bound above 2**32 takes no buffered bits).
        order = np.argsort(rows, kind="stable")
        seeds = np.empty(len(rows), dtype=np.int64)
        bounds = np.flatnonzero(np.diff(rows[order])) + 1
        for group in np.split(order, bounds):
            rng = self._rngs[int(rows[group[0]])]
            assert rng is not None
            seeds[group] = rng.integers(2**63, size=len(group))
        states = pcg64_states(seeds)
        if self.training:
            self._draw_training(rows, jobs, profile_of, states)
        else:
            self._draw_services(rows, jobs, profile_of, states)
        self.window_start[rows, jobs] = 0

    def _draw_services(
        self,
        rows: np.ndarray,
        jobs: np.ndarray,
        profile_of: np.ndarray,
        states: Sequence[Mapping[str, Any]],
    ) -> None:
        """The first two draws of ``_BATCH_DRAWS`` units of new services, windowed: the
        numbers ``_refill`` draws from each stream, in the same arithmetic (each draw's
        cumulative sum continues from the last bound before it)."""
        draws = 2 * _BATCH_DRAWS  # what a window from unit 0 needs
        sigma = self._sigma[profile_of][:, None]
        noisy = self._noisy[profile_of].tolist()
        normal = np.zeros((len(rows), draws))
        stream = self._stream
        bit_generator = stream.bit_generator
        for index, (row, job, state) in enumerate(
            zip(rows.tolist(), jobs.tolist(), states, strict=True)
        ):
            if noisy[index]:
                bit_generator.state = state
                stream.standard_normal(out=normal[index])
                self._job_states[row][job] = (state, draws)
            else:
                self._job_states[row][job] = (state, 0)
        # Without noise sigma and the draws are 0 and the factors exp(0) = 1, as _lognormal's.
        factors = np.exp(sigma * normal - 0.5 * sigma * sigma)
        bounds = np.cumsum(factors.reshape(len(rows), 2, _BATCH_DRAWS), axis=2)
        bounds[:, 1] += bounds[:, 0, -1:]
        bounds = bounds.reshape(len(rows), draws)
        for row, job, job_bounds in zip(rows.tolist(), jobs.tolist(), bounds, strict=True):
            self._bounds[row][job] = job_bounds
        self.next_bound[rows, jobs] = bounds[:, 0]
        self.bound_window[rows, jobs] = bounds[:, :_WINDOW]

    def _draw_training(
        self,
        rows: np.ndarray,
        jobs: np.ndarray,
        profile_of: np.ndarray,
        states: Sequence[Mapping[str, Any]],
    ) -> None:
        """All iterations' work and losses of new training jobs, windowed; jobs of one
        workload and length are drawn into one array (each from its own stream)."""
        totals = self.total[rows, jobs]
        groups: dict[tuple[int, int], list[int]] = {}
        for index, key in enumerate(zip(profile_of.tolist(), totals.tolist(), strict=True)):
            groups.setdefault(key, []).append(index)
        loss_noisy = self.loss_noise_cv != 0.0
        loss_sigma = _lognormal_sigma(self.loss_noise_cv)
        for (profile, total), members in groups.items():
            sigma = float(self._sigma[profile])
            work_draws = total if self._noisy[profile] else 0
            loss_draws = total if loss_noisy else 0
            normal = np.zeros((len(members), 2, total))
            for position, index in enumerate(members):
                self._stream.bit_generator.state = states[index]
                draws = self._stream.standard_normal(work_draws + loss_draws)
                normal[position, 0, :work_draws] = draws[:work_draws]
                normal[position, 1, :loss_draws] = draws[work_draws:]
            # Without noise sigma and the draws are 0 and the factors exp(0) = 1, as _lognormal's.
            bounds = np.cumsum(np.exp(sigma * normal[:, 0] - 0.5 * sigma * sigma), axis=1)
            noise = np.exp(loss_sigma * normal[:, 1] - 0.5 * loss_sigma * loss_sigma)
            losses = self._loss_curve(profile, total) * noise
            at_rows, at_jobs = rows[members], jobs[members]
            for row, job, job_bounds, job_losses in zip(
                at_rows.tolist(), at_jobs.tolist(), bounds, losses, strict=True
            ):
                self._bounds[row][job] = job_bounds
                self._losses[row][job] = job_losses
            self.final_bound[at_rows, at_jobs] = bounds[:, -1]
            self.next_bound[at_rows, at_jobs] = bounds[:, 0]
            width = min(total, _WINDOW)
            windows = np.full((len(members), _WINDOW), math.inf)
            windows[:, :width] = bounds[:, :width]
            self.bound_window[at_rows, at_jobs] = windows
            windows = np.full((len(members), _WINDOW), math.nan)
            windows[:, :width] = losses[:, :width]
            self.loss_window[at_rows, at_jobs] = windows

    def _loss_curve(self, profile: int, total: int) -> np.ndarray:
        """Workload ``profile``'s loss curve at iterations ``1..total`` (computed once)."""
        curve = self._loss_curves.get((profile, total))
        if curve is None:
            iterations = np.arange(1, total + 1, dtype=np.float64)
            curve = np.asarray(self.profiles[profile].loss_at(iterations))
            self._loss_curves[profile, total] = curve
        return curve

    def _more_work(self, row: int, job: int) -> np.ndarray:
        """The work factors of service ``job``'s next ``_BATCH_DRAWS`` units, from its stream."""
        bit_generator = self._stream.bit_generator
        state, drawn = self._job_states[row][job]
        bit_generator.state = state
        if drawn:  # drawn at placement, when the state after them was not read back
            self._stream.standard_normal(drawn)
        noise_cv = self.profiles[self.profile_of[row, job]].noise_cv
        factors = _lognormal(self._stream, noise_cv, _BATCH_DRAWS)
        self._job_states[row][job] = (bit_generator.state, 0)
        return factors

    def _refill(self, jobs: Sequence[tuple[int, int]]) -> None:
        """Window the bounds (and losses) of ``jobs`` (row, job) from the unit before their
        current one, all windows written at once.

        A service's bounds are drawn further ahead if needed, 32 at a time from its own stream,
        exactly the numbers the reference draws when it reaches them.
        """
        if not jobs:
            return
        rows, columns = (list(part) for part in zip(*jobs, strict=True))
        units = self.units[rows, columns].tolist()
        starts = [max(done - 1, 0) for done in units]
        windows = np.full((len(jobs), _WINDOW), math.inf)
        losses = np.full((len(jobs), _WINDOW), math.nan) if self.training else windows
        for index, (row, job) in enumerate(jobs):
            start = starts[index]
            bounds = self._bounds[row][job]
            if not self.training:
                while len(bounds) < start + _WINDOW:
                    extra = np.cumsum(self._more_work(row, job))
                    bounds = np.concatenate((bounds, bounds[-1] + extra))
                self._bounds[row][job] = bounds
            part = bounds[start : start + _WINDOW]
            windows[index, : len(part)] = part
            if self.training:
                loss = self._losses[row][job][start : start + _WINDOW]
                losses[index, : len(loss)] = loss
        self.window_start[rows, columns] = starts
        self.bound_window[rows, columns] = windows
        if self.training:
            self.loss_window[rows, columns] = losses

    def migrate(self, row: int, job: int, worker: int, slot: int) -> None:
        """Move running job ``job`` of ``row``; it pauses for the migration cost."""
        self.stale[row] = True
        self.worker[row, job] = worker
        self.slot[row, job] = slot
        starting = self.phase[row, job] == _STARTING
        self.phase[row, job] = _MIGRATING
        resume = self.now[row] + self.scenario.migration_cost_s
        if starting:  # as ReplayBackend.apply: only a timed start-up has an end to wait for
            resume = max(resume, float(self.resume_s[row, job]))
        self.resume_s[row, job] = resume

    def set_limits(self, limits: np.ndarray) -> None:
        """Put ``limits`` (per row and job) in force."""
        self.stale |= (limits != self.limit).any(axis=1)
        self.limit = limits

    # ------------------------------------------------------------------ time

    def advance(self, rows: np.ndarray, seconds: np.ndarray) -> None:
        """Let ``seconds[r]`` of simulated time pass in every row ``r`` where ``rows`` is set.

        Args:
            rows: boolean mask of the rows to advance.
            seconds: per row, seconds to let pass (finite, >= 0); ignored where ``rows`` is not.
        """
        end = np.where(rows, self.now + seconds, self.now)
        cpu_before = self.cpu_seconds.copy()
        self._wake(rows)
        moving = rows & (self.now < end)
        # Jobs keep their worker and slot while time passes: their cells are found once.
        cells = self.worker * self.slots + self.slot
        while moving.any():
            if self.stale.any():
                self._allocate(cells)
            until = self._next_event(end, moving)
            self._integrate(until, moving)
            self.now = np.where(moving, until, self.now)
            self._wake(moving)
            moving &= self.now < end
        self.now = np.where(rows, end, self.now)
        timed = rows & (seconds > 0)
        if timed.any():
            spent = (self.cpu_seconds - cpu_before)[timed]
            self.usage[timed] = spent / seconds[timed][:, None]

    def _wake(self, rows: np.ndarray) -> None:
        """Start jobs whose start-up ended, resume migrated ones (``ReplayBackend._wake``)."""
        mask = rows[:, None]
        booting = self.phase == _BOOTING
        if booting.any():
            booted = mask & booting & (self.startup_left <= _WORK_EPS)
            self.stale |= booted.any(axis=1)
            self.startup_left[booted] = 0.0
            self.unit_start[booted] = np.broadcast_to(self.now[:, None], booted.shape)[booted]
            self.phase[booted] = _RUNNING
        # Only a starting or migrating job has a resume time (others have inf): most calls
        # find none due and lay out nothing more.
        if not (rows & (self.resume_s.min(axis=1) <= self.now)).any():
            return
        paused = (self.phase == _STARTING) | (self.phase == _MIGRATING)
        waking = mask & paused & (self.resume_s <= self.now[:, None])
        self.stale |= waking.any(axis=1)
        rebooting = waking & (self.startup_left > 0)
        resumed = waking & (self.startup_left <= 0)
        first = resumed & np.isnan(self.unit_start)
        self.unit_start[first] = self.resume_s[first]
        self.phase[resumed] = _RUNNING
        self.phase[rebooting] = _BOOTING
        self.resume_s[waking] = math.inf

    def _dense(self, values: np.ndarray, layout: _Layout, fill: float) -> np.ndarray:
        """``values`` (one per job of the ``layout``) laid out as ``(rows, workers, slots)``."""
        count = len(layout.episodes)
        dense = np.full(count * self.workers * self.slots, fill)
        dense[layout.cells] = values
        return dense.reshape(count, self.workers, self.slots)

    def _allocate(self, cells: np.ndarray) -> None:
        """CPU shares by water-filling every worker of the stale rows, then rates
        (``ReplayBackend._allocate``); the other rows keep theirs.

        Args:
            cells: every job's ``worker * slots + slot``.
        """
        # The stale rows' arrays alone: a wake-up in one of 16 rows of 640 jobs laid out all.
        stale = np.flatnonzero(self.stale)
        phase = self.phase[stale].reshape(-1)
        booting = phase == _BOOTING
        using = np.flatnonzero((phase == _RUNNING) | booting)
        booting = booting[using]
        rows = using // self.jobs
        at = stale[rows] * self.jobs + using % self.jobs
        places = rows * (self.workers * self.slots) + cells.reshape(-1)[at]
        layout = _Layout(stale, rows, at, self.worker.reshape(-1)[at], places)
        demand = np.where(booting, self.boot_demand.reshape(-1)[at], self.demand.reshape(-1)[at])
        caps = np.minimum(self.limit.reshape(-1)[at] * self.cores[layout.workers], demand)
        dense = self._dense(caps, layout, 0.0)
        over = dense.sum(axis=2) > self.cores[None, :]
        if over.any():
            crowded = dense[over]
            ordered = np.sort(crowded, axis=1)
            met_before = np.concatenate(
                (np.zeros((len(ordered), 1)), np.cumsum(ordered[:, :-1], axis=1)), axis=1
            )
            capacity = np.broadcast_to(self.cores[None, :], over.shape)[over]
            levels = (capacity[:, None] - met_before) / np.arange(self.slots, 0, -1)
            first = np.argmax(levels <= ordered, axis=1)
            level = levels[np.arange(len(levels)), first]
            dense[over] = np.minimum(crowded, np.maximum(level, 0.0)[:, None])
        share = dense.reshape(-1)[layout.cells]
        self.share[stale] = 0.0
        self.share.reshape(-1)[at] = share
        # Rates of the jobs that get CPU, by profile; the others' are 0, as the profile's
        # throughput at 0 cores is.
        rate = np.zeros(len(at))
        profile_of = self.profile_of.reshape(-1)[at]
        for profile, (cores_points, rate_points) in enumerate(self._curves):
            members = profile_of == profile
            rate[members] = np.interp(share[members], cores_points, rate_points)
        rate[booting] = 0.0
        self.rate[stale] = 0.0
        self.rate.reshape(-1)[at] = rate
        if self._contends:  # as the reference: no job of the scenario slows under contention
            self._contend(booting, demand, layout)
        self.stale[:] = False

    def _contend(self, booting: np.ndarray, demand: np.ndarray, layout: _Layout) -> None:
        """Slow every oversubscribed worker's jobs by their efficiency (``ReplayBackend._contend``).

        Per worker the runnable threads ``N`` are the largest fixed point of the piecewise-linear
        function of :func:`~dlsched.envs.replay.contention.runnable_threads`; here every segment
        of every crowded worker is evaluated at once and the first one holding it is taken, the
        segment the reference's loop stops at.
        """
        at, worker = layout.at, layout.workers
        worker_cores = self.cores[worker]
        whole = self._whole[worker]
        limit = self.limit.reshape(-1)[at]
        stock = self.stock.reshape(-1)[at] & ~booting
        following = np.clip(np.ceil(limit * worker_cores - 1e-9), 1.0, whole)
        threads = np.where(stock | (limit >= 1.0), whole, following)
        busy = np.minimum(threads, demand)
        quotas = np.where(limit >= 1.0, math.inf, limit * worker_cores)
        busy_d = self._dense(busy, layout, 0.0)
        total = busy_d.sum(axis=2)
        over = total > self.cores[None, :]
        if not over.any():
            return
        quota_d = self._dense(quotas, layout, 0.0)[over]
        busy_o = busy_d[over]
        occupied = np.zeros(busy_d.size, dtype=bool)
        occupied[layout.cells] = True
        present = occupied.reshape(busy_d.shape)[over]
        capacity = np.broadcast_to(self.cores[None, :], over.shape)[over][:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            breaks = np.where(
                np.isfinite(quota_d), capacity * busy_o / np.where(quota_d > 0, quota_d, 1.0), 0.0
            )
            # Empty slots sort after every job, so the segments are the reference's.
            breaks = np.where(present, breaks, -1.0)
            order = np.argsort(-breaks, axis=1, kind="stable")
            breaks_s = np.take_along_axis(breaks, order, axis=1)
            busy_s = np.take_along_axis(busy_o, order, axis=1)
            quota_s = np.take_along_axis(np.where(present, quota_d, 0.0), order, axis=1)
            count = present.sum(axis=1)
            positions = np.arange(self.slots + 1)[None, :]
            zero = np.zeros((len(busy_s), 1))
            saturated = total[over][:, None] - np.concatenate(
                (zero, np.cumsum(busy_s, axis=1)), axis=1
            )
            bound_quota = np.concatenate((zero, np.cumsum(quota_s, axis=1)), axis=1)
            upper = np.concatenate((np.full((len(busy_s), 1), math.inf), breaks_s), axis=1)
            lower = np.concatenate((breaks_s, zero), axis=1)
            lower = np.where(positions >= count[:, None], -math.inf, lower)
            fixed = saturated / (1.0 - bound_quota / capacity)
            slack = 1.0 - FIXED_POINT_TOLERANCE
            saturates = bound_quota >= capacity * slack
            holds = (saturates | (fixed >= lower * slack)) & (positions <= count[:, None])
            first = np.argmax(holds, axis=1)
            pick = np.arange(len(first))
            runnable = np.where(
                saturates[pick, first],
                np.maximum(upper[pick, first], capacity[:, 0]),
                np.maximum(np.minimum(fixed[pick, first], upper[pick, first]), capacity[:, 0]),
            )
        crowded = runnable > capacity[:, 0]
        kept_d = np.ones((*over.shape, self.slots))
        if crowded.any():
            # One layout for the three per-job terms: laying each out apart cost more.
            terms = np.zeros((3, busy_d.size))
            terms[:, layout.cells] = np.stack(
                (self.exponent, self.floor, self.bound_scale)
            ).reshape(3, -1)[:, at]
            exponent, floor, bound_scale = (
                term.reshape((*over.shape, self.slots))[over][crowded] for term in terms
            )
            kept_o = np.ones((len(runnable), self.slots))
            kept_o[crowded] = job_efficiencies(
                busy_o[crowded],
                quota_d[crowded],
                present[crowded],
                runnable[crowded],
                capacity[crowded, 0],
                exponent,
                floor,
                bound_scale,
            )
            kept_d[over] = kept_o
        crowded_d = np.zeros(over.shape, dtype=bool)
        crowded_d[over] = crowded
        # The layout's jobs on a crowded worker, in the order of their rows and jobs.
        on_worker = layout.rows * self.workers + worker
        slowed = crowded_d.reshape(-1)[on_worker]
        kept = kept_d.reshape(-1)[layout.cells][slowed]
        at = at[slowed]
        if booting.any():  # most steps start no job: skip laying the start-ups out by worker
            starting = self._dense(booting.astype(float), layout, 0.0).sum(axis=2) > 0
            beside = starting.reshape(-1)[on_worker[slowed]]
            kept = np.where(beside, np.minimum(kept, self.beside_startup.reshape(-1)[at]), kept)
        self.rate.reshape(-1)[at] *= kept

    def _next_event(self, end: np.ndarray, moving: np.ndarray) -> np.ndarray:
        """Per row, the earliest time before its end at which the shares change."""
        until = np.minimum(end, self.resume_s.min(axis=1))
        booting = (self.phase == _BOOTING) & (self.share > 0)
        if booting.any():
            left = np.full(self.share.shape, math.inf)
            left[booting] = self.startup_left[booting] / self.share[booting]
            left = left.min(axis=1)
            until = np.minimum(until, np.where(booting.any(axis=1), self.now + left, math.inf))
        if self.training:
            finishing = (self.phase == _RUNNING) & (self.rate > 0)
            if finishing.any():
                remaining = np.full(self.rate.shape, math.inf)
                remaining[finishing] = (self.final_bound[finishing] - self.work[finishing]).clip(
                    min=0.0
                ) / self.rate[finishing]
                remaining = remaining.min(axis=1)
                until = np.minimum(
                    until, np.where(finishing.any(axis=1), self.now + remaining, math.inf)
                )
        return np.where(moving, until, self.now)

    def _integrate(self, until: np.ndarray, moving: np.ndarray) -> None:
        """Let each moving row's constant shares run to ``until``; complete finished units."""
        span = np.where(moving, until - self.now, 0.0)[:, None]
        work_before = self.work.copy()
        self.cpu_seconds += self.share * span
        self.work += self.rate * span
        booting = self.phase == _BOOTING
        if booting.any():
            self.startup_left[booting] -= (self.share * span)[booting]
        crossed = moving[:, None] & (self.work >= self.next_bound - _WORK_EPS)
        if crossed.any():
            self._complete(crossed, work_before, until)

    def _complete(self, crossed: np.ndarray, work_before: np.ndarray, until: np.ndarray) -> None:
        """Record the units the ``crossed`` jobs completed: ``ReplayBackend._complete_units``
        for all of them at once from their windows, per job where a window falls short.

        The jobs are addressed by their flat index ``row * jobs + job`` in the (C-contiguous)
        arrays: a gather or a scatter by one index costs a third of one by two.
        """
        cells = np.flatnonzero(crossed)
        rows = cells // self.jobs
        windows = self.bound_window.reshape(-1, _WINDOW)
        threshold = (self.work.reshape(-1)[cells] + _WORK_EPS)[:, None]
        # The bounds ascend: the count in the whole window is the count in its head unless every
        # bound of the head was reached (a job that completed many units: look further).
        count = (windows[cells, :_HEAD] <= threshold).sum(axis=1)
        far = count == _HEAD
        if far.any():
            count[far] = (windows[cells[far]] <= threshold[far]).sum(axis=1)
        start = self.window_start.reshape(-1)[cells]
        completed = start + count
        first_new = self.units.reshape(-1)[cells]
        # A window that ends before the last unit completed, or that lacks the unit before a
        # service's last one when it needs it, leaves the job to the reference's per-job code.
        short = count >= _WINDOW
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
        self.units.reshape(-1)[cells] = completed
        end_s = until[rows]
        if self.training:
            self.loss.reshape(-1)[cells] = self.loss_window.reshape(-1, _WINDOW)[
                cells, completed - 1 - start
            ]
            finished = completed >= self.total.reshape(-1)[cells]
            done = cells[finished]
            self.stale[done // self.jobs] = True
            self.phase.reshape(-1)[done] = _DONE
            self.completed.reshape(-1)[done] = end_s[finished]
            self.next_bound.reshape(-1)[done] = math.inf
            going = ~finished
            self.next_bound.reshape(-1)[cells[going]] = windows[
                cells[going], (completed - start)[going]
            ]
        else:
            now = self.now[rows]
            rate = self.rate.reshape(-1)[cells]
            before = work_before.reshape(-1)[cells]
            last = windows[cells, completed - 1 - start]
            finish = np.minimum(end_s, now + np.maximum(last - before, 0.0) / rate)
            previous = windows[cells, np.maximum(completed - 2 - start, 0)]
            reached = np.minimum(end_s, now + np.maximum(previous - before, 0.0) / rate)
            unit_start = self.unit_start.reshape(-1)
            began = np.where(completed - 1 == first_new, unit_start[cells], reached)
            self.latency.reshape(-1)[cells] = finish - began
            unit_start[cells] = finish
            self.next_bound.reshape(-1)[cells] = windows[cells, completed - start]
        low = (completed - start > _WINDOW // 2) & (self.phase.reshape(-1)[cells] != _DONE)
        refill += zip(rows[low].tolist(), (cells[low] % self.jobs).tolist(), strict=True)
        self._refill(refill)

    def _complete_units(self, row: int, job: int, work_before: float, until: np.ndarray) -> None:
        """Record the units a job completed (``ReplayBackend._complete_units``)."""
        end_s = float(until[row])
        now = float(self.now[row])
        work = float(self.work[row, job])
        bounds = self._bounds[row][job]
        if not self.training:
            while bounds[-1] <= work + _WORK_EPS:
                extra = np.cumsum(self._more_work(row, job))
                bounds = np.concatenate((bounds, bounds[-1] + extra))
            self._bounds[row][job] = bounds
        completed = int(np.searchsorted(bounds, work + _WORK_EPS, side="right"))
        first_new = int(self.units[row, job])
        self.units[row, job] = completed
        if self.training:
            self.loss[row, job] = self._losses[row][job][completed - 1]
            if completed >= len(bounds):
                self.stale[row] = True
                self.phase[row, job] = _DONE
                self.completed[row, job] = end_s
                self.next_bound[row, job] = math.inf
                return
        else:
            last_two = bounds[max(completed - 2, 0) : completed]
            reached = np.minimum(
                end_s, now + np.maximum(last_two - work_before, 0.0) / self.rate[row, job]
            )
            finish = float(reached[-1])
            start = float(self.unit_start[row, job] if completed - 1 == first_new else reached[0])
            self.latency[row, job] = finish - start
            self.unit_start[row, job] = finish
        self.next_bound[row, job] = bounds[completed]
