"""``k8s-autoscaler``: a Kubernetes-style CPU autoscaler, usage over a target utilisation.

Source: what clusters run. Kubernetes' autoscalers recommend CPU from recent usage divided by a
target utilisation (a workload's ``averageUtilization``, in percent), recompute it every sync
period (the controller manager's ``--horizontal-pod-autoscaler-sync-period``, 15 s by default)
and, so as not to scale down on a passing dip, apply the highest recommendation made within a
stabilisation window (``stabilizationWindowSeconds``, 300 s by default for scaling down). Scaling
up is immediate: the newest recommendation is part of the window. The Autothrottle evaluation
code (repository ``microsoft/autothrottle``, ``worker-daemon.py``, its ``K8sCPUScaler``) applies
exactly this rule to a container's CPU limit rather than to a replica count, which is what this
module does; ``docs/papers/autothrottle.md`` says more.

The rule, per container, every ``sync_period_s`` seconds:

1. ``usage``: the cores it used since the last sync (CPU-seconds over elapsed seconds);
2. ``recommendation = usage / (average_utilization / 100)`` cores;
3. keep the last ``stabilization_window_s / sync_period_s`` recommendations (rounded down, at
   least one) and set the limit to the largest, at least ``min_limit_cores`` and at most the
   whole worker (a limit of 1, no cap).

Choices, and what this module does:

- **Defaults scaled to the interval.** dlsched acts once per environment interval (10 s by
  default), so the 15-s sync period becomes ``sync_period_s = 10``; the window keeps the number
  of recommendations Kubernetes' defaults keep (300 s / 15 s = 20), so
  ``stabilization_window_s = 200``. The evaluation code's fast variant (a sync every 1 s over a
  20-s window) is ``sync_period_s=1, stabilization_window_s=20`` on a 1-s interval.
- **The target.** Kubernetes has no default target utilisation; 50 % is the value the
  Autothrottle evaluation settles on most often for this scaler across its applications and
  workloads.
- **A new container.** Its first measurement may cover only part of an interval (it was placed
  during it), so, as the evaluation code's scaler does with its first sample, the first sync
  that sees a job records where its CPU counter stands and leaves it uncapped; recommendations
  begin at the next.
- **Units.** Usage and recommendations are in cores, the unit of a CPU quota; the limit handed
  to the environment is that over the worker's cores.

It reads only CPU usage, so it schedules both inference and training jobs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from dlsched.baselines.base import Baseline, round_due
from dlsched.baselines.parameters import check_integer, check_number
from dlsched.envs.decision import Decision
from dlsched.envs.errors import PolicyError
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry


def recommendation(usage_cores: float, average_utilization: int) -> float:
    """The cores that would run ``usage_cores`` at ``average_utilization`` percent."""
    return usage_cores / (average_utilization / 100)


@dataclass
class StabilizationWindow:
    """The recommendations of one container within the stabilisation window, newest last.

    Attributes:
        size: how many recommendations the window holds.
        recommendations: those it holds (cores).
    """

    size: int
    recommendations: deque[float] = field(default_factory=deque)

    def add(self, cores: float) -> float:
        """Add the newest recommendation, dropping the oldest beyond ``size``; the largest held."""
        self.recommendations.append(cores)
        while len(self.recommendations) > self.size:
            self.recommendations.popleft()
        return max(self.recommendations)


@dataclass
class _Counter:
    """Where a job's CPU counter stood at its last sync."""

    time_s: float
    cpu_seconds: float


class K8sAutoscaler(Baseline):
    """Kubernetes-style CPU autoscaling: limits of recent usage over a target utilisation.

    Each container's limit is the largest recommendation (usage over the target utilisation) of
    a stabilisation window.

    Args:
        average_utilization: the target CPU utilisation of the limit, in percent (as
            Kubernetes' ``averageUtilization``; no Kubernetes default, 50).
        sync_period_s: seconds between recommendations (Kubernetes' 15-s
            ``--horizontal-pod-autoscaler-sync-period`` scaled to dlsched's 10-s interval: 10).
        stabilization_window_s: the span whose largest recommendation is applied
            (``stabilizationWindowSeconds``; Kubernetes' 300 s keep 20 recommendations of 15 s,
            20 of 10 s are 200).
        min_limit_cores: the lowest limit it sets, in cores (the evaluation code's 0.01).
    """

    name = "k8s-autoscaler"

    def __init__(
        self,
        average_utilization: int = 50,
        sync_period_s: float = 10.0,
        stabilization_window_s: float = 200.0,
        min_limit_cores: float = 0.01,
    ) -> None:
        super().__init__()
        self.average_utilization = check_integer(
            self.name, "average_utilization", average_utilization, low=1
        )
        self.sync_period_s = check_number(
            self.name, "sync_period_s", sync_period_s, low=0.0, low_open=True
        )
        self.stabilization_window_s = check_number(
            self.name, "stabilization_window_s", stabilization_window_s, low=0.0
        )
        self.min_limit_cores = check_number(
            self.name, "min_limit_cores", min_limit_cores, low=0.0, low_open=True
        )
        if self.stabilization_window_s < self.sync_period_s:
            raise PolicyError(
                f"{self.name}: stabilization_window_s={stabilization_window_s!r} is shorter than "
                f"sync_period_s={sync_period_s!r}, so the window would hold no recommendation; "
                "make it at least one sync period"
            )
        self._windows: dict[str, StabilizationWindow] = {}
        self._counters: dict[str, _Counter] = {}
        self._last_sync_s: float | None = None

    @property
    def window_size(self) -> int:
        """How many recommendations the stabilisation window holds."""
        return int(self.stabilization_window_s // self.sync_period_s + 1e-9)

    def reset(self) -> None:
        self._windows = {}
        self._counters = {}
        self._last_sync_s = None

    def act(self, telemetry: Telemetry) -> Decision:
        if not round_due(self._last_sync_s, telemetry.time_s, self.sync_period_s):
            return Decision()  # the limits in force hold until the next sync
        self._last_sync_s = telemetry.time_s
        cores = {worker.index: worker.cores for worker in telemetry.workers}
        limits: dict[str, float] = {}
        for job in telemetry.active_jobs:
            if job.state is not JobState.RUNNING or job.worker is None:
                continue
            usage = self._usage_since_last_sync(job, telemetry.time_s)
            if usage is None:
                continue
            window = self._windows.setdefault(job.job_id, StabilizationWindow(self.window_size))
            limit_cores = window.add(recommendation(usage, self.average_utilization))
            worker_cores = cores[job.worker]
            limits[job.job_id] = min(max(limit_cores, self.min_limit_cores) / worker_cores, 1.0)
        return Decision(limits=limits)

    def recommendations(self, job_id: str) -> tuple[float, ...]:
        """The recommendations (cores) held for ``job_id``, oldest first; empty before its first."""
        window = self._windows.get(job_id)
        return tuple(window.recommendations) if window else ()

    def _usage_since_last_sync(self, job: JobTelemetry, now_s: float) -> float | None:
        """The cores ``job`` used since its last sync; ``None`` at the first sync that sees it."""
        last = self._counters.get(job.job_id)
        self._counters[job.job_id] = _Counter(now_s, job.cpu_seconds)
        if last is None or now_s <= last.time_s:
            return None
        return max(job.cpu_seconds - last.cpu_seconds, 0.0) / (now_s - last.time_s)
