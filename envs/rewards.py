"""Named reward functions, chosen with ``reward=`` when making an environment.

A reward maps the telemetry at the end of a step to a float per episode: each named reward here
is one function of :class:`~dlsched.envs.telemetry_columns.TelemetryColumns` (whose
``iterations_before`` is the telemetry before the step), for one episode or many alike. It reads
only telemetry, like a baseline, so rewards mean the same on every backend.
:func:`telemetry_reward` evaluates one on typed snapshots. A single environment also takes a
function of its own, ``(now, before) -> float`` of :class:`~dlsched.envs.telemetry.Telemetry`
(:data:`RewardFn`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dlsched.envs.errors import UnknownNameError
from dlsched.envs.telemetry import Telemetry
from dlsched.envs.telemetry_columns import TelemetryColumns

#: A reward of one's own: the telemetry after a step and before it, to a float.
RewardFn = Callable[[Telemetry, Telemetry], float]
#: A named reward: per episode, from its columns.
ColumnReward = Callable[[TelemetryColumns], np.ndarray]

#: What :func:`satisfied_fraction_cores` charges for holding the whole cluster's cores, in
#: satisfied fraction.
CORE_CHARGE = 0.25
#: The name of the reward that charges the cores the limits hold (:func:`satisfied_fraction_cores`).
CHARGING_REWARD = "satisfied_fraction_cores"


def satisfied(columns: TelemetryColumns) -> np.ndarray:
    """The number of active inference jobs in S, DQoES's key metric (journal, Section V-A)."""
    return columns.satisfied_count.astype(np.float64)


def satisfied_fraction(columns: TelemetryColumns) -> np.ndarray:
    """Satisfied jobs as a fraction of the active inference jobs (0 when none is active)."""
    active = columns.active.sum(axis=1)
    satisfied = columns.satisfied_count
    return np.where(active > 0, satisfied / np.maximum(active, 1), 0.0)


def qoe_gap(columns: TelemetryColumns) -> np.ndarray:
    """Minus DQoES's objective (journal, Section III-C, Eq. 2), relative to each target.

    Eq. 2 sums ``q_i`` over the containers in G or B; summed as printed, the positive ``q`` of G
    and the negative ``q`` of B cancel, so this sums ``|q_i| / o_i`` instead, which makes jobs with
    different targets comparable. Jobs with no measurement yet count as 0.
    """
    _, satisfied, _ = columns.qoe()
    counted = columns.measured & ~satisfied
    with np.errstate(invalid="ignore"):
        gap = np.abs(columns.target_s - columns.latency_s) / columns.target_s
    return -_ordered_sum(np.where(counted, gap, 0.0))


def satisfied_closeness(columns: TelemetryColumns) -> np.ndarray:
    """Satisfied fraction plus partial credit for latencies near their target, per active job.

    Each active inference job scores 1 in S; outside S it scores ``0.5 * max(0, 1 - |ln(p/o)| /
    ln 2)``, that is up to a half for a latency ``p`` close to its target ``o``, falling to 0 at
    twice or half the target; a job without a measurement scores 0. The reward is the mean over
    active jobs (0 when none is active).

    Why: :func:`satisfied_fraction` says nothing until a latency enters the narrow band of S
    (``alpha = 0.1``), so a learning agent gets no sign of which way to move a limit; the partial
    credit gives one. It is at most half of what S gives, so a satisfied job always counts more
    than one brought near its target. Training on it rather than on ``satisfied_fraction``
    raised the held-out satisfied fraction of a PPO agent after 75k steps from 0.26 to 0.37
    (``dlsched train``, train-inference-mix, same settings otherwise).
    """
    _, satisfied, _ = columns.qoe()
    partial = columns.measured & ~satisfied & (columns.latency_s != 0) & (columns.target_s != 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        distance = np.abs(np.log(columns.latency_s / columns.target_s)) / math.log(2.0)
        credit = 0.5 * np.maximum(0.0, 1.0 - distance)
    score = np.where(satisfied, 1.0, np.where(partial, credit, 0.0))
    active = columns.active.sum(axis=1)
    return np.where(active > 0, _ordered_sum(score) / np.maximum(active, 1), 0.0)


def allocated_cores(columns: TelemetryColumns) -> np.ndarray:
    """Per episode, the cores the limits in force hold: per worker, the sum over its active jobs
    of ``limit x`` its cores (an uncapped job holds the whole worker), at most its cores, summed
    over the workers.

    At most the worker's cores, because quotas that add up to more (Docker accepts them) hold
    the worker and no more: three uncapped jobs on a 2-core worker hold its 2 cores, not 6. The
    evaluation's ``cores_allocated`` is the same figure (``dlsched.runs.evaluation.cost``).
    """
    cores = np.asarray(columns.cores, dtype=np.float64)
    held = np.zeros((columns.active.shape[0], len(cores)))
    for worker, worker_cores in enumerate(cores.tolist()):
        on_worker = columns.active & (columns.worker == worker)
        held[:, worker] = _ordered_sum(np.where(on_worker, columns.limit * worker_cores, 0.0))
    return _ordered_sum(np.minimum(held, cores))


def satisfied_fraction_cores(columns: TelemetryColumns) -> np.ndarray:
    """:func:`satisfied_fraction` less :data:`CORE_CHARGE` times the share of the cluster's
    cores the limits hold (:func:`allocated_cores` over the cluster's cores).

    Why: the other inference rewards are blind to the CPU a policy holds, so a policy trained
    on them has no reason to release cores its services do not need; Autothrottle's Tower is
    rewarded instead by the CPU it saves while the latency target is met. Here a core costs,
    and a satisfied service pays more than the cores it could free: with ``n`` services, one
    fewer satisfied is worth ``1 / n``, and holding the whole cluster costs
    :data:`CORE_CHARGE`, so a policy gives up a service only to free more than
    ``1 / (n x CORE_CHARGE)`` of the cluster (on a worker of 3 services, more than it has).
    Among decisions that satisfy as many, it prefers the one that holds fewer cores. A charge
    of one's own is a reward function ``(now, before) -> float`` of :func:`allocated_cores`.
    """
    share = allocated_cores(columns) / float(np.sum(columns.cores))
    return satisfied_fraction(columns) - CORE_CHARGE * share


def active_jobs(columns: TelemetryColumns) -> np.ndarray:
    """Minus the training jobs not yet finished (waiting ones included).

    Summed over an episode with a fixed interval, this is minus the total completion time in
    intervals, so maximising it minimises the mean completion time, FlowCon's and SpeCon's metric.
    """
    return -(columns.waiting | columns.active).sum(axis=1).astype(np.float64)


def progress(columns: TelemetryColumns) -> np.ndarray:
    """The fraction of their iterations that training jobs completed during the step."""
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


#: Every named reward.
REWARDS: dict[str, ColumnReward] = {
    "satisfied": satisfied,
    "satisfied_fraction": satisfied_fraction,
    "satisfied_closeness": satisfied_closeness,
    CHARGING_REWARD: satisfied_fraction_cores,
    "qoe_gap": qoe_gap,
    "active_jobs": active_jobs,
    "progress": progress,
}


def reward_function(name: str) -> ColumnReward:
    """The reward registered as ``name``.

    Raises:
        UnknownNameError: no reward has that name; the message lists them.
    """
    if name not in REWARDS:
        raise UnknownNameError("reward", name, REWARDS)
    return REWARDS[name]


def telemetry_reward(name: str) -> RewardFn:
    """The reward registered as ``name``, on typed snapshots: ``(now, before) -> float``."""
    reward = reward_function(name)

    def on_telemetry(now: Telemetry, before: Telemetry) -> float:
        return float(reward(TelemetryColumns.of(now, before))[0])

    on_telemetry.__name__ = name
    return on_telemetry
