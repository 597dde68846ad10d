"""Telemetry in columns: what ``info["telemetry"]`` says of many episodes, as arrays.

:class:`TelemetryColumns` is the measurement of every episode of a
:class:`~dlsched.envs.replay.vector.ReplayVectorEnv` after a step, one ``(episodes, jobs)`` array
per field of :class:`~dlsched.envs.telemetry.JobTelemetry`. From it this module computes what the
single environment computes from a :class:`~dlsched.envs.telemetry.Telemetry`: the observation
(:func:`encode_columns`, :func:`dlsched.envs.observation.encode`'s features) and the named rewards
(:func:`column_reward`, :mod:`dlsched.envs.rewards`' functions), with the same arithmetic.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dlsched.envs.errors import ArgumentError, UnknownNameError
from dlsched.envs.observation import (
    FEATURES,
    LATENCY_RATIO_CAP,
    LOSS_RATIO_CAP,
    RATE_SCALE,
    TARGET_SCALE_S,
    ObservationLayout,
)

__all__ = ["COLUMN_REWARDS", "TelemetryColumns", "column_reward", "encode_columns"]


@dataclass
class TelemetryColumns:
    """Every episode's telemetry as ``(episodes, jobs)`` arrays (``(episodes, workers)`` for
    workers), in the units of :class:`~dlsched.envs.telemetry.JobTelemetry`.

    Attributes:
        time_s: per episode, its simulated time.
        present: the job has arrived (placed or waiting), so it is in the telemetry.
        waiting: arrived, no slot yet.
        active: holds a slot (running, starting or migrating).
        migrating: active and paused by a migration.
        done: a training job that finished.
        worker: its worker (meaningful where placed).
        slot: its slot (meaningful where placed).
        limit: the limit in force.
        cpu_usage: cores used over the last step.
        age_s: seconds since it arrived.
        target_s: latency target; NaN for training jobs.
        tolerance: the satisfaction tolerance.
        latency_s: latency of the last batch; NaN without one.
        iterations: training iterations done (0 for inference).
        iterations_before: the same at the telemetry before (0 where absent then).
        total_iterations: the iterations a training job runs; 0 for inference.
        loss: the last loss; NaN without one.
        first_loss: the first loss the job reported; NaN without one.
        worker_usage: per worker, cores its active jobs used over the last step.
        worker_jobs: per worker, its active jobs.
    """

    time_s: np.ndarray
    present: np.ndarray
    waiting: np.ndarray
    active: np.ndarray
    migrating: np.ndarray
    done: np.ndarray
    worker: np.ndarray
    slot: np.ndarray
    limit: np.ndarray
    cpu_usage: np.ndarray
    age_s: np.ndarray
    target_s: np.ndarray
    tolerance: np.ndarray
    latency_s: np.ndarray
    iterations: np.ndarray
    iterations_before: np.ndarray
    total_iterations: np.ndarray
    loss: np.ndarray
    first_loss: np.ndarray
    worker_usage: np.ndarray
    worker_jobs: np.ndarray

    @property
    def measured(self) -> np.ndarray:
        """Active inference jobs with a latency (those in one of DQoES's sets)."""
        return self.active & ~np.isnan(self.latency_s) & ~np.isnan(self.target_s)

    def qoe(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks of DQoES's sets G, S and B among the measured jobs (``JobTelemetry.qoe_class``).

        Computed once (the reward, the observation and the info all read them): a step's
        columns are not changed once read.
        """
        return self._qoe_sets

    @functools.cached_property
    def _qoe_sets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        measured = self.measured
        with np.errstate(invalid="ignore"):
            quality = self.target_s - self.latency_s
            band = self.tolerance * self.target_s
            better = measured & (quality > band)
            worse = measured & (quality < -band)
        return better, measured & ~better & ~worse, worse

    def satisfied_count(self) -> np.ndarray:
        """Per episode, active jobs in S (``info["satisfied"]``)."""
        return self.qoe()[1].sum(axis=1)


def encode_columns(
    columns: TelemetryColumns, layout: ObservationLayout, cores: np.ndarray, horizon_s: float
) -> np.ndarray:
    """The observations of every episode: :func:`dlsched.envs.observation.encode`, batched.

    Args:
        columns: the telemetry after the step.
        layout: the observation layout of one episode.
        cores: per worker, its cores.
        horizon_s: the scenario's horizon.
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
    worker_cores = cores[worker]
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


def _satisfied(columns: TelemetryColumns) -> np.ndarray:
    return columns.satisfied_count().astype(np.float64)


def _satisfied_fraction(columns: TelemetryColumns) -> np.ndarray:
    active = columns.active.sum(axis=1)
    satisfied = columns.satisfied_count()
    return np.where(active > 0, satisfied / np.maximum(active, 1), 0.0)


def _qoe_gap(columns: TelemetryColumns) -> np.ndarray:
    _, satisfied, _ = columns.qoe()
    counted = columns.measured & ~satisfied
    with np.errstate(invalid="ignore"):
        gap = np.abs(columns.target_s - columns.latency_s) / columns.target_s
    return -_ordered_sum(np.where(counted, gap, 0.0))


def _satisfied_closeness(columns: TelemetryColumns) -> np.ndarray:
    _, satisfied, _ = columns.qoe()
    partial = columns.measured & ~satisfied & (columns.latency_s != 0) & (columns.target_s != 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        distance = np.abs(np.log(columns.latency_s / columns.target_s)) / math.log(2.0)
        credit = 0.5 * np.maximum(0.0, 1.0 - distance)
    score = np.where(satisfied, 1.0, np.where(partial, credit, 0.0))
    active = columns.active.sum(axis=1)
    return np.where(active > 0, _ordered_sum(score) / np.maximum(active, 1), 0.0)


def _active_jobs(columns: TelemetryColumns) -> np.ndarray:
    return -(columns.waiting | columns.active).sum(axis=1).astype(np.float64)


def _progress(columns: TelemetryColumns) -> np.ndarray:
    total = columns.total_iterations.astype(np.float64)
    counted = columns.present & (total > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        gained = (columns.iterations - columns.iterations_before) / total
    return _ordered_sum(np.where(counted, gained, 0.0))


def _ordered_sum(values: np.ndarray) -> np.ndarray:
    """Row sums added left to right, as Python's ``sum`` over the jobs adds them."""
    total = np.zeros(values.shape[0])
    for column in values.T:
        total += column
    return total


#: The batched twin of every named reward of :data:`dlsched.envs.rewards.REWARDS`.
COLUMN_REWARDS: dict[str, Callable[[TelemetryColumns], np.ndarray]] = {
    "satisfied": _satisfied,
    "satisfied_fraction": _satisfied_fraction,
    "satisfied_closeness": _satisfied_closeness,
    "qoe_gap": _qoe_gap,
    "active_jobs": _active_jobs,
    "progress": _progress,
}


def column_reward(name: str) -> Callable[[TelemetryColumns], np.ndarray]:
    """The batched reward registered as ``name`` (per episode, from its columns)."""
    if name not in COLUMN_REWARDS:
        raise UnknownNameError("reward", name, COLUMN_REWARDS)
    return COLUMN_REWARDS[name]
