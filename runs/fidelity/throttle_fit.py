"""The throttling curves of a profile set, fitted from recorded host episodes.

The replay model's throttle ratio of a job under a quota is a curve of its pressure on the quota
(:mod:`dlsched.envs.replay.throttling`): ``1 / (1 + (half_pressure / pressure) ** (1 /
burstiness))``. A host episode records, per job and step, the limit in force, the CPU the job
used and the throttle ratio the engine counted (``cpu.stat``): each such step of a job under a
quota is one point ``(pressure, ratio)``, the pressure computed as the replay model computes it
(the job's busy threads from its profile's demand and threading, its usage as its share). Per
workload with :data:`MIN_THROTTLED_STEPS` points, :func:`fit_throttling` picks the curve of
least squared error of the ratios on a grid (``half_pressure`` and ``burstiness`` on log
scales); the set's default curve is fitted to every point. ``dlsched calibrate
--throttling-from`` runs it and writes ``throttling.json`` with its account.
"""

from __future__ import annotations

import datetime
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlsched.envs.errors import ArgumentError
from dlsched.envs.replay.contention import busy_and_quotas
from dlsched.envs.replay.fit_provenance import FitProvenance
from dlsched.envs.replay.profile import load_profile_set, profile_set_directory
from dlsched.envs.replay.throttling import (
    THROTTLING_FILE,
    ThrottleCurve,
    ThrottlingModel,
    pressure,
    throttle_ratio,
    throttling_data,
)
from dlsched.envs.telemetry import JobState
from dlsched.runs.evaluation.records import EpisodeResult
from dlsched.runs.fidelity.race_fit import recorded_episodes

#: Job-steps under a quota a workload needs for a curve of its own (else the default's).
MIN_THROTTLED_STEPS = 10
#: The grid of ``half_pressure``: from half the quota to twice it.
HALF_PRESSURE_GRID = np.geomspace(0.5, 2.0, 81)
#: The grid of ``burstiness``: from a sharp step to a passage over a factor of e.
BURSTINESS_GRID = np.geomspace(0.01, 1.0, 61)


@dataclass(frozen=True)
class ThrottledSteps:
    """Every recorded step of one workload's jobs under a quota.

    Attributes:
        workload: the workload.
        pressure: per step, the job's pressure on its quota.
        ratio: per step, the throttle ratio the host measured.
    """

    workload: str
    pressure: np.ndarray
    ratio: np.ndarray


def throttled_steps(episodes: Sequence[EpisodeResult], profile_set: str) -> list[ThrottledSteps]:
    """Per workload (sorted), the steps of ``episodes`` in which one of its jobs ran under a
    quota and its throttle ratio was measured, with its pressure against ``profile_set``.

    Raises:
        UnknownNameError: ``profile_set`` is no set.
        ProfileError: a workload of the episodes is not in it.
    """
    profiles = load_profile_set(profile_set)
    points: dict[str, tuple[list[float], list[float]]] = {}
    for episode in episodes:
        for step in episode.steps:
            for sample in step.containers:
                if (
                    sample.state is not JobState.RUNNING
                    or sample.throttle_ratio is None
                    or not 0 < sample.limit < 1
                ):
                    continue
                profile = profiles[sample.workload]
                cores = sample.limit_cores / sample.limit
                busy, quota = busy_and_quotas(
                    np.array([sample.limit]),
                    np.array([profile.demand_cores]),
                    np.array([profile.threading == "stock"]),
                    cores,
                )
                at = pressure(busy, np.array([sample.cpu_usage]), quota)
                pressures, ratios = points.setdefault(sample.workload, ([], []))
                pressures.append(float(at[0]))
                ratios.append(sample.throttle_ratio)
    return [
        ThrottledSteps(name, np.array(points[name][0]), np.array(points[name][1]))
        for name in sorted(points)
    ]


def fit_curve(at: np.ndarray, measured: np.ndarray) -> tuple[ThrottleCurve, float]:
    """The curve of least squared error of ``measured`` ratios at pressures ``at``, and its
    root mean square error."""
    burstiness = BURSTINESS_GRID[:, None]
    # one half_pressure at a time: the whole grid at once holds grid x steps numbers
    error = np.array(
        [
            ((throttle_ratio(at[None, :], half, burstiness) - measured[None, :]) ** 2).mean(axis=1)
            for half in HALF_PRESSURE_GRID
        ]
    )
    best_half, best_burstiness = np.unravel_index(int(np.argmin(error)), error.shape)
    curve = ThrottleCurve(
        float(HALF_PRESSURE_GRID[best_half]), float(BURSTINESS_GRID[best_burstiness])
    )
    return curve, float(np.sqrt(error[best_half, best_burstiness]))


def fit_throttling(steps: Sequence[ThrottledSteps], source: str, host: str) -> ThrottlingModel:
    """The throttling model of ``steps``: a curve per workload with enough of them, and the
    default fitted to all, with the account of each fit.

    Args:
        steps: per workload, its throttled steps.
        source: where the steps were recorded (for the provenance).
        host: the host they were recorded on.

    Raises:
        ArgumentError: fewer than :data:`MIN_THROTTLED_STEPS` steps in all.
    """
    every_pressure = np.concatenate([s.pressure for s in steps]) if steps else np.zeros(0)
    every_ratio = np.concatenate([s.ratio for s in steps]) if steps else np.zeros(0)
    if len(every_ratio) < MIN_THROTTLED_STEPS:
        raise ArgumentError(
            f"{len(every_ratio)} recorded steps of jobs under a quota with a measured throttle "
            f"ratio: expected at least {MIN_THROTTLED_STEPS}; record host episodes of a policy "
            "that caps its jobs (dlsched validate --policy dqoes ...) with this dlsched version"
        )
    default, default_rms = fit_curve(every_pressure, every_ratio)
    residuals = [_residual("default", default, default_rms, every_pressure, every_ratio)]
    workloads: dict[str, ThrottleCurve] = {}
    for workload in steps:
        if len(workload.ratio) < MIN_THROTTLED_STEPS:
            residuals.append(
                f"{workload.workload}: {len(workload.ratio)} steps, fewer than "
                f"{MIN_THROTTLED_STEPS}: the default curve"
            )
            continue
        curve, rms = fit_curve(workload.pressure, workload.ratio)
        workloads[workload.workload] = curve
        residuals.append(
            _residual(workload.workload, curve, rms, workload.pressure, workload.ratio)
        )
    fit = FitProvenance(
        source=source,
        host=host,
        date=datetime.date.today().isoformat(),
        objective=(
            "least squares of the per-step throttle ratio against 1 / (1 + (half_pressure / "
            "pressure) ** (1 / burstiness)) on a grid (half_pressure 0.5-2, burstiness "
            "0.01-1, log-spaced); pressure = busy threads / quota where the job used 0.95 of "
            "its quota or more, else usage / quota"
        ),
        residuals=tuple(residuals),
    )
    return ThrottlingModel(default=default, workloads=workloads, fit=fit)


def _residual(
    name: str, curve: ThrottleCurve, rms: float, at: np.ndarray, measured: np.ndarray
) -> str:
    modelled = curve.ratio(at)
    return (
        f"{name}: half_pressure {curve.half_pressure:.3f}, burstiness {curve.burstiness:.3f}, "
        f"{len(measured)} steps, rms error {rms:.3f}, mean ratio measured "
        f"{float(measured.mean()):.3f} modelled {float(modelled.mean()):.3f}"
    )


def write_throttling(directory: Path, model: ThrottlingModel) -> Path:
    """Write ``model`` as the ``throttling.json`` of the profile set in ``directory``."""
    path = directory / THROTTLING_FILE
    path.write_text(json.dumps(throttling_data(model), indent=1) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class FittedThrottling:
    """What ``dlsched calibrate --throttling-from`` fitted and wrote.

    Attributes:
        model: the curves and their account.
        path: the ``throttling.json`` written.
        steps: per workload, its throttled steps.
        started_from: the set a new profile-set folder was started as (``None``: it held one).
    """

    model: ThrottlingModel
    path: Path
    steps: Mapping[str, int]
    started_from: str | None


def fit_throttling_from(folders: Sequence[Path], directory: Path) -> FittedThrottling:
    """Fit the throttling curves of the profile set in ``directory`` to the host episodes
    recorded in ``folders`` (as ``--race-from`` reads them) and write them into it; a
    ``directory`` without profiles is first made a copy of the set the episodes ran on.

    Raises:
        ArgumentError: no episode, episodes of several sets (with a new ``directory``), or too
            few throttled steps.
        ProfileError: the set lacks a workload of the episodes.
    """
    episodes = recorded_episodes(folders)
    started_from = None
    if not directory.is_dir() or not any(directory.glob("*.json")):
        sets = sorted({episode.scenario.profile_set for episode in episodes})
        if len(sets) != 1:
            raise ArgumentError(
                f"the episodes ran on profile sets {sets}: expected one to start {directory} "
                f"from; fit episodes of one set, or copy a set into {directory} first"
            )
        directory.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(profile_set_directory(sets[0]), directory, dirs_exist_ok=True)
        started_from = sets[0]
    recorded_in = ", ".join(str(folder) for folder in folders)
    steps = throttled_steps(episodes, str(directory.resolve()))
    backends = ", ".join(sorted({episode.backend for episode in episodes}))
    model = fit_throttling(
        steps,
        f"{len(episodes)} episodes recorded in {recorded_in}, by dlsched calibrate "
        "--throttling-from",
        f"the {backends} host that recorded {recorded_in}",
    )
    path = write_throttling(directory, model)
    return FittedThrottling(model, path, {s.workload: len(s.ratio) for s in steps}, started_from)
