"""``dlsched bench contention``: what CPU limits do to the total progress of co-located jobs.

The replay model shares a worker's CPU max-min under the limits and lets each job progress at
its profile's speed on the CPU it gets (DESIGN.md, "Replay model"): jobs do not slow each other
down beyond taking CPU. So, for jobs that all want more than an equal share, free competition
and equal limits give the same progress, and limits can only move progress from one job to
another. This benchmark checks that assumption on the local Docker engine with real training
workloads. It runs JOBS copies of one workload on the host and measures each job's iterations
per second under three allocations:

- ``free``: no limit (free competition, what ``default`` does);
- ``equal``: every job at an equal share ``1 / JOBS`` (the max-min fair share);
- ``favoured``: the first job uncapped and every other at half an equal share, the shape
  FlowCon gives a newly arrived job and the jobs it has classified as completing.

It does so twice: with the workloads' ``tuned`` threading (threads follow the quota and wait
passively; the default, and what the measured profiles were recorded with) and with ``stock``
threading (torch's and OpenMP's own defaults, as unmodified framework jobs run; the papers
describe no thread tuning of their TensorFlow and PyTorch jobs). Progress is reported in "alone
jobs": the summed iterations per second of all jobs over the first job's rate when it ran alone
and uncapped, the unit in which a host without contention would give the same figure for
``free`` and ``equal``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.engine import engine_cores
from dlsched.envs.errors import BackendError
from dlsched.envs.scenarios.model import ArrivalPattern, JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState, Telemetry
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import THREADINGS

#: The allocations measured, in order, and what each is.
ALLOCATIONS: Mapping[str, str] = {
    "free": "no limits",
    "equal": "every job at 1/JOBS",
    "favoured": "job 1 uncapped, the others at 1/(2 JOBS)",
}

#: The workloads a contention measurement can run: those that count iterations.
TRAINING_WORKLOADS: tuple[str, ...] = tuple(
    sorted(name for name, spec in WORKLOADS.items() if spec.kind == "training")
)

#: More iterations than any measurement runs, so that no job finishes during it.
_ENDLESS_ITERATIONS = 10_000_000

#: How long the jobs may take to report their first iteration (torch's import included).
_START_TIMEOUT_S = 120.0


def allocation_limits(allocation: str, jobs: int) -> tuple[float, ...]:
    """The limit of each of ``jobs`` jobs under ``allocation`` (fractions of the worker).

    Raises:
        BackendError: ``allocation`` is not one of :data:`ALLOCATIONS`.
    """
    if allocation == "free":
        return (1.0,) * jobs
    if allocation == "equal":
        return (1.0 / jobs,) * jobs
    if allocation == "favoured":
        return (1.0,) + (0.5 / jobs,) * (jobs - 1)
    raise BackendError(f"allocation {allocation!r} is not one of {list(ALLOCATIONS)}")


@dataclass(frozen=True)
class AllocationRates:
    """The progress of every job under one allocation.

    Attributes:
        allocation: its name (:data:`ALLOCATIONS`).
        limits: each job's limit, the first job first.
        rates: each job's iterations per second over the window.
        alone_jobs: the summed rates over the first job's rate alone.
    """

    allocation: str
    limits: tuple[float, ...]
    rates: tuple[float, ...]
    alone_jobs: float


@dataclass(frozen=True)
class ThreadingContention:
    """The measurements with one threading of the workloads.

    Attributes:
        threading: ``"tuned"`` or ``"stock"``.
        alone_rate: the first job's iterations per second alone and uncapped.
        allocations: the rates under each allocation, in :data:`ALLOCATIONS` order.
    """

    threading: str
    alone_rate: float
    allocations: tuple[AllocationRates, ...]

    def of(self, allocation: str) -> AllocationRates:
        """The measurement of ``allocation``."""
        return next(rates for rates in self.allocations if rates.allocation == allocation)


@dataclass(frozen=True)
class ContentionResult:
    """The figures of ``dlsched bench contention``.

    Attributes:
        workload: the training workload every job ran.
        jobs: jobs on the host during the allocations.
        cores: the host's cores.
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after each change before measuring.
        threadings: one set of measurements per threading.
    """

    workload: str
    jobs: int
    cores: float
    window_s: float
    settle_s: float
    threadings: tuple[ThreadingContention, ...]

    def report(self) -> str:
        lines = [
            f"{self.jobs} x {self.workload} on {self.cores:g} cores, rates over "
            f"{self.window_s:g} s windows; 'alone jobs' = summed iterations/s over job 1's "
            "rate alone:"
        ]
        for measured in self.threadings:
            free = measured.of("free").alone_jobs
            lines.append(
                f"  {measured.threading} threading (job 1 alone: {measured.alone_rate:.1f} it/s)"
            )
            lines.append(
                f"    {'allocation':10} {'limits':22} {'iterations/s per job':28} "
                f"{'alone jobs':>10} {'x free':>7}"
            )
            for rates in measured.allocations:
                limits = " ".join(f"{limit:.2f}" for limit in rates.limits)
                per_job = " ".join(f"{rate:.1f}" for rate in rates.rates)
                ratio = rates.alone_jobs / free if free > 0 else float("nan")
                lines.append(
                    f"    {rates.allocation:10} {limits:22} {per_job:28} "
                    f"{rates.alone_jobs:10.2f} {ratio:7.2f}"
                )
        lines.append(
            "Without contention (the replay model's sharing), 'free' and 'equal' give the same "
            "figure, and 'favoured' at most that."
        )
        return "\n".join(lines)


def measure_contention(
    workload: str = "mlp-digits",
    jobs: int = 3,
    window_s: float = 20.0,
    settle_s: float = 5.0,
    threadings: Sequence[str] = THREADINGS,
    endpoint: str | None = None,
    image: str | None = None,
    progress: bool = True,
) -> ContentionResult:
    """Measure the jobs' progress under each allocation, for each threading.

    Args:
        workload: a training workload of the image.
        jobs: how many copies run together (at least 2).
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after each change of limits before measuring.
        threadings: the workloads' threadings to measure (``"tuned"``, ``"stock"``).
        endpoint: the engine (``None``: the environment's).
        image: the workload image (``None``: dlsched's own).
        progress: print each phase on stderr as it starts.

    Raises:
        BackendError: bad arguments, or a job that stopped running during the measurement.
    """
    if workload not in TRAINING_WORKLOADS:
        raise BackendError(
            f"workload {workload!r} is not a training workload; use one of "
            f"{list(TRAINING_WORKLOADS)}"
        )
    if jobs < 2:
        raise BackendError(f"jobs={jobs}: contention needs at least 2 jobs on the host")
    if not (window_s > 0 and settle_s >= 0):
        raise BackendError(
            f"window_s={window_s!r}, settle_s={settle_s!r}: the window must be positive and the "
            "settling time at least 0"
        )
    unknown = [threading for threading in threadings if threading not in THREADINGS]
    if unknown or not threadings:
        raise BackendError(f"threadings {list(threadings)}: expected some of {list(THREADINGS)}")
    cores = engine_cores(endpoint)
    scenario = Scenario(
        name="bench-contention",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(cores=cores, endpoint=endpoint),),
        groups=(
            JobGroup(
                workloads=(workload,),
                count=jobs,
                arrival=ArrivalPattern(),
                iterations=_ENDLESS_ITERATIONS,
            ),
        ),
        slots_per_worker=jobs,
        profile_set="measured",
    )
    measured = tuple(
        _measure_threading(scenario, threading, window_s, settle_s, image, progress)
        for threading in threadings
    )
    return ContentionResult(workload, jobs, cores, window_s, settle_s, measured)


def _measure_threading(
    scenario: Scenario,
    threading: str,
    window_s: float,
    settle_s: float,
    image: str | None,
    progress: bool,
) -> ThreadingContention:
    def say(message: str) -> None:
        if progress:
            print(f"[contention, {threading}] {message}", file=sys.stderr, flush=True)

    specs = scenario.realise(np.random.default_rng(0))
    ids = [spec.job_id for spec in specs]
    backend = DockerBackend(image=image, workload_threading=threading)
    try:
        backend.reset(scenario, specs, np.random.default_rng(0))
        say(f"job 1 alone: starting, then {settle_s:g} s + {window_s:g} s")
        backend.apply({}, [Placement(ids[0], 0, 0)])
        _wait_for_first_iterations(backend, ids[:1])
        alone = _rates(backend, ids[:1], settle_s, window_s)[0]
        backend.apply({}, [Placement(job_id, 0, slot) for slot, job_id in enumerate(ids) if slot])
        _wait_for_first_iterations(backend, ids)
        measured = []
        for allocation in ALLOCATIONS:
            limits = allocation_limits(allocation, len(ids))
            say(f"{allocation} ({ALLOCATIONS[allocation]}): {settle_s:g} s + {window_s:g} s")
            backend.apply(dict(zip(ids, limits, strict=True)))
            rates = _rates(backend, ids, settle_s, window_s)
            measured.append(AllocationRates(allocation, limits, rates, sum(rates) / alone))
    finally:
        backend.close()
    return ThreadingContention(threading, alone, tuple(measured))


def _wait_for_first_iterations(backend: DockerBackend, job_ids: Sequence[str]) -> None:
    """Advance until every job of ``job_ids`` has reported an iteration."""
    started = time.monotonic()
    while True:
        telemetry = backend.advance(1.0)
        _check_running(telemetry, job_ids)
        if all(_iterations(telemetry, job_id) > 0 for job_id in job_ids):
            return
        if time.monotonic() - started > _START_TIMEOUT_S:
            raise BackendError(
                f"the benchmark's jobs {list(job_ids)} reported no iteration within "
                f"{_START_TIMEOUT_S:g} s; is the host overloaded?"
            )


def _rates(
    backend: DockerBackend, job_ids: Sequence[str], settle_s: float, window_s: float
) -> tuple[float, ...]:
    """Each job's iterations per second over ``window_s``, after ``settle_s``."""
    before = backend.advance(settle_s)
    after = backend.advance(window_s)
    _check_running(after, job_ids)
    elapsed = after.time_s - before.time_s
    return tuple(
        (_iterations(after, job_id) - _iterations(before, job_id)) / elapsed for job_id in job_ids
    )


def _iterations(telemetry: Telemetry, job_id: str) -> int:
    job = telemetry.job(job_id)
    return job.iterations or 0


def _check_running(telemetry: Telemetry, job_ids: Sequence[str]) -> None:
    stopped = [
        (job_id, telemetry.job(job_id).state.value)
        for job_id in job_ids
        if telemetry.job(job_id).state is not JobState.RUNNING
    ]
    if stopped:
        raise BackendError(
            f"benchmark jobs stopped during the measurement: {stopped}; see the log above"
        )
