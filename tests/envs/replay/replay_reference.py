"""A readable replay model, one job at a time: the oracle the replay engine is held against.

The package's replay model (:mod:`dlsched.envs.replay.engine`) holds many episodes in arrays and
is written for speed. This module writes the same model (docs/replay-model.md) plainly, per job
and per event, as a one-episode :class:`~dlsched.envs.backend.Backend`; an environment made with
``backend=ReferenceReplay()`` runs it through the adapter the Docker backend takes
(:class:`~dlsched.envs.backend_episode.BackendEpisode`). ``test_replay_vector.py`` (beside it)
holds the engine's episodes equal to this model's, step by step. It shares with the engine only
what is tested on its own: the profiles, water-filling, the contention formulas and the
throttling curves. It has no
race (``envs/replay/race.py``): sets that carry one are held against it without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from dlsched.envs.backend import Backend, BackendCapabilities
from dlsched.envs.decision import Placement
from dlsched.envs.replay.contention import (
    busy_and_quotas,
    crowded,
    job_efficiencies,
    runnable_threads,
)
from dlsched.envs.replay.profile import (
    load_profile_set,
    load_set_contention,
    load_set_throttling,
)
from dlsched.envs.replay.sharing import water_fill
from dlsched.envs.replay.throttling import BINDING_SHARE
from dlsched.envs.replay.workload_profile import WorkloadProfile
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry, WorkerTelemetry

EPS = 1e-9  # work within which a unit counts as complete
DRAWS = 32  # a service's units drawn at a time


def lognormal(rng: np.random.Generator, cv: float, count: int) -> np.ndarray:
    """``count`` factors of mean 1 and coefficient of variation ``cv`` (ones without noise)."""
    if cv == 0.0:
        return np.ones(count)
    sigma = math.sqrt(math.log1p(cv * cv))
    return np.exp(sigma * rng.standard_normal(count) - 0.5 * sigma * sigma)


@dataclass
class Job:
    """One job and where it is."""

    spec: JobSpec
    profile: WorkloadProfile
    total: int
    exponent: float
    bound_scale: float
    state: str = "unplaced"  # starting, booting, running, migrating, done
    worker: int = 0
    slot: int = 0
    limit: float = 1.0
    resume_s: float = math.inf
    startup_left: float = 0.0
    unit_start: float = math.nan
    work: float = 0.0
    bounds: np.ndarray = field(default_factory=lambda: np.empty(0))
    losses: np.ndarray = field(default_factory=lambda: np.empty(0))
    rng: np.random.Generator | None = None
    units: int = 0
    latency: float = math.nan
    loss: float = math.nan
    completed: float = math.nan
    cpu_seconds: float = 0.0
    usage: float = 0.0
    share: float = 0.0
    rate: float = 0.0
    throttle: float = math.nan  # the throttle ratio at the shares now (NaN: no quota or CPU)
    throttled_s: float = 0.0  # seconds under a quota weighed by the ratio, this advance
    quota_s: float = 0.0  # seconds under a quota, this advance
    throttle_ratio: float = math.nan  # over the last advance that let time pass

    @property
    def boot_demand(self) -> float:
        profile = self.profile
        if not profile.startup_cpu_s or profile.startup_s <= 0:
            return 0.0
        return profile.startup_cpu_s / profile.startup_s

    def units_per_s(self, cores: float) -> float:
        points = np.array((0.0, *self.profile.throughput.cores))
        rates = np.array((0.0, *self.profile.throughput.units_per_s))
        return float(np.interp(cores, points, rates))


class ReferenceReplay(Backend):
    """The replay model, one job at a time (see the module docstring)."""

    name: ClassVar[str] = "reference"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        simulated_time=True, deterministic=True, batchable=False, reads_profiles=True
    )

    def __init__(self, loss_noise_cv: float = 0.01) -> None:
        self.loss_noise_cv = loss_noise_cv

    def reset(
        self, scenario: Scenario, jobs: Sequence[JobSpec], rng: np.random.Generator
    ) -> Telemetry:
        profiles = load_profile_set(scenario.profile_set)
        contention = load_set_contention(scenario.profile_set)
        self.throttling = load_set_throttling(scenario.profile_set)
        self.scenario = scenario
        self.rng = rng
        self.now = 0.0
        self.cores = [worker.cores for worker in scenario.workers]
        self.jobs: list[Job] = []
        for spec in sorted(jobs, key=lambda job: (job.arrival_s, job.job_id)):
            profile = profiles[spec.workload]
            exponent = profile.contention_exponent
            if exponent is None:
                exponent = contention.exponents.get(profile.threading, 0.0)
            training = spec.kind is JobKind.TRAINING
            total = (spec.iterations or profile.iterations or 0) if training else 0
            bound_scale = contention.bound_scales.get(profile.threading, 1.0)
            self.jobs.append(Job(spec, profile, total, exponent, bound_scale))
        self.by_id = {job.spec.job_id: job for job in self.jobs}
        return self.telemetry()

    def apply(
        self,
        limits: Mapping[str, float],
        placements: Sequence[Placement] = (),
        migrations: Sequence[Placement] = (),
    ) -> None:
        for placement in placements:
            self.place(self.by_id[placement.job_id], placement)
        for migration in migrations:
            job = self.by_id[migration.job_id]
            resume = self.now + self.scenario.migration_cost_s
            if job.state == "starting":  # a timed start-up ends no earlier than it would have
                resume = max(resume, job.resume_s)
            job.worker, job.slot, job.state, job.resume_s = (
                migration.worker,
                migration.slot,
                "migrating",
                resume,
            )
        for job_id, limit in limits.items():
            self.by_id[job_id].limit = limit

    def place(self, job: Job, placement: Placement) -> None:
        job.worker, job.slot = placement.worker, placement.slot
        if job.boot_demand > 0:
            job.state = "booting"
            job.startup_left = job.profile.startup_cpu_s or 0.0
        else:
            job.state = "starting"
            job.resume_s = self.now + job.profile.startup_s
        job.rng = np.random.default_rng(int(self.rng.integers(2**63)))
        if job.spec.kind is JobKind.TRAINING:
            job.bounds = np.cumsum(lognormal(job.rng, job.profile.noise_cv, job.total))
            curve = np.asarray(job.profile.loss_at(np.arange(1, job.total + 1, dtype=float)))
            job.losses = curve * lognormal(job.rng, self.loss_noise_cv, job.total)
        else:
            job.bounds = np.cumsum(lognormal(job.rng, job.profile.noise_cv, DRAWS))

    def advance(self, seconds: float) -> Telemetry:
        end = self.now + seconds
        spent = [job.cpu_seconds for job in self.jobs]
        for job in self.jobs:
            job.throttled_s = job.quota_s = 0.0
        self.wake()
        while self.now < end:
            self.allocate()
            until = self.next_event(end)
            self.integrate(until)
            self.now = until
            self.wake()
        self.now = end
        if seconds > 0:
            for job, before in zip(self.jobs, spent, strict=True):
                job.usage = (job.cpu_seconds - before) / seconds
                measured = job.quota_s > 0 and job.state != "done"
                job.throttle_ratio = (
                    min(job.throttled_s / job.quota_s, 1.0) if measured else math.nan
                )
        return self.telemetry()

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ the model

    def wake(self) -> None:
        """Start the first unit of jobs whose start-up ended; resume paused ones."""
        for job in self.jobs:
            if job.state == "booting" and job.startup_left <= EPS:
                job.startup_left, job.unit_start, job.state = 0.0, self.now, "running"
        for job in self.jobs:
            if job.state in ("starting", "migrating") and job.resume_s <= self.now:
                if job.startup_left > 0:  # migrated while it started up on the CPU
                    job.state = "booting"
                else:
                    if math.isnan(job.unit_start):
                        job.unit_start = job.resume_s
                    job.state = "running"
                job.resume_s = math.inf

    def allocate(self) -> None:
        """Every worker's shares by water-filling, then rates, slowed by contention."""
        for job in self.jobs:
            job.share = job.rate = 0.0
            job.throttle = math.nan
        for worker, cores in enumerate(self.cores):
            members = [
                job
                for job in self.jobs
                if job.worker == worker and job.state in ("running", "booting")
            ]
            if not members:
                continue
            booting = np.array([job.state == "booting" for job in members])
            # A start-up keeps busy what its CPU-seconds take over its seconds, at most a worker.
            demand = np.array(
                [
                    min(job.boot_demand, max(self.cores)) if boots else job.profile.demand_cores
                    for job, boots in zip(members, booting, strict=True)
                ]
            )
            limits = np.array([job.limit for job in members])
            caps = np.minimum(limits * cores, demand)
            shares = water_fill(np.array([cores]), caps[None, :])[0]
            for job, share, boots in zip(members, shares, booting, strict=True):
                job.share = float(share)
                job.rate = 0.0 if boots else job.units_per_s(job.share)
            stock = np.array([job.profile.threading == "stock" for job in members]) & ~booting
            busy, quotas = busy_and_quotas(limits, demand, stock, cores)
            if self.throttling is not None:
                for job, used, busy_cores in zip(members, shares, busy, strict=True):
                    if job.limit < 1.0 and used > 0:
                        quota = job.limit * cores
                        binding = used >= BINDING_SHARE * quota
                        at = (max(busy_cores, used) if binding else used) / quota
                        curve = self.throttling.curve(job.spec.workload)
                        exponent = math.log(curve.half_pressure / at) / curve.burstiness
                        job.throttle = 1.0 / (1.0 + math.exp(min(exponent, 700.0)))
            runnable = runnable_threads(busy, quotas, cores)
            if not crowded(runnable, cores):
                continue
            kept = job_efficiencies(
                busy[None, :],
                quotas[None, :],
                np.ones((1, len(members)), dtype=bool),
                np.array([runnable]),
                np.array([cores]),
                np.array([[job.exponent for job in members]]),
                np.array([[job.profile.contention_floor or 0.0 for job in members]]),
                np.array([[job.bound_scale for job in members]]),
            )[0]
            if booting.any():
                beside = [job.profile.efficiency_beside_startup or 1.0 for job in members]
                kept = np.minimum(kept, beside)
            for job, factor in zip(members, kept, strict=True):
                job.rate *= float(factor)

    def next_event(self, end: float) -> float:
        """The first time before ``end`` at which the shares change."""
        until = min([end, *(job.resume_s for job in self.jobs)])
        for job in self.jobs:
            if job.state == "booting" and job.share > 0:  # its start-up's CPU is delivered
                until = min(until, self.now + job.startup_left / job.share)
            if job.state == "running" and job.total and job.rate > 0:
                left = max(float(job.bounds[-1]) - job.work, 0.0)
                until = min(until, self.now + left / job.rate)
        return until

    def integrate(self, until: float) -> None:
        """Constant shares from now to ``until``; record the units that complete."""
        span = until - self.now
        for job in self.jobs:
            before = job.work
            job.cpu_seconds += job.share * span
            job.work += job.rate * span
            if not math.isnan(job.throttle):
                job.throttled_s += job.throttle * span
                job.quota_s += span
            if job.state == "booting":
                job.startup_left -= job.share * span
            if job.state == "running" and job.work >= self.next_bound(job) - EPS:
                self.complete(job, before, until)

    def next_bound(self, job: Job) -> float:
        return float(job.bounds[job.units]) if job.units < len(job.bounds) else math.inf

    def complete(self, job: Job, before: float, until: float) -> None:
        """The units ``job`` completed between now and ``until``."""
        if not job.total:
            while job.bounds[-1] <= job.work + EPS:  # draw a service's next units
                extra = np.cumsum(lognormal(job.rng, job.profile.noise_cv, DRAWS))  # type: ignore[arg-type]
                job.bounds = np.concatenate((job.bounds, job.bounds[-1] + extra))
        done = int(np.searchsorted(job.bounds, job.work + EPS, side="right"))
        first_new = job.units
        job.units = done
        if job.total:
            job.loss = float(job.losses[done - 1])
            if done >= job.total:
                job.state, job.completed = "done", until
            return
        # A batch ends when the work reaches its bound; it began where the one before ended.
        ends = np.minimum(
            until, self.now + np.maximum(job.bounds[max(done - 2, 0) : done] - before, 0) / job.rate
        )
        began = job.unit_start if done - 1 == first_new else float(ends[0])
        job.latency = float(ends[-1]) - began
        job.unit_start = float(ends[-1])

    # ------------------------------------------------------------------ telemetry

    def telemetry(self) -> Telemetry:
        states = {
            "starting": JobState.RUNNING,
            "booting": JobState.RUNNING,
            "running": JobState.RUNNING,
            "migrating": JobState.MIGRATING,
            "done": JobState.DONE,
        }
        jobs = []
        for job in self.jobs:
            if job.state == "unplaced":
                continue
            training = job.spec.kind is JobKind.TRAINING
            jobs.append(
                JobTelemetry(
                    job_id=job.spec.job_id,
                    workload=job.spec.workload,
                    kind=job.spec.kind,
                    state=states[job.state],
                    worker=job.worker,
                    slot=job.slot,
                    arrival_s=job.spec.arrival_s,
                    age_s=self.now - job.spec.arrival_s,
                    limit=job.limit,
                    cpu_usage=job.usage,
                    cpu_seconds=job.cpu_seconds,
                    target_s=job.spec.target_s,
                    tolerance=job.spec.tolerance,
                    batches=0 if training else job.units,
                    latency_s=None if math.isnan(job.latency) else job.latency,
                    iterations=job.units if training else 0,
                    total_iterations=job.total if training else None,
                    loss=None if math.isnan(job.loss) else job.loss,
                    completed_s=None if math.isnan(job.completed) else job.completed,
                    loss_targets=job.spec.loss_targets,
                    throttle_ratio=None if math.isnan(job.throttle_ratio) else job.throttle_ratio,
                )
            )
        workers = tuple(
            WorkerTelemetry(
                index,
                cores,
                sum(j.cpu_usage for j in jobs if j.worker == index and j.active),
            )
            for index, cores in enumerate(self.cores)
        )
        return Telemetry(self.now, self.scenario.interval_s, workers, tuple(jobs))
