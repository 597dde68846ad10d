"""Calibration: measure the replay profiles of real workloads on the local engine.

``dlsched calibrate`` is its command line.

Each workload runs alone, in one container of the workload image per CPU limit (by default five:
0.1, 0.25, 0.5, 0.75 of the host and uncapped), with its thread pool sized as a real host sizes it
(``tuned`` or ``stock`` threading, :mod:`dlsched.envs.workloads.cpu_quota`), and its JSON lines and
CPU time are recorded. From them come the fields of a profile (``<set>/<workload>.json``, see
:mod:`dlsched.envs.replay.profile`):

- ``throughput``: units per second from the spacing of the unit completions after warm-up,
  against the cores the run got (its CPU-seconds over the same window: the quota, when alone).
  The fit is the closest non-decreasing curve to the measured rates (least squares, pooling
  adjacent violators); each run's residual against it is written in the provenance.
- ``demand_cores``: the mean cores the uncapped run used over its measuring window (or a
  capped run's, if other processes held the uncapped one below it).
- ``noise_cv``: the coefficient of variation of the uncapped run's unit durations (batch
  latencies; for training, the time between consecutive iterations).
- ``startup_s``: from the container's start to the workload's ``start`` event (interpreter,
  torch, data and model ready), uncapped.
- ``loss_curve`` (training): the uncapped run trains the whole default job; its minibatch
  losses are averaged over bins of iterations, finer at the start where the loss falls fast.

CPU time comes from the container's cgroup file when the engine runs on this host and from the
engine's one-shot statistics otherwise. A measurement needs the host to itself
(:mod:`.quiet_host`): each run waits for a quiet host (no other container, idle cores), the CPU
other processes used during it is recorded (from ``/proc/stat``), a run that had company is
measured again, and a calibration whose runs all had company is refused
(:class:`~dlsched.envs.errors.HostBusyError`) unless forced. Containers carry
``dlsched.managed=1`` and the labels of their owner process, as the Docker backend's do (so that
``dlsched docker cleanup`` leaves a running calibration's containers alone); they are removed
after their run, also on interruption.

The contention term of the replay model is calibrated apart (:mod:`.contention`).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import itertools
import json
import math
import platform
import re
import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import numpy as np
from docker.models.containers import Container

from dlsched.envs.docker.cgroup import CpuUsageFile, find_cpu_usage_file
from dlsched.envs.docker.container_output import JsonLineReader
from dlsched.envs.docker.containers import LABEL_OWNER
from dlsched.envs.docker.engine import connect
from dlsched.envs.docker.image import (
    IMAGE_TAG,
    MANAGED_LABEL,
    build_hint,
    image_present,
)
from dlsched.envs.errors import BackendError, HostBusyError, ImageMissingError, ProfileError
from dlsched.envs.owner import ProcessOwner
from dlsched.envs.replay.contention import load_contention
from dlsched.envs.replay.profile import PROFILE_FORMAT, load_profile
from dlsched.envs.workloads.catalog import WORKLOADS, WorkloadSpec
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.envs.workloads.events import (
    BatchEvent,
    DoneEvent,
    IterationEvent,
    StartEvent,
    WorkloadEvent,
)
from dlsched.runs.fidelity.quiet_host import (
    QUIET_CORES,
    busy_message,
    host_busy_seconds,
    other_running_containers,
    wait_until_quiet,
)

#: Where profiles are written unless told: the working directory, never the installed package.
DEFAULT_OUTPUT_DIR = Path("dlsched-profiles")
DEFAULT_LIMITS = (0.1, 0.25, 0.5, 0.75, 1.0)
#: What a calibration measures of a workload, in order.
PARTS = ("throughput", "startup", "contention")
CPU_PERIOD_US = 100_000
CALIBRATION_LABEL = "dlsched.calibration"
#: Units skipped before measuring: the first ones pay for lazy initialisation and warm caches.
WARMUP_UNITS = {"training": 5, "inference": 1}
#: Units a measuring window must hold before it may end, so that short windows still give a rate.
MIN_WINDOW_UNITS = 3
LOSS_CURVE_POINTS = 40
#: Seconds between CPU-time samples.
SAMPLE_EVERY_S = 1.0


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
            f"--threading {self.threading}"
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
    and loss curve), its start-up (:func:`measure_startup`), then its own contention curve
    against that throughput
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
                _measure_cleanly(client, spec, limit, host.cores, settings)
                for limit in settings.all_limits
            ]
            profile = build_profile(
                spec, runs, host, command, settings.duration_s, settings.threading
            )
        else:
            profile = _existing_profile(path, settings.threading)
        if "startup" in settings.parts:
            wait_until_quiet(client, settings.wait_quiet_s, settings.quiet_cores, settings.force)
            _set_startup(profile, measure_startup(client, spec, settings.threading))
        path.write_text(json.dumps(profile, indent=2) + "\n")
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
                bound_scale=bound_scale,
            )
            _set_derivation(
                profile,
                "contention_exponent",
                f"contention_exponent: {fitted.exponent:.4f} and contention_floor: "
                f"{fitted.floor:.4f}, fitted to {len(fitted.residuals)} cells of "
                f"{', '.join(str(n) for n in counts)} copies under free, equal and favoured "
                "limits against the throughput above (least squares of each job's log "
                "efficiency against the replay model's, f + (1 - f) R ** -a over the threads "
                "runnable beside it, a throttled job's exponent times the set's bound scale "
                f"{bound_scale:g}); "
                + "; ".join(residual.describe() for residual in fitted.residuals),
            )
            profile["contention_exponent"] = round(fitted.exponent, 4)
            profile["contention_floor"] = round(fitted.floor, 4)
            if fitted.beside_startup is not None:
                profile["efficiency_beside_startup"] = round(min(1.0, fitted.beside_startup), 3)
                _set_derivation(
                    profile,
                    "efficiency_beside_startup",
                    f"efficiency_beside_startup: {fitted.beside_startup:.3f}, one copy's "
                    "iterations per second (uncapped) while the next copies started beside it, "
                    "over the throughput above at the cores it used",
                )
            path.write_text(json.dumps(profile, indent=2) + "\n")
        print(f"wrote {path}", file=sys.stderr)
        written.append(path)
    return written


#: Longest seconds each co-location cell is measured over: a service answers a batch every few
#: seconds.
_EXPONENT_WINDOW_S = {"training": 15.0, "inference": 40.0}


def _existing_profile(path: Path, threading: Threading) -> dict[str, Any]:
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


def _set_startup(profile: dict[str, Any], startup: StartupMeasurement) -> None:
    profile["startup_s"] = significant(startup.startup_s, 3)
    profile["startup_cpu_s"] = significant(startup.startup_cpu_s, 3)
    _set_derivation(
        profile,
        "startup_s",
        "startup_s: median of "
        f"{len(startup.seconds)} uncapped starts from the engine's create call to the start "
        f"event ({', '.join(f'{x:.2f}' for x in startup.seconds)} s); startup_cpu_s: the "
        "container's CPU-seconds at the start event, median "
        f"({', '.join(f'{x:.2f}' for x in startup.cpu_seconds)})",
    )


def _set_derivation(profile: dict[str, Any], field: str, text: str) -> None:
    """Replace the provenance's account of ``field`` with ``text``."""
    provenance = profile["provenance"]
    kept = [
        part
        for part in provenance["derivation"].split("; ")
        if not part.startswith(f"{field}:")
        and not part.startswith(f"{field} ")
        and not (field == "startup_s" and part.startswith("startup_cpu_s:"))
        and not (field == "contention_exponent" and " jobs " in part and ": R " in part)
    ]
    provenance["derivation"] = "; ".join([*kept, text])


def _measure_cleanly(
    client: docker.DockerClient,
    spec: WorkloadSpec,
    limit: float,
    host_cores: int,
    settings: CalibrationSettings,
) -> LimitRun:
    """Measure ``spec`` at ``limit`` when the host is quiet, again if others interfered."""
    attempts: list[LimitRun] = []
    for _ in range(1 + max(0, settings.retries)):
        wait_until_quiet(client, settings.wait_quiet_s, settings.quiet_cores, settings.force)
        measured = measure_run(
            client, spec, limit, host_cores, settings.duration_s, settings.threading
        )
        attempts.append(_report(measured, spec))
        if attempts[-1].interference <= settings.quiet_cores:
            break
    cleanest = min(attempts, key=lambda attempt: attempt.interference)
    if cleanest.interference > settings.quiet_cores and not settings.force:
        raise HostBusyError(
            busy_message(
                f"during {spec.name} at limit {limit:g}, {_company(cleanest)} in the cleanest "
                f"of {len(attempts)} attempts",
                settings.quiet_cores,
            )
        )
    return cleanest


# --- measuring one run ---


@dataclass(frozen=True)
class HostDescription:
    """The machine the profiles are measured on.

    Attributes:
        name: host name.
        cpu_model: the processor, as ``/proc/cpuinfo`` names it.
        cores: cores the engine reports.
        engine: the engine's version.
    """

    name: str
    cpu_model: str
    cores: int
    engine: str

    @classmethod
    def of(cls, client: docker.DockerClient) -> HostDescription:
        info = client.info()
        return cls(
            name=socket.gethostname(),
            cpu_model=_cpu_model(),
            cores=int(info["NCPU"]),
            engine=str(info.get("ServerVersion", "unknown")),
        )

    def describe(self) -> str:
        return f"{self.name}: {self.cpu_model}, {self.cores} cores, Docker {self.engine}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown processor"


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU-seconds of a container, and of the whole host, at a Unix time.

    Attributes:
        time: Unix time of the sample.
        cpu_seconds: CPU-seconds the container has used.
        host_busy_seconds: CPU-seconds all the host's processes have used, ``None`` when the
            engine runs on another machine.
    """

    time: float
    cpu_seconds: float
    host_busy_seconds: float | None


@dataclass(frozen=True)
class LimitRun:
    """What one container, alone at one CPU limit, measured.

    Attributes:
        limit: the limit, as a fraction of the host's cores (1 = uncapped).
        quota_cores: the quota in cores, ``None`` uncapped.
        cpu_cores: mean cores used over the measuring window.
        window_s: length of the measuring window.
        completions: Unix times of the unit completions inside the window.
        unit_durations_s: durations of those units (batch latency, or iteration spacing).
        startup_s: container start to the workload's start event.
        losses: ``(iteration, loss)`` of every iteration the run reported (training).
        threads: torch threads the workload used.
        other_containers: other containers running on the engine at the start or the end of
            the run (0 for a clean measurement).
        other_cores: mean cores the host's other processes used during the window (``None``
            when the engine runs on another machine).
    """

    limit: float
    quota_cores: float | None
    cpu_cores: float
    window_s: float
    completions: tuple[float, ...]
    unit_durations_s: tuple[float, ...]
    startup_s: float
    losses: tuple[tuple[int, float], ...]
    threads: int
    other_containers: int
    other_cores: float | None

    @property
    def interference(self) -> float:
        """Cores others used during the run (a container counts as a whole core)."""
        return (self.other_cores or 0.0) + self.other_containers

    @property
    def units_per_s(self) -> float:
        """Units per second: completions over the time between the first and the last."""
        span = self.completions[-1] - self.completions[0]
        return (len(self.completions) - 1) / span


class _EventLog:
    """Follows a container's stdout in a thread and keeps the workload events it prints."""

    def __init__(self, container: Container) -> None:
        self._stream = container.logs(stdout=True, stderr=False, stream=True, follow=True)
        self._reader = JsonLineReader()
        self._lock = threading.Lock()
        self._events: list[WorkloadEvent] = []
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            for chunk in self._stream:
                self._keep(self._reader.feed(chunk))
        except Exception:  # a torn-down stream ends the log as an exit does
            pass
        finally:
            self._keep(self._reader.finish())
            self.ended.set()

    def _keep(self, events: list[WorkloadEvent]) -> None:
        with self._lock:
            self._events.extend(events)

    def events(self) -> list[WorkloadEvent]:
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        self._stream.close()


def _units(events: Sequence[WorkloadEvent]) -> list[IterationEvent | BatchEvent]:
    return [event for event in events if isinstance(event, IterationEvent | BatchEvent)]


def measure_run(
    client: docker.DockerClient,
    spec: WorkloadSpec,
    limit: float,
    host_cores: int,
    duration_s: float,
    threading: Threading = "tuned",
) -> LimitRun:
    """Run ``spec`` alone at ``limit`` with ``threading`` and measure it.

    A capped run measures ``duration_s`` seconds after its warm-up units (longer if it has not
    completed :data:`MIN_WINDOW_UNITS` units by then); the uncapped run of a training workload
    trains its whole default job, so that its losses cover every iteration.

    Raises:
        BackendError: the container failed, or completed too few units to give a rate.
    """
    quota_us = None if limit >= 1 else max(1000, round(limit * host_cores * CPU_PERIOD_US))
    to_completion = limit >= 1 and spec.kind == "training"
    with _calibration_container(client, spec, quota_us, threading) as container:
        others_before = other_running_containers(client, own=1)
        log = _EventLog(container)
        try:
            samples = _follow_run(client, container, log, spec, duration_s, to_completion)
        finally:
            log.close()
        others = max(others_before, other_running_containers(client, own=1))
        container.reload()
        started_at = _parse_engine_time(container.attrs["State"]["StartedAt"])
        events = log.events()
    return _summarise(spec, limit, quota_us, samples, events, started_at, others, duration_s)


@contextmanager
def _calibration_container(
    client: docker.DockerClient, spec: WorkloadSpec, quota_us: int | None, threading: Threading
) -> Iterator[Container]:
    """A running container of ``spec``, removed (killed if needed) when the block ends."""
    iterations = spec.iterations if spec.kind == "training" else None
    command = ["python", "-m", "dlsched_workloads", spec.name, "--threading", threading]
    if iterations is not None:
        command += ["--iterations", str(iterations)]
    try:
        container = client.containers.run(
            IMAGE_TAG,
            command,
            detach=True,
            labels={
                MANAGED_LABEL: "1",
                CALIBRATION_LABEL: spec.name,
                **ProcessOwner.current().as_labels(LABEL_OWNER),
            },
            cpu_period=CPU_PERIOD_US if quota_us is not None else None,
            cpu_quota=quota_us,
            network_mode="none",
        )
    except docker.errors.APIError as error:
        raise BackendError(f"the engine could not start {spec.name}: {error}") from error
    try:
        yield container
    finally:
        with suppress(docker.errors.NotFound):
            container.remove(force=True)


@dataclass(frozen=True)
class StartupMeasurement:
    """A workload's start-up, measured from the engine's create call to its first unit.

    Attributes:
        seconds: each repetition's start-up time (the ``containers.run`` call to the
            workload's start event: the engine's create and start, the interpreter, torch,
            the data and the model).
        cpu_seconds: the CPU the container used meanwhile, each repetition.
    """

    seconds: tuple[float, ...]
    cpu_seconds: tuple[float, ...]

    @property
    def startup_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def startup_cpu_s(self) -> float:
        return statistics.median(self.cpu_seconds)


#: Seconds between CPU samples while a container starts (start-up takes one or two seconds).
_STARTUP_SAMPLE_S = 0.02


def measure_startup(
    client: docker.DockerClient, spec: WorkloadSpec, threading: Threading, repeats: int = 3
) -> StartupMeasurement:
    """Start ``spec`` uncapped ``repeats`` times; its start-up time and CPU, each time.

    The CPU at the start event is interpolated between the cgroup samples around it.

    Raises:
        BackendError: the workload reported no start event, or its cgroup cannot be read here
            (start-up CPU needs the engine on this host).
    """
    seconds, cpu = [], []
    for _ in range(max(1, repeats)):
        called = time.time()
        with _calibration_container(client, spec, None, threading) as container:
            container.reload()
            usage = find_cpu_usage_file(container.id, container.attrs["State"].get("Pid"))
            if usage is None:
                raise BackendError(
                    "start-up CPU is read from the container's cgroup, which this host cannot "
                    "see (the engine runs elsewhere); calibrate on the engine's host"
                )
            log = _EventLog(container)
            try:
                samples = _sample_until_start(usage, log, spec)
            finally:
                log.close()
        start = next(event for event in log.events() if isinstance(event, StartEvent))
        times, used = zip(*samples, strict=True)
        seconds.append(start.time - called)
        cpu.append(float(np.interp(start.time, times, used)))
    return StartupMeasurement(tuple(seconds), tuple(cpu))


def _sample_until_start(
    usage: CpuUsageFile, log: _EventLog, spec: WorkloadSpec
) -> list[tuple[float, float]]:
    """``(time, CPU-seconds)`` of the container until just after its start event."""
    deadline = time.time() + 300
    samples: list[tuple[float, float]] = []
    started = False
    while time.time() < deadline:
        seconds = usage.read_seconds()
        if seconds is not None:
            samples.append((time.time(), seconds))
        if started:
            return samples
        started = any(isinstance(event, StartEvent) for event in log.events())
        if log.ended.is_set() and not started:
            break
        time.sleep(_STARTUP_SAMPLE_S)
    raise BackendError(
        f"{spec.name} reported no start event within 300 s (did it fail? run `python -m "
        f"dlsched_workloads {spec.name}` in the image)"
    )


def _follow_run(
    client: docker.DockerClient,
    container: Container,
    log: _EventLog,
    spec: WorkloadSpec,
    duration_s: float,
    to_completion: bool,
) -> list[CpuSample]:
    """Sample the container's CPU time until its measuring window is over; the samples.

    The first sample is taken once the warm-up units are done; sampling stops when the window
    is over or the workload ends.
    """
    container.reload()
    usage_file = find_cpu_usage_file(container.id, container.attrs["State"].get("Pid"))
    warmup = WARMUP_UNITS[spec.kind]
    # Generous for the slowest unit at the smallest limit; a run still going after this is stuck.
    deadline = time.time() + 600 + 20 * duration_s
    samples: list[CpuSample] = []
    while time.time() < deadline:
        events = log.events()
        units = _units(events)
        finished = any(isinstance(event, DoneEvent) for event in events) or log.ended.is_set()
        if len(units) >= warmup or samples:
            sample = _cpu_sample(client, container, usage_file)
            if sample is not None:
                samples.append(sample)
        if finished:
            break
        if samples and not to_completion:
            in_window = [unit for unit in units if unit.time >= samples[0].time]
            elapsed = samples[-1].time - samples[0].time
            if elapsed >= duration_s and len(in_window) >= MIN_WINDOW_UNITS:
                break
        log.ended.wait(SAMPLE_EVERY_S)
    else:
        raise BackendError(
            f"{spec.name} made too little progress within {600 + 20 * duration_s:.0f} s; "
            "check `docker logs` of a manual run, or calibrate at larger limits"
        )
    return samples


def _cpu_sample(
    client: docker.DockerClient, container: Container, usage_file: CpuUsageFile | None
) -> CpuSample | None:
    """The container's CPU time now, or ``None`` once it has exited."""
    if usage_file is not None:
        now = time.time()
        seconds = usage_file.read_seconds()
        return None if seconds is None else CpuSample(now, seconds, host_busy_seconds())
    try:
        stats = client.api.stats(container.id, stream=False, one_shot=True)
    except docker.errors.APIError:
        return None
    total = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage")
    if not total:
        return None
    return CpuSample(_parse_engine_time(stats["read"]), total / 1e9, None)


_ENGINE_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def _parse_engine_time(text: str) -> float:
    """Unix time of an engine timestamp (RFC 3339 with up to nanoseconds)."""
    match = _ENGINE_TIME.match(text)
    if match is None:
        raise BackendError(f"the engine gave the time {text!r}, not an RFC 3339 timestamp")
    whole, fraction, zone = match.groups()
    stamp = dt.datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return stamp.timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


def _summarise(
    spec: WorkloadSpec,
    limit: float,
    quota_us: int | None,
    samples: list[CpuSample],
    events: list[WorkloadEvent],
    started_at: float,
    other_containers: int,
    duration_s: float,
) -> LimitRun:
    """Turn one run's samples and events into a :class:`LimitRun`."""
    start = next((event for event in events if isinstance(event, StartEvent)), None)
    units = _units(events)
    if start is None or len(samples) < 2:
        raise BackendError(
            f"{spec.name} at limit {limit:g} reported {len(units)} units and no measuring "
            f"window (did it fail? run `python -m dlsched_workloads {spec.name}` in the image)"
        )
    first, last = samples[0], samples[-1]
    window = [unit for unit in units if first.time <= unit.time <= last.time]
    if len(window) < 2:
        raise BackendError(
            f"{spec.name} at limit {limit:g} completed {len(window)} unit(s) in its measuring "
            f"window of {last.time - first.time:.0f} s; give a longer --duration than "
            f"{duration_s:g}"
        )
    span = last.time - first.time
    used = last.cpu_seconds - first.cpu_seconds
    other_cores = None
    if first.host_busy_seconds is not None and last.host_busy_seconds is not None:
        other_cores = max(0.0, (last.host_busy_seconds - first.host_busy_seconds - used) / span)
    if spec.kind == "inference":
        durations = [unit.latency_s for unit in window if isinstance(unit, BatchEvent)]
    else:
        durations = list(np.diff([unit.time for unit in window]))
    return LimitRun(
        limit=limit,
        quota_cores=None if quota_us is None else quota_us / CPU_PERIOD_US,
        cpu_cores=used / span,
        window_s=span,
        completions=tuple(unit.time for unit in window),
        unit_durations_s=tuple(float(duration) for duration in durations),
        startup_s=start.time - started_at,
        losses=tuple(
            (event.iteration, event.loss)
            for event in units
            if isinstance(event, IterationEvent) and math.isfinite(event.loss)
        ),
        threads=window[-1].threads,
        other_containers=other_containers,
        other_cores=other_cores,
    )


def _report(run: LimitRun, spec: WorkloadSpec) -> LimitRun:
    cores = "uncapped" if run.quota_cores is None else f"{run.quota_cores:.2f} cores"
    print(
        f"{spec.name} at limit {run.limit:g} ({cores}, {run.threads} threads): "
        f"{run.units_per_s:.4g} {plural(spec.unit)}/s, {run.cpu_cores:.2f} cores used, "
        f"{len(run.completions)} {plural(spec.unit)} in {run.window_s:.0f} s; {_company(run)}",
        file=sys.stderr,
    )
    return run


# --- the profile ---


def _company(run: LimitRun) -> str:
    others = "unknown" if run.other_cores is None else f"{run.other_cores:.2f}"
    return f"other processes used {others} cores, {run.other_containers} other container(s)"


def plural(unit: str) -> str:
    """A unit's plural (``batches``, ``iterations``), as reports print rates."""
    return "batches" if unit == "batch" else f"{unit}s"


def significant(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits, as profiles store their numbers."""
    return float(f"{value:.{digits}g}")


def demand_cores(runs: Sequence[LimitRun]) -> float:
    """The most cores the workload was seen to use: the uncapped run's usage when it had the
    host to itself; a capped run that used more (other processes held the uncapped one back)
    shows that the workload can use at least that much."""
    return max(run.cpu_cores for run in runs)


def throughput_points(runs: Sequence[LimitRun]) -> list[tuple[float, float]]:
    """``(cores, units per second)`` sorted by cores, one point per distinct CPU allowance.

    A run's cores are the CPU it got: the mean cores it used over its window (its quota when
    alone and CPU-bound; less if other processes took some). The last point is thus at
    :func:`demand_cores`. Runs at the same cores (within 1 %) are averaged. Rates that fall
    where cores rise (noise between nearby allowances, or a contended run) are pooled with
    their neighbours until they do not (pool-adjacent-violators): more CPU never slows a job.
    """
    merged: list[tuple[float, list[float]]] = []
    for run in sorted(runs, key=lambda item: item.cpu_cores):
        if merged and abs(merged[-1][0] - run.cpu_cores) <= 0.01 * run.cpu_cores:
            # The larger allowance names the point, so the last one stays at the demand.
            merged[-1] = (run.cpu_cores, [*merged[-1][1], run.units_per_s])
        else:
            merged.append((run.cpu_cores, [run.units_per_s]))
    rates = monotone_rates([statistics.mean(rates) for _, rates in merged])
    return [(cores, rate) for (cores, _), rate in zip(merged, rates, strict=True)]


def monotone_rates(rates: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence to ``rates`` (least squares, equal weights)."""
    blocks: list[tuple[float, int]] = []  # (mean, size) of pooled runs of values
    for rate in rates:
        blocks.append((rate, 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (low_mean, low_size), (high_mean, high_size) = blocks[-2], blocks[-1]
            size = low_size + high_size
            blocks[-2:] = [((low_mean * low_size + high_mean * high_size) / size, size)]
    return [mean for mean, size in blocks for _ in range(size)]


def loss_curve(
    losses: Sequence[tuple[int, float]], points: int = LOSS_CURVE_POINTS
) -> list[tuple[int, float]]:
    """Loss against iterations done: mean minibatch losses over geometrically growing bins.

    Iteration ``k`` reports the loss of its minibatch before its update, that is the loss of
    the model after ``k - 1`` iterations; so the first reported loss (initial weights) sits at
    0 iterations done. Bins grow geometrically, so the fast early fall keeps its shape while
    the long tail is averaged over many iterations.

    Args:
        losses: ``(iteration, loss)`` as the workload reported them.
        points: at most this many points (fewer where bins would repeat an iteration).
    """
    if not losses:
        return []
    done = np.array([iteration - 1 for iteration, _ in losses], dtype=float)
    values = np.array([loss for _, loss in losses], dtype=float)
    edges = np.unique(np.round(np.geomspace(1, done.max() + 2, points + 1))) - 1
    curve: list[tuple[int, float]] = []
    for low, high in itertools.pairwise(edges.tolist()):
        in_bin = (done >= low) & (done < high)
        if in_bin.any():
            iteration = round(float(done[in_bin].mean()))
            if not curve or iteration > curve[-1][0]:
                curve.append((iteration, float(values[in_bin].mean())))
    return curve


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
        lines.append(
            f"limit {run.limit:g} ({cores}, {run.threads} threads): "
            f"{len(run.completions)} {unit} in {run.window_s:.1f} s -> "
            f"{run.units_per_s:.4g} {unit}/s (residual {run.units_per_s - fitted:+.3g}), "
            f"{run.cpu_cores:.3f} cores used; " + _company(run)
        )
    return "; ".join(lines)
