"""Contention measured on a real host: co-located jobs on one Docker engine, job by job.

The replay model's contention term (:mod:`dlsched.envs.replay.contention`) is fitted
(:mod:`~dlsched.runs.fidelity.contention_fit`) to what this module measures;
``dlsched calibrate --contention`` is its command line.

For one workload and one threading (``tuned`` or ``stock``, see
:mod:`dlsched.envs.workloads.cpu_quota`) it runs, on one Docker engine:

- the **solo curve**: one job alone at each of ``solo_limits``, its units (iterations or
  batches) per second against the cores it used (its CPU-seconds over the window, from the
  cgroup); or the solo curve of the workload's profile, which calibration measured that way;
- the **grid**: ``n`` copies together for every ``n`` of ``job_counts`` under every allocation
  of :data:`~dlsched.runs.fidelity.contention_grid.ALLOCATIONS`, each job's limit, cores used
  and units per second. A service's rate is one over the mean latency of the batches it
  answered in the window, since a window holds only a few of them.

What it measures is a :class:`~dlsched.runs.fidelity.contention_grid.ThreadingMeasurement` (one
threading) or a :class:`~dlsched.runs.fidelity.contention_grid.ContentionMeasurement` (all of
them, on a quiet host: :func:`calibrate_contention`).
"""

from __future__ import annotations

import datetime as dt
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.engine import connect
from dlsched.envs.errors import BackendError, HostBusyError
from dlsched.envs.replay.workload_profile import WorkloadProfile
from dlsched.envs.scenarios.model import ArrivalPattern, JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState, Telemetry
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading
from dlsched.runs.fidelity.calibration_measurement import HostDescription
from dlsched.runs.fidelity.contention_fit import WorkloadContention, fit_workload_contention
from dlsched.runs.fidelity.contention_grid import (
    ALLOCATIONS,
    ContentionMeasurement,
    GridCell,
    JobSample,
    ThreadingMeasurement,
    allocation_limits,
)
from dlsched.runs.fidelity.quiet_host import (
    QUIET_CORES,
    busy_message,
    host_busy_seconds,
    other_running_containers,
    wait_until_quiet,
)

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
#: More iterations than any measurement runs, so that no job finishes during it (hours at the
#: profiles' fastest rate, 60 iterations/s), yet few enough that the replay side of a six-job
#: measurement stays within MAX_ITERATIONS (the engine draws every iteration at placement).
ENDLESS_ITERATIONS = 1_000_000
#: How long jobs may take to report their first iteration (torch's import included).
_START_TIMEOUT_S = 180.0


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
    episode = ControlledEpisode(backend, scenario)
    beside_startup: tuple[JobSample, ...] = ()
    try:
        episode.reset(specs, np.random.default_rng(0))
        episode.place([Placement(ids[0], 0, 0)])
        wait_for_first_units(episode, ids[:1])
        placed = 1
        solo = []
        for limit in sorted(solo_limits):
            report(f"solo at limit {limit:g}")
            solo.extend(measure_window(episode, {ids[0]: limit}, settle_s, window_s, inference)[0])
        grid = []
        for count in sorted(job_counts):
            members = ids[:count]
            if count > placed:
                episode.set_limits({job_id: 1.0 for job_id in ids[:placed]})
                episode.place(
                    [
                        Placement(job_id, 0, slot)
                        for slot, job_id in enumerate(members)
                        if slot >= placed
                    ]
                )
                running = wait_for_first_units(episode, members, running=ids[0])
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
                    episode, dict(zip(members, limits, strict=True)), settle_s, window_s, inference
                )
                grid.append(GridCell(allocation, tuple(samples), other))
    finally:
        episode.close()
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
    episode: ControlledEpisode,
    limits: Mapping[str, float],
    settle_s: float,
    window_s: float,
    inference: bool,
) -> tuple[list[JobSample], float]:
    """Set ``limits``, wait ``settle_s``, then measure those jobs over ``window_s``.

    Returns:
        One sample per job, and the cores the host's other processes used meanwhile.
    """
    episode.set_limits(limits)
    before = episode.advance(settle_s)
    host_before = host_busy_seconds()
    latencies: dict[str, dict[int, float]] = {job_id: {} for job_id in limits}
    after = before
    while after.time_s - before.time_s < window_s:
        # Services are polled every second to see each batch's latency; trainings at the end.
        step = min(1.0, window_s - (after.time_s - before.time_s)) if inference else window_s
        after = episode.advance(step)
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
    episode: ControlledEpisode, job_ids: Sequence[str], running: str | None = None
) -> tuple[JobSample, ...]:
    """Advance until every job of ``job_ids`` has reported an iteration or a batch.

    Args:
        episode: the measurement's episode.
        job_ids: the jobs waited for.
        running: a job of ``job_ids`` already running, measured meanwhile.

    Returns:
        ``running``'s rate and cores over the whole seconds in which every other job of
        ``job_ids`` was still starting (no unit yet): one sample, or none if no such second.
    """
    started = time.monotonic()
    starting = [job_id for job_id in job_ids if job_id != running]
    previous = episode.advance(0.0) if running is not None else None
    first = previous
    while True:
        telemetry = episode.advance(1.0)
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
    host: str | None = None,
    endpoint: str | None = None,
) -> ContentionMeasurement:
    """Measure the grid of every threading of ``settings`` on the engine at ``endpoint``.

    Args:
        settings: what to measure and how.
        host: the host's description, for the provenance (``None``: the engine's host as
            :class:`~dlsched.runs.fidelity.calibration_measurement.HostDescription` describes
            it).
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
        if host is None:
            host = HostDescription.of(client).describe()
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
