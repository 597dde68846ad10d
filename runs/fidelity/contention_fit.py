"""The replay model's contention term fitted to a contention measurement; no container runs here.

The replay model shares a worker's cores max-min under the limits (water-filling), which is
exact while the runnable threads of the worker's jobs fit its cores. Beyond that a job makes less
progress per CPU-second it gets, and the replay model multiplies its progress by ``R ** -a``,
``R`` the worker's oversubscription and ``a`` an exponent per threading
(:mod:`dlsched.envs.replay.contention`). This module fits ``a`` to a measured grid
(:mod:`~dlsched.runs.fidelity.contention_grid`, measured by
:mod:`~dlsched.runs.fidelity.contention_measurement`), and writes the fit into a profile set
(:func:`write_contention`).

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

A workload's own curve, ``f + (1 - f) R ** -a`` with a floor ``f``, is fitted job by job
(:func:`fit_workload_contention`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlsched.envs.replay.contention import (
    CONTENTION_FILE,
    ContentionModel,
    Crowding,
    contention_data,
)
from dlsched.envs.replay.fit_provenance import FitProvenance
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading
from dlsched.runs.fidelity.contention_grid import (
    ContentionMeasurement,
    GridCell,
    ThreadingMeasurement,
    measurement_data,
)

_OBJECTIVE = (
    "least squares of log efficiency against -a log R over the cells with R > 1 (closed form); "
    "efficiency = the cell's summed iterations/s over the solo curve's at the cores each job "
    "used; R from the cell's limits with the solo uncapped usage as demand; then, a fixed, the "
    "bound scale s on a grid of 0.01 in [0, 1] by least squares of each job's log efficiency "
    "against the replay model's per-job efficiency"
)


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


#: The floors :func:`fit_workload_contention` searches (their resolution).
_FLOOR_STEP = 0.0025
#: The exponents :func:`fit_workload_contention` searches; the last bounds :mod:`.crowd_fit`'s too.
EXPONENT_GRID = np.arange(0.0, 12.0 + 1e-9, 0.005)


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
    Crowding`, with ``bound_scale`` for throttled jobs), on a grid of floors below the least
    efficiency measured (steps of 0.0025) and of the exponents :data:`EXPONENT_GRID`.

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
                (weights * ratios ** -(EXPONENT_GRID[:, None] * scale)).sum(axis=1) / weights.sum()
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
                best, floor, exponent = (
                    float(errors[at]),
                    float(candidate),
                    float(EXPONENT_GRID[at]),
                )
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
        fit=FitProvenance(
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


def write_contention(directory: Path, measurement: ContentionMeasurement) -> Path:
    """Fit ``measurement`` and write the set's ``contention.json`` (with the measurements).

    Args:
        directory: the profile set's folder (created if missing).
        measurement: what :func:`calibrate_contention` measured.

    Returns:
        The file written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CONTENTION_FILE
    data = contention_data(fit_contention(measurement))
    data["measurements"] = measurement_data(measurement)
    # The races were fitted from host episodes, not from this grid: measuring the grid again
    # must not lose them.
    if path.is_file():
        races = json.loads(path.read_text()).get("races")
        if races:
            data["races"] = races
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path
