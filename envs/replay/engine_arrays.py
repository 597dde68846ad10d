"""The replay engine's own per-job arrays: what it needs beyond what telemetry shows.

:class:`~dlsched.envs.episode_batch.JobArrays` holds what the environment loop reads of every job;
:class:`PhysicsArrays` holds the rest of the replay model's state, ``(episodes, jobs)`` each,
allocated and reset in one place with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlsched.envs.episode_batch import ArrayFields, column


@dataclass
class PhysicsArrays(ArrayFields):
    """The replay model's per-job state beyond telemetry.

    Attributes:
        profile_of: the job's workload, an index of the scenario's
            :class:`~dlsched.envs.replay.profile_table.ProfileTable` (``-1``: padding).
        demand: cores it keeps busy uncapped.
        stock: whether it runs stock threading.
        exponent: its contention exponent ``a``.
        floor: its contention floor ``f``.
        bound_scale: the factor on its exponent while its quota throttles it.
        beside_startup: the most of its efficiency it keeps beside a start-up.
        boot_demand: cores its start-up keeps busy (0: start-up takes no CPU).
        resume_s: when its start-up or migration pause ends; ``inf`` otherwise.
        startup_left: CPU-seconds of start-up still to deliver.
        unit_start: when its current unit started; NaN before its first.
        work: units of average work delivered since its first unit started.
        next_bound: the work at which its current unit completes.
        final_bound: a training job's work of all its iterations.
        share: cores it gets now.
        rate: units of average work per second it makes now.
        speed: the factor on its workload's throughput in its episode (1 unless the backend
            draws speeds: ``speed_spread``).
        race_level: the multiplier its race is at now (:mod:`~dlsched.envs.replay.race`; 1
            without a race).
        race_full_at: its race's ``full_at`` (``inf`` without a race).
        race_fade: its race's ``fade`` (0 without a race).
        race_switch_s: when its race moves to its next level (``inf``: never).
        race_active: whether its race changes its rate now (it is crowded): only then is its
            next switch an event.
        throttle_rate: its throttle ratio at the shares now where it runs under a quota
            (:mod:`~dlsched.envs.replay.throttling`), else 0.
        throttle_weight: 1 where it runs under a quota (its periods count), else 0.
        throttled_s: seconds under a quota weighed by the ratio, since the last advance began.
        quota_s: seconds under a quota, since the last advance began.
    """

    profile_of: np.ndarray = field(metadata=column(-1, np.int64))
    demand: np.ndarray = field(metadata=column(0.0))
    stock: np.ndarray = field(metadata=column(False, bool))
    exponent: np.ndarray = field(metadata=column(0.0))
    floor: np.ndarray = field(metadata=column(0.0))
    bound_scale: np.ndarray = field(metadata=column(1.0))
    beside_startup: np.ndarray = field(metadata=column(1.0))
    boot_demand: np.ndarray = field(metadata=column(0.0))
    resume_s: np.ndarray = field(metadata=column(np.inf))
    startup_left: np.ndarray = field(metadata=column(0.0))
    unit_start: np.ndarray = field(metadata=column(np.nan))
    work: np.ndarray = field(metadata=column(0.0))
    next_bound: np.ndarray = field(metadata=column(np.inf))
    final_bound: np.ndarray = field(metadata=column(np.inf))
    share: np.ndarray = field(metadata=column(0.0))
    rate: np.ndarray = field(metadata=column(0.0))
    speed: np.ndarray = field(metadata=column(1.0))
    race_level: np.ndarray = field(metadata=column(1.0))
    race_full_at: np.ndarray = field(metadata=column(np.inf))
    race_fade: np.ndarray = field(metadata=column(0.0))
    race_switch_s: np.ndarray = field(metadata=column(np.inf))
    race_active: np.ndarray = field(metadata=column(False, bool))
    throttle_rate: np.ndarray = field(metadata=column(0.0))
    throttle_weight: np.ndarray = field(metadata=column(0.0))
    throttled_s: np.ndarray = field(metadata=column(0.0))
    quota_s: np.ndarray = field(metadata=column(0.0))
