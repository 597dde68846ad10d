"""``dlsched bench contention``: what CPU limits do to the total progress of co-located jobs.

The replay model shares a worker's CPU max-min under the limits and lets each job progress at its
profile's speed on the CPU it gets (docs/replay-model.md, "CPU sharing"): jobs do not slow each
other down beyond taking CPU. So, for jobs that all want more than an equal share, free competition
and equal limits give the same progress, and limits can only move progress from one job to another.
This benchmark checks that assumption on the local Docker engine with real training workloads. It
runs JOBS copies of one workload on the host and measures each job's iterations per second under
three allocations:

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlsched.envs.docker.engine import engine_cores
from dlsched.envs.errors import BackendError
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading
from dlsched.runs.fidelity.contention_grid import ALLOCATION_HELP
from dlsched.runs.fidelity.contention_measurement import (
    TRAINING_WORKLOADS,
    check_grid_arguments,
    measure_grid,
)

#: The allocations measured, in order, and what each is.
ALLOCATIONS: Mapping[str, str] = {
    name: ALLOCATION_HELP[name] for name in ("free", "equal", "favoured")
}

__all__ = ["ALLOCATIONS", "TRAINING_WORKLOADS", "ContentionResult", "measure_contention"]


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

    It is one cell of ``dlsched calibrate --contention``'s grid per allocation
    (:func:`dlsched.runs.fidelity.contention_measurement.measure_grid`), reported in "alone
    jobs".

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
            f"workload {workload!r} is not a training workload; expected one of "
            f"{list(TRAINING_WORKLOADS)} (services: dlsched calibrate --only contention)"
        )
    if jobs < 2:
        raise BackendError(f"jobs={jobs}: contention needs at least 2 jobs on the host")
    if not settle_s >= 0:
        raise BackendError(f"settle_s={settle_s!r}: the settling time must be at least 0")
    unknown = [threading for threading in threadings if threading not in THREADINGS]
    if unknown or not threadings:
        raise BackendError(f"threadings {list(threadings)}: expected some of {list(THREADINGS)}")
    chosen: list[Threading] = ["stock" if name == "stock" else "tuned" for name in threadings]
    for threading in chosen:
        check_grid_arguments(workload, threading, (jobs,), tuple(ALLOCATIONS), (1.0,), window_s)
    cores = engine_cores(endpoint)
    measured = []
    for threading in chosen:
        grid = measure_grid(
            workload,
            threading,
            cores,
            job_counts=(jobs,),
            allocations=tuple(ALLOCATIONS),
            solo_limits=(1.0,),
            window_s=window_s,
            settle_s=settle_s,
            endpoint=endpoint,
            image=image,
            say=None if progress else (lambda _: None),
        )
        alone = grid.solo[0].rate
        measured.append(
            ThreadingContention(
                threading,
                alone,
                tuple(
                    AllocationRates(
                        cell.allocation,
                        tuple(sample.limit for sample in cell.samples),
                        tuple(sample.rate for sample in cell.samples),
                        sum(sample.rate for sample in cell.samples) / alone,
                    )
                    for cell in grid.grid
                ),
            )
        )
    return ContentionResult(workload, jobs, cores, window_s, settle_s, tuple(measured))
