"""Contention measured on a real host, and the replay model's contention term fitted to it.

The replay model shares a worker's cores max-min under the limits (water-filling), which is
exact while the runnable threads of the worker's jobs fit its cores. Beyond that a job makes less
progress per CPU-second it gets, and the replay model multiplies its progress by ``R ** -a``,
``R`` the worker's oversubscription and ``a`` an exponent per threading
(:mod:`dlsched.envs.replay.contention`). This module measures what ``a`` is fitted to, and fits
it; ``dlsched calibrate --contention`` is its command line.

For one workload and one threading (``tuned`` or ``stock``, see
:mod:`dlsched.envs.workloads.cpu_quota`) it runs, on one Docker engine:

- the **solo curve**: one job alone at each of ``solo_limits``, its units (iterations or
  batches) per second against the cores it used (its CPU-seconds over the window, from the
  cgroup); or the solo curve of the workload's profile, which calibration measured that way;
- the **grid**: ``n`` copies together for every ``n`` of ``job_counts`` under every allocation
  of :data:`ALLOCATIONS`, each job's limit, cores used and units per second. A service's rate is
  one over the mean latency of the batches it answered in the window, since a window holds only
  a few of them.

A cell's **efficiency** is its jobs' summed rate over what the solo curve gives at the cores each
used: 1 when co-location costs nothing beyond the CPU the others take, less under contention. It
separates contention from the sharing of CPU, which water-filling already models.

**The fit.** For each threading, ``a`` minimises the squared error of the log efficiencies,
``sum over cells with R > 1 of (log e + a log R)^2`` (closed form); cells where the threads fit
(``R = 1``) are modelled as 1 and reported among the residuals. ``R`` is computed from each
cell's limits as the replay model does, with the solo job's uncapped usage as the demand.
Then, with ``a`` fixed, the **bound scale** ``s`` (the factor on the exponent of a job its quota
throttles) minimises the squared error of the log efficiencies *per job*, each job's rate over
the solo curve's at its cores against :func:`~dlsched.envs.replay.contention.job_efficiencies`,
on a grid of steps of 0.01 in ``[0, 1]``: the summed efficiency of a cell hides what ``s`` is
about, that the uncapped job of a ``favoured`` cell keeps more of its solo progress than the
throttled ones.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.envs.backend import Backend
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.engine import connect
from dlsched.envs.errors import BackendError, HostBusyError, ProfileError
from dlsched.envs.replay.contention import (
    CONTENTION_FILE,
    ContentionFit,
    ContentionModel,
    Crowding,
    busy_and_quotas,
    contention_data,
    crowding,
    oversubscription,
    runnable_threads,
)
from dlsched.envs.replay.profile import WorkloadProfile
from dlsched.envs.scenarios.model import ArrivalPattern, JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState, Telemetry
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading
from dlsched.runs.fidelity.quiet_host import (
    QUIET_CORES,
    busy_message,
    host_busy_seconds,
    other_running_containers,
    wait_until_quiet,
)

#: The allocations of the grid: each job's limit (fraction of the worker) among ``n`` jobs.
ALLOCATIONS: Mapping[str, Callable[[int], tuple[float, ...]]] = {
    "free": lambda n: (1.0,) * n,
    "equal": lambda n: (1.0 / n,) * n,
    "favoured": lambda n: (1.0,) + (0.5 / n,) * (n - 1),
    "halves": lambda n: (0.5,) + (0.5 / (n - 1),) * (n - 1),
}
#: What each allocation is, in words.
ALLOCATION_HELP: Mapping[str, str] = {
    "free": "no limits (free competition, what default does)",
    "equal": "every job at 1/n of the worker",
    "favoured": "job 1 uncapped, the others at 1/(2n) (FlowCon's shape for a new job)",
    "halves": "job 1 at 1/2, the others sharing the other half",
}
DEFAULT_SOLO_LIMITS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 1.0)
DEFAULT_JOB_COUNTS: tuple[int, ...] = (2, 3, 4)
DEFAULT_WORKLOAD = "mlp-digits"

#: The workloads the set-wide contention measurement runs: those that count iterations.
TRAINING_WORKLOADS: tuple[str, ...] = tuple(
    sorted(name for name, spec in WORKLOADS.items() if spec.kind == "training")
)
#: The copies that fit one workload's own contention curve (``dlsched calibrate``), by kind: a
#: stock training's efficiency levels off beyond 3 copies on 2 cores, which 2 and 3 cannot show;
#: a service barely contends, and its cells take a window of several batches each.
WORKLOAD_JOB_COUNTS: Mapping[str, tuple[int, ...]] = {
    "training": (2, 3, 4, 6),
    "inference": (2, 3),
}
WORKLOAD_ALLOCATIONS: tuple[str, ...] = ("free", "equal", "favoured")
#: More iterations than any measurement runs, so that no job finishes during it.
ENDLESS_ITERATIONS = 10_000_000
#: How long jobs may take to report their first iteration (torch's import included).
_START_TIMEOUT_S = 180.0
_OBJECTIVE = (
    "least squares of log efficiency against -a log R over the cells with R > 1 (closed form); "
    "efficiency = the cell's summed iterations/s over the solo curve's at the cores each job "
    "used; R from the cell's limits with the solo uncapped usage as demand; then, a fixed, the "
    "bound scale s on a grid of 0.01 in [0, 1] by least squares of each job's log efficiency "
    "against the replay model's per-job efficiency"
)


def allocation_limits(allocation: str, jobs: int) -> tuple[float, ...]:
    """The limit of each of ``jobs`` jobs under ``allocation`` (fractions of the worker).

    Raises:
        BackendError: ``allocation`` is not one of :data:`ALLOCATIONS`.
    """
    if allocation not in ALLOCATIONS:
        raise BackendError(f"allocation {allocation!r} is not one of {list(ALLOCATIONS)}")
    return ALLOCATIONS[allocation](jobs)


@dataclass(frozen=True)
class JobSample:
    """One job over one measuring window.

    Attributes:
        limit: its limit, a fraction of the worker (1 = uncapped).
        cores: the cores it used (CPU-seconds over the window's seconds).
        rate: its iterations per second.
    """

    limit: float
    cores: float
    rate: float


@dataclass(frozen=True)
class GridCell:
    """``len(samples)`` jobs together under one allocation.

    Attributes:
        allocation: a key of :data:`ALLOCATIONS`.
        samples: one per job, job 1 first.
        other_cores: cores the host's other processes used during the window (``None`` when
            the engine runs on another machine).
    """

    allocation: str
    samples: tuple[JobSample, ...]
    other_cores: float | None = None


@dataclass(frozen=True)
class ThreadingMeasurement:
    """What one threading of the workload measured.

    Attributes:
        threading: ``"tuned"`` or ``"stock"``.
        solo: one job alone at each solo limit, in increasing order of limit.
        grid: every job count under every allocation.
        beside_startup: the first job, uncapped, while the next copies start beside it (from
            their placement to their first unit); empty where not measured (services).
    """

    threading: Threading
    solo: tuple[JobSample, ...]
    grid: tuple[GridCell, ...]
    beside_startup: tuple[JobSample, ...] = ()

    @property
    def demand(self) -> float:
        """The most cores the job used alone (uncapped, on a quiet host)."""
        return max(sample.cores for sample in self.solo)

    def solo_rate(self, cores: float) -> float:
        """The solo curve at ``cores``: linear between the measured points, from 0 at 0."""
        points = sorted(self.solo, key=lambda sample: sample.cores)
        xs = np.array([0.0, *(sample.cores for sample in points)])
        ys = np.maximum.accumulate(np.array([0.0, *(sample.rate for sample in points)]))
        return float(np.interp(cores, xs, ys))

    def efficiency(self, cell: GridCell) -> float:
        """The cell's summed rate over the solo curve's at the cores each job used."""
        alone = sum(self.solo_rate(sample.cores) for sample in cell.samples)
        return sum(sample.rate for sample in cell.samples) / alone if alone > 0 else math.nan

    def efficiency_beside_startup(self) -> float | None:
        """The running job's rate while others start, over the solo curve's at its cores."""
        alone = sum(self.solo_rate(sample.cores) for sample in self.beside_startup)
        if not self.beside_startup or alone <= 0:
            return None
        return sum(sample.rate for sample in self.beside_startup) / alone

    def cells(
        self, cores: float, demand: float | None = None
    ) -> list[tuple[GridCell, float, float]]:
        """Every cell of the grid with its ``R`` and its measured efficiency."""
        return [
            (cell, self.oversubscription(cell, cores, demand), self.efficiency(cell))
            for cell in self.grid
        ]

    def job_efficiencies(self, cell: GridCell) -> list[float]:
        """Each job's rate over the solo curve's at the cores it used."""
        return [
            sample.rate / alone if (alone := self.solo_rate(sample.cores)) > 0 else math.nan
            for sample in cell.samples
        ]

    def crowding(
        self, cell: GridCell, cores: float, demand: float | None = None
    ) -> Crowding | None:
        """The replay model's states of the cell's jobs (``None`` where the threads fit)."""
        count = len(cell.samples)
        limits = np.array([sample.limit for sample in cell.samples])
        busy, quotas = busy_and_quotas(
            limits,
            np.full(count, self.demand if demand is None else demand),
            np.full(count, self.threading == "stock"),
            cores,
        )
        runnable = runnable_threads(busy, quotas, cores)
        if runnable <= cores:
            return None
        return crowding(
            busy[None, :],
            quotas[None, :],
            np.ones((1, count), dtype=bool),
            np.array([runnable]),
            np.array([cores]),
        )

    def modelled_job_efficiencies(
        self,
        cell: GridCell,
        cores: float,
        exponent: float,
        floor: float,
        bound_scale: float,
        demand: float | None = None,
    ) -> np.ndarray:
        """The replay model's efficiency of each job of the cell (1 where the threads fit)."""
        count = len(cell.samples)
        states = self.crowding(cell, cores, demand)
        if states is None:
            return np.ones(count)
        return states.efficiencies(
            np.full((1, count), exponent),
            np.full((1, count), floor),
            np.full((1, count), bound_scale),
        )[0]

    def oversubscription(self, cell: GridCell, cores: float, demand: float | None = None) -> float:
        """The replay model's ``R`` of the cell (:func:`dlsched.envs.replay.contention`)."""
        count = len(cell.samples)
        return oversubscription(
            np.array([sample.limit for sample in cell.samples]),
            np.full(count, self.demand if demand is None else demand),
            np.full(count, self.threading == "stock"),
            cores,
        )


@dataclass(frozen=True)
class ContentionMeasurement:
    """A contention grid measured on one host.

    Attributes:
        workload: the training workload every job ran.
        cores: the host's cores.
        host: the host, as calibration describes it (name, CPU model, cores, engine).
        date: when, ``YYYY-MM-DD``.
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after each change before measuring.
        threadings: one measurement per threading.
        command: the command line that measured it.
    """

    workload: str
    cores: float
    host: str
    date: str
    window_s: float
    settle_s: float
    threadings: tuple[ThreadingMeasurement, ...]
    command: str = ""

    def busiest_cell(self) -> float:
        """The most cores other processes used during any window (0 if unknown)."""
        return max(
            (cell.other_cores or 0.0 for measured in self.threadings for cell in measured.grid),
            default=0.0,
        )


# --------------------------------------------------------------------------------- measuring


def measure_grid(
    workload: str,
    threading: Threading,
    cores: float,
    job_counts: Sequence[int] = DEFAULT_JOB_COUNTS,
    allocations: Sequence[str] = tuple(ALLOCATIONS),
    solo_limits: Sequence[float] = DEFAULT_SOLO_LIMITS,
    window_s: float = 15.0,
    settle_s: float = 5.0,
    endpoint: str | None = None,
    image: str | None = None,
    say: Callable[[str], None] | None = None,
) -> ThreadingMeasurement:
    """Measure the solo curve and the grid of one workload with one threading.

    Args:
        workload: a workload of the image (training or inference).
        threading: ``"tuned"`` or ``"stock"``.
        cores: the engine's cores (the worker of the measurement).
        job_counts: how many jobs run together in the grid (each at least 2).
        allocations: keys of :data:`ALLOCATIONS`.
        solo_limits: limits of the solo curve, fractions of the worker in ``(0, 1]``; empty to
            measure only the grid (the solo curve then comes from the workload's profile).
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after each change of limits before measuring.
        endpoint: the engine (``None``: the environment's).
        image: the workload image (``None``: dlsched's own).
        say: where progress lines go (``None``: stderr).

    Raises:
        BackendError: bad arguments, or a job that stopped running during the measurement.
    """
    check_grid_arguments(workload, threading, job_counts, allocations, solo_limits, window_s)

    def report(message: str) -> None:
        (say or _to_stderr)(f"[contention, {workload}, {threading}] {message}")

    inference = WORKLOADS[workload].kind == "inference"
    most = max(job_counts)
    group = (
        JobGroup(workloads=(workload,), count=most, arrival=ArrivalPattern(), targets_s=(60.0,))
        if inference
        else JobGroup(
            workloads=(workload,),
            count=most,
            arrival=ArrivalPattern(),
            iterations=ENDLESS_ITERATIONS,
        )
    )
    scenario = Scenario(
        name="calibrate-contention",
        kind=JobKind.INFERENCE if inference else JobKind.TRAINING,
        workers=(WorkerSpec(cores=cores, endpoint=endpoint),),
        groups=(group,),
        slots_per_worker=most,
        profile_set="measured",
    )
    specs = scenario.realise(np.random.default_rng(0))
    ids = [spec.job_id for spec in specs]
    backend = DockerBackend(image=image, workload_threading=threading)
    beside_startup: tuple[JobSample, ...] = ()
    try:
        backend.reset(scenario, specs, np.random.default_rng(0))
        backend.apply({}, [Placement(ids[0], 0, 0)])
        wait_for_first_units(backend, ids[:1])
        placed = 1
        solo = []
        for limit in sorted(solo_limits):
            report(f"solo at limit {limit:g}")
            solo.extend(measure_window(backend, {ids[0]: limit}, settle_s, window_s, inference)[0])
        grid = []
        for count in sorted(job_counts):
            members = ids[:count]
            if count > placed:
                backend.apply(
                    {job_id: 1.0 for job_id in ids[:placed]},
                    [
                        Placement(job_id, 0, slot)
                        for slot, job_id in enumerate(members)
                        if slot >= placed
                    ],
                )
                running = wait_for_first_units(backend, members, running=ids[0])
                if placed == 1 and not inference:
                    report(f"{count - 1} starting beside 1 running")
                    beside_startup = running
                placed = count
            for allocation in allocations:
                limits = allocation_limits(allocation, count)
                report(
                    f"{count} jobs, {allocation}: limits {', '.join(f'{x:.3g}' for x in limits)}"
                )
                samples, other = measure_window(
                    backend, dict(zip(members, limits, strict=True)), settle_s, window_s, inference
                )
                grid.append(GridCell(allocation, tuple(samples), other))
    finally:
        backend.close()
    return ThreadingMeasurement(threading, tuple(solo), tuple(grid), beside_startup)


def measure_workload_contention(
    profile: WorkloadProfile,
    cores: float,
    window_s: float,
    job_counts: Sequence[int],
    settle_s: float = 5.0,
    endpoint: str | None = None,
    say: Callable[[str], None] | None = None,
    bound_scale: float = 1.0,
) -> WorkloadContention:
    """Fit one workload's own contention curve against its profile's solo curve.

    ``job_counts`` copies of the workload run together under :data:`WORKLOAD_ALLOCATIONS` with
    the profile's threading; the solo curve is the profile's, measured alone by the same
    calibration. The fit is :func:`fit_workload_contention`, with ``bound_scale`` (the profile
    set's, for the profile's threading) for throttled jobs.
    """
    solo = tuple(
        JobSample(limit=min(1.0, c / cores), cores=c, rate=r)
        for c, r in zip(profile.throughput.cores, profile.throughput.units_per_s, strict=True)
    )
    grid = measure_grid(
        profile.workload,
        profile.threading,
        cores,
        job_counts=job_counts,
        allocations=WORKLOAD_ALLOCATIONS,
        solo_limits=(),
        window_s=window_s,
        settle_s=settle_s,
        endpoint=endpoint,
        say=say,
    )
    measured = ThreadingMeasurement(profile.threading, solo, grid.grid, grid.beside_startup)
    return fit_workload_contention(
        measured, cores, demand=profile.demand_cores, bound_scale=bound_scale
    )


def check_grid_arguments(
    workload: str,
    threading: str,
    job_counts: Sequence[int],
    allocations: Sequence[str],
    solo_limits: Sequence[float],
    window_s: float,
) -> None:
    """Refuse a grid that cannot be measured, before any container starts.

    Raises:
        BackendError: the first bad argument, its value and what was expected.
    """
    if workload not in WORKLOADS:
        raise BackendError(f"workload {workload!r} is not one of {sorted(WORKLOADS)}")
    if threading not in THREADINGS:
        raise BackendError(f"threading {threading!r}: expected one of {list(THREADINGS)}")
    if not job_counts or min(job_counts) < 2:
        raise BackendError(f"job counts {list(job_counts)}: each must be at least 2")
    unknown = [name for name in allocations if name not in ALLOCATIONS]
    if unknown or not allocations:
        raise BackendError(f"allocations {list(allocations)}: expected some of {list(ALLOCATIONS)}")
    if not all(0 < limit <= 1 for limit in solo_limits):
        raise BackendError(f"solo limits {list(solo_limits)}: each must be in (0, 1]")
    if not window_s > 0:
        raise BackendError(f"window_s={window_s!r}: the window must be positive")


def measure_window(
    backend: Backend,
    limits: Mapping[str, float],
    settle_s: float,
    window_s: float,
    inference: bool,
) -> tuple[list[JobSample], float]:
    """Set ``limits``, wait ``settle_s``, then measure those jobs over ``window_s``.

    Returns:
        One sample per job, and the cores the host's other processes used meanwhile.
    """
    backend.apply(dict(limits))
    before = backend.advance(settle_s)
    host_before = host_busy_seconds()
    latencies: dict[str, dict[int, float]] = {job_id: {} for job_id in limits}
    after = before
    while after.time_s - before.time_s < window_s:
        # Services are polled every second to see each batch's latency; trainings at the end.
        step = min(1.0, window_s - (after.time_s - before.time_s)) if inference else window_s
        after = backend.advance(step)
        for job_id in latencies:
            job = after.job(job_id)
            if job.latency_s is not None and job.batches > before.job(job_id).batches:
                latencies[job_id][job.batches] = job.latency_s
    host_after = host_busy_seconds()
    _check_running(after, list(limits))
    elapsed = after.time_s - before.time_s
    samples = []
    used = 0.0
    for job_id, limit in limits.items():
        job_before, job_after = before.job(job_id), after.job(job_id)
        seconds = job_after.cpu_seconds - job_before.cpu_seconds
        used += seconds
        if inference:
            answered = list(latencies[job_id].values())
            rate = 1.0 / statistics.fmean(answered) if answered else 0.0
        else:
            rate = (job_after.iterations - job_before.iterations) / elapsed
        samples.append(JobSample(limit=limit, cores=seconds / elapsed, rate=rate))
    return samples, max(0.0, (host_after - host_before - used) / elapsed)


def wait_for_first_units(
    backend: Backend, job_ids: Sequence[str], running: str | None = None
) -> tuple[JobSample, ...]:
    """Advance until every job of ``job_ids`` has reported an iteration or a batch.

    Args:
        backend: the measurement's backend.
        job_ids: the jobs waited for.
        running: a job of ``job_ids`` already running, measured meanwhile.

    Returns:
        ``running``'s rate and cores over the whole seconds in which every other job of
        ``job_ids`` was still starting (no unit yet): one sample, or none if no such second.
    """
    started = time.monotonic()
    starting = [job_id for job_id in job_ids if job_id != running]
    previous = backend.advance(0.0) if running is not None else None
    first = previous
    while True:
        telemetry = backend.advance(1.0)
        _check_running(telemetry, job_ids)
        if running is not None and all(_units(telemetry, job_id) == 0 for job_id in starting):
            previous = telemetry
        if all(_units(telemetry, job_id) > 0 for job_id in job_ids):
            if first is None or previous is None or previous.time_s <= first.time_s:
                return ()
            elapsed = previous.time_s - first.time_s
            before, after = first.job(running or ""), previous.job(running or "")
            return (
                JobSample(
                    limit=1.0,
                    cores=(after.cpu_seconds - before.cpu_seconds) / elapsed,
                    rate=(after.iterations - before.iterations) / elapsed,
                ),
            )
        if time.monotonic() - started > _START_TIMEOUT_S:
            raise BackendError(
                f"the measurement's jobs {list(job_ids)} reported no unit of work within "
                f"{_START_TIMEOUT_S:g} s; is the host overloaded?"
            )


def _units(telemetry: Telemetry, job_id: str) -> int:
    job = telemetry.job(job_id)
    return job.iterations + job.batches


def _check_running(telemetry: Telemetry, job_ids: Sequence[str]) -> None:
    stopped = [
        (job_id, telemetry.job(job_id).state.value)
        for job_id in job_ids
        if telemetry.job(job_id).state is not JobState.RUNNING
    ]
    if stopped:
        raise BackendError(f"jobs stopped during the measurement: {stopped}; see the log above")


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class CellResidual:
    """One measured cell against the fitted model.

    Attributes:
        threading: the cell's threading.
        jobs: jobs in the cell.
        allocation: its allocation.
        oversubscription: the model's ``R``.
        measured: the measured efficiency.
        modelled: the model's efficiency, ``R ** -a`` or ``f + (1 - f) R ** -a``.
    """

    threading: str
    jobs: int
    allocation: str
    oversubscription: float
    measured: float
    modelled: float

    def describe(self) -> str:
        return (
            f"{self.threading} {self.jobs} jobs {self.allocation}: R {self.oversubscription:.2f}, "
            f"efficiency measured {self.measured:.3f}, modelled {self.modelled:.3f}"
        )


def fit_exponent(
    measured: ThreadingMeasurement, cores: float, demand: float | None = None
) -> tuple[float, list[CellResidual]]:
    """The exponent of one measurement, and every cell's residual (see the module docstring).

    Args:
        measured: the solo curve and the grid.
        cores: the host's cores.
        demand: the workload's uncapped demand (default: the solo curve's largest usage).
    """
    points = measured.cells(cores, demand)
    usable = [
        (math.log(ratio), math.log(efficiency))
        for _, ratio, efficiency in points
        if ratio > 1.0 and efficiency > 0
    ]
    denominator = sum(log_ratio * log_ratio for log_ratio, _ in usable)
    exponent = (
        max(0.0, -sum(lr * le for lr, le in usable) / denominator) if denominator > 0 else 0.0
    )
    residuals = [
        CellResidual(
            measured.threading,
            len(cell.samples),
            cell.allocation,
            ratio,
            efficiency,
            ratio**-exponent,
        )
        for cell, ratio, efficiency in points
    ]
    return exponent, residuals


@dataclass(frozen=True)
class WorkloadContention:
    """One workload's own contention curve, ``f + (1 - f) R ** -a``, and how well it fits.

    Attributes:
        exponent: ``a``.
        floor: ``f``, the share of its solo progress the workload keeps however crowded.
        residuals: every measured cell against the curve.
        beside_startup: the share it keeps, uncapped, while a copy starts beside it (``None``:
            not measured).
    """

    exponent: float
    floor: float
    residuals: tuple[CellResidual, ...]
    beside_startup: float | None = None


#: The floors and exponents :func:`fit_workload_contention` searches (its grid's resolution).
_FLOOR_STEP = 0.0025
_EXPONENTS = np.arange(0.0, 12.0 + 1e-9, 0.005)


def fit_floor_and_exponent(cells: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The floor ``f`` and exponent ``a`` that fit ``(R, efficiency)`` cells best.

    How profiles calibrated before the per-job fit (:func:`fit_workload_contention`) got
    theirs: their derivations list those cells, from which this fit reproduces them.

    Minimises ``sum over cells with R > 1 of (log e - log(f + (1 - f) R ** -a))^2`` on a grid of
    floors (steps of 0.0025, below the least efficiency measured) and exponents (steps of 0.005
    up to 12). Cells that cannot see a floor (few copies only) fit a floor of 0.

    Args:
        cells: each cell's oversubscription ``R`` and measured efficiency.

    Returns:
        ``(floor, exponent)``; ``(0, 0)`` without a cell of ``R > 1``.
    """
    usable = [(ratio, eff) for ratio, eff in cells if ratio > 1 and eff > 0]
    if not usable:
        return 0.0, 0.0
    ratios = np.array([ratio for ratio, _ in usable])
    logs = np.log([eff for _, eff in usable])
    decays = ratios[None, :] ** -_EXPONENTS[:, None]  # exponents x cells
    best = (math.inf, 0.0, 0.0)
    for floor in np.arange(0.0, min(1.0, float(np.exp(logs.min()))) - 1e-9, _FLOOR_STEP):
        errors = ((logs - np.log(floor + (1.0 - floor) * decays)) ** 2).sum(axis=1)
        at = int(np.argmin(errors))
        if errors[at] < best[0] - 1e-12:
            best = (float(errors[at]), float(floor), float(_EXPONENTS[at]))
    return best[1], best[2]


def fit_workload_contention(
    measured: ThreadingMeasurement,
    cores: float,
    demand: float | None = None,
    bound_scale: float = 1.0,
) -> WorkloadContention:
    """A workload's own contention curve fitted to its grid, job by job.

    Minimises ``sum over the jobs of cells whose runnable threads exceed the cores of
    (log e - log modelled e)^2``, each job's efficiency ``e`` its rate over the solo curve's at
    its cores, the modelled one the replay model's (:class:`~dlsched.envs.replay.contention.
    Crowding`, with ``bound_scale`` for throttled jobs), on the grid of
    :func:`fit_floor_and_exponent` (floors below the least efficiency measured). Cells of free
    competition alone fit as :func:`fit_floor_and_exponent` fits their ``(R, e)``.

    Args:
        measured: the solo curve and the grid.
        cores: the host's cores.
        demand: the workload's uncapped demand (default: the solo curve's largest usage).
        bound_scale: the profile set's bound scale for the workload's threading.
    """
    logs: list[np.ndarray] = []
    decays: list[np.ndarray] = []  # per job: sum over its states of weight x R ** -(a s)
    for cell in measured.grid:
        states = measured.crowding(cell, cores, demand)
        efficiencies = measured.job_efficiencies(cell)
        if states is None or not all(e > 0 for e in efficiencies):
            continue
        for job, efficiency in enumerate(efficiencies):
            scale = bound_scale if states.throttled[0, job] else 1.0
            ratios = states.ratios[0, job][None, :]
            weights = states.weights[0, job][None, :]
            decays.append(
                (weights * ratios ** -(_EXPONENTS[:, None] * scale)).sum(axis=1) / weights.sum()
            )
            logs.append(np.array(math.log(efficiency)))
    floor, exponent = 0.0, 0.0
    if logs:
        measured_logs = np.array(logs)
        decay = np.stack(decays, axis=1)  # exponents x jobs
        best = math.inf
        for candidate in np.arange(
            0.0, min(1.0, float(np.exp(measured_logs.min()))) - 1e-9, _FLOOR_STEP
        ):
            errors = ((measured_logs - np.log(candidate + (1.0 - candidate) * decay)) ** 2).sum(
                axis=1
            )
            at = int(np.argmin(errors))
            if errors[at] < best - 1e-12:
                best, floor, exponent = float(errors[at]), float(candidate), float(_EXPONENTS[at])
    residuals = []
    for cell in measured.grid:
        modelled = measured.modelled_job_efficiencies(
            cell, cores, exponent, floor, bound_scale, demand
        )
        alone = np.array([measured.solo_rate(sample.cores) for sample in cell.samples])
        residuals.append(
            CellResidual(
                measured.threading,
                len(cell.samples),
                cell.allocation,
                measured.oversubscription(cell, cores, demand),
                measured.efficiency(cell),
                float((modelled * alone).sum() / alone.sum()) if alone.sum() > 0 else math.nan,
            )
        )
    return WorkloadContention(
        exponent=exponent,
        floor=floor,
        residuals=tuple(residuals),
        beside_startup=measured.efficiency_beside_startup(),
    )


#: The bound scales :func:`fit_bound_scale` searches.
_BOUND_SCALES = np.round(np.arange(0.0, 1.0 + 1e-9, 0.01), 2)


def fit_bound_scale(
    measured: ThreadingMeasurement, cores: float, exponent: float, floor: float = 0.0
) -> tuple[float, list[str]]:
    """The bound scale ``s`` that fits the jobs of ``measured``'s grid best, with ``a`` fixed.

    Minimises ``sum over the jobs of cells whose runnable threads exceed the cores of
    (log e - log modelled e)^2``, the modelled efficiency from
    :func:`~dlsched.envs.replay.contention.job_efficiencies`; only throttled jobs depend on
    ``s``. Ties (no throttled job in any crowded cell) give 1.

    Args:
        measured: the solo curve and the grid.
        cores: the host's cores.
        exponent: the threading's exponent ``a``.
        floor: its floor ``f``.

    Returns:
        ``s`` and one residual line per cell that has a throttled job: the allocation, each
        job's limit, measured and modelled efficiency.
    """
    # Each crowded cell's states do not depend on s: found once, then weighed for every s.
    # (A cell whose threads fit is modelled as 1 whatever s is: it moves no error.)
    cells: list[tuple[GridCell, np.ndarray, Crowding]] = []
    for cell in measured.grid:
        efficiencies = measured.job_efficiencies(cell)
        states = measured.crowding(cell, cores)
        if states is not None and all(efficiency > 0 for efficiency in efficiencies):
            cells.append((cell, np.log(np.array(efficiencies)), states))

    def modelled(states: Crowding, scale: float) -> np.ndarray:
        shape = states.throttled.shape
        return states.efficiencies(
            np.full(shape, exponent), np.full(shape, floor), np.full(shape, scale)
        )[0]

    def error(scale: float) -> float:
        return float(
            sum(((logs - np.log(modelled(states, scale))) ** 2).sum() for _, logs, states in cells)
        )

    errors = [error(float(scale)) for scale in _BOUND_SCALES[::-1]]
    scale = float(_BOUND_SCALES[::-1][int(np.argmin(errors))])
    lines = []
    for cell, logs, states in cells:
        fitted = modelled(states, scale)
        if np.array_equal(fitted, modelled(states, 1.0)):
            continue
        jobs = ", ".join(
            f"limit {sample.limit:.3g} measured {math.exp(log):.3f} modelled {value:.3f}"
            for sample, log, value in zip(cell.samples, logs, fitted, strict=True)
        )
        lines.append(f"{measured.threading} {len(cell.samples)} jobs {cell.allocation}: {jobs}")
    return scale, lines


def fit_contention(measurement: ContentionMeasurement) -> ContentionModel:
    """The contention model fitted to ``measurement`` (threadings it did not measure: 0)."""
    exponents: dict[Threading, float] = {}
    bound_scales: dict[Threading, float] = {}
    residual_lines = []
    for measured in measurement.threadings:
        exponent, residuals = fit_exponent(measured, measurement.cores)
        exponents[measured.threading] = round(exponent, 4)
        logs = [math.log(r.measured / r.modelled) for r in residuals if r.measured > 0]
        rms = math.sqrt(sum(x * x for x in logs) / len(logs)) if logs else 0.0
        residual_lines.append(
            f"{measured.threading}: a = {exponent:.4f}, rms log residual {rms:.3f} over "
            f"{len(logs)} cells (demand {measured.demand:.3f} cores)"
        )
        residual_lines.extend(residual.describe() for residual in residuals)
        scale, scale_lines = fit_bound_scale(
            measured, measurement.cores, exponents[measured.threading]
        )
        bound_scales[measured.threading] = scale
        residual_lines.append(
            f"{measured.threading}: bound scale s = {scale:.2f}, per job over "
            f"{len(scale_lines)} cells with throttled jobs"
        )
        residual_lines.extend(scale_lines)
    return ContentionModel(
        exponents={threading: exponents.get(threading, 0.0) for threading in THREADINGS},
        bound_scales={threading: bound_scales.get(threading, 1.0) for threading in THREADINGS},
        fit=ContentionFit(
            source=(
                f"{measurement.workload} jobs measured with `{measurement.command}`"
                if measurement.command
                else f"{measurement.workload} jobs measured with dlsched calibrate --contention"
            ),
            host=measurement.host,
            date=measurement.date,
            objective=_OBJECTIVE,
            residuals=tuple(residual_lines),
        ),
    )


# --------------------------------------------------------------------------------- records


def measurement_data(measurement: ContentionMeasurement) -> dict[str, Any]:
    """``measurement`` as JSON data (what ``contention.json`` keeps under ``measurements``)."""
    return dataclasses.asdict(measurement)


def measurement_from_data(data: Any, where: str) -> ContentionMeasurement:
    """Read back :func:`measurement_data`.

    Raises:
        ProfileError: the data is not a recorded measurement; the message names ``where``.
    """
    try:
        threadings = tuple(
            ThreadingMeasurement(
                threading=item["threading"],
                solo=tuple(JobSample(**sample) for sample in item["solo"]),
                grid=tuple(
                    GridCell(
                        allocation=cell["allocation"],
                        samples=tuple(JobSample(**sample) for sample in cell["samples"]),
                        other_cores=cell.get("other_cores"),
                    )
                    for cell in item["grid"]
                ),
                beside_startup=tuple(
                    JobSample(**sample) for sample in item.get("beside_startup", ())
                ),
            )
            for item in data["threadings"]
        )
        return ContentionMeasurement(
            workload=data["workload"],
            cores=float(data["cores"]),
            host=data["host"],
            date=data["date"],
            window_s=float(data["window_s"]),
            settle_s=float(data["settle_s"]),
            threadings=threadings,
            command=data.get("command", ""),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ProfileError(
            f"{where}: the recorded contention measurement is malformed ({error!r}); record it "
            "again with dlsched calibrate --contention"
        ) from None


# --------------------------------------------------------------------------------- calibrating


@dataclass(frozen=True)
class ContentionSettings:
    """How ``dlsched calibrate --contention`` measures.

    Attributes:
        workload: the training workload every job runs.
        threadings: the threadings measured.
        job_counts: jobs together in the grid.
        window_s: seconds each rate is measured over.
        settle_s: seconds after each change before measuring.
        wait_quiet_s: how long to wait for a quiet host first.
        quiet_cores: cores other processes may use while the host counts as quiet.
        force: measure and write on a busy host (the load is recorded).
    """

    workload: str = DEFAULT_WORKLOAD
    threadings: tuple[Threading, ...] = THREADINGS
    job_counts: tuple[int, ...] = DEFAULT_JOB_COUNTS
    window_s: float = 15.0
    settle_s: float = 5.0
    wait_quiet_s: float = 600.0
    quiet_cores: float = QUIET_CORES
    force: bool = False

    def command(self) -> str:
        return (
            f"dlsched calibrate --contention --workload {self.workload} "
            f"--threading {','.join(self.threadings)} "
            f"--job-counts {','.join(str(n) for n in self.job_counts)} "
            f"--duration {self.window_s:g} --settle {self.settle_s:g}"
        )


def calibrate_contention(
    settings: ContentionSettings,
    host: str,
    endpoint: str | None = None,
) -> ContentionMeasurement:
    """Measure the grid of every threading of ``settings`` on the engine at ``endpoint``.

    Args:
        settings: what to measure and how.
        host: the host's description, for the provenance.
        endpoint: the engine (``None``: the environment's).

    Raises:
        HostBusyError: the host was busy before or during the measurement, and not ``force``.
        BackendError: bad settings, or a job that failed.
    """
    for threading in settings.threadings:
        check_grid_arguments(
            settings.workload,
            threading,
            settings.job_counts,
            tuple(ALLOCATIONS),
            DEFAULT_SOLO_LIMITS,
            settings.window_s,
        )
    client = connect(endpoint)
    try:
        cores = float(client.info()["NCPU"])
        wait_until_quiet(client, settings.wait_quiet_s, settings.quiet_cores, settings.force)
        if other_running_containers(client) and not settings.force:
            raise HostBusyError(
                busy_message("another container runs on the engine", settings.quiet_cores)
            )
    finally:
        client.close()
    measured = tuple(
        measure_grid(
            settings.workload,
            threading,
            cores,
            job_counts=settings.job_counts,
            window_s=settings.window_s,
            settle_s=settings.settle_s,
            endpoint=endpoint,
        )
        for threading in settings.threadings
    )
    measurement = ContentionMeasurement(
        workload=settings.workload,
        cores=cores,
        host=host,
        date=dt.date.today().isoformat(),
        window_s=settings.window_s,
        settle_s=settings.settle_s,
        threadings=measured,
        command=settings.command(),
    )
    busiest = measurement.busiest_cell()
    if busiest > settings.quiet_cores and not settings.force:
        raise HostBusyError(
            busy_message(
                f"other processes used up to {busiest:.2f} cores during the measurement",
                settings.quiet_cores,
            )
        )
    return measurement


def write_contention(directory: Path, measurement: ContentionMeasurement) -> Path:
    """Fit ``measurement`` and write the set's ``contention.json`` (with the measurements).

    Args:
        directory: the profile set's folder (created if missing).
        measurement: what :func:`calibrate_contention` measured.

    Returns:
        The file written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    data = contention_data(fit_contention(measurement))
    data["measurements"] = measurement_data(measurement)
    path = directory / CONTENTION_FILE
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def recorded_measurement(directory: Path) -> ContentionMeasurement:
    """The measurement a profile set's ``contention.json`` was fitted to.

    Raises:
        ProfileError: the set has no contention file, or it records no measurement.
    """
    path = directory / CONTENTION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ProfileError(f"cannot read contention file {path}: {error}") from None
    if "measurements" not in data:
        raise ProfileError(f"contention file {path} records no measurements to refit from")
    return measurement_from_data(data["measurements"], str(path))
