"""The fit of the replay model's contention term (:mod:`dlsched.runs.fidelity.contention_fit`):
it recovers the exponents and floors synthetic measurements were made with, and reproduces the
shipped sets' terms from the measurements they record.

The term itself, and what it does to episodes, is tested with the replay model
(``tests/envs/replay/test_contention.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.envs.replay.contention import oversubscription
from dlsched.envs.replay.profile import PROFILES_DIR, load_set_contention
from dlsched.runs.fidelity.contention_fit import (
    fit_contention,
    fit_exponent,
    fit_workload_contention,
)
from dlsched.runs.fidelity.contention_grid import (
    ContentionMeasurement,
    GridCell,
    JobSample,
    ThreadingMeasurement,
    allocation_limits,
    recorded_measurement,
)

MEASURED_SETS = ("measured", "measured-stock")


@pytest.mark.parametrize("profile_set", MEASURED_SETS)
def test_the_shipped_fit_is_reproduced_from_its_recorded_measurements(profile_set):
    directory = PROFILES_DIR / profile_set
    recorded = recorded_measurement(directory)
    refitted = fit_contention(recorded)
    shipped = load_set_contention(profile_set)
    for threading, exponent in shipped.exponents.items():
        assert refitted.exponents[threading] == pytest.approx(exponent, abs=1e-4)
    assert refitted.bound_scales == shipped.bound_scales
    assert shipped.fit is not None and shipped.fit.residuals == refitted.fit.residuals


#: A stock job measured alone: 10 iterations/s per core, under limits of 0.25, 0.5 and 1 of 2 cores.
SOLO = tuple(JobSample(limit, 2 * limit, 20 * limit) for limit in (0.25, 0.5, 1.0))


def _cell(allocation, limits, cores_used, rates):
    return GridCell(
        allocation,
        tuple(JobSample(*sample) for sample in zip(limits, cores_used, rates, strict=True)),
    )


def _free_cells(counts, efficiency_of):
    """Free-competition cells of stock copies on 2 cores whose efficiency is given by R."""
    cells = []
    for count in counts:
        limits = (1.0,) * count
        ratio = oversubscription(
            np.array(limits), np.full(count, 2.0), np.ones(count, dtype=bool), 2.0
        )
        used = 2.0 / count
        rate = 10 * used * efficiency_of(ratio)
        cells.append(_cell("free", limits, (used,) * count, (rate,) * count))
    return tuple(cells)


def test_the_fit_recovers_an_exponent_from_synthetic_measurements():
    # Cells made with exponent 0.8 exactly.
    cells = _free_cells((2, 3, 4), lambda r: r**-0.8)
    measured = ThreadingMeasurement("stock", SOLO, cells)
    exponent, residuals = fit_exponent(measured, 2.0)
    assert exponent == pytest.approx(0.8, abs=1e-9)
    assert all(r.measured == pytest.approx(r.modelled) for r in residuals)
    model = fit_contention(
        ContentionMeasurement("mlp-digits", 2.0, "test host", "2026-11-25", 15, 5, (measured,))
    )
    assert model.exponents == {"tuned": 0.0, "stock": 0.8}


def test_a_workload_fit_recovers_a_floor_and_an_exponent():
    levelling = _free_cells((2, 3, 4, 6), lambda r: 0.2 + 0.8 * r**-2.4)
    fitted = fit_workload_contention(ThreadingMeasurement("stock", SOLO, levelling), 2.0)
    assert fitted.floor == pytest.approx(0.2, abs=0.0025)
    assert fitted.exponent == pytest.approx(2.4, abs=0.05)
    assert all(r.measured == pytest.approx(r.modelled, rel=0.01) for r in fitted.residuals)
    # A plain power law is fitted as one: no floor.
    power = _free_cells((2, 3, 4, 6), lambda r: r**-0.8)
    fitted = fit_workload_contention(ThreadingMeasurement("stock", SOLO, power), 2.0)
    assert fitted.floor == 0.0 and fitted.exponent == pytest.approx(0.8, abs=0.005)


def test_a_workload_fit_recovers_its_curve_job_by_job_beside_throttled_jobs():
    # Cells of stock copies under every allocation, each job's rate made by the replay model
    # itself (floor 0.15, exponent 1.6, bound scale 0.77): the fit must find its curve again,
    # where the worker-wide R of a favoured cell would mislead a fit of summed cells.
    shape = ThreadingMeasurement("stock", SOLO, ())
    cells = []
    for count in (2, 3, 4, 6):
        for allocation in ("free", "equal", "favoured"):
            limits = allocation_limits(allocation, count)
            # The cores each job gets: its quota, the uncapped ones sharing what is left.
            capped = [2.0 * limit for limit in limits if limit < 1.0]
            uncapped = (2.0 - sum(capped)) / max(1, len(limits) - len(capped))
            used = [2.0 * limit if limit < 1.0 else uncapped for limit in limits]
            probe = _cell(allocation, limits, used, [1.0] * count)
            kept = shape.modelled_job_efficiencies(probe, 2.0, 1.6, 0.15, 0.77, demand=1.94)
            rates = [10.0 * c * k for c, k in zip(used, kept, strict=True)]
            cells.append(_cell(allocation, limits, used, rates))
    measured = ThreadingMeasurement("stock", SOLO, tuple(cells))
    fitted = fit_workload_contention(measured, 2.0, demand=1.94, bound_scale=0.77)
    assert fitted.floor == pytest.approx(0.15, abs=0.0026)
    assert fitted.exponent == pytest.approx(1.6, abs=0.006)
    assert all(r.measured == pytest.approx(r.modelled, rel=1e-3) for r in fitted.residuals)
