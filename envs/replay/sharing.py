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


def water_fill(capacity: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """The cores each job gets, for many workers at once.

    Each job takes at most its cap. On a worker whose caps fit its capacity every job gets its
    cap; on the others a level ``L`` with ``sum(min(cap, L)) == capacity`` is found in closed
    form from the sorted caps, and each job gets ``min(cap, L)``. The result is
    work-conserving, never above a cap, never above the capacity (up to rounding of the last
    bit) and max-min fair, and it does not depend on the order of a worker's jobs.

    Args:
        capacity: ``(workers,)``, the cores of each worker (non-negative).
        caps: ``(workers, slots)``, per job the most cores it can take: its limit in cores or
            its demand (the cores it can keep busy when nothing caps it), whichever is lower;
            non-negative. An empty slot, or a job that is paused or not started, has cap 0.

    Returns:
        A new ``(workers, slots)`` float array: cores per job.
    """
    shares = np.array(caps, dtype=np.float64)
    over = shares.sum(axis=1) > capacity
    if over.any():
        crowded = shares[over]
        ordered = np.sort(crowded, axis=1)
        # Candidate level if the k smallest caps are met and the other jobs share the rest
        # equally; the right k is the first whose level does not exceed the (k+1)-th cap.
        met_before = np.concatenate(
            (np.zeros((len(ordered), 1)), np.cumsum(ordered[:, :-1], axis=1)), axis=1
        )
        levels = (capacity[over][:, None] - met_before) / np.arange(ordered.shape[1], 0, -1)
        below = levels <= ordered
        level = levels[np.arange(len(levels)), np.argmax(below, axis=1)]
        # Caps that exceed the capacity only by rounding find no level: they fit, and are met
        # (an argmax over no match took the first level, capacity / n, and left cores idle).
        level = np.where(below.any(axis=1), level, np.inf)
        shares[over] = np.minimum(crowded, np.maximum(level, 0.0)[:, None])
    return shares
