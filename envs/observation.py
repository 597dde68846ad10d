"""The observation layout: one row per slot, one normalised column per feature.

Every feature is computed from telemetry alone (:class:`~dlsched.envs.telemetry_columns.
TelemetryColumns`, for one episode or many alike) and lies in ``[0, 1]``. The layout (feature
names, workers, slots) is part of a trained model's contract: a model reads its features by name
(the columns its card lists, a subset of :data:`FEATURES`) and refuses an environment that lacks
one, or (unless it is a model of the slot network) whose workers and slots differ.

The first sixteen features are those of the first models; the rest (:data:`WORKER_FREE`) mean
the same on a worker of any size, so that one model schedules a 2-core host and a 16-core worker
alike: the worker's size on a log scale, the equal share of its worker a job would get, how much
of its quota a job used, and, estimated from what the job reported under the CPU it used, the
share of its worker a service needs to meet its target (and what the services cheaper than it
need together), or the work a training job has left (and how many of its worker's jobs have
less), and the fraction of its quota's periods in which the job was throttled (0 where it is
not measured: no quota in force). ``docs/training.md`` says why these and how they were chosen.
A feature added later comes last: a model reads the features its card lists by name, so a
model trained before it sees and does what it did.

An empty slot is a row of zeros, and it is a slot all the same: a job may arrive in it. Training
across layouts pads each environment's observation to one layout enclosing them all
(:func:`enclosing_layout`); the rows no slot of the environment has are absent, and every
feature of an absent row is NaN, which no encoded observation holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    "worker_cores",  # log2(cores of the job's worker) / WORKER_CORES_LOG2_CAP
    "fair_share",  # 1 / active jobs on the job's worker
    "quota_used",  # cores used over the last interval / cores of its limit
    "need",  # estimated share of its worker a service needs for its target, / NEED_CAP
    "cheaper_need",  # the same summed over the worker's services that need less, / NEED_CAP
    "work_left",  # a training job's work left, seconds of its whole worker (log scale)
    "shorter_jobs",  # fraction of its worker's other jobs with less work left
    "throttle_ratio",  # fraction of its quota's CFS periods throttled in the last interval
)

#: The features whose meaning does not depend on the worker's size or the layout's slots.
WORKER_FREE: tuple[str, ...] = FEATURES[FEATURES.index("worker_cores") :]
#: The features of the first models (all of the observation until the worker-free ones).
ORIGINAL_FEATURES: tuple[str, ...] = FEATURES[: FEATURES.index("worker_cores")]

LATENCY_RATIO_CAP = 4.0
TARGET_SCALE_S = 100.0
RATE_SCALE = 10.0
LOSS_RATIO_CAP = 2.0
#: A worker of 2**4 = 16 cores (the papers' largest) has ``worker_cores`` 1.
WORKER_CORES_LOG2_CAP = 4.0
#: A service that needs twice its worker has ``need`` 1: it cannot be satisfied there.
NEED_CAP = 2.0
#: ``work_left`` is ``log1p(s / interval) / log1p(WORK_LEFT_CAP_INTERVALS)``.
WORK_LEFT_CAP_INTERVALS = 1000.0


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

    def rows_within(self, enclosing: ObservationLayout) -> np.ndarray:
        """The rows of ``enclosing``'s observation that hold this layout's, in this layout's
        order: worker ``w``'s slot ``s`` at ``enclosing.row(w, s)``."""
        workers = np.arange(self.workers)[:, None] * enclosing.slots_per_worker
        return (workers + np.arange(self.slots_per_worker)).ravel()


def enclosing_layout(layouts: Sequence[ObservationLayout]) -> ObservationLayout:
    """The smallest layout each of ``layouts`` fits in (:meth:`ObservationLayout.rows_within`):
    the most workers and the most slots per worker among them, and the first one's features."""
    return ObservationLayout(
        max(layout.workers for layout in layouts),
        max(layout.slots_per_worker for layout in layouts),
        layouts[0].features,
    )


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
    at = columns.active.ravel().nonzero()[0]
    row = at // columns.active.shape[1]

    def of(column: np.ndarray) -> np.ndarray:
        return column.reshape(-1)[at]

    worker = of(columns.worker)
    position = worker * layout.slots_per_worker + of(columns.slot)
    on_worker = row * layout.workers + worker
    worker_cores = columns.cores[worker]
    # One row of features per active job, in FEATURES' order, then one scatter into the slots
    # (not one scatter per feature). A feature a job lacks (a latency before its first batch, a
    # target of a training job) computes to NaN here and is 0 below, as in an empty slot.
    values = np.zeros((len(row), len(FEATURES)))
    values[:, _ACTIVE] = 1.0
    values[:, _MIGRATING] = of(columns.migrating)
    values[:, _LIMIT] = of(columns.limit)
    values[:, _CPU_USAGE] = of(columns.cpu_usage) / worker_cores
    values[:, _AGE] = of(columns.age_s) / horizon_s
    values[:, _WORKER_USAGE] = columns.worker_usage.reshape(-1)[on_worker] / worker_cores
    values[:, _WORKER_JOBS] = columns.worker_jobs.reshape(-1)[on_worker] / layout.slots_per_worker
    target = of(columns.target_s)
    latency = of(columns.latency_s)
    values[:, _TARGET] = target / TARGET_SCALE_S
    values[:, _LATENCY_RATIO] = latency / target / LATENCY_RATIO_CAP
    better, satisfied, worse = (of(mask) for mask in columns.qoe())
    values[:, _CLASS_G] = better
    values[:, _CLASS_S] = satisfied
    values[:, _CLASS_B] = worse
    values[:, _MEASURED] = better | satisfied | worse  # every measured job is in one set
    used = of(columns.cpu_usage)
    values[:, _WORKER_CORES] = np.log2(np.maximum(worker_cores, 1.0)) / WORKER_CORES_LOG2_CAP
    values[:, _FAIR_SHARE] = 1.0 / np.maximum(columns.worker_jobs.reshape(-1)[on_worker], 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        values[:, _QUOTA_USED] = used / (of(columns.limit) * worker_cores)
    values[:, _THROTTLE_RATIO] = of(columns.throttle_ratio)
    if columns.training:
        left_s = _work_left_s(columns, of, used, worker_cores)
        known = np.isfinite(left_s)
        values[:, _WORK_LEFT] = np.where(
            known,
            np.log1p(np.where(known, left_s, 0.0) / columns.interval_s)
            / np.log1p(WORK_LEFT_CAP_INTERVALS),
            0.0,
        )
        values[:, _SHORTER_JOBS] = _share_below(on_worker, np.where(known, left_s, np.inf))
    else:
        # The cores a batch took (those used over the last interval) times the batch latency
        # over the target: the cores that would give the target, were the latency inversely
        # proportional to the cores below the job's demand.
        with np.errstate(divide="ignore", invalid="ignore"):
            need = used * latency / target / worker_cores
        need = np.where(np.isfinite(need) & (used > 0), need, np.nan)
        values[:, _NEED] = need / NEED_CAP
        values[:, _CHEAPER_NEED] = _sum_below(on_worker, need) / NEED_CAP
    if columns.training:
        total = of(columns.total_iterations).astype(np.float64)
        training = total > 0
        done = of(columns.iterations)
        gained = done - of(columns.iterations_before)
        loss = of(columns.loss)
        has_loss = training & ~np.isnan(loss)
        with np.errstate(divide="ignore", invalid="ignore"):
            values[:, _PROGRESS] = np.where(training, done / total, 0.0)
            values[:, _PROGRESS_RATE] = np.where(training, gained / total * RATE_SCALE, 0.0)
            first = of(columns.first_loss)
            first = np.where(np.isnan(first), loss, first)
            ratio = np.where(first > 0, loss / first, 1.0)
            values[:, _LOSS_RATIO] = np.where(has_loss, ratio / LOSS_RATIO_CAP, 0.0)
        values[:, _MEASURED] = np.where(has_loss, 1.0, values[:, _MEASURED])
    values[np.isnan(values)] = 0.0
    np.minimum(np.maximum(values, 0.0, out=values), 1.0, out=values)
    observation = np.zeros((episodes, rows_total, len(FEATURES)), dtype=np.float32)
    observation.reshape(-1, len(FEATURES))[row * rows_total + position] = values
    return observation


def _work_left_s(
    columns: TelemetryColumns,
    of: Callable[[np.ndarray], np.ndarray],
    used: np.ndarray,
    worker_cores: np.ndarray,
) -> np.ndarray:
    """Per active training job, the seconds its worker's cores would take for the iterations
    it has left at the CPU-seconds per iteration it has spent so far (NaN before its first
    iteration): contention that burns CPU without progress shows as more work."""
    done = of(columns.iterations).astype(np.float64)
    total = of(columns.total_iterations).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_iteration = of(columns.cpu_seconds) / done
        left = np.maximum(total - done, 0.0) * per_iteration / worker_cores
    return np.where((done > 0) & (total > 0), left, np.nan)


def _sum_below(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per entry, the sum of the values of its group that sort before it (smaller, or equal
    and earlier); NaN values count as nothing and get nothing (0)."""
    known = ~np.isnan(value)
    # lexsort is stable: of equal values in a group, the earlier sorts first.
    order = np.lexsort((np.where(known, value, np.inf), group))
    sorted_values = np.where(known, value, 0.0)[order]
    sorted_group = group[order]
    before = np.cumsum(sorted_values) - sorted_values
    # The sum before an entry less the sum before the first entry of its group.
    start = np.searchsorted(sorted_group, sorted_group)
    result = np.empty(len(value))
    result[order] = before - before[start]
    return np.where(known, result, 0.0)


def _share_below(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per entry, the fraction of the other entries of its group with a smaller value (infinite
    values are larger than every finite one, and get 0 themselves)."""
    order = np.lexsort((value, group))
    sorted_group = group[order]
    sorted_values = value[order]
    # Equal values are not ordered: each has the rank of the first of them in its group.
    first = np.ones(len(order), dtype=bool)
    first[1:] = (sorted_group[1:] != sorted_group[:-1]) | (sorted_values[1:] != sorted_values[:-1])
    first_equal = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    start = np.searchsorted(sorted_group, sorted_group)
    size = np.searchsorted(sorted_group, sorted_group, side="right") - start
    result = np.empty(len(value))
    result[order] = (first_equal - start) / np.maximum(size - 1, 1)
    return np.where(np.isfinite(value), result, 0.0)


# Column of each feature in the observation.
_ACTIVE = FEATURES.index("active")
_MIGRATING = FEATURES.index("migrating")
_LIMIT = FEATURES.index("limit")
_CPU_USAGE = FEATURES.index("cpu_usage")
_MEASURED = FEATURES.index("measured")
_LATENCY_RATIO = FEATURES.index("latency_ratio")
_TARGET = FEATURES.index("target")
_CLASS_G = FEATURES.index("class_g")
_CLASS_S = FEATURES.index("class_s")
_CLASS_B = FEATURES.index("class_b")
_PROGRESS = FEATURES.index("progress")
_PROGRESS_RATE = FEATURES.index("progress_rate")
_LOSS_RATIO = FEATURES.index("loss_ratio")
_AGE = FEATURES.index("age")
_WORKER_USAGE = FEATURES.index("worker_usage")
_WORKER_JOBS = FEATURES.index("worker_jobs")
_WORKER_CORES = FEATURES.index("worker_cores")
_FAIR_SHARE = FEATURES.index("fair_share")
_QUOTA_USED = FEATURES.index("quota_used")
_NEED = FEATURES.index("need")
_CHEAPER_NEED = FEATURES.index("cheaper_need")
_WORK_LEFT = FEATURES.index("work_left")
_SHORTER_JOBS = FEATURES.index("shorter_jobs")
_THROTTLE_RATIO = FEATURES.index("throttle_ratio")
