"""Telemetry of made-up jobs, for the tests of the policies and rewards that read it.

A test names what matters to it and leaves the rest at the defaults here: a job ``j<slot>``
that arrived at time 0 and runs uncapped on worker 0, having used no CPU yet.
"""

from __future__ import annotations

from typing import Any

from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry, WorkerTelemetry


def inference_job(job_id: str, **fields: Any) -> JobTelemetry:
    """The telemetry of service ``job_id``, a resnet50; ``fields`` set the rest of
    :class:`JobTelemetry` (``target_s``, ``latency_s``, ...)."""
    return _job(job_id, "resnet50", JobKind.INFERENCE, fields)


def training_job(job_id: str, **fields: Any) -> JobTelemetry:
    """The telemetry of training ``job_id``, a vae; ``fields`` set the rest of
    :class:`JobTelemetry` (``loss``, ``iterations``, ...)."""
    return _job(job_id, "vae", JobKind.TRAINING, fields)


def _job(job_id: str, workload: str, kind: JobKind, fields: dict[str, Any]) -> JobTelemetry:
    defaults: dict[str, Any] = {
        "state": JobState.RUNNING,
        "worker": 0,
        "slot": int(job_id[1:]),
        "arrival_s": 0.0,
        "age_s": 0.0,
        "limit": 1.0,
        "cpu_usage": 0.0,
        "cpu_seconds": 0.0,
    }
    return JobTelemetry(job_id=job_id, workload=workload, kind=kind, **(defaults | fields))


def snapshot(time_s: float, *jobs: JobTelemetry, cores: float = 8.0) -> Telemetry:
    """The telemetry at ``time_s`` of ``jobs`` on one worker of ``cores`` cores, 10 s a step;
    the worker's usage is the sum of theirs."""
    return Telemetry(
        time_s=time_s,
        interval_s=10.0,
        workers=(WorkerTelemetry(0, cores, sum(j.cpu_usage for j in jobs)),),
        jobs=jobs,
    )
