"""What the Docker backend knows of each job of an episode, and the telemetry that says.

A placed job is a :class:`Job`: its spec, where it runs, the limit in force (read back at every
measurement) and the one the backend set, and its state. Each container it ran in (a migrated job
has had several, one after another) is a :class:`Run`, with the job's output and CPU readings
from that container; :meth:`Job.write` merges them into the job's column of the episode's
arrays, what the backend reports.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from dlsched.envs.docker.cgroup import (
    NO_THROTTLING,
    CfsLimit,
    CfsThrottling,
    CpuLimitFiles,
    CpuUsageFile,
    ProcessStat,
)
from dlsched.envs.docker.container_output import ContainerOutput, Progress
from dlsched.envs.episode_batch import JobArrays
from dlsched.envs.progress_trace import MAX_TRACE_EVENTS, ProgressTrace
from dlsched.envs.scenarios.model import JobKind, JobSpec
from dlsched.envs.telemetry import JobState
from dlsched.envs.workloads.catalog import WORKLOADS


@dataclass
class Run:
    """One container of a job (a migrated job has had several, one after another)."""

    container_id: str
    name: str
    worker: int
    started_s: float  # episode time at which it was started
    output: ContainerOutput
    cpu_file: CpuUsageFile | None  # None: measured through the engine's statistics
    limit_files: CpuLimitFiles | None  # None: the limit in force read through the engine
    process: ProcessStat | None  # None: a stop by signal cannot be seen from this host
    # CPU readings are timed by the clock of their source: episode seconds for cgroup files,
    # the engine's Unix time for its statistics (a remote engine's clock may be off ours, but
    # differences between its own timestamps are right).
    window_start_at: float  # when the current usage window began (at start: the start)
    window_start_cpu: float = 0.0
    cpu_seconds: float = 0.0  # the last reading
    cpu_usage: float = 0.0  # cores, over the last window that was long enough
    stopped: bool = False  # paused or stopped at the last measurement (an incident said so)
    # The CFS counters count from the cgroup's creation: the first window starts at zero.
    window_start_throttling: CfsThrottling = NO_THROTTLING
    throttling: CfsThrottling | None = None  # the last reading; None: never read
    throttle_ratio: float | None = None  # over the last window that was long enough

    @property
    def read_from_files(self) -> bool:
        """Whether its CPU time and limit are both read from this host's cgroup files."""
        return self.cpu_file is not None and self.limit_files is not None

    def record(
        self,
        seconds: float,
        at: float,
        min_window_s: float,
        throttling: CfsThrottling | None = None,
    ) -> None:
        """Take a reading of cumulative CPU-seconds (and of the CFS counters, where read) at
        time ``at`` (the source's clock); the throttle ratio is taken over the same window as
        the usage."""
        self.cpu_seconds = max(seconds, self.cpu_seconds)
        if throttling is not None:
            self.throttling = throttling
        span = at - self.window_start_at
        if span >= min_window_s:
            self.cpu_usage = (self.cpu_seconds - self.window_start_cpu) / span
            self.window_start_at, self.window_start_cpu = at, self.cpu_seconds
            if self.throttling is None:
                self.throttle_ratio = None
            else:
                self.throttle_ratio = self.throttling.ratio_since(self.window_start_throttling)
                self.window_start_throttling = self.throttling


@dataclass
class Job:
    """What the backend knows of one placed job."""

    spec: JobSpec
    worker: int
    slot: int
    limit: float  # the fraction of the worker ``in_force`` amounts to
    # The CFS limit in force, read back at every measurement: an update is skipped only when
    # it equals this, and one that differs from ``applied`` was set by another process.
    in_force: CfsLimit
    applied: CfsLimit  # the one the backend last set, as read back then
    runs: list[Run] = field(default_factory=list)
    state: JobState = JobState.RUNNING
    completed_s: float | None = None

    @property
    def run(self) -> Run:
        return self.runs[-1]

    @property
    def cpu_seconds(self) -> float:
        return sum(run.cpu_seconds for run in self.runs)

    @property
    def cpu_usage(self) -> float:
        return self.run.cpu_usage if self.state is JobState.RUNNING else 0.0

    @property
    def throttle_ratio(self) -> float | None:
        """The throttle ratio of its running container under the quota in force (``None``
        without a quota, or once it stopped running)."""
        if self.state is not JobState.RUNNING or self.in_force.cores is None:
            return None
        return self.run.throttle_ratio

    def write(self, arrays: JobArrays, column: int) -> None:
        """Write what the job reports now (where it runs, its limit, its CPU, its throttle ratio
        and its progress over all its runs) into its ``column`` of a one-episode batch's
        ``arrays``; its phase is the batch's to write."""
        latest = _latest(run.output.progress() for run in self.runs)
        training = self.spec.kind is JobKind.TRAINING
        at = (0, column)
        arrays.worker[at] = self.worker
        arrays.slot[at] = self.slot
        arrays.limit[at] = self.limit
        arrays.cpu_seconds[at] = self.cpu_seconds
        arrays.usage[at] = self.cpu_usage
        arrays.units[at] = latest.iterations if training else latest.batches
        arrays.latency[at] = _number(latest.latency_s)
        arrays.loss[at] = _number(latest.loss)
        arrays.completed[at] = _number(self.completed_s)
        arrays.total[at] = total_iterations(self.spec) or 0
        arrays.throttle_ratio[at] = _number(self.throttle_ratio)

    def progress_trace(self, epoch_start: float) -> ProgressTrace:
        """Every iteration or batch the job's containers reported, one after another, in
        episode seconds (``epoch_start``: the Unix time the episode began)."""
        times, counts, dropped = [], [], False
        for run in self.runs:
            run_times, run_counts, run_dropped = run.output.events()
            times.append(np.frombuffer(run_times, dtype=np.float64))
            counts.append(np.frombuffer(run_counts, dtype=np.int64))
            dropped = dropped or run_dropped
        every_time = np.concatenate(times) if times else np.zeros(0)
        every_count = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
        return ProgressTrace(
            job_id=self.spec.job_id,
            unit="iteration" if self.spec.kind is JobKind.TRAINING else "batch",
            times_s=every_time[:MAX_TRACE_EVENTS] - epoch_start,
            counts=every_count[:MAX_TRACE_EVENTS],
            truncated=dropped or len(every_time) > MAX_TRACE_EVENTS,
        )


def total_iterations(job: JobSpec) -> int | None:
    """The iterations a training job runs: its own, or its workload's default."""
    if job.kind is not JobKind.TRAINING:
        return None
    return job.iterations if job.iterations is not None else WORKLOADS[job.workload].iterations


def _latest(progress: Iterable[Progress]) -> Progress:
    """One progress from a job's runs: the newest measurement of each kind."""
    merged = Progress()
    for item in progress:
        merged = dataclasses.replace(
            merged,
            iterations=max(merged.iterations, item.iterations),
            batches=max(merged.batches, item.batches),
            loss=item.loss if item.loss is not None else merged.loss,
            latency_s=item.latency_s if item.latency_s is not None else merged.latency_s,
            total_iterations=item.total_iterations or merged.total_iterations,
        )
    return merged


def _number(value: float | None) -> float:
    """An array's value of a measurement: NaN for none yet."""
    return math.nan if value is None else value
