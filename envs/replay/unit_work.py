"""The work of every job's units, drawn from the job's own noise stream.

A unit's work (a batch or an iteration) is the profile's average unit times a lognormal factor of
mean 1 and coefficient of variation ``noise_cv``; a training iteration's reported loss is the
profile's loss curve times a factor of coefficient of variation ``loss_noise_cv``. A job draws
them from its own stream, ``np.random.default_rng(seed)`` with ``seed`` drawn from its episode's
generator when it is placed, so its noise does not depend on what other jobs do or on how time
is split. The engine compares a job's work done with the cumulative bounds of its units: a
training job's are drawn whole when it is placed; a service's, which runs until the horizon,
:data:`BATCH_DRAWS` at a time as it reaches them.

:class:`UnitWork` keeps every job's bounds (and losses) and a window of :data:`WINDOW` of them
from the unit before the current one in arrays, so that completing units is array work for all
jobs at once; a job that runs off its window is refilled (:meth:`UnitWork.refill`), or completed
from its whole bounds (:meth:`UnitWork.bounds_through`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dlsched.envs.replay.profile_table import ProfileTable, lognormal, lognormal_sigma
from dlsched.envs.replay.streams import pcg64_states

#: Service units whose work is drawn at a time (their number is unbounded).
BATCH_DRAWS = 32
#: Unit bounds (and losses) of each job kept in arrays for the vectorised completions.
WINDOW = 64
#: Bounds of a window compared first when counting the units a job completed (most complete one
#: or two a step; comparing all 64 of every job cost more than the rest of the completions).
HEAD = 8


class UnitWork:
    """Every job's unit bounds and losses, per row and job (see the module docstring).

    Args:
        table: the scenario's profiles.
        episodes: rows.
        jobs: columns.
        training: whether the scenario's jobs train (else they serve).
        loss_noise_cv: coefficient of variation of a reported loss around its curve.
    """

    def __init__(
        self, table: ProfileTable, episodes: int, jobs: int, training: bool, loss_noise_cv: float
    ) -> None:
        self.table = table
        self.jobs = jobs
        self.training = training
        self.loss_noise_cv = loss_noise_cv
        self.rngs: list[np.random.Generator | None] = [None] * episodes
        # Every service's noise stream: a state of its generator (the generator
        # np.random.default_rng(seed) would be) and the normals already drawn after it; its
        # draws are made on one shared generator set to that state (building a generator per
        # job cost more than its draws, reading its state back after them a third of them).
        self._states: list[dict[int, tuple[Mapping[str, Any], int]]] = [{} for _ in range(episodes)]
        self._stream = np.random.Generator(np.random.PCG64(0))
        self._bounds: list[list[np.ndarray]] = [[] for _ in range(episodes)]
        self._losses: list[list[np.ndarray]] = [[] for _ in range(episodes)]
        # A training workload's loss curve at iterations 1..total, by (profile, total).
        self._loss_curves: dict[tuple[int, int], np.ndarray] = {}
        shape = (episodes, jobs)
        #: Per job, the seed of its noise stream (drawn when it is placed).
        self.seeds = np.zeros(shape, dtype=np.int64)
        #: Per job, the unit its window starts at.
        self.window_start = np.zeros(shape, dtype=np.int64)
        #: Per job, the cumulative work at which its units ``window_start ...`` complete.
        self.bound_window = np.full((*shape, WINDOW), math.inf)
        #: Per job, the losses its iterations ``window_start + 1 ...`` report (training).
        self.loss_window = np.full((*shape, WINDOW), math.nan)

    def reset_rows(self, rows: Sequence[int], rngs: Sequence[np.random.Generator]) -> None:
        """Forget the jobs of ``rows``, whose generators are now ``rngs``."""
        for row, rng in zip(rows, rngs, strict=True):
            self.rngs[row] = rng
            self._states[row] = {}
            self._bounds[row] = [np.empty(0)] * self.jobs
            self._losses[row] = [np.empty(0)] * self.jobs
        self.window_start[rows] = 0
        self.bound_window[rows] = math.inf
        self.loss_window[rows] = math.nan

    def draw(
        self, rows: np.ndarray, jobs: np.ndarray, profile_of: np.ndarray, totals: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Seed and draw the first units of jobs just placed (``jobs[i]`` of ``rows[i]``, a
        row's jobs in placement order) and window them.

        Returns:
            Per job, the bound of its first unit and the bound of its last (``inf`` for a
            service).
        """
        # A seed per placement from the row's generator: one call per row draws the same
        # numbers as one call per job (a bound above 2**32 takes no buffered bits).
        order = np.argsort(rows, kind="stable")
        seeds = np.empty(len(rows), dtype=np.int64)
        starts = np.flatnonzero(np.diff(rows[order])) + 1
        for group in np.split(order, starts):
            rng = self.rngs[int(rows[group[0]])]
            assert rng is not None
            seeds[group] = rng.integers(2**63, size=len(group))
        states = pcg64_states(seeds)
        self.seeds[rows, jobs] = seeds
        self.window_start[rows, jobs] = 0
        if self.training:
            return self._draw_training(rows, jobs, profile_of, totals, states)
        return self._draw_services(rows, jobs, profile_of, states)

    def _draw_services(
        self,
        rows: np.ndarray,
        jobs: np.ndarray,
        profile_of: np.ndarray,
        states: Sequence[Mapping[str, Any]],
    ) -> tuple[np.ndarray, np.ndarray]:
        """The first two draws of :data:`BATCH_DRAWS` units of new services, windowed: the
        numbers :meth:`_more_work` draws from each stream, in the same arithmetic (each draw's
        cumulative sum continues from the last bound before it)."""
        draws = 2 * BATCH_DRAWS  # what a window from unit 0 needs
        sigma = self.table.sigma[profile_of][:, None]
        noisy = self.table.noisy[profile_of].tolist()
        normal = np.zeros((len(rows), draws))
        stream = self._stream
        bit_generator = stream.bit_generator
        for index, (row, job, state) in enumerate(
            zip(rows.tolist(), jobs.tolist(), states, strict=True)
        ):
            if noisy[index]:
                bit_generator.state = state
                stream.standard_normal(out=normal[index])
                self._states[row][job] = (state, draws)
            else:
                self._states[row][job] = (state, 0)
        # Without noise sigma and the draws are 0 and the factors exp(0) = 1, as lognormal's.
        factors = np.exp(sigma * normal - 0.5 * sigma * sigma)
        bounds = np.cumsum(factors.reshape(len(rows), 2, BATCH_DRAWS), axis=2)
        bounds[:, 1] += bounds[:, 0, -1:]
        bounds = bounds.reshape(len(rows), draws)
        for row, job, job_bounds in zip(rows.tolist(), jobs.tolist(), bounds, strict=True):
            self._bounds[row][job] = job_bounds
        self.bound_window[rows, jobs] = bounds[:, :WINDOW]
        return bounds[:, 0], np.full(len(rows), math.inf)

    def _draw_training(
        self,
        rows: np.ndarray,
        jobs: np.ndarray,
        profile_of: np.ndarray,
        totals: np.ndarray,
        states: Sequence[Mapping[str, Any]],
    ) -> tuple[np.ndarray, np.ndarray]:
        """All iterations' work and losses of new training jobs, windowed; jobs of one
        workload and length are drawn into one array (each from its own stream)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for index, key in enumerate(zip(profile_of.tolist(), totals.tolist(), strict=True)):
            groups.setdefault(key, []).append(index)
        loss_noisy = self.loss_noise_cv != 0.0
        loss_sigma = lognormal_sigma(self.loss_noise_cv)
        first = np.empty(len(rows))
        last = np.empty(len(rows))
        for (profile, total), members in groups.items():
            sigma = float(self.table.sigma[profile])
            work_draws = total if self.table.noisy[profile] else 0
            loss_draws = total if loss_noisy else 0
            normal = np.zeros((len(members), 2, total))
            for position, index in enumerate(members):
                self._stream.bit_generator.state = states[index]
                draws = self._stream.standard_normal(work_draws + loss_draws)
                normal[position, 0, :work_draws] = draws[:work_draws]
                normal[position, 1, :loss_draws] = draws[work_draws:]
            # Without noise sigma and the draws are 0 and the factors exp(0) = 1, as lognormal's.
            bounds = np.cumsum(np.exp(sigma * normal[:, 0] - 0.5 * sigma * sigma), axis=1)
            noise = np.exp(loss_sigma * normal[:, 1] - 0.5 * loss_sigma * loss_sigma)
            losses = self._loss_curve(profile, total) * noise
            at_rows, at_jobs = rows[members], jobs[members]
            for row, job, job_bounds, job_losses in zip(
                at_rows.tolist(), at_jobs.tolist(), bounds, losses, strict=True
            ):
                self._bounds[row][job] = job_bounds
                self._losses[row][job] = job_losses
            first[members] = bounds[:, 0]
            last[members] = bounds[:, -1]
            width = min(total, WINDOW)
            windows = np.full((len(members), WINDOW), math.inf)
            windows[:, :width] = bounds[:, :width]
            self.bound_window[at_rows, at_jobs] = windows
            windows = np.full((len(members), WINDOW), math.nan)
            windows[:, :width] = losses[:, :width]
            self.loss_window[at_rows, at_jobs] = windows
        return first, last

    def _loss_curve(self, profile: int, total: int) -> np.ndarray:
        """Workload ``profile``'s loss curve at iterations ``1..total`` (computed once)."""
        curve = self._loss_curves.get((profile, total))
        if curve is None:
            iterations = np.arange(1, total + 1, dtype=np.float64)
            curve = np.asarray(self.table.profiles[profile].loss_at(iterations))
            self._loss_curves[profile, total] = curve
        return curve

    def _more_work(self, row: int, job: int, profile: int) -> np.ndarray:
        """The work factors of service ``job``'s next :data:`BATCH_DRAWS` units, from its
        stream."""
        bit_generator = self._stream.bit_generator
        state, drawn = self._states[row][job]
        bit_generator.state = state
        if drawn:  # drawn at placement, when the state after them was not read back
            self._stream.standard_normal(drawn)
        noise_cv = self.table.profiles[profile].noise_cv
        factors = lognormal(self._stream, noise_cv, BATCH_DRAWS)
        self._states[row][job] = (bit_generator.state, 0)
        return factors

    def bounds_through(self, row: int, job: int, profile: int, work: float) -> np.ndarray:
        """Job ``job`` of ``row``'s bounds, a service's drawn on until one lies beyond ``work``
        (the numbers its stream gives, :data:`BATCH_DRAWS` at a time)."""
        bounds = self._bounds[row][job]
        if not self.training:
            while bounds[-1] <= work:
                extra = np.cumsum(self._more_work(row, job, profile))
                bounds = np.concatenate((bounds, bounds[-1] + extra))
            self._bounds[row][job] = bounds
        return bounds

    def loss(self, row: int, job: int, iteration: int) -> float:
        """The loss training job ``job`` of ``row`` reports after iteration ``iteration``."""
        return float(self._losses[row][job][iteration - 1])

    def refill(
        self, jobs: Sequence[tuple[int, int]], units: np.ndarray, profile_of: np.ndarray
    ) -> None:
        """Window the bounds (and losses) of ``jobs`` (row, job) from the unit before their
        current one, all windows written at once.

        Args:
            jobs: the jobs, as (row, column).
            units: every job's completed units.
            profile_of: every job's workload index.
        """
        if not jobs:
            return
        rows, columns = (list(part) for part in zip(*jobs, strict=True))
        starts = [max(done - 1, 0) for done in units[rows, columns].tolist()]
        windows = np.full((len(jobs), WINDOW), math.inf)
        losses = np.full((len(jobs), WINDOW), math.nan) if self.training else windows
        for index, (row, job) in enumerate(jobs):
            start = starts[index]
            bounds = self._bounds[row][job]
            if not self.training:
                while len(bounds) < start + WINDOW:
                    extra = np.cumsum(self._more_work(row, job, int(profile_of[row, job])))
                    bounds = np.concatenate((bounds, bounds[-1] + extra))
                self._bounds[row][job] = bounds
            part = bounds[start : start + WINDOW]
            windows[index, : len(part)] = part
            if self.training:
                loss = self._losses[row][job][start : start + WINDOW]
                losses[index, : len(loss)] = loss
        self.window_start[rows, columns] = starts
        self.bound_window[rows, columns] = windows
        if self.training:
            self.loss_window[rows, columns] = losses
