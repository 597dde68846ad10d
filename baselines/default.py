"""``default``: Docker's own behaviour, no limit on any container (free competition).

This is what the papers compare against and call Docker Swarm or DS (DQoES journal, Section V-C-2;
FlowCon journal, Section 6.2): every container runs uncapped and the kernel shares the CPU
between them, evenly among those that can use more.
"""

from __future__ import annotations

from dlsched.baselines.base import Baseline
from dlsched.envs.decision import Decision
from dlsched.envs.telemetry import Telemetry


class DockerDefault(Baseline):
    """No limits: every running container is uncapped (limit 1) at every interval."""

    name = "default"

    def act(self, telemetry: Telemetry) -> Decision:
        return Decision(limits={job.job_id: 1.0 for job in telemetry.active_jobs})
