"""The observation layout: one row per slot, one normalised column per feature.

Every feature is computed from telemetry alone and lies in ``[0, 1]``. The layout (feature
names, workers, slots) is part of a trained model's contract: a model refuses an environment
whose :class:`ObservationLayout` differs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from dlsched.envs.telemetry import JobState, QoEClass, Telemetry

FEATURES: tuple[str, ...] = (
    "active",  # a running or migrating job holds the slot
    "migrating",
    "limit",  # CPU limit in force, fraction of the worker
    "cpu_usage",  # cores used over the last interval / worker cores
    "measured",  # the job has reported a latency (inference) or a loss (training)
    "latency_ratio",  # last batch latency / target, divided by LATENCY_RATIO_CAP
    "target",  # latency target / TARGET_SCALE_S
    "class_g",
    "class_s",
    "class_b",
    "progress",  # training iterations done / total
    "progress_rate",  # fraction of the total done during the last interval, times RATE_SCALE
    "loss_ratio",  # last loss / first loss, divided by LOSS_RATIO_CAP
    "age",  # age / horizon
    "worker_usage",  # CPU used on the job's worker / its cores
    "worker_jobs",  # active jobs on the job's worker / slots per worker
)

LATENCY_RATIO_CAP = 4.0
TARGET_SCALE_S = 100.0
RATE_SCALE = 10.0
LOSS_RATIO_CAP = 2.0


@dataclass(frozen=True)
class ObservationLayout:
    """The shape and meaning of observations: ``(workers * slots, len(features))``."""

    workers: int
    slots_per_worker: int
    features: tuple[str, ...] = FEATURES

    @property
    def shape(self) -> tuple[int, int]:
        return (self.workers * self.slots_per_worker, len(self.features))

    def row(self, worker: int, slot: int) -> int:
        return worker * self.slots_per_worker + slot


def encode(
    telemetry: Telemetry,
    before: Telemetry | None,
    first_loss: dict[str, float],
    layout: ObservationLayout,
    horizon_s: float,
) -> np.ndarray:
    """The observation of ``telemetry``; ``before`` gives rates, ``first_loss`` loss ratios."""
    observation = np.zeros(layout.shape, dtype=np.float32)
    column = _columns(layout.features)
    iterations_before = {job.job_id: job.iterations for job in before.jobs} if before else {}
    worker_usage = [w.cpu_usage / w.cores if w.cores else 0.0 for w in telemetry.workers]
    # Active jobs per worker (len(telemetry.on_worker(w)) for each w), counted in one pass.
    worker_jobs = dict.fromkeys((w.index for w in telemetry.workers), 0)
    active = telemetry.active_jobs
    for job in active:
        if job.worker in worker_jobs:
            worker_jobs[job.worker] += 1
    for job in active:
        if job.worker is None or job.slot is None:
            continue
        cores = telemetry.workers[job.worker].cores
        values = {
            "active": 1.0,
            "migrating": float(job.state is JobState.MIGRATING),
            "limit": job.limit,
            "cpu_usage": job.cpu_usage / cores,
            "age": job.age_s / horizon_s,
            "worker_usage": worker_usage[job.worker],
            "worker_jobs": worker_jobs[job.worker] / layout.slots_per_worker,
        }
        if job.target_s is not None:
            values["target"] = job.target_s / TARGET_SCALE_S
            if job.latency_s is not None:
                values["measured"] = 1.0
                values["latency_ratio"] = job.latency_s / job.target_s / LATENCY_RATIO_CAP
                qoe = job.qoe_class
                values["class_g"] = float(qoe is QoEClass.G)
                values["class_s"] = float(qoe is QoEClass.S)
                values["class_b"] = float(qoe is QoEClass.B)
        if job.total_iterations:
            values["progress"] = job.iterations / job.total_iterations
            gained = job.iterations - iterations_before.get(job.job_id, 0)
            values["progress_rate"] = gained / job.total_iterations * RATE_SCALE
            if job.loss is not None:
                values["measured"] = 1.0
                first = first_loss.get(job.job_id, job.loss)
                ratio = job.loss / first if first > 0 else 1.0
                values["loss_ratio"] = ratio / LOSS_RATIO_CAP
        # One row written at once: numpy rounds each value to float32 as item assignment would.
        row = [0.0] * len(column)
        for name, value in values.items():
            row[column[name]] = value
        observation[layout.row(job.worker, job.slot)] = row
    np.clip(observation, 0.0, 1.0, out=observation)
    return observation


@functools.cache
def _columns(features: tuple[str, ...]) -> dict[str, int]:
    """Column index by feature name."""
    return {name: index for index, name in enumerate(features)}
