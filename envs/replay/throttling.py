"""Throttling: the fraction of its quota's CFS periods in which a replayed job is throttled.

A job under a CFS quota of ``q`` cores may use ``q`` times the period of CPU time per period;
once it has, its threads wait for the next period, and the kernel counts the period as
throttled (``nr_throttled`` of ``nr_periods`` in the cgroup's ``cpu.stat``). Its throttle ratio
over an interval is the fraction of the periods in which that happened.

What decides it is the job's **pressure** on its quota: the cores it would keep busy over the
quota. A job that gets its whole quota (its share is the quota: the quota binds) would keep
``busy`` cores busy, its threads that run unthrottled (``min(threads, demand)``, as
:func:`~dlsched.envs.replay.contention.busy_and_quotas` counts them); one that gets less (its
worker's other jobs take the rest) keeps only its share busy, and its quota seldom binds. So
``pressure = busy / q`` where the quota binds and ``share / q`` where it does not.

The ratio against the pressure is a curve per workload, fitted from host episodes (``dlsched
calibrate --throttling-from``, :mod:`dlsched.runs.fidelity.throttle_fit`)::

    ratio = 1 / (1 + (half_pressure / pressure) ** (1 / burstiness))

``half_pressure`` is the pressure at which half the periods are throttled (1 for a job whose
demand is steady: throttled exactly when its threads want more than the quota), and
``burstiness`` how gradual the passage from never to always is: a job whose demand varies from
period to period (data loading between steps, a service between batches) is throttled in some
periods below its quota's pressure and spared in some above it. The curve is a logistic in the
log of the pressure, so that a job at twice its quota and one at half of it sit symmetrically.

The model draws nothing: a job's ratio is a function of its share, its limit and its workload,
so the replay model stays deterministic per seed. A profile set holds its curves in
``throttling.json`` beside its profiles (format on :func:`load_throttling`); a set without one
has no throttling model, and its jobs' ratios are not measured (NaN; ``None`` in telemetry).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.fit_provenance import FitProvenance, parse_provenance, provenance_data
from dlsched.envs.replay.model_file import read_model_file

#: Version of the throttling file format this module reads and writes.
THROTTLING_FORMAT = 1
#: The file name of a profile set's throttling model.
THROTTLING_FILE = "throttling.json"
#: The share of its quota at which a job's quota counts as binding: the replay model gives a
#: job its quota exactly, a host a little less (the last period of a window, accounting).
BINDING_SHARE = 0.95


@dataclass(frozen=True)
class ThrottleCurve:
    """How one workload's throttle ratio follows its pressure (see the module docstring).

    Attributes:
        half_pressure: the pressure at which half the periods are throttled (> 0).
        burstiness: the width of the passage, in the log of the pressure (> 0).
    """

    half_pressure: float
    burstiness: float

    def ratio(self, pressure: np.ndarray) -> np.ndarray:
        """The throttle ratio at each of ``pressure`` (>= 0)."""
        return throttle_ratio(pressure, self.half_pressure, self.burstiness)


@dataclass(frozen=True)
class ThrottlingModel:
    """A profile set's throttling curves.

    Attributes:
        default: the curve of a workload that :attr:`workloads` does not name.
        workloads: per workload, its own curve.
        fit: how the curves were obtained.
    """

    default: ThrottleCurve
    workloads: Mapping[str, ThrottleCurve] = field(default_factory=dict)
    fit: FitProvenance | None = None

    def curve(self, workload: str) -> ThrottleCurve:
        """``workload``'s curve (the default where it has none of its own)."""
        return self.workloads.get(workload, self.default)


def throttle_ratio(
    pressure: np.ndarray, half_pressure: np.ndarray | float, burstiness: np.ndarray | float
) -> np.ndarray:
    """``1 / (1 + (half_pressure / pressure) ** (1 / burstiness))``, 0 at no pressure.

    Args:
        pressure: per job, the cores it would keep busy over its quota's cores (>= 0).
        half_pressure: per job (or one for all), its curve's ``half_pressure``.
        burstiness: per job (or one for all), its curve's ``burstiness``.
    """
    with np.errstate(divide="ignore", over="ignore"):
        odds = np.exp(np.log(np.asarray(half_pressure) / pressure) / burstiness)
    return 1.0 / (1.0 + odds)


def pressure(busy: np.ndarray, share: np.ndarray, quota: np.ndarray) -> np.ndarray:
    """Per job, its pressure on its quota: ``busy / quota`` where its share reaches
    :data:`BINDING_SHARE` of the quota (the quota binds), else ``share / quota``.

    Args:
        busy: the cores its unthrottled threads keep busy.
        share: the cores it got (the replay model's share, or a host's measured usage).
        quota: its quota in cores (> 0).
    """
    binding = share >= BINDING_SHARE * quota
    return np.where(binding, np.maximum(busy, share), share) / quota


def load_throttling(directory: Path) -> ThrottlingModel | None:
    """The throttling model of the profile set in ``directory`` (``None`` without the file).

    The file is a JSON object::

        {"format": 1,
         "default": {"half_pressure": 1.0, "burstiness": 0.1},
         "workloads": {"mobilenet-svc": {"half_pressure": 1.02, "burstiness": 0.06}, ...},
         "fit": {"source": "dlsched calibrate --throttling-from ...", "host": "...",
                 "date": "2026-12-07", "objective": "...", "residuals": ["...", ...]}}

    ``workloads`` is optional; ``fit`` is required: a curve says where it comes from.

    Raises:
        ProfileError: the file is not valid JSON or a field is malformed; the message names the
            file, the field, the value and what was expected.
    """
    path = directory / THROTTLING_FILE
    data = read_model_file(path, "throttling")
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ProfileError(
            f"throttling file {path} holds {type(data).__name__}, expected an object"
        )
    problems: list[str] = []
    known = {"format", "default", "workloads", "fit"}
    for key in sorted(set(data) - known):
        problems.append(f"{key}: unknown field; known fields: {', '.join(sorted(known))}")
    if data.get("format") != THROTTLING_FORMAT:
        problems.append(f"format: got {data.get('format')!r}, expected {THROTTLING_FORMAT}")
    default = _curve(data.get("default"), "default", problems)
    workloads: dict[str, ThrottleCurve] = {}
    raw = data.get("workloads", {})
    if not isinstance(raw, dict):
        problems.append(f"workloads: got {raw!r}, expected an object of workload to curve")
    else:
        for name, value in sorted(raw.items()):
            curve = _curve(value, f"workloads.{name}", problems)
            if curve is not None:
                workloads[name] = curve
    fit, fit_problems = parse_provenance(data.get("fit"), "fit")
    problems += fit_problems
    if problems or default is None:
        raise ProfileError(f"throttling file {path} is malformed:\n  " + "\n  ".join(problems))
    return ThrottlingModel(default=default, workloads=workloads, fit=fit)


def _curve(data: Any, where: str, problems: list[str]) -> ThrottleCurve | None:
    """A curve from its JSON object; ``None`` (and its problems noted) where it is malformed."""
    if not isinstance(data, dict) or set(data) != {"half_pressure", "burstiness"}:
        problems.append(
            f"{where}: got {data!r}, expected an object with half_pressure and burstiness"
        )
        return None
    values = []
    for key in ("half_pressure", "burstiness"):
        value = data[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and value > 0)
        ):
            problems.append(f"{where}.{key}: got {value!r}, expected a finite number > 0")
            return None
        values.append(float(value))
    return ThrottleCurve(*values)


def throttling_data(model: ThrottlingModel) -> dict[str, Any]:
    """The JSON object of ``model``, as :func:`load_throttling` reads it."""
    data: dict[str, Any] = {
        "format": THROTTLING_FORMAT,
        "default": _curve_data(model.default),
        "workloads": {name: _curve_data(curve) for name, curve in sorted(model.workloads.items())},
    }
    if model.fit is not None:
        data["fit"] = provenance_data(model.fit)
    return data


def _curve_data(curve: ThrottleCurve) -> dict[str, float]:
    return {"half_pressure": curve.half_pressure, "burstiness": curve.burstiness}
