"""``equal``: a static equal share of each worker for each of its containers.

Not from a paper: the simplest use of limits, and the split the papers' default system reaches
when every container can use more than its share (DQoES journal, Section V-C-2). Unlike
``default``, CPU a container cannot use is not passed on to the others.
"""

from __future__ import annotations

from dlsched.baselines.base import Baseline
from dlsched.envs.decision import Decision
from dlsched.envs.telemetry import Telemetry


class EqualShare(Baseline):
    """Caps every active container at ``1 / n`` of its worker, ``n`` its worker's active jobs."""

    name = "equal"

    def act(self, telemetry: Telemetry) -> Decision:
        limits: dict[str, float] = {}
        for worker in telemetry.workers:
            jobs = telemetry.on_worker(worker.index)
            for job in jobs:
                limits[job.job_id] = 1.0 / len(jobs)
        return Decision(limits=limits)
