"""Calibration's measurement protocol: one workload alone in a container of the image on the host.

:func:`measure_run` runs a workload alone at one CPU limit, its thread pool sized as a real host
sizes it (``tuned`` or ``stock`` threading, :mod:`dlsched.envs.workloads.cpu_quota`), skips its
warm-up units (:data:`WARMUP_UNITS`), then samples its CPU time while it completes units; the
result is a :class:`LimitRun`. :func:`measure_startup` starts a workload uncapped a few times and
times its start-up (a :class:`StartupMeasurement`). :class:`HostDescription` is the machine they
run on.

CPU time comes from the container's cgroup file when the engine runs on this host and from the
engine's one-shot statistics otherwise; the CPU other processes used during a run is read from
``/proc/stat`` (:mod:`.quiet_host`), so that a run that had company can be told apart.
Containers carry ``dlsched.managed=1`` and the labels of their owner process, as the Docker
backend's do (so that ``dlsched docker cleanup`` leaves a running calibration's containers
alone); they are removed after their run, also on interruption.

Waiting for a quiet host and measuring again is :mod:`.calibration`'s; turning runs into a
profile is :mod:`.calibration_fit`'s and :mod:`.calibration_profile`'s.
"""

from __future__ import annotations

import datetime as dt
import math
import platform
import re
import socket
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import numpy as np
from docker.models.containers import Container

from dlsched.envs.docker.cgroup import CpuUsageFile, find_cpu_usage_file, stats_cpu_seconds
from dlsched.envs.docker.container_output import JsonLineReader
from dlsched.envs.docker.containers import LABEL_OWNER
from dlsched.envs.docker.image import IMAGE_TAG, MANAGED_LABEL
from dlsched.envs.docker.sandbox import DEFAULT_LIMITS, WORKLOAD_USER, least_privilege
from dlsched.envs.errors import BackendError
from dlsched.envs.owner import ProcessOwner
from dlsched.envs.workloads.catalog import WorkloadSpec
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.envs.workloads.events import (
    BatchEvent,
    DoneEvent,
    IterationEvent,
    StartEvent,
    WorkloadEvent,
)
from dlsched.runs.fidelity.quiet_host import host_busy_seconds, other_running_containers

CPU_PERIOD_US = 100_000
CALIBRATION_LABEL = "dlsched.calibration"
#: Units skipped before measuring: the first ones pay for lazy initialisation and warm caches.
WARMUP_UNITS = {"training": 5, "inference": 1}
#: Units a measuring window must hold before it may end, so that short windows still give a rate.
MIN_WINDOW_UNITS = 3
#: Iterations a capped training run is started with: more than any window measures (the
#: fastest workload, mlp-digits, makes about 50 a second uncapped).
_CAPPED_ITERATIONS = 1_000_000
#: Seconds between CPU-time samples.
SAMPLE_EVERY_S = 1.0


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

    def company(self) -> str:
        """Who else used the host during the run, as reports print it."""
        others = "unknown" if self.other_cores is None else f"{self.other_cores:.2f}"
        return f"other processes used {others} cores, {self.other_containers} other container(s)"


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
    # A capped training is stopped when its window ends: its job must not end first, however
    # long the window (a run measured again, longer, where its rate was not precise enough).
    iterations = spec.iterations if to_completion else _CAPPED_ITERATIONS
    with _calibration_container(client, spec, quota_us, threading, iterations) as container:
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


@contextmanager
def _calibration_container(
    client: docker.DockerClient,
    spec: WorkloadSpec,
    quota_us: int | None,
    threading: Threading,
    iterations: int | None,
) -> Iterator[Container]:
    """A running container of ``spec`` (a training of ``iterations``), removed (killed if
    needed) when the block ends; confined as the Docker backend's are, with the default limits
    (:mod:`dlsched.envs.docker.sandbox`), so that a profile measures the workload as it runs
    there."""
    command = ["python", "-m", "dlsched_workloads", spec.name, "--threading", threading]
    if spec.kind == "training" and iterations is not None:
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
            user=WORKLOAD_USER,
            **least_privilege(DEFAULT_LIMITS),
        )
    except docker.errors.APIError as error:
        raise BackendError(f"the engine could not start {spec.name}: {error}") from error
    try:
        yield container
    finally:
        with suppress(docker.errors.NotFound):
            container.remove(force=True)


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
    seconds = stats_cpu_seconds(stats)
    return None if seconds is None else CpuSample(_parse_engine_time(stats["read"]), seconds, None)


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
        with _calibration_container(client, spec, None, threading, spec.iterations) as container:
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
