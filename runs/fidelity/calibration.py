"""Calibration: measure the replay profiles of real workloads on the local engine.

``dlsched calibrate`` is its command line; :func:`calibrate` runs its steps for each workload
and writes its profile (``<set>/<workload>.json``, see :mod:`dlsched.envs.replay.profile`).

Each workload runs alone, in one container of the workload image per CPU limit (by default five:
0.1, 0.25, 0.5, 0.75 of the host and uncapped), and its JSON lines and CPU time are recorded
(:mod:`.calibration_measurement`). From them come the throughput curve, the demand and the loss
curve (:mod:`.calibration_fit`), written with the other fields and the provenance of each
(:mod:`.calibration_profile`).

A measurement needs the host to itself (:mod:`.quiet_host`): each run waits for a quiet host (no
other container, idle cores), the CPU other processes used during it is recorded (from
``/proc/stat``), a run that had company is measured again, and a calibration whose runs all had
company is refused (:class:`~dlsched.envs.errors.HostBusyError`) unless forced.

The contention term of the replay model is calibrated apart (:mod:`.contention_measurement`); a
workload's own contention curve is measured here, after its throughput.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker

from dlsched.envs.docker.engine import connect
from dlsched.envs.docker.image import IMAGE_TAG, build_hint, image_present
from dlsched.envs.errors import HostBusyError, ImageMissingError
from dlsched.envs.replay.contention import load_contention
from dlsched.envs.replay.profile import load_profile
from dlsched.envs.workloads.catalog import WORKLOADS, WorkloadSpec
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.runs.fidelity.calibration_measurement import (
    HostDescription,
    LimitRun,
    measure_run,
    measure_startup,
)
from dlsched.runs.fidelity.calibration_profile import (
    build_profile,
    existing_profile,
    plural,
    set_contention,
    set_startup,
    write_profile,
)
from dlsched.runs.fidelity.quiet_host import QUIET_CORES, busy_message, wait_until_quiet
from dlsched.runs.fidelity.rate_precision import DEFAULT_TOLERANCE, longer_duration, rate_interval

#: Where profiles are written unless told: the working directory, never the installed package.
DEFAULT_OUTPUT_DIR = Path("dlsched-profiles")
DEFAULT_LIMITS = (0.1, 0.25, 0.5, 0.75, 1.0)
#: What a calibration measures of a workload, in order.
PARTS = ("throughput", "startup", "contention")


@dataclass(frozen=True)
class CalibrationSettings:
    """How a calibration measures.

    Attributes:
        limits: CPU limits measured, as fractions of the host's cores; 1 (uncapped) is always
            added.
        duration_s: seconds each capped run measures after warm-up (the uncapped run of a
            training workload trains its whole default job), and at most the seconds of each
            contention cell (15 s for training, 40 s for a service's slower batches).
        wait_quiet_s: before each run, how long to wait for a quiet host (no other container,
            other processes using at most ``quiet_cores``).
        quiet_cores: cores other processes may use while the host counts as quiet.
        retries: measure a run again (keeping the cleanest) when the host was not quiet.
        threading: how the workloads size their thread pools (``tuned`` or ``stock``).
        force: write profiles measured on a busy host (the load is in their provenance).
        parts: what is measured (:data:`PARTS`); with fewer than all, the profiles must exist
            in the output folder and only those fields are measured again.
        job_counts: how many copies of a workload run together to fit its own contention curve
            (``None``: :data:`~dlsched.runs.fidelity.contention_measurement.WORKLOAD_JOB_COUNTS`
            of its kind: up to 6 trainings, whose curve levels off beyond 3, and 2 and 3
            services).
        tolerance: how far apart two calibrations of one quiet host may be (a fraction of a
            rate): a run whose rate's 95% interval is wider than half of it is measured again,
            longer (:mod:`.rate_precision`).
        settle_s: seconds after each change of limits of a contention cell before its window.
    """

    limits: tuple[float, ...] = DEFAULT_LIMITS
    duration_s: float = 60.0
    wait_quiet_s: float = 600.0
    quiet_cores: float = QUIET_CORES
    retries: int = 1
    threading: Threading = "tuned"
    force: bool = False
    parts: tuple[str, ...] = PARTS
    job_counts: tuple[int, ...] | None = None
    tolerance: float = DEFAULT_TOLERANCE
    settle_s: float = 5.0

    @property
    def all_limits(self) -> tuple[float, ...]:
        """The limits measured, uncapped included, in increasing order."""
        return tuple(sorted({*self.limits, 1.0}))

    def command(self, workloads: Sequence[str]) -> str:
        """The ``dlsched calibrate`` command line that measures with these settings."""
        return (
            f"dlsched calibrate --workload {','.join(workloads)} "
            f"--limits {','.join(f'{limit:g}' for limit in self.all_limits)} "
            f"--duration {self.duration_s:g} --wait-quiet {self.wait_quiet_s:g} "
            f"--quiet-cores {self.quiet_cores:g} --retries {self.retries} "
            f"--threading {self.threading} --tolerance {self.tolerance:g} "
            f"--settle {self.settle_s:g}"
            + ("" if set(self.parts) == set(PARTS) else f" --only {','.join(self.parts)}")
            + (
                ""
                if self.job_counts is None
                else f" --job-counts {','.join(str(n) for n in self.job_counts)}"
            )
        )


def calibrate(
    workloads: Sequence[str], settings: CalibrationSettings, output_dir: Path
) -> list[Path]:
    """Measure every workload of ``workloads`` and write its profile into ``output_dir``.

    For each workload, in order: its throughput at every limit alone (with its demand, noise
    and loss curve), its start-up
    (:func:`~dlsched.runs.fidelity.calibration_measurement.measure_startup`), then its own
    contention curve against that throughput
    (:func:`~dlsched.runs.fidelity.contention_measurement.measure_workload_contention`).
    The profile is written after each part, so an interrupted calibration keeps what it measured.

    Args:
        workloads: names of :data:`~dlsched.envs.workloads.catalog.WORKLOADS`.
        settings: how to measure.
        output_dir: where ``<workload>.json`` is written (created if missing).

    Returns:
        The profile files written, in the order of ``workloads``.

    Raises:
        ImageMissingError: the workload image is not on the engine.
        HostBusyError: other work held the host during a run, even after its retries, and
            ``settings.force`` is off; nothing more is written for that workload.
        ProfileError: a part is measured alone (``--only``) for a profile that does not exist
            or was measured with another threading.
        BackendError: a run failed or made too little progress.
    """
    from dlsched.runs.fidelity.contention_measurement import (
        WORKLOAD_JOB_COUNTS,
        measure_workload_contention,
    )

    client = connect(timeout_s=600)
    if not image_present(client):
        raise ImageMissingError(
            f"the workload image {IMAGE_TAG} is not on the engine; build it with: {build_hint()}"
        )
    host = HostDescription.of(client)
    command = settings.command(workloads)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in workloads:
        spec = WORKLOADS[name]
        path = output_dir / f"{name}.json"
        if "throughput" in settings.parts:
            runs = [
                _measure_precisely(client, spec, limit, host.cores, settings)
                for limit in settings.all_limits
            ]
            profile = build_profile(
                spec, runs, host, command, settings.duration_s, settings.threading
            )
        else:
            profile = existing_profile(path, settings.threading)
        if "startup" in settings.parts:
            wait_until_quiet(client, settings.wait_quiet_s, settings.quiet_cores, settings.force)
            set_startup(profile, measure_startup(client, spec, settings.threading))
        write_profile(path, profile)
        if "contention" in settings.parts:
            wait_until_quiet(client, settings.wait_quiet_s, settings.quiet_cores, settings.force)
            counts = settings.job_counts or WORKLOAD_JOB_COUNTS[spec.kind]
            # Throttled jobs lose by the set's bound scale in replay: the fit holds it too.
            bound_scale = load_contention(output_dir).bound_scales[settings.threading]
            fitted = measure_workload_contention(
                load_profile(path),
                float(host.cores),
                window_s=min(_EXPONENT_WINDOW_S[spec.kind], settings.duration_s),
                job_counts=counts,
                settle_s=settings.settle_s,
                bound_scale=bound_scale,
            )
            set_contention(profile, fitted, counts, bound_scale)
            write_profile(path, profile)
        print(f"wrote {path}", file=sys.stderr)
        written.append(path)
    return written


#: Longest seconds each co-location cell is measured over: a service answers a batch every few
#: seconds.
_EXPONENT_WINDOW_S = {"training": 15.0, "inference": 40.0}


def _measure_precisely(
    client: docker.DockerClient,
    spec: WorkloadSpec,
    limit: float,
    host_cores: int,
    settings: CalibrationSettings,
) -> LimitRun:
    """Measure ``spec`` at ``limit`` cleanly; again, longer, where the rate is not known to
    half the tolerance (an uncapped training trains its whole job: its interval is only said).
    """
    run = _measure_cleanly(client, spec, limit, host_cores, settings, settings.duration_s)
    interval = rate_interval(run)
    if interval is None:
        return run
    longer = longer_duration(interval, settings.tolerance, settings.duration_s)
    if longer is None:
        return run
    known = f"{spec.name} at limit {limit:g}: rate known to +-{interval.width / 2:.1%} (95%)"
    if limit >= 1 and spec.kind == "training":
        print(
            f"{known}, wider than half the tolerance (+-{settings.tolerance / 2:.1%}); an "
            "uncapped training runs its whole job, so it is not measured again",
            file=sys.stderr,
        )
        return run
    print(
        f"{known}, wider than half the tolerance (+-{settings.tolerance / 2:.1%}): measuring "
        f"it again for {longer:.0f} s",
        file=sys.stderr,
    )
    again = _measure_cleanly(client, spec, limit, host_cores, settings, longer)
    still = rate_interval(again)
    if still is not None and still.width / 2 > settings.tolerance / 2:
        print(
            f"{spec.name} at limit {limit:g}: still +-{still.width / 2:.1%} after {longer:.0f} s;"
            f" two calibrations may differ by more than {settings.tolerance:.0%} here",
            file=sys.stderr,
        )
    return again


def _measure_cleanly(
    client: docker.DockerClient,
    spec: WorkloadSpec,
    limit: float,
    host_cores: int,
    settings: CalibrationSettings,
    duration_s: float,
) -> LimitRun:
    """Measure ``spec`` at ``limit`` for ``duration_s`` when the host is quiet, again if others
    interfered."""
    attempts: list[LimitRun] = []
    for _ in range(1 + max(0, settings.retries)):
        wait_until_quiet(client, settings.wait_quiet_s, settings.quiet_cores, settings.force)
        measured = measure_run(client, spec, limit, host_cores, duration_s, settings.threading)
        attempts.append(_report(measured, spec))
        if attempts[-1].interference <= settings.quiet_cores:
            break
    cleanest = min(attempts, key=lambda attempt: attempt.interference)
    if cleanest.interference > settings.quiet_cores and not settings.force:
        raise HostBusyError(
            busy_message(
                f"during {spec.name} at limit {limit:g}, {cleanest.company()} in the cleanest "
                f"of {len(attempts)} attempts",
                settings.quiet_cores,
            )
        )
    return cleanest


def _report(run: LimitRun, spec: WorkloadSpec) -> LimitRun:
    """Print what ``run`` measured; ``run``."""
    cores = "uncapped" if run.quota_cores is None else f"{run.quota_cores:.2f} cores"
    print(
        f"{spec.name} at limit {run.limit:g} ({cores}, {run.threads} threads): "
        f"{run.units_per_s:.4g} {plural(spec.unit)}/s, {run.cpu_cores:.2f} cores used, "
        f"{len(run.completions)} {plural(spec.unit)} in {run.window_s:.0f} s; {run.company()}",
        file=sys.stderr,
    )
    return run
