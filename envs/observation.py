"""The observation layout: one row per slot, one normalised column per feature.

Every feature is computed from telemetry alone and lies in ``[0, 1]``. The layout (feature
names, workers, slots) is part of a trained model's contract: a model refuses an environment
whose :class:`ObservationLayout` differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.envs.errors import ArgumentError
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
    """The observation of ``telemetry``; ``before`` gives rates, ``first_loss`` loss ratios.

    Raises:
        ArgumentError: ``layout`` has other features than :data:`FEATURES`.
    """
    if layout.features != FEATURES:
        raise ArgumentError(
            f"layout features {layout.features}; observations are encoded with {FEATURES}"
        )
    iterations_before = {job.job_id: job.iterations for job in before.jobs} if before else {}
    worker_usage = [w.cpu_usage / w.cores if w.cores else 0.0 for w in telemetry.workers]
    # Active jobs per worker (len(telemetry.on_worker(w)) for each w), counted in one pass.
    worker_jobs = dict.fromkeys((w.index for w in telemetry.workers), 0)
    active = telemetry.active_jobs
    for job in active:
        if job.worker in worker_jobs:
            worker_jobs[job.worker] += 1
    slots = layout.slots_per_worker
    # One list of floats per slot, in FEATURES' order, turned into float32 at once: numpy
    # rounds each value to float32 as item assignment into the array would.
    empty = [0.0] * len(FEATURES)
    rows = [empty] * (layout.workers * slots)
    for job, qoe in zip(active, telemetry.qoe_classes, strict=True):
        worker, slot = job.worker, job.slot
        if worker is None or slot is None:
            continue
        measured = latency_ratio = target = class_g = class_s = class_b = 0.0
        progress = progress_rate = loss_ratio = 0.0
        if job.target_s is not None:
            target = job.target_s / TARGET_SCALE_S
            if job.latency_s is not None:
                measured = 1.0
                latency_ratio = job.latency_s / job.target_s / LATENCY_RATIO_CAP
                class_g = float(qoe is QoEClass.G)
                class_s = float(qoe is QoEClass.S)
                class_b = float(qoe is QoEClass.B)
        if job.total_iterations:
            progress = job.iterations / job.total_iterations
            gained = job.iterations - iterations_before.get(job.job_id, 0)
            progress_rate = gained / job.total_iterations * RATE_SCALE
            if job.loss is not None:
                measured = 1.0
                first = first_loss.get(job.job_id, job.loss)
                ratio = job.loss / first if first > 0 else 1.0
                loss_ratio = ratio / LOSS_RATIO_CAP
        rows[worker * slots + slot] = [
            1.0,  # active
            float(job.state is JobState.MIGRATING),
            job.limit,
            job.cpu_usage / telemetry.workers[worker].cores,
            measured,
            latency_ratio,
            target,
            class_g,
            class_s,
            class_b,
            progress,
            progress_rate,
            loss_ratio,
            job.age_s / horizon_s,  # age
            worker_usage[worker],
            worker_jobs[worker] / slots,
        ]
    observation = np.array(rows, dtype=np.float32)
    np.clip(observation, 0.0, 1.0, out=observation)
    return observation
