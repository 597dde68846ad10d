"""The checks a :class:`~dlsched.envs.decision.Decision` passes before an environment acts on it.

The single environment (:meth:`~dlsched.envs.scheduling_env.SchedulingEnv.step_decision`) and the
batched replay environment (:meth:`~dlsched.envs.replay.vector.ReplayVectorEnv.step_decisions`)
take decisions alike: the same refusals, with the same messages, and the same clipping of the
limits they keep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.envs.decision import Decision, Migration
from dlsched.envs.errors import ActionError
from dlsched.envs.values import is_number, is_whole, shown


def check_decision(decision: object) -> None:
    """Refuse anything but a ``Decision`` whose limits are a mapping and migrations a sequence.

    Raises:
        ActionError: naming what was given.
    """
    if not (
        isinstance(decision, Decision)
        and isinstance(decision.limits, Mapping)
        and isinstance(decision.migrations, Sequence)
    ):
        raise ActionError(
            f"step_decision takes a Decision(limits={{job id: limit}}, migrations=(...)), "
            f"not {shown(decision)}; use step() for an action array"
        )


def check_migration(migration: object) -> None:
    """Refuse a migration that is not a ``Migration`` to a whole-numbered worker.

    Raises:
        ActionError: naming what was given.
    """
    if not isinstance(migration, Migration) or not is_whole(migration.worker):
        raise ActionError(
            f"decision's migrations hold {shown(migration)}; expected "
            "Migration(job_id, worker) items, the worker a whole number"
        )


def clip_limit(limit: float, floor: float) -> float:
    """A limit raised to the environment's ``floor`` and cut at 1 (no cap)."""
    return float(min(max(limit, floor), 1.0))


def checked_limits(
    limits: Mapping[str, float], arrived: Mapping[str, bool], floor: float
) -> dict[str, float]:
    """The limits of a decision that apply, clipped: those of the jobs that hold a slot.

    Args:
        limits: the decision's limits by job id.
        arrived: every job that has arrived, by id, and whether it holds a slot (is active).
        floor: the environment's lowest limit.

    Raises:
        ActionError: a limit for a job that has not arrived, not a finite number, or negative.
    """
    checked = {}
    for job_id, limit in limits.items():
        if job_id not in arrived:
            raise ActionError(
                f"decision sets a limit for job {job_id!r}, which has not arrived; jobs "
                f"present: {sorted(arrived)}"
            )
        # A float (what step() passes) needs no type check; is_number is kept apart as it
        # would narrow limit to Real.
        if type(limit) is float:
            valid = math.isfinite(limit)
        else:
            number = is_number(limit)
            valid = number and bool(np.isfinite(limit))
        if not valid:
            raise ActionError(
                f"limit of job {job_id!r} is {limit!r} ({type(limit).__name__}); expected a "
                "finite number, a fraction of a worker in [0, 1]"
            )
        if limit < 0:
            raise ActionError(
                f"limit of job {job_id!r} is {limit!r}; limits are fractions of a worker "
                "in [0, 1] (values above 1 are clipped to 1, that is no cap)"
            )
        if arrived[job_id]:
            checked[job_id] = clip_limit(limit, floor)
    return checked
