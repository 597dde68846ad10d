"""CPU shares and progress rates of every job of the replay engine's stale rows.

A worker's running (and booting) jobs share its cores by water-filling
(:func:`~dlsched.envs.replay.sharing.water_fill`); a job's profile turns its share into units of
work per second, slowed by contention where the worker's runnable threads exceed its cores
(:mod:`dlsched.envs.replay.contention`); the shares give each capped job its throttle ratio
(:mod:`dlsched.envs.replay.throttling`). :func:`allocate` does this for every worker of every row
whose shares changed, in arrays laid out as ``(rows, workers, slots)`` (empty slots count as
jobs capped at 0, which changes no level); the other rows keep their shares and rates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.envs.episode_batch import BOOTING, RUNNING, JobArrays
from dlsched.envs.replay.contention import (
    busy_and_quotas,
    crowded,
    crowded_runnable_threads,
    job_efficiencies,
)
from dlsched.envs.replay.engine_arrays import PhysicsArrays
from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.replay.race import race_factor
from dlsched.envs.replay.sharing import water_fill
from dlsched.envs.replay.throttling import pressure, throttle_ratio


@dataclass(frozen=True)
class Layout:
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
    #: The worker count and slots per worker.
    shape: tuple[int, int]

    def dense(self, values: np.ndarray, fill: float) -> np.ndarray:
        """``values`` (one per job) laid out as ``(rows, workers, slots)``, ``fill`` elsewhere."""
        workers, slots = self.shape
        count = len(self.episodes)
        dense = np.full(count * workers * slots, fill)
        dense[self.cells] = values
        return dense.reshape(count, workers, slots)


def allocate(
    stale: np.ndarray,
    cells: np.ndarray,
    jobs: JobArrays,
    physics: PhysicsArrays,
    table: ProfileTable,
    cores: np.ndarray,
    slots: int,
) -> None:
    """Shares and rates of every job of the rows ``stale`` (indices, ascending).

    Args:
        stale: the rows to allocate.
        cells: per row and job, its ``worker * slots + slot``.
        jobs: the jobs (phase, worker, limit are read).
        physics: the engine's arrays (``share`` and ``rate`` are written; ``throttle_rate`` and
            ``throttle_weight`` too, where the set has a throttling model).
        table: the scenario's profiles.
        cores: per worker, its cores.
        slots: slots per worker.
    """
    columns = jobs.phase.shape[1]
    workers = len(cores)
    phase = jobs.phase[stale].reshape(-1)
    booting = phase == BOOTING
    using = np.flatnonzero((phase == RUNNING) | booting)
    booting = booting[using]
    rows = using // columns
    at = stale[rows] * columns + using % columns
    places = rows * (workers * slots) + cells.reshape(-1)[at]
    layout = Layout(stale, rows, at, jobs.worker.reshape(-1)[at], places, (workers, slots))
    demand = np.where(booting, physics.boot_demand.reshape(-1)[at], physics.demand.reshape(-1)[at])
    caps = np.minimum(jobs.limit.reshape(-1)[at] * cores[layout.workers], demand)
    dense = layout.dense(caps, 0.0)
    filled = water_fill(np.tile(cores, len(stale)), dense.reshape(-1, slots))
    share = filled.reshape(-1)[layout.cells]
    physics.share[stale] = 0.0
    physics.share.reshape(-1)[at] = share
    # Rates of the jobs that get CPU, by profile; the others' are 0, as the profile's
    # throughput at 0 cores is.
    rate = np.zeros(len(at))
    profile_of = physics.profile_of.reshape(-1)[at]
    for profile, (cores_points, rate_points) in enumerate(table.curves):
        members = profile_of == profile
        rate[members] = np.interp(share[members], cores_points, rate_points)
    # exact where no speed is drawn: x * 1.0 is x
    rate *= physics.speed.reshape(-1)[at]
    rate[booting] = 0.0
    physics.rate[stale] = 0.0
    physics.rate.reshape(-1)[at] = rate
    if table.racing:
        physics.race_active[stale] = False
    if table.throttles:
        _throttle(stale, booting, demand, share, profile_of, layout, jobs, physics, table, cores)
    if table.contends:
        _contend(booting, demand, layout, jobs, physics, cores, table.racing)


def _throttle(
    stale: np.ndarray,
    booting: np.ndarray,
    demand: np.ndarray,
    share: np.ndarray,
    profile_of: np.ndarray,
    layout: Layout,
    jobs: JobArrays,
    physics: PhysicsArrays,
    table: ProfileTable,
    cores: np.ndarray,
) -> None:
    """The throttle ratio of every job of the rows ``stale`` under the shares just allocated
    (:mod:`~dlsched.envs.replay.throttling`): ``throttle_rate``, with ``throttle_weight`` 1
    where the job runs under a quota (0 and 0 elsewhere). The engine integrates both over time:
    the ratio it reports is the interval's, even where a batch allocates a row for its next
    interval before that row's telemetry is read."""
    physics.throttle_rate[stale] = 0.0
    physics.throttle_weight[stale] = 0.0
    at = layout.at
    limit = jobs.limit.reshape(-1)[at]
    capped = (limit < 1.0) & (share > 0)
    if not np.count_nonzero(capped):
        return
    stock = physics.stock.reshape(-1)[at] & ~booting
    busy, quotas = busy_and_quotas(limit, demand, stock, cores[layout.workers])
    ratio = throttle_ratio(
        pressure(busy, share, np.where(capped, quotas, 1.0)),
        table.half_pressure[profile_of],
        table.burstiness[profile_of],
    )
    physics.throttle_rate.reshape(-1)[at] = np.where(capped, ratio, 0.0)
    physics.throttle_weight.reshape(-1)[at] = capped


def _contend(
    booting: np.ndarray,
    demand: np.ndarray,
    layout: Layout,
    jobs: JobArrays,
    physics: PhysicsArrays,
    cores: np.ndarray,
    racing: bool,
) -> None:
    """Slow every oversubscribed worker's jobs by their efficiency (see
    :mod:`~dlsched.envs.replay.contention`), times their race's level where they race
    (:mod:`~dlsched.envs.replay.race`).

    A booting job's start-up is single-threaded: it counts its busy cores among the worker's
    runnable threads, its own start-up is not slowed, and the running jobs keep at most their
    efficiency beside a start-up.
    """
    at, worker = layout.at, layout.workers
    limit = jobs.limit.reshape(-1)[at]
    stock = physics.stock.reshape(-1)[at] & ~booting
    busy, quotas = busy_and_quotas(limit, demand, stock, cores[worker])
    busy_d = layout.dense(busy, 0.0)
    total = busy_d.sum(axis=2)
    over = total > cores[None, :]
    if not over.any():
        return
    quota_o = layout.dense(quotas, 0.0)[over]
    busy_o = busy_d[over]
    occupied = np.zeros(busy_d.size, dtype=bool)
    occupied[layout.cells] = True
    present = occupied.reshape(busy_d.shape)[over]
    capacity = np.broadcast_to(cores[None, :], over.shape)[over]
    runnable = crowded_runnable_threads(busy_o, quota_o, present, total[over], capacity)
    slowed_workers = crowded(runnable, capacity)
    slots = layout.shape[1]
    kept_d = np.ones((*over.shape, slots))
    if slowed_workers.any():
        # One layout for the three per-job terms: laying each out apart cost more.
        terms = np.zeros((3, busy_d.size))
        terms[:, layout.cells] = np.stack(
            (physics.exponent, physics.floor, physics.bound_scale)
        ).reshape(3, -1)[:, at]
        exponent, floor, bound_scale = (
            term.reshape((*over.shape, slots))[over][slowed_workers] for term in terms
        )
        kept_o = np.ones((len(runnable), slots))
        kept_o[slowed_workers] = job_efficiencies(
            busy_o[slowed_workers],
            quota_o[slowed_workers],
            present[slowed_workers],
            runnable[slowed_workers],
            capacity[slowed_workers],
            exponent,
            floor,
            bound_scale,
        )
        kept_d[over] = kept_o
    crowded_d = np.zeros(over.shape, dtype=bool)
    crowded_d[over] = slowed_workers
    # The layout's jobs on a crowded worker, in the order of their rows and jobs.
    on_worker = layout.rows * len(cores) + worker
    slowed = crowded_d.reshape(-1)[on_worker]
    kept = kept_d.reshape(-1)[layout.cells][slowed]
    at = at[slowed]
    if booting.any():  # most steps start no job: skip laying the start-ups out by worker
        starting = layout.dense(booting.astype(float), 0.0).sum(axis=2) > 0
        beside = starting.reshape(-1)[on_worker[slowed]]
        kept = np.where(beside, np.minimum(kept, physics.beside_startup.reshape(-1)[at]), kept)
    if racing:
        ratio_d = np.ones(over.shape)
        ratio_d[over] = runnable / capacity
        ratio = ratio_d.reshape(-1)[on_worker[slowed]]
        full_at = physics.race_full_at.reshape(-1)[at]
        fade = physics.race_fade.reshape(-1)[at]
        kept = kept * race_factor(physics.race_level.reshape(-1)[at], ratio, full_at, fade)
        # only where its level changes the rate is a job's next switch an event
        physics.race_active.reshape(-1)[at] = (ratio > 1.0) & (full_at < np.inf)
    physics.rate.reshape(-1)[at] *= kept
