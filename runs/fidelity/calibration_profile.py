"""The profile JSON that calibration writes, with the provenance of every field.

:func:`build_profile` makes a profile (``<set>/<workload>.json``, see
:mod:`dlsched.envs.replay.profile`) from a workload's runs at every limit
(:mod:`.calibration_measurement`) and the curves fitted to them (:mod:`.calibration_fit`):

- ``throughput`` and ``demand_cores``: the fitted curve and demand; each run's residual against
  the curve is written in the provenance.
- ``noise_cv``: the coefficient of variation of the uncapped run's unit durations (batch
  latencies; for training, the time between consecutive iterations).
- ``startup_s``: from the container's start to the workload's ``start`` event (interpreter,
  torch, data and model ready), uncapped.
- ``loss_curve`` (training): the fitted loss curve of the uncapped run.

A calibration that measures only some parts reopens the profile (:func:`existing_profile`) and
replaces those fields and their account in the provenance (:func:`set_startup`,
:func:`set_contention`).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.envs.docker.image import IMAGE_TAG
from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.profile import PROFILE_FORMAT
from dlsched.envs.workloads.catalog import WorkloadSpec
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.runs.fidelity.calibration_fit import demand_cores, loss_curve, throughput_points
from dlsched.runs.fidelity.calibration_measurement import (
    CPU_PERIOD_US,
    WARMUP_UNITS,
    HostDescription,
    LimitRun,
    StartupMeasurement,
)
from dlsched.runs.fidelity.contention_fit import WorkloadContention
from dlsched.runs.fidelity.rate_precision import rate_interval


def plural(unit: str) -> str:
    """A unit's plural (``batches``, ``iterations``), as reports print rates."""
    return "batches" if unit == "batch" else f"{unit}s"


def significant(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits, as profiles store their numbers."""
    return float(f"{value:.{digits}g}")


def build_profile(
    spec: WorkloadSpec,
    runs: Sequence[LimitRun],
    host: HostDescription,
    command: str,
    duration_s: float,
    threading: Threading = "tuned",
) -> dict[str, Any]:
    """The profile JSON object of ``spec`` from its runs (one of them uncapped)."""
    uncapped = next(run for run in runs if run.quota_cores is None)
    demand = demand_cores(runs)
    points = throughput_points(runs)
    durations = uncapped.unit_durations_s
    noise_cv = statistics.stdev(durations) / statistics.mean(durations) if len(durations) > 1 else 0
    profile: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "workload": spec.name,
        "kind": spec.kind,
        "unit": spec.unit,
        "threading": threading,
        "batch_size": spec.batch_size,
        "demand_cores": significant(demand),
        "throughput": {
            "cores": [significant(cores) for cores, _ in points],
            "units_per_s": [significant(rate) for _, rate in points],
        },
        "noise_cv": significant(noise_cv, 3),
        "startup_s": significant(uncapped.startup_s, 3),
    }
    if spec.kind == "training":
        curve = loss_curve(uncapped.losses)
        profile["iterations"] = spec.iterations
        profile["loss_curve"] = {
            "iterations": [iteration for iteration, _ in curve],
            "loss": [significant(loss) for _, loss in curve],
        }
    profile["measured_on"] = {"cpu_model": host.cpu_model, "cores": host.cores}
    profile["provenance"] = {
        "source": "measured with `dlsched calibrate` on a local Docker engine",
        "method": (
            f"{spec.name} ({threading} threading) alone in one container of {IMAGE_TAG} per "
            "CPU limit "
            f"(cpu_period {CPU_PERIOD_US} us, quota = limit x {host.cores} cores, none at 1); "
            f"the first {WARMUP_UNITS[spec.kind]} {plural(spec.unit)} skipped as warm-up, then "
            f"{duration_s:g} s measured per capped run"
            + (", the uncapped run training the whole job" if spec.kind == "training" else "")
            + "; CPU time from the container's cgroup (or the engine's statistics); "
            f"Python {platform.python_version()}, torch {_torch_version()}; command: {command}"
        ),
        "host": host.describe(),
        "date": dt.date.today().isoformat(),
        "derivation": _derivation(spec, runs, demand, points),
    }
    return profile


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _derivation(
    spec: WorkloadSpec,
    runs: Sequence[LimitRun],
    demand: float,
    points: Sequence[tuple[float, float]],
) -> str:
    unit = plural(spec.unit)
    cores_points = [0.0, *(cores for cores, _ in points)]
    rate_points = [0.0, *(rate for _, rate in points)]
    lines = [
        f"units_per_s: ({unit} completed in the window - 1) / time between the first and "
        "the last completion; cores: the CPU the run got, CPU-seconds / wall seconds of its "
        "window; fit: the closest non-decreasing rates in least squares (adjacent violators "
        "pooled), residual = measured - fitted at the run's cores",
        f"demand_cores: the most cores a run used ({demand:.3f}), the uncapped run's unless "
        "other processes held it below a capped one; the workload runs one thread per usable "
        "core, so a host with more cores may see more",
        "noise_cv: stdev / mean of the uncapped run's "
        + ("batch latencies" if spec.kind == "inference" else "iteration spacings"),
        "startup_s: the uncapped run's start event time - the container's StartedAt",
    ]
    if spec.kind == "training":
        lines.append(
            "loss_curve: the uncapped run's minibatch losses (iteration k's loss is that after "
            "k - 1 iterations) averaged over geometrically growing bins of iterations done"
        )
    for run in runs:
        cores = "uncapped" if run.quota_cores is None else f"quota {run.quota_cores:g} cores"
        fitted = float(np.interp(run.cpu_cores, cores_points, rate_points))
        interval = rate_interval(run)
        known = (
            ""
            if interval is None
            else f" +-{interval.width / 2:.1%} (95%, {interval.windows} sub-windows)"
        )
        lines.append(
            f"limit {run.limit:g} ({cores}, {run.threads} threads): "
            f"{len(run.completions)} {unit} in {run.window_s:.1f} s -> "
            f"{run.units_per_s:.4g} {unit}/s{known} (residual {run.units_per_s - fitted:+.3g}), "
            f"{run.cpu_cores:.3f} cores used; " + run.company()
        )
    return "; ".join(lines)


def write_profile(path: Path, profile: dict[str, Any]) -> None:
    """Write ``profile`` to ``path`` as indented JSON."""
    path.write_text(json.dumps(profile, indent=2) + "\n")


def existing_profile(path: Path, threading: Threading) -> dict[str, Any]:
    """The profile at ``path`` as JSON data, to measure some of its parts again."""
    try:
        profile = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ProfileError(
            f"--only measures parts of an existing profile, but {path} cannot be read ({error}); "
            "calibrate the whole profile first (without --only)"
        ) from None
    if profile.get("threading", "tuned") != threading:
        raise ProfileError(
            f"{path} was measured with {profile.get('threading', 'tuned')} threading, not "
            f"{threading}; pass --threading {profile.get('threading', 'tuned')} or calibrate "
            "into another --output-dir"
        )
    profile["format"] = PROFILE_FORMAT
    profile["threading"] = threading
    return dict(profile)


def set_startup(profile: dict[str, Any], startup: StartupMeasurement) -> None:
    """Write a workload's measured start-up into ``profile``, with its account."""
    profile["startup_s"] = significant(startup.startup_s, 3)
    profile["startup_cpu_s"] = significant(startup.startup_cpu_s, 3)
    set_derivation(
        profile,
        "startup_s",
        "startup_s: median of "
        f"{len(startup.seconds)} uncapped starts from the engine's create call to the start "
        f"event ({', '.join(f'{x:.2f}' for x in startup.seconds)} s); startup_cpu_s: the "
        "container's CPU-seconds at the start event, median "
        f"({', '.join(f'{x:.2f}' for x in startup.cpu_seconds)})",
    )


def set_derivation(profile: dict[str, Any], field: str, text: str) -> None:
    """Replace the provenance's account of ``field`` with ``text``."""
    provenance = profile["provenance"]
    kept = [
        part
        for part in _accounts(provenance["derivation"])
        if not part.startswith(f"{field}:")
        and not part.startswith(f"{field} ")
        and not (field == "startup_s" and part.startswith("startup_cpu_s:"))
        and not (field == "contention_exponent" and " jobs " in part and ": R " in part)
    ]
    provenance["derivation"] = "; ".join([*kept, text])


def _accounts(derivation: str) -> list[str]:
    """A derivation cut into its accounts: at each ``"; "`` outside parentheses (an account
    may hold ``"; "`` within them)."""
    parts, depth, start = [], 0, 0
    for at, character in enumerate(derivation):
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth == 0 and derivation.startswith("; ", at):
            parts.append(derivation[start:at])
            start = at + 2
    return [*parts, derivation[start:]]


def set_contention(
    profile: dict[str, Any],
    fitted: WorkloadContention,
    counts: Sequence[int],
    bound_scale: float,
) -> None:
    """Write a workload's own contention curve into ``profile``, with its account.

    Args:
        profile: the profile's JSON data.
        fitted: the curve fitted to ``counts`` copies of the workload.
        counts: the numbers of copies measured together.
        bound_scale: the set's bound scale the fit held for throttled jobs.
    """
    set_derivation(
        profile,
        "contention_exponent",
        f"contention_exponent: {fitted.exponent:.4f} and contention_floor: "
        f"{fitted.floor:.4f}, fitted to {len(fitted.residuals)} cells of "
        f"{', '.join(str(n) for n in counts)} copies under free, equal and favoured "
        "limits against the throughput above (least squares of each job's log "
        "efficiency against the replay model's, f + (1 - f) R ** -a over the threads "
        "runnable beside it, a throttled job's exponent times the set's bound scale "
        f"{bound_scale:g}); " + "; ".join(residual.describe() for residual in fitted.residuals),
    )
    profile["contention_exponent"] = round(fitted.exponent, 4)
    profile["contention_floor"] = round(fitted.floor, 4)
    if fitted.beside_startup is not None:
        profile["efficiency_beside_startup"] = round(min(1.0, fitted.beside_startup), 3)
        set_derivation(
            profile,
            "efficiency_beside_startup",
            f"efficiency_beside_startup: {fitted.beside_startup:.3f}, one copy's "
            "iterations per second (uncapped) while the next copies started beside it, "
            "over the throughput above at the cores it used",
        )
