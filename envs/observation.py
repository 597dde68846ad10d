"""The observation layout: one row per slot, one normalised column per feature.

Every feature is computed from telemetry alone (:class:`~dlsched.envs.telemetry_columns.
TelemetryColumns`, for one episode or many alike) and lies in ``[0, 1]``. The layout (feature
names, workers, slots) is part of a trained model's contract: a model refuses an environment
whose :class:`ObservationLayout` differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.envs.errors import ArgumentError
from dlsched.envs.telemetry_columns import TelemetryColumns

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


def encode(columns: TelemetryColumns, layout: ObservationLayout, horizon_s: float) -> np.ndarray:
    """The observation of every episode of ``columns``, ``(episodes, *layout.shape)`` float32.

    Args:
        columns: the telemetry after the step (``iterations_before`` gives the rates,
            ``first_loss`` the loss ratios).
        layout: the observation layout of one episode.
        horizon_s: the scenario's horizon.

    Raises:
        ArgumentError: ``layout`` has other features than :data:`FEATURES`.
    """
    episodes = columns.active.shape[0]
    if layout.features != FEATURES:
        raise ArgumentError(
            f"layout features {layout.features}; observations are encoded with {FEATURES}"
        )
    rows_total = layout.workers * layout.slots_per_worker
    # The active jobs by their flat index in the (episodes, jobs) columns: gathering by one
    # index costs a third of gathering by two.
    at = np.flatnonzero(columns.active)
    row = at // columns.active.shape[1]

    def of(column: np.ndarray) -> np.ndarray:
        return column.reshape(-1)[at]

    worker = of(columns.worker)
    position = worker * layout.slots_per_worker + of(columns.slot)
    on_worker = row * layout.workers + worker
    worker_cores = columns.cores[worker]
    # One row of features per active job, in FEATURES' order, then one scatter into the slots
    # (not one scatter per feature); a feature a job lacks is 0, as in an empty slot.
    values = np.zeros((len(row), len(FEATURES)))

    def put(name: str, column: np.ndarray, where: np.ndarray | None = None) -> None:
        index = _FEATURE_INDEX[name]
        if where is None:
            values[:, index] = column
        else:  # elsewhere the value stays (0, or what an earlier put wrote)
            values[:, index] = np.where(where, column, values[:, index])

    put("active", np.ones(len(row)))
    put("migrating", of(columns.migrating).astype(np.float64))
    put("limit", of(columns.limit))
    put("cpu_usage", of(columns.cpu_usage) / worker_cores)
    put("age", of(columns.age_s) / horizon_s)
    put("worker_usage", columns.worker_usage.reshape(-1)[on_worker] / worker_cores)
    put("worker_jobs", columns.worker_jobs.reshape(-1)[on_worker] / layout.slots_per_worker)
    target = of(columns.target_s)
    latency = of(columns.latency_s)
    has_target = ~np.isnan(target)
    put("target", target / TARGET_SCALE_S, has_target)
    better, satisfied, worse = (of(mask) for mask in columns.qoe())
    measured = has_target & ~np.isnan(latency)
    put("measured", np.ones(len(row)), measured)
    put("latency_ratio", latency / target / LATENCY_RATIO_CAP, measured)
    put("class_g", better.astype(np.float64), measured)
    put("class_s", satisfied.astype(np.float64), measured)
    put("class_b", worse.astype(np.float64), measured)
    total = of(columns.total_iterations).astype(np.float64)
    training = total > 0
    if training.any():
        done = of(columns.iterations)
        gained = done - of(columns.iterations_before)
        with np.errstate(divide="ignore", invalid="ignore"):
            put("progress", done / total, training)
            put("progress_rate", gained / total * RATE_SCALE, training)
            loss = of(columns.loss)
            first = of(columns.first_loss)
            first = np.where(np.isnan(first), loss, first)
            ratio = np.where(first > 0, loss / first, 1.0)
        has_loss = training & ~np.isnan(loss)
        put("measured", np.ones(len(row)), has_loss)
        put("loss_ratio", ratio / LOSS_RATIO_CAP, has_loss)
    observation = np.zeros((episodes, rows_total, len(FEATURES)))
    observation.reshape(-1, len(FEATURES))[row * rows_total + position] = values
    np.clip(observation, 0.0, 1.0, out=observation)
    return observation.astype(np.float32)


#: Column of each feature in the observation.
_FEATURE_INDEX = {name: index for index, name in enumerate(FEATURES)}
