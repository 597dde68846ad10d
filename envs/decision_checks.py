"""The one place where what a policy hands an environment is checked and turned into limits.

An action array (one limit per slot, for one episode or a row per episode) and a typed
:class:`~dlsched.envs.decision.Decision` (limits by job id, and migrations) both become the
limits of every slot, ``(episodes, workers x slots_per_worker)``, checked and clipped here:
refused when they are not finite numbers (or, for a decision, negative, or of a job that has not
arrived), then clipped to ``[floor, 1]``; an action with entries outside the box ``[0, 1]`` is
said once per environment (:class:`ClipNotice`). The loop (:mod:`dlsched.envs.loop`) gives the
limits to the jobs that hold the slots and checks the migrations against the slots; a backend
receives only checked limits.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from dlsched.envs.decision import Decision, Migration
from dlsched.envs.errors import ActionClippedWarning, ActionError
from dlsched.envs.observation import ObservationLayout
from dlsched.envs.telemetry_columns import TelemetryColumns
from dlsched.envs.user_values import is_number, is_whole, shown


def check_decision(decision: object) -> None:
    """Refuse anything but a ``Decision`` whose limits are a mapping and migrations a sequence
    of ``Migration`` to whole-numbered workers.

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
    for migration in decision.migrations:
        if not isinstance(migration, Migration) or not is_whole(migration.worker):
            raise ActionError(
                f"decision's migrations hold {shown(migration)}; expected "
                "Migration(job_id, worker) items, the worker a whole number"
            )


class ClipNotice:
    """Says once, as an :class:`~dlsched.envs.errors.ActionClippedWarning`, that an environment
    clipped an action's entries outside the box ``[0, 1]``: an agent's raw output (a Gaussian
    policy's sample) may leave the box, and is clipped as SB3 clips it, but a user passing
    limits in cores rather than fractions should hear of it. Until it is said each action costs
    two reductions more; after, nothing."""

    def __init__(self) -> None:
        self.said = False

    def look(self, array: np.ndarray, episodes: int | None) -> None:
        """Warn (the first time) if ``array`` has entries outside ``[0, 1]``."""
        if self.said or (array.min() >= 0.0 and array.max() <= 1.0):
            return
        self.said = True
        outside = (array < 0.0) | (array > 1.0)
        first = tuple(int(i) for i in np.argwhere(outside)[0])
        where = f"index {first[0]}" if episodes is None else f"env {first[0]}, slot {first[1]}"
        warnings.warn(
            f"action entries outside the action space [0, 1] were clipped into it "
            f"({int(outside.sum())} of {array.size}; the first, at {where}: "
            f"{float(array[first])!r}): a limit is a fraction of its worker's cores, above 1 "
            "clipped to 1, below the floor raised to it. Said once for this environment",
            ActionClippedWarning,
            stacklevel=4,
        )


def action_limits(
    actions: object,
    episodes: int | None,
    layout: ObservationLayout,
    floor: float,
    notice: ClipNotice | None = None,
) -> np.ndarray:
    """The limits per slot an action array sets, clipped to the box then raised to ``floor``.

    Args:
        actions: ``(slots,)`` for a single environment (``episodes`` is ``None``), or
            ``(episodes, slots)``; numbers only. ``slots`` is workers x slots_per_worker.
        episodes: the episodes of a batched environment; ``None`` for a single one.
        layout: the environment's layout (its workers and slots per worker).
        floor: the lowest limit.
        notice: the environment's notice of clipped actions, if it gives them.

    Returns:
        ``(1, slots)`` for a single environment, else ``(episodes, slots)``, float64.

    Raises:
        ActionError: not an array of numbers, another shape, or a value that is not finite
            (naming where).
    """
    array = _action_array(actions)
    slots = layout.workers * layout.slots_per_worker
    expected = (slots,) if episodes is None else (episodes, slots)
    if array.shape != expected:
        if episodes is None:
            raise ActionError(
                f"action shape {array.shape} does not match the action space {expected} "
                f"(workers x slots_per_worker = {layout.workers} x {layout.slots_per_worker})"
            )
        raise ActionError(
            f"actions of shape {array.shape}; expected (num_envs, workers x slots_per_worker) "
            f"= {expected}"
        )
    bad = ~np.isfinite(array)
    if np.count_nonzero(bad):
        if episodes is None:
            where = np.flatnonzero(bad)
            raise ActionError(
                f"action has non-finite values at indices {where.tolist()}: "
                f"{array[where].tolist()}; every entry must be a limit in [0, 1]"
            )
        env, slot = (int(i) for i in np.argwhere(bad)[0])
        raise ActionError(
            f"actions of environment {env} have a non-finite value at slot {slot}: "
            f"{float(array[env, slot])!r} ({int(bad.sum())} non-finite in all); every entry "
            "must be a limit in [0, 1]"
        )
    if notice is not None:
        notice.look(array, episodes)
    # An agent's raw output may leave the box; a typed Decision may not (it is refused). Clipped
    # to the box then raised to the floor (in (0, 1]) is clamped to [floor, 1]. (np.clip's own
    # wrapper costs more than the ufuncs it calls.)
    return np.minimum(np.maximum(array, floor), 1.0).reshape(-1, slots)


def decision_limits(
    decisions: Sequence[Decision], columns: TelemetryColumns, slots_per_worker: int, floor: float
) -> np.ndarray:
    """The limits per slot that one decision per episode sets (the limit in force where it
    names no job), ``(episodes, workers x slots_per_worker)``.

    Raises:
        ActionError: a decision that is not one, a limit that is not a finite number or is
            negative, or one for a job that has not arrived.
    """
    limits = np.ones((len(decisions), columns.worker_usage.shape[1] * slots_per_worker))
    rows, jobs = np.nonzero(columns.active)
    held = columns.worker[rows, jobs] * slots_per_worker + columns.slot[rows, jobs]
    limits[rows, held] = columns.limit[rows, jobs]
    for row, decision in enumerate(decisions):
        check_decision(decision)
        if not decision.limits:
            continue
        specs = columns.specs[row]
        present = columns.present[row].tolist()
        active = columns.active[row].tolist()
        arrived = {spec.job_id: (j, active[j]) for j, spec in enumerate(specs) if present[j]}
        for job_id, limit in decision.limits.items():
            job, holds = _arrived_job(job_id, arrived)
            value = _limit(job_id, limit)
            if holds:
                slot = int(columns.worker[row, job]) * slots_per_worker + int(
                    columns.slot[row, job]
                )
                limits[row, slot] = min(max(value, floor), 1.0)
    return limits


def job_limit(job_id: str, limit: object) -> float:
    """``limit`` as job ``job_id``'s limit in force: a finite number in ``(0, 1]``, taken as it
    is (what a controlled episode sets, where no action box clips it).

    Raises:
        ActionError: not a finite number, or outside ``(0, 1]``.
    """
    value = _limit(job_id, limit)
    if not 0.0 < value <= 1.0:
        raise ActionError(
            f"limit of job {job_id!r} is {limit!r}; a limit in force is a fraction of a worker "
            "in (0, 1] (1: no cap)"
        )
    return value


def _arrived_job(job_id: str, arrived: Mapping[str, tuple[int, bool]]) -> tuple[int, bool]:
    if job_id not in arrived:
        raise ActionError(
            f"decision sets a limit for job {job_id!r}, which has not arrived; jobs "
            f"present: {sorted(arrived)}"
        )
    return arrived[job_id]


def _limit(job_id: str, limit: object) -> float:
    """``limit`` as a float if it is a finite number >= 0."""
    try:
        value = float(limit) if is_number(limit) else math.nan
    except OverflowError:  # a whole number beyond a float's range
        value = math.nan
    if not math.isfinite(value):
        raise ActionError(
            f"limit of job {job_id!r} is {limit!r} ({type(limit).__name__}); expected a "
            "finite number, a fraction of a worker in [0, 1]"
        )
    if value < 0:
        raise ActionError(
            f"limit of job {job_id!r} is {limit!r}; limits are fractions of a worker "
            "in [0, 1] (values above 1 are clipped to 1, that is no cap)"
        )
    return value


def _action_array(action: object) -> np.ndarray:
    """``action`` as an array of float64, if it holds only real numbers: a numpy array of
    integers or floats, a (nested) list or tuple of Python or numpy numbers, a tensor.

    Raises:
        ActionError: a ragged sequence, or values that are not real numbers (strings, None,
            booleans, complex numbers, objects); numpy would convert ``"0.5"`` and ``True``
            without a word, or fail deep inside with a ``TypeError``.
    """
    try:
        array = np.asarray(action)
    except (ValueError, TypeError) as error:
        raise ActionError(
            f"action {shown(action)} is not an array of numbers ({error}); expected an "
            "array of limits in [0, 1], one per slot"
        ) from None
    if array.dtype.kind == "O" and all(is_number(value) for value in array.flat):
        try:  # an object array of numbers (Python ints beyond int64 make one) is numbers
            array = array.astype(np.float64)
        except OverflowError:
            raise ActionError(
                f"action {shown(action)} holds a number beyond a float's range; expected "
                "limits in [0, 1], one per slot"
            ) from None
    if array.dtype.kind not in "iuf":
        raise ActionError(
            f"action {shown(action)} holds {array.dtype} values; expected numbers (limits in "
            "[0, 1], one per slot), e.g. a float32 array"
        )
    return array.astype(np.float64, copy=False)
