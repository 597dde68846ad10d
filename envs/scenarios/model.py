"""Typed scenarios: the workers of a host or cluster and the jobs that arrive on them.

A :class:`Scenario` is what a YAML file describes (see :mod:`dlsched.envs.scenarios.file_format`).
It may leave some values to chance (which models, how many, which targets, when they arrive);
calling :meth:`Scenario.realise` with the episode's generator draws them and returns the concrete
:class:`JobSpec` list of one episode. The same generator state always gives the same jobs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum

import numpy as np


class JobKind(StrEnum):
    """Whether a job trains a model (it ends) or serves one (it runs until the horizon)."""

    TRAINING = "training"
    INFERENCE = "inference"


class ArrivalKind(StrEnum):
    """How the arrival times of a job group are generated."""

    BURST = "burst"  # every job at ``start_s``
    FIXED = "fixed"  # one job every ``every_s`` seconds from ``start_s``
    RANDOM = "random"  # uniform in ``[start_s, start_s + window_s]``, drawn from the episode seed
    EXPLICIT = "explicit"  # the listed ``times_s``, one per job


@dataclass(frozen=True)
class ArrivalPattern:
    """Arrival times of the jobs of one group."""

    kind: ArrivalKind = ArrivalKind.BURST
    start_s: float = 0.0
    every_s: float = 0.0
    window_s: float = 0.0
    times_s: tuple[float, ...] = ()

    def times(self, count: int, rng: np.random.Generator) -> list[float]:
        """The arrival times of ``count`` jobs, in job order (random ones sorted)."""
        if self.kind is ArrivalKind.BURST:
            return [self.start_s] * count
        if self.kind is ArrivalKind.FIXED:
            return [self.start_s + i * self.every_s for i in range(count)]
        if self.kind is ArrivalKind.RANDOM:
            drawn = rng.uniform(self.start_s, self.start_s + self.window_s, size=count)
            return sorted(float(t) for t in drawn)
        return [float(t) for t in self.times_s[:count]]

    def last_time(self, count: int) -> float:
        """The latest time any of ``count`` jobs may arrive (``count`` >= 1)."""
        if self.kind is ArrivalKind.FIXED:
            return self.start_s + (count - 1) * self.every_s
        if self.kind is ArrivalKind.RANDOM:
            return self.start_s + self.window_s
        if self.kind is ArrivalKind.EXPLICIT:
            return max(self.times_s[:count])
        return self.start_s


@dataclass(frozen=True)
class IntRange:
    """An integer drawn uniformly from ``[low, high]`` (both included)."""

    low: int
    high: int

    def draw(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.low, self.high + 1))


@dataclass(frozen=True)
class FloatRange:
    """A float drawn uniformly from ``[low, high]``."""

    low: float
    high: float

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class JobGroup:
    """A template for one or more jobs of a scenario.

    Attributes:
        workloads: workload names; with more than one, each job draws one uniformly
            (the papers' "random models").
        count: how many jobs, fixed or drawn per episode.
        arrival: when they arrive.
        arrival_choices: arrival patterns of which each episode draws one uniformly for the
            group (a training distribution over arrival patterns); when given, ``arrival`` is
            not used.
        targets_s: inference latency targets, one per job (cycled if shorter than ``count``).
        target_range_s: inference targets drawn per job instead of ``targets_s``.
        tolerance: the satisfaction tolerance ``alpha`` (DQoES Section IV, Eq. 2).
        iterations: training iterations of each job, fixed or drawn per job; ``None`` takes
            the workload's own.
        worker: the worker every job of the group is pinned to, or ``None`` for the placer.
        loss_targets: TRADL's two-tier loss targets (first tier, second tier), training only.
    """

    workloads: tuple[str, ...]
    count: int | IntRange = 1
    arrival: ArrivalPattern = field(default_factory=ArrivalPattern)
    targets_s: tuple[float, ...] = ()
    target_range_s: FloatRange | None = None
    tolerance: float = 0.1
    iterations: int | IntRange | None = None
    worker: int | None = None
    loss_targets: tuple[float, float] | None = None
    arrival_choices: tuple[ArrivalPattern, ...] = ()

    @property
    def max_count(self) -> int:
        return self.count.high if isinstance(self.count, IntRange) else self.count

    @property
    def max_iterations(self) -> int | None:
        """The most iterations a job of the group runs (``None``: its workload's own)."""
        if isinstance(self.iterations, IntRange):
            return self.iterations.high
        return self.iterations


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: a Docker host (or its replay twin).

    Attributes:
        cores: CPU cores of the worker.
        endpoint: Docker endpoint URL for the Docker backend (``None``: the local engine).
    """

    cores: float
    endpoint: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """One concrete job of one episode."""

    job_id: str
    workload: str
    kind: JobKind
    arrival_s: float
    target_s: float | None = None
    tolerance: float = 0.1
    iterations: int | None = None
    worker: int | None = None
    loss_targets: tuple[float, float] | None = None


@dataclass(frozen=True)
class Scenario:
    """Workers, job templates and timing of one experiment.

    Attributes:
        name: the scenario's name (a shipped scenario is loaded by it).
        description: one line saying what it is.
        source: where it comes from (paper, section, figure), or ``""`` for a user's own.
        kind: whether its jobs train or serve; an environment accepts only its own kind.
        workers: the workers of the host or cluster.
        groups: the job templates.
        interval_s: seconds one environment step covers (the papers' IV).
        horizon_s: seconds after which an episode is truncated.
        slots_per_worker: positions per worker in the observation and action arrays; a job
            that finds no free slot waits until one frees.
        profile_set: which set of replay workload profiles the replay backend uses.
        workload_threading: how the workloads size their thread pools on the Docker backend
            (``"tuned"`` or ``"stock"``, see :mod:`dlsched.envs.workloads.cpu_quota`); the
            replay backend checks it against its profiles' threading. ``None``: not said.
        migration_cost_s: seconds a migrated job is paused (replay backend).
        container_memory_mb: memory (RAM, no swap) each job's container may use on the Docker
            backend, in MiB, beyond which the kernel's out-of-memory killer ends its job. The
            default leaves room over every workload of the image: the services peak at about
            1.2 GiB (mobilenet-svc, its page cache included), the trainings at 0.3 GiB.
        container_pids: processes and threads each job's container may run on the Docker
            backend. A workload is one process of about one thread per core and a few more
            (3 on a 2-core host, stock threading included); the default fits hosts of a few
            hundred cores and stops a runaway fork.
    """

    name: str
    kind: JobKind
    workers: tuple[WorkerSpec, ...]
    groups: tuple[JobGroup, ...]
    interval_s: float = 10.0
    horizon_s: float = 600.0
    slots_per_worker: int = 10
    description: str = ""
    source: str = ""
    profile_set: str = "paper"
    migration_cost_s: float = 10.0
    workload_threading: str | None = None
    container_memory_mb: int = 2048
    container_pids: int = 512

    @property
    def max_jobs(self) -> int:
        return sum(group.max_count for group in self.groups)

    @property
    def cluster_cores(self) -> float:
        """The cores of all its workers together."""
        return float(sum(worker.cores for worker in self.workers))

    def workload_names(self) -> list[str]:
        """Every workload its job groups may draw, sorted, each once."""
        return sorted({name for group in self.groups for name in group.workloads})

    def realise(self, rng: np.random.Generator) -> tuple[JobSpec, ...]:
        """Draw the concrete jobs of one episode, sorted by arrival time.

        Job ids are ``j00``, ``j01``, ... in group order, before sorting, so a job keeps its id
        whatever its draw of arrival time.
        """
        drafts: list[JobSpec] = []
        for group in self.groups:
            count = group.count.draw(rng) if isinstance(group.count, IntRange) else group.count
            arrival = group.arrival
            if group.arrival_choices:  # drawn only then, so other scenarios' draws are unchanged
                arrival = group.arrival_choices[int(rng.integers(len(group.arrival_choices)))]
            arrivals = arrival.times(count, rng)
            for index in range(count):
                if len(group.workloads) == 1:
                    workload = group.workloads[0]
                else:
                    workload = group.workloads[int(rng.integers(len(group.workloads)))]
                target: float | None = None
                if self.kind is JobKind.INFERENCE:
                    if group.target_range_s is not None:
                        target = group.target_range_s.draw(rng)
                    else:
                        target = group.targets_s[index % len(group.targets_s)]
                iterations = group.iterations
                if isinstance(iterations, IntRange):  # drawn only then, as arrival_choices
                    iterations = iterations.draw(rng)
                drafts.append(
                    JobSpec(
                        job_id=f"j{len(drafts):02d}",
                        workload=workload,
                        kind=self.kind,
                        arrival_s=arrivals[index],
                        target_s=target,
                        tolerance=group.tolerance,
                        iterations=iterations,
                        worker=group.worker,
                        loss_targets=group.loss_targets,
                    )
                )
        return tuple(sorted(drafts, key=lambda job: (job.arrival_s, job.job_id)))

    def content_hash(self) -> str:
        """A short hash of everything that defines the scenario (for tracking).

        A field added after runs were recorded is hashed only when set (away from its
        default), so that a scenario without it keeps the hash its recorded runs are grouped by
        (``dlsched compare``)."""
        fields = asdict(self)
        for name, unset in _ADDED_FIELDS.items():
            if fields[name] == unset:
                del fields[name]
        payload = json.dumps(_floats(fields), sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


#: The fields added after runs were recorded, and their value when a scenario does not set them.
_ADDED_FIELDS = {
    "workload_threading": None,
    "container_memory_mb": Scenario.container_memory_mb,
    "container_pids": Scenario.container_pids,
}


def _floats(value: object) -> object:
    """``value`` with every number a float, so ``horizon_s=600`` and ``600.0`` hash alike."""
    if isinstance(value, dict):
        return {key: _floats(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_floats(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value
