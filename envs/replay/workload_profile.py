"""The workload profile: what the replay backend knows of a workload, as typed data.

A profile says how fast a workload progresses on the CPU it gets (units per second against cores,
linear between the recorded points, 0 at 0 cores, flat above its demand), how much CPU it can use
when nothing caps it, how much each unit's work varies from run to run, how long it takes to
start, and, for training, its default length and its loss curve. It also says how the workload
sizes its thread pool (``tuned`` or ``stock``, :mod:`dlsched.envs.workloads.cpu_quota`), which
decides what it loses to contention (:mod:`.contention`). Every profile carries its provenance:
measured on which host, how and when, or derived from which paper figure.

Profiles are read from versioned JSON files, and checked, by :mod:`.profile`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import overload

import numpy as np

from dlsched.envs.errors import ProfileError
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.workloads.cpu_quota import Threading


class WorkUnit(StrEnum):
    """What one unit of progress is: an inference batch or a training iteration."""

    BATCH = "batch"
    ITERATION = "iteration"


#: The unit each kind of job progresses in.
UNIT_OF_KIND: Mapping[JobKind, WorkUnit] = {
    JobKind.INFERENCE: WorkUnit.BATCH,
    JobKind.TRAINING: WorkUnit.ITERATION,
}


class _Curve(ABC):
    """A curve through recorded points, linear between them: read at a number, or at an array of
    them (then an array of the same shape)."""

    @abstractmethod
    def _points(self) -> tuple[Sequence[float], Sequence[float]]:
        """The points, ``x`` increasing, and the curve's value at each."""

    @overload
    def at(self, x: float) -> float: ...

    @overload
    def at(self, x: np.ndarray) -> np.ndarray: ...

    def at(self, x: float | np.ndarray) -> float | np.ndarray:
        """The curve at ``x``: linear between points, flat outside them."""
        xs, ys = self._points()
        values = np.interp(x, xs, ys)
        return values if isinstance(x, np.ndarray) else float(values)


@dataclass(frozen=True)
class Throughput(_Curve):
    """Units per second against the cores a job gets, as recorded points; :meth:`at` reads it
    at the cores a job gets, from 0 at 0 cores, flat after the last point.

    Attributes:
        cores: strictly increasing positive core counts.
        units_per_s: the throughput at each of them, non-negative and non-decreasing.
    """

    cores: tuple[float, ...]
    units_per_s: tuple[float, ...]

    def _points(self) -> tuple[Sequence[float], Sequence[float]]:
        return (0.0, *self.cores), (0.0, *self.units_per_s)


@dataclass(frozen=True)
class LossCurve(_Curve):
    """The loss a training job reports against the iterations it has done; :meth:`at` reads it
    after a number of iterations, flat outside the recorded points.

    Attributes:
        iterations: strictly increasing, non-negative iteration counts.
        loss: the loss at each of them (finite).
    """

    iterations: tuple[float, ...]
    loss: tuple[float, ...]

    def _points(self) -> tuple[Sequence[float], Sequence[float]]:
        return self.iterations, self.loss


@dataclass(frozen=True)
class Provenance:
    """Where a profile's numbers come from.

    Attributes:
        source: the host measurement or the paper (section, figure) they come from.
        method: how they were obtained (recording tool, or "derived from published figures").
        host: the machine they describe (CPU model and cores).
        date: when, ``YYYY-MM-DD``.
        derivation: how each number was obtained, in one line (details may live next to the
            files, as ``DERIVATION.md`` does for the ``paper`` set).
    """

    source: str
    method: str
    host: str
    date: str
    derivation: str


@dataclass(frozen=True)
class MeasuringHost:
    """The machine a measured profile describes, as ``dlsched validate`` compares it.

    Attributes:
        cpu_model: the processor, as ``/proc/cpuinfo`` names it.
        cores: the cores the engine reported.
    """

    cpu_model: str
    cores: int

    def describe(self) -> str:
        return f"{self.cpu_model}, {self.cores} cores"


@dataclass(frozen=True)
class WorkloadProfile:
    """What the replay backend knows of one workload.

    Attributes:
        workload: the workload's name (the file is ``<workload>.json``).
        kind: inference or training.
        unit: batch (inference) or iteration (training).
        batch_size: images per batch (inference) or samples per iteration (training).
        demand_cores: cores it keeps busy when uncapped and alone on a large enough worker.
        throughput: units per second against cores.
        noise_cv: coefficient of variation of each unit's work between runs.
        startup_s: seconds from container start to the start of its first unit.
        iterations: default iterations of a training job; ``None`` for inference.
        loss_curve: loss against iterations for training; ``None`` for inference.
        provenance: where the numbers come from.
        threading: how the workload sized its thread pool when it was measured (or, for a
            derived profile, how the paper's jobs ran): ``tuned`` or ``stock``.
        measured_on: the machine it was measured on; ``None`` for a profile derived from a
            paper.
        contention_exponent: how much this workload loses when a worker's runnable threads
            exceed its cores (:mod:`.contention`): its progress is ``R ** -a`` of what its CPU
            gives it alone. ``None`` takes the set's exponent for its threading
            (``contention.json``). Workloads differ: a service whose threads spend a batch in
            long convolutions barely loses, a small model's training step meets a barrier every
            few milliseconds and loses most.
        contention_floor: the share of its solo progress this workload keeps however crowded
            the worker: its efficiency is ``f + (1 - f) R ** -a`` (:mod:`.contention`). Stock
            jobs level off there (their threads still meet at barriers now and then);
            ``None`` is 0, the plain power law.
        efficiency_beside_startup: the share of its solo progress this workload keeps at the
            cores it gets while another job starts on its worker and the worker's threads do
            not fit its cores. Measured: an uncapped stock training keeps about a quarter beside
            one single-threaded start-up, far less than the start-up's one runnable thread
            explains (:mod:`.contention`). ``None``: no effect beyond the contention curve.
        startup_cpu_s: CPU-seconds the job uses during its start-up (the interpreter, torch and
            its data loading), measured alone. The start-up then competes for CPU: it keeps
            ``startup_cpu_s / startup_s`` cores busy and ends once they are delivered, so a busy
            worker starts jobs more slowly. ``None``: start-up takes ``startup_s`` and no CPU.
    """

    workload: str
    kind: JobKind
    unit: WorkUnit
    batch_size: int
    demand_cores: float
    throughput: Throughput
    noise_cv: float
    startup_s: float
    provenance: Provenance
    iterations: int | None = None
    loss_curve: LossCurve | None = None
    threading: Threading = "tuned"
    measured_on: MeasuringHost | None = None
    contention_exponent: float | None = None
    contention_floor: float | None = None
    efficiency_beside_startup: float | None = None
    startup_cpu_s: float | None = None

    @overload
    def units_per_s(self, cores: float) -> float: ...

    @overload
    def units_per_s(self, cores: np.ndarray) -> np.ndarray: ...

    def units_per_s(self, cores: float | np.ndarray) -> float | np.ndarray:
        """Units per second on ``cores`` (CPU above the demand brings nothing).

        Args:
            cores: cores the job gets, a number or an array of them.
        """
        return self.throughput.at(np.minimum(cores, self.demand_cores))

    def unit_seconds(self, cores: float) -> float:
        """Seconds one unit of average work takes on ``cores`` (``inf`` at no throughput).

        Args:
            cores: cores the job gets.
        """
        rate = float(self.units_per_s(float(cores)))
        return 1.0 / rate if rate > 0 else math.inf

    def loss_at(self, iterations: float | np.ndarray) -> float | np.ndarray:
        """The loss curve at ``iterations``.

        Args:
            iterations: iterations done, a number or an array of them.

        Raises:
            ProfileError: the profile is an inference one and has no loss curve.
        """
        if self.loss_curve is None:
            raise ProfileError(
                f"workload {self.workload!r} is an {self.kind.value} profile and has no "
                "loss_curve; only training profiles report a loss"
            )
        return self.loss_curve.at(iterations)
