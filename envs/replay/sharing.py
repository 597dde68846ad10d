"""How a worker's cores are shared among its containers: CFS with quotas, as water-filling.

Under the Linux Completely Fair Scheduler every runnable container gets an equal share of the
cores, a CPU quota (``cpu_quota / cpu_period``) caps what one container may use, and a container
never uses more than its threads can keep busy (its demand). Time a capped or satisfied container
leaves is taken by the others, so no core idles while some container could use more. The
allocation with those three properties is the max-min fair one, computed here exactly by
water-filling: raise a common level until the cores are spent; every job gets the level or its
cap, whichever is lower.
"""

from __future__ import annotations

import numpy as np


def water_fill(capacity: float, limits: np.ndarray, demands: np.ndarray) -> np.ndarray:
    """The cores each job gets on a worker of ``capacity`` cores.

    Each job is capped at ``min(limit, demand)``. If the caps fit in the capacity every job gets
    its cap; otherwise a level ``L`` with ``sum(min(cap, L)) == capacity`` is found in closed form
    from the sorted caps, and each job gets ``min(cap, L)``. The result is work-conserving, never
    above a cap, never above the capacity (up to rounding of the last bit) and max-min fair, and
    it does not depend on the order of the jobs.

    Args:
        capacity: cores of the worker (non-negative).
        limits: per job, the CPU cap in cores (a limit fraction times the worker's cores);
            non-negative.
        demands: per job, the cores it can keep busy when nothing caps it; non-negative. A job
            that is paused or not started demands 0.

    Returns:
        A new float array of the same shape: cores per job.
    """
    caps = np.minimum(np.asarray(limits, dtype=np.float64), np.asarray(demands, dtype=np.float64))
    if caps.size == 0 or caps.sum() <= capacity:
        return caps
    sorted_caps = np.sort(caps)
    count = sorted_caps.size
    # Candidate level if the k smallest caps are met and the remaining count - k jobs share the
    # rest equally; the right k is the first whose level does not exceed the (k+1)-th cap.
    met_before = np.concatenate(([0.0], np.cumsum(sorted_caps[:-1])))
    levels = (capacity - met_before) / np.arange(count, 0, -1)
    level = levels[np.argmax(levels <= sorted_caps)]
    return np.minimum(caps, max(level, 0.0))
