"""A contention measurement as data: the grid of co-located jobs, and what the replay model
makes of each cell.

For one workload and one threading (``tuned`` or ``stock``, see
:mod:`dlsched.envs.workloads.cpu_quota`) a measurement
(:mod:`~dlsched.runs.fidelity.contention_measurement`) holds:

- the **solo curve**: one job alone at each of its limits, its units (iterations or batches) per
  second against the cores it used (its CPU-seconds over the window, from the cgroup); or the
  solo curve of the workload's profile, which calibration measured that way;
- the **grid**: ``n`` copies together for every ``n`` of its job counts under every allocation
  of :data:`ALLOCATIONS`, each job's limit, cores used and units per second.

A cell's **efficiency** is its jobs' summed rate over what the solo curve gives at the cores each
used: 1 when co-location costs nothing beyond the CPU the others take, less under contention. It
separates contention from the sharing of CPU, which water-filling already models. Each cell's
``R`` and crowding are the replay model's (:mod:`dlsched.envs.replay.contention`), what
:mod:`~dlsched.runs.fidelity.contention_fit` fits the model with.

A measurement is kept as JSON under ``measurements`` in a profile set's ``contention.json``
(:func:`measurement_data`, read back by :func:`recorded_measurement`). Nothing here runs a
container.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.envs.errors import BackendError, ProfileError
from dlsched.envs.replay.contention import (
    CONTENTION_FILE,
    Crowding,
    busy_and_quotas,
    crowded,
    crowding,
    oversubscription,
    runnable_threads,
)
from dlsched.envs.workloads.cpu_quota import Threading

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
        if not crowded(runnable, cores):
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
