"""The typed telemetry snapshot: what can be measured from outside a container, in raw units.

Backends produce it, environments pass it in ``info["telemetry"]``, baselines read it. It carries
nothing a real Docker host could not measure: CPU usage, the limit in force, the progress a job
prints (iteration and loss, or batch latency) and its age.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dlsched.envs.scenarios.model import JobKind, JobSpec


class JobState(StrEnum):
    """Life cycle of a job, as seen from outside its container."""

    WAITING = "waiting"  # arrived, no free slot yet
    RUNNING = "running"
    MIGRATING = "migrating"  # paused while it moves to another worker
    DONE = "done"  # training finished its iterations
    FAILED = "failed"  # its container died


class QoEClass(StrEnum):
    """DQoES's sets (journal, Section IV-A): G outperforms, S satisfied, B underperforms."""

    G = "G"
    S = "S"
    B = "B"


@dataclass(frozen=True)
class JobTelemetry:
    """What is measured of one job.

    Attributes:
        job_id: the job's id in the episode (``j00``...).
        workload: the workload it runs.
        kind: training or inference.
        state: where it is in its life cycle.
        worker: the worker it runs on, ``None`` while waiting.
        slot: its slot on that worker, ``None`` while waiting.
        arrival_s: when it arrived (seconds since the episode start).
        age_s: seconds since it arrived.
        limit: the CPU limit in force, as a fraction of its worker's cores (1 = uncapped).
        cpu_usage: mean cores it used over the last interval.
        cpu_seconds: CPU-seconds it used since it arrived.
        target_s: inference latency target ``o_i``; ``None`` for training.
        tolerance: the satisfaction tolerance ``alpha``.
        batches: inference batches completed.
        latency_s: latency of the last completed batch; ``None`` before the first one.
        iterations: training iterations completed.
        total_iterations: the iterations a training job runs; ``None`` for inference.
        loss: the last loss the job reported; ``None`` before its first iteration.
        completed_s: when a training job finished (seconds since the episode start).
        loss_targets: TRADL's two-tier loss targets, if the scenario sets them.
        throttle_ratio: the fraction of the CPU quota's periods (CFS periods) in the last
            interval in which the job used its whole quota and waited; ``None`` where it was not
            measured (no quota in force, or a backend that does not measure it).
    """

    job_id: str
    workload: str
    kind: JobKind
    state: JobState
    worker: int | None
    slot: int | None
    arrival_s: float
    age_s: float
    limit: float
    cpu_usage: float
    cpu_seconds: float
    target_s: float | None = None
    tolerance: float = 0.1
    batches: int = 0
    latency_s: float | None = None
    iterations: int = 0
    total_iterations: int | None = None
    loss: float | None = None
    completed_s: float | None = None
    loss_targets: tuple[float, float] | None = None
    throttle_ratio: float | None = None

    @property
    def active(self) -> bool:
        """Whether the job holds a slot and still competes for CPU."""
        return self.state in (JobState.RUNNING, JobState.MIGRATING)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> JobTelemetry:
        """The measurement whose fields are ``fields``, every one of them, by name.

        Equal to ``JobTelemetry(**fields)`` but built without a frozen dataclass's generated
        ``__init__`` (one ``object.__setattr__`` per field), which costs a backend more than the
        rest of a job's measurement, every job every step. The caller gives every field, in the
        class's order, in a dict of its own: it becomes the object's attributes, not copied.
        """
        job = object.__new__(cls)
        object.__setattr__(job, "__dict__", fields)
        return job

    def with_cpu_usage(self, cpu_usage: float) -> JobTelemetry:
        """This measurement with ``cpu_usage`` in place of its own.

        ``dataclasses.replace(self, cpu_usage=...)`` gives the same object; this copies the
        fields instead of re-running a frozen dataclass's ``__init__`` (one ``object.__setattr__``
        per field), as the environments do for every job every step.
        """
        copy = object.__new__(JobTelemetry)
        fields = copy.__dict__
        fields.update(self.__dict__)
        fields["cpu_usage"] = cpu_usage
        return copy

    @property
    def quality_s(self) -> float | None:
        """DQoES's ``q_i = o_i - p_i`` (target minus latency), ``None`` without a measurement."""
        if self.target_s is None or self.latency_s is None:
            return None
        return self.target_s - self.latency_s

    @property
    def qoe_class(self) -> QoEClass | None:
        """G, S or B by DQoES's rule with this job's tolerance; ``None`` without a measurement."""
        quality = self.quality_s
        if quality is None or self.target_s is None:
            return None
        band = self.tolerance * self.target_s
        if quality > band:
            return QoEClass.G
        if quality < -band:
            return QoEClass.B
        return QoEClass.S


@dataclass(frozen=True)
class WorkerTelemetry:
    """One worker as measured: its cores and the CPU its jobs used over the last interval."""

    index: int
    cores: float
    cpu_usage: float


@dataclass(frozen=True)
class Telemetry:
    """A snapshot of a host or cluster at ``time_s``.

    ``jobs`` holds every job that has arrived, finished and failed ones included, in arrival
    order; jobs yet to arrive are not there (a scheduler cannot see the future).
    """

    time_s: float
    interval_s: float
    workers: tuple[WorkerTelemetry, ...]
    jobs: tuple[JobTelemetry, ...]

    @functools.cached_property
    def active_jobs(self) -> tuple[JobTelemetry, ...]:
        """The jobs that hold a slot (running or migrating), in arrival order.

        Computed once per snapshot (the reward, the observation and the info all read it).
        """
        return tuple(job for job in self.jobs if job.active)

    def job(self, job_id: str) -> JobTelemetry:
        for job in self.jobs:
            if job.job_id == job_id:
                return job
        raise KeyError(job_id)

    def on_worker(self, worker: int) -> tuple[JobTelemetry, ...]:
        """The active jobs of one worker."""
        return tuple(job for job in self.active_jobs if job.worker == worker)

    @functools.cached_property
    def qoe_classes(self) -> tuple[QoEClass | None, ...]:
        """Each active job's ``qoe_class``, in ``active_jobs``' order.

        Computed once per snapshot: the reward, the observation and the info all read them.
        """
        return tuple(job.qoe_class for job in self.active_jobs)

    def count(self, qoe_class: QoEClass) -> int:
        """How many active inference jobs are in a DQoES set."""
        return sum(1 for job_class in self.qoe_classes if job_class is qoe_class)


def measurement_template(job: JobSpec) -> dict[str, Any]:
    """Every field of ``job``'s :class:`JobTelemetry`, in the class's order (see
    :meth:`JobTelemetry.from_fields`): those that stay the same all episode, and placeholders for
    those a measurement sets (its state, where it runs, its age, limit, CPU and progress), so
    that a measurement copies one dict rather than building one, every job every step."""
    return {
        "job_id": job.job_id,
        "workload": job.workload,
        "kind": job.kind,
        "state": JobState.RUNNING,
        "worker": None,
        "slot": None,
        "arrival_s": job.arrival_s,
        "age_s": 0.0,
        "limit": 1.0,
        "cpu_usage": 0.0,
        "cpu_seconds": 0.0,
        "target_s": job.target_s,
        "tolerance": job.tolerance,
        "batches": 0,
        "latency_s": None,
        "iterations": 0,
        "total_iterations": None,
        "loss": None,
        "completed_s": None,
        "loss_targets": job.loss_targets,
        "throttle_ratio": None,
    }


def waiting_job(job: JobSpec, now_s: float) -> JobTelemetry:
    """The telemetry of ``job``, arrived and waiting for a slot at ``now_s``."""
    return JobTelemetry(
        job_id=job.job_id,
        workload=job.workload,
        kind=job.kind,
        state=JobState.WAITING,
        worker=None,
        slot=None,
        arrival_s=job.arrival_s,
        age_s=now_s - job.arrival_s,
        limit=1.0,
        cpu_usage=0.0,
        cpu_seconds=0.0,
        target_s=job.target_s,
        tolerance=job.tolerance,
        total_iterations=job.iterations,
        loss_targets=job.loss_targets,
    )
