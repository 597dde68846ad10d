"""What an evaluation records of an episode: every step's state, every job's outcome, its scores.

A step is a :class:`StepRecord`, with one :class:`ContainerSample` per job that has arrived; an
episode is an :class:`EpisodeResult`: its policy (:class:`PolicyIdentity`), scenario, backend and
seed, its steps, its jobs' arrivals and completions (:class:`JobOutcome`) and its scores
(:class:`~dlsched.runs.evaluation.metrics.EpisodeMetrics`). :func:`to_jsonable` turns any of them
into plain JSON values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.telemetry import JobState, QoEClass
from dlsched.policies.policy import ParamValue, Policy
from dlsched.runs.evaluation.metrics import EpisodeMetrics

#: The policy every other one is compared with: the environment's free competition.
DEFAULT_POLICY = "default"
#: The privileged reference (it reads the true profiles), where it applies.
ORACLE_POLICY = "oracle"


@dataclass(frozen=True)
class ContainerSample:
    """One job at one step, as measured (a row of the trajectory table).

    Attributes:
        job_id: the job's id in the episode.
        workload: the workload it runs.
        state: waiting, running, migrating, done or failed.
        worker: its worker, ``None`` while waiting.
        limit: CPU limit in force, a fraction of its worker's cores (1 = uncapped).
        limit_cores: the same limit in cores.
        cpu_usage: cores it used over the last interval.
        latency_s: last batch latency (inference), ``None`` before the first batch.
        target_s: latency target (inference).
        tolerance: satisfaction tolerance ``alpha``.
        qoe_class: G, S or B (inference), ``None`` without a measurement.
        loss: last reported loss (training), ``None`` before the first iteration.
        iterations: training iterations completed.
        throttle_ratio: the fraction of its quota's CFS periods in which it was throttled over
            the last interval; ``None`` where not measured (no quota in force).
    """

    job_id: str
    workload: str
    state: JobState
    worker: int | None
    limit: float
    limit_cores: float
    cpu_usage: float
    latency_s: float | None
    target_s: float | None
    tolerance: float
    qoe_class: QoEClass | None
    loss: float | None
    iterations: int
    throttle_ratio: float | None = None


@dataclass(frozen=True)
class StepRecord:
    """The state after one environment step (step 0 is the state right after ``reset``).

    Attributes:
        step: index of the step; 0 is the reset.
        time_s: seconds since the episode started.
        reward: the environment's reward for the step, ``None`` at the reset.
        active_jobs: jobs holding a slot.
        satisfied: active inference jobs in S.
        g: active inference jobs in G (faster than needed).
        b: active inference jobs in B (too slow).
        q_g: DQoES's ``Q_G``, the sum of ``q_i = o_i - p_i`` over G, in seconds (Alg. 1 line 8).
        q_b: DQoES's ``Q_B``, the same sum over B (negative).
        total_limit: the limits of active jobs summed in cores, over the cluster's cores
            (above 1 means the caps overcommit the cluster).
        finished_jobs: training jobs done.
        containers: every job that has arrived, in arrival order.
        cores_allocated: the cores the limits in force hold
            (:func:`~dlsched.runs.evaluation.cost.allocated_cores`: per worker, its active
            jobs' limits in cores, at most its cores; an uncapped job holds the worker).
        cores_used: the cores every job used over the step's interval, summed.
        decision_s: wall time of the policy's decision that this step applied, in seconds
            (:mod:`~dlsched.runs.evaluation.cost`); ``None`` at the reset. A measurement of the
            machine, not of the episode: left out of equality.
    """

    step: int
    time_s: float
    reward: float | None
    active_jobs: int
    satisfied: int
    g: int
    b: int
    q_g: float
    q_b: float
    total_limit: float
    finished_jobs: int
    containers: tuple[ContainerSample, ...]
    # defaults: episode records written before these were kept read back without them
    cores_allocated: float = 0.0
    cores_used: float = 0.0
    decision_s: float | None = field(default=None, compare=False)

    @property
    def satisfied_fraction(self) -> float | None:
        """Satisfied over active jobs, ``None`` when none is active."""
        return self.satisfied / self.active_jobs if self.active_jobs else None


@dataclass(frozen=True)
class JobOutcome:
    """When one job arrived and, for training, when it finished (and the tiers it aimed at)."""

    job_id: str
    workload: str
    arrival_s: float
    completed_s: float | None
    loss_targets: tuple[float, float] | None = None

    @property
    def completion_s(self) -> float | None:
        """Seconds from arrival to finish, ``None`` if it did not finish."""
        return None if self.completed_s is None else self.completed_s - self.arrival_s


@dataclass(frozen=True)
class PolicyIdentity:
    """A policy as tracked: its registered name and every parameter, sorted by name."""

    name: str
    params: tuple[tuple[str, ParamValue], ...] = ()

    @classmethod
    def of(cls, policy: Policy) -> PolicyIdentity:
        return cls(policy.name, tuple(sorted(policy.params().items())))


@dataclass(frozen=True)
class EpisodeScore:
    """What a summary needs of one episode: whose it is, its seed, its metrics."""

    policy: PolicyIdentity
    seed: int
    metrics: EpisodeMetrics


@dataclass(frozen=True)
class EpisodeResult:
    """Everything recorded of one episode.

    Attributes:
        policy: the policy and its parameters.
        scenario: the scenario it ran.
        backend: ``replay`` or ``docker``.
        seed: the ``reset`` seed.
        steps: the reset state and every step after it.
        jobs: arrival and completion of every job that arrived.
        metrics: the episode's scores.
        backend_options: the keyword arguments the backend was built with.
        incidents: what the backend reported that makes the figures doubtful (see
            :meth:`~dlsched.envs.episode_batch.EpisodeBatch.incidents`); an episode with
            incidents is tagged so in MLflow.
        progress_traces: each job's progress event by event, where the backend sees the
            workloads' own events (Docker; see
            :meth:`~dlsched.envs.episode_batch.EpisodeBatch.progress_traces`); none on replay.
    """

    policy: PolicyIdentity
    scenario: Scenario
    backend: str
    seed: int
    steps: tuple[StepRecord, ...]
    jobs: tuple[JobOutcome, ...]
    metrics: EpisodeMetrics
    backend_options: Mapping[str, str] = field(default_factory=dict)
    incidents: tuple[str, ...] = ()
    progress_traces: tuple[ProgressTrace, ...] = ()

    @property
    def score(self) -> EpisodeScore:
        return EpisodeScore(self.policy, self.seed, self.metrics)


def backend_label(backend: str, options: Mapping[str, str]) -> str:
    """How a comparison names a backend and its options: ``docker[workload_threading=stock]``.

    Episodes of one scenario are compared only with others of the same label, so that, e.g.,
    stock and tuned workloads on Docker are never one table.
    """
    if not options:
        return backend
    return f"{backend}[{','.join(f'{key}={options[key]}' for key in sorted(options))}]"


def to_jsonable(value: Any) -> Any:
    """A dataclass tree (enums, tuples, nested dataclasses) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Enum):
        return value.value
    return value
