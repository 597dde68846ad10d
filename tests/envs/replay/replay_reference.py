"""A readable replay model, one job at a time: the oracle the replay engine is held against.

The package's replay model (:mod:`dlsched.envs.replay.engine`) holds many episodes in arrays and
is written for speed. This module writes the same model (docs/replay-model.md) plainly, per job
and per event, as a :class:`~dlsched.envs.backend.Backend` of one episode at a time, as the
Docker backend is: an environment made with ``backend=ReferenceReplay()`` drives its
:class:`ReferenceEpisode`, which writes its jobs into the batch's arrays after each call.
``test_replay_vector.py`` (beside it)
holds the engine's episodes equal to this model's, step by step. It shares with the engine only
what is tested on its own: the profiles, water-filling, the contention formulas and the
throttling curves. It has no
race (``envs/replay/race.py``): sets that carry one are held against it without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from dlsched.envs.backend import Backend, BackendCapabilities
from dlsched.envs.episode_batch import (
    BOOTING,
    DONE,
    HAS_ENDED,
    MIGRATING,
    RUNNING,
    STARTING,
    UNPLACED,
    EpisodeBatch,
    EpisodeJobs,
    Generators,
    Move,
)
from dlsched.envs.errors import BackendError
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


#: A reference job's phase in the batch's arrays, by its state.
PHASES = {
    "unplaced": UNPLACED,
    "starting": STARTING,
    "booting": BOOTING,
    "running": RUNNING,
    "migrating": MIGRATING,
    "done": DONE,
}


class ReferenceReplay(Backend):
    """The replay model, one job at a time (see the module docstring)."""

    name: ClassVar[str] = "reference"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        simulated_time=True, deterministic=True, batchable=False, reads_profiles=True
    )

    def __init__(self, loss_noise_cv: float = 0.01) -> None:
        self.loss_noise_cv = loss_noise_cv

    def episode_batch(
        self, scenario: Scenario, episodes: int, jobs: Sequence[JobSpec] | None = None
    ) -> ReferenceEpisode:
        if episodes != 1:
            raise BackendError(f"the reference runs one episode at a time, not {episodes}")
        return ReferenceEpisode(scenario, self.loss_noise_cv, None if jobs is None else len(jobs))


class ReferenceEpisode(EpisodeBatch):
    """One episode of the reference model, its jobs written into the arrays after each call."""

    def __init__(self, scenario: Scenario, loss_noise_cv: float, jobs: int | None) -> None:
        super().__init__(scenario, 1, jobs)
        self.loss_noise_cv = loss_noise_cv

    def reset_rows(self, rows: Sequence[int], episodes: EpisodeJobs, rngs: Generators) -> None:
        assert list(rows) == [0]
        self.reset(episodes[0], rngs[0])
        ordered = tuple(job.spec for job in self.jobs_of)
        self.state.describe(np.zeros(1, dtype=np.int64), [ordered])
        self.set_jobs(0, ordered)
        self.write()

    def place(
        self, rows: np.ndarray, jobs: np.ndarray, workers: np.ndarray, slots: np.ndarray
    ) -> None:
        for job, worker, slot in zip(jobs.tolist(), workers.tolist(), slots.tolist(), strict=True):
            self.place_job(self.jobs_of[job], worker, slot)
        self.write()

    def apply(self, limits: np.ndarray, migrations: Sequence[Move]) -> None:
        for move in migrations:
            self.migrate(self.jobs_of[move.job], move.worker, move.slot)
        for job, limit in zip(self.jobs_of, limits[0].tolist(), strict=False):
            if job.state not in ("unplaced", "done"):
                job.limit = limit
        self.write()

    def advance(self, rows: np.ndarray, seconds: np.ndarray) -> None:
        if rows[0]:
            self.advance_by(float(seconds[0]))
            self.write()

    # ------------------------------------------------------------------ the episode

    def reset(self, jobs: Sequence[JobSpec], rng: np.random.Generator) -> None:
        scenario = self.scenario
        profiles = load_profile_set(scenario.profile_set)
        contention = load_set_contention(scenario.profile_set)
        self.throttling = load_set_throttling(scenario.profile_set)
        self.rng = rng
        self.time = 0.0
        self.jobs_of: list[Job] = []
        for spec in sorted(jobs, key=lambda job: (job.arrival_s, job.job_id)):
            profile = profiles[spec.workload]
            exponent = profile.contention_exponent
            if exponent is None:
                exponent = contention.exponents.get(profile.threading, 0.0)
            training = spec.kind is JobKind.TRAINING
            total = (spec.iterations or profile.iterations or 0) if training else 0
            bound_scale = contention.bound_scales.get(profile.threading, 1.0)
            self.jobs_of.append(Job(spec, profile, total, exponent, bound_scale))

    def migrate(self, job: Job, worker: int, slot: int) -> None:
        resume = self.time + self.scenario.migration_cost_s
        if job.state == "starting":  # a timed start-up ends no earlier than it would have
            resume = max(resume, job.resume_s)
        job.worker, job.slot, job.state, job.resume_s = worker, slot, "migrating", resume

    def place_job(self, job: Job, worker: int, slot: int) -> None:
        job.worker, job.slot, job.limit = worker, slot, 1.0
        if job.boot_demand > 0:
            job.state = "booting"
            job.startup_left = job.profile.startup_cpu_s or 0.0
        else:
            job.state = "starting"
            job.resume_s = self.time + job.profile.startup_s
        job.rng = np.random.default_rng(int(self.rng.integers(2**63)))
        if job.spec.kind is JobKind.TRAINING:
            job.bounds = np.cumsum(lognormal(job.rng, job.profile.noise_cv, job.total))
            curve = np.asarray(job.profile.loss_at(np.arange(1, job.total + 1, dtype=float)))
            job.losses = curve * lognormal(job.rng, self.loss_noise_cv, job.total)
        else:
            job.bounds = np.cumsum(lognormal(job.rng, job.profile.noise_cv, DRAWS))

    def advance_by(self, seconds: float) -> None:
        end = self.time + seconds
        spent = [job.cpu_seconds for job in self.jobs_of]
        for job in self.jobs_of:
            job.throttled_s = job.quota_s = 0.0
        self.wake()
        while self.time < end:
            self.allocate()
            until = self.next_event(end)
            self.integrate(until)
            self.time = until
            self.wake()
        self.time = end
        if seconds > 0:
            for job, before in zip(self.jobs_of, spent, strict=True):
                job.usage = (job.cpu_seconds - before) / seconds
                measured = job.quota_s > 0 and job.state != "done"
                job.throttle_ratio = (
                    min(job.throttled_s / job.quota_s, 1.0) if measured else math.nan
                )

    # ------------------------------------------------------------------ the model

    def wake(self) -> None:
        """Start the first unit of jobs whose start-up ended; resume paused ones."""
        for job in self.jobs_of:
            if job.state == "booting" and job.startup_left <= EPS:
                job.startup_left, job.unit_start, job.state = 0.0, self.time, "running"
        for job in self.jobs_of:
            if job.state in ("starting", "migrating") and job.resume_s <= self.time:
                if job.startup_left > 0:  # migrated while it started up on the CPU
                    job.state = "booting"
                else:
                    if math.isnan(job.unit_start):
                        job.unit_start = job.resume_s
                    job.state = "running"
                job.resume_s = math.inf

    def allocate(self) -> None:
        """Every worker's shares by water-filling, then rates, slowed by contention."""
        for job in self.jobs_of:
            job.share = job.rate = 0.0
            job.throttle = math.nan
        for worker, cores in enumerate(self.cores):
            members = [
                job
                for job in self.jobs_of
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
        until = min([end, *(job.resume_s for job in self.jobs_of)])
        for job in self.jobs_of:
            if job.state == "booting" and job.share > 0:  # its start-up's CPU is delivered
                until = min(until, self.time + job.startup_left / job.share)
            if job.state == "running" and job.total and job.rate > 0:
                left = max(float(job.bounds[-1]) - job.work, 0.0)
                until = min(until, self.time + left / job.rate)
        return until

    def integrate(self, until: float) -> None:
        """Constant shares from now to ``until``; record the units that complete."""
        span = until - self.time
        for job in self.jobs_of:
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
            until,
            self.time + np.maximum(job.bounds[max(done - 2, 0) : done] - before, 0) / job.rate,
        )
        began = job.unit_start if done - 1 == first_new else float(ends[0])
        job.latency = float(ends[-1]) - began
        job.unit_start = float(ends[-1])

    # ------------------------------------------------------------------ the arrays

    def write(self) -> None:
        """Write every job as it is now into the batch's row."""
        state = self.state
        self.now[0] = self.time
        for column, job in enumerate(self.jobs_of):
            phase = PHASES[job.state]
            if HAS_ENDED[phase] and not HAS_ENDED[state.phase[0, column]]:
                self.ended_jobs += 1
            at = (0, column)
            state.phase[at] = phase
            state.worker[at] = job.worker
            state.slot[at] = job.slot
            state.limit[at] = job.limit
            state.cpu_seconds[at] = job.cpu_seconds
            state.usage[at] = job.usage
            state.units[at] = job.units
            state.latency[at] = job.latency
            state.loss[at] = job.loss
            state.completed[at] = job.completed
            state.total[at] = job.total
            state.throttle_ratio[at] = job.throttle_ratio
