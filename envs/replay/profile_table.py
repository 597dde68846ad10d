"""The workload profiles of one scenario as the replay engine reads them: one row per workload.

:class:`ProfileTable` checks a scenario's workloads against its profile set once (known, of the
scenario's kind and threading) and lays out what the engine looks up per job by its workload's
index: throughput curves, CPU demand, threading, the contention terms
(:mod:`dlsched.envs.replay.contention`), the throttling curves
(:mod:`dlsched.envs.replay.throttling`), start-up and noise. Every per-workload array has one
entry more, at the end, for padding columns (index ``-1``): a job that is no job demands nothing
and never slows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dlsched.envs.errors import ScenarioError, UnknownNameError
from dlsched.envs.replay.profile import (
    load_profile_set,
    load_set_contention,
    load_set_throttling,
)
from dlsched.envs.replay.workload_profile import WorkloadProfile
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.size_bounds import MAX_ITERATIONS, MAX_UNITS_PER_STEP


class ProfileTable:
    """The profiles of ``scenario``'s workloads (or of ``workloads``), by index (see the module
    docstring).

    Attributes:
        names: the workloads, sorted; a job's index is its workload's position here.
        profiles: their profiles, in that order.
        curves: per workload, its throughput curve from 0 cores, ``(cores, units_per_s)``.
        demand, stock, exponent, floor, bound_scale, beside_startup, boot_demand, startup_s,
        startup_cpu_s, noisy, sigma: per workload (and padding last), what the engine copies
            into a job's columns or reads by its index.
        max_iterations: the most iterations an episode's training jobs run, summed (what the
            engine draws and keeps for them).
        races: per workload (no padding), its threading's race, if the set has one and the
            workload trains: services do not race (their latencies repeat over host reruns,
            ``docs/fidelity.md``).
        racing: whether any job of the scenario races (a race and a contention term).
        throttles: whether the set has a throttling model (:mod:`dlsched.envs.replay.
            throttling`): else no job's throttle ratio is modelled.
        half_pressure, burstiness: per workload (and padding last), its throttling curve.

    Raises:
        UnknownNameError: a workload of the scenario is not in its profile set.
        ScenarioError: a workload's kind or threading differs from the scenario's.
        ProfileError: a profile of the set is malformed.
    """

    def __init__(self, scenario: Scenario, workloads: Sequence[str] | None = None) -> None:
        profiles = load_profile_set(scenario.profile_set)
        contention = load_set_contention(scenario.profile_set)
        self.names = sorted(set(workloads)) if workloads is not None else scenario.workload_names()
        for name in self.names:
            _check(scenario, name, profiles)
        self.profiles: list[WorkloadProfile] = [profiles[name] for name in self.names]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.curves = [
            (np.array((0.0, *p.throughput.cores)), np.array((0.0, *p.throughput.units_per_s)))
            for p in self.profiles
        ]
        every = self.profiles
        max_cores = max(worker.cores for worker in scenario.workers)
        self.demand = _padded([p.demand_cores for p in every], 0.0)
        self.stock = _padded([p.threading == "stock" for p in every], False)
        self.exponent = _padded(
            [
                p.contention_exponent
                if p.contention_exponent is not None
                else contention.exponents.get(p.threading, 0.0)
                for p in every
            ],
            0.0,
        )
        self.floor = _padded([p.contention_floor or 0.0 for p in every], 0.0)
        self.bound_scale = _padded(
            [contention.bound_scales.get(p.threading, 1.0) for p in every], 1.0
        )
        self.beside_startup = _padded([p.efficiency_beside_startup or 1.0 for p in every], 1.0)
        self.boot_demand = _padded([boot_demand(p, max_cores) for p in every], 0.0)
        self.startup_s = _padded([p.startup_s for p in every], 0.0)
        self.startup_cpu_s = _padded([p.startup_cpu_s or 0.0 for p in every], 0.0)
        # A profile with noise draws its unit factors; one without draws nothing (factors 1).
        self.noisy = _padded([p.noise_cv != 0.0 for p in every], False)
        self.sigma = _padded(
            [lognormal_sigma(p.noise_cv) if p.noise_cv != 0.0 else 0.0 for p in every], 0.0
        )
        # No job of the scenario slows under contention where no workload has an exponent (no
        # profile sets a start-up efficiency without one).
        self.contends = bool((self.exponent > 0).any())
        #: Per workload, its threading's race (:mod:`~dlsched.envs.replay.race`), if it has one.
        self.races = [
            contention.races.get(p.threading) if p.kind is JobKind.TRAINING else None for p in every
        ]
        # A race changes only the efficiency of a crowded job, which only contention slows.
        self.racing = self.contends and any(race is not None for race in self.races)
        throttling = load_set_throttling(scenario.profile_set)
        self.throttles = throttling is not None
        curves = [throttling.curve(name) for name in self.names] if throttling else []
        self.half_pressure = _padded([curve.half_pressure for curve in curves], 1.0)
        self.burstiness = _padded([curve.burstiness for curve in curves], 1.0)
        self._check_units_per_step(scenario, max_cores)
        self.max_iterations = self._max_iterations(scenario)

    def _check_units_per_step(self, scenario: Scenario, cores: float) -> None:
        """Refuse a scenario whose steps are so long that a job would complete more units than
        :data:`~dlsched.envs.size_bounds.MAX_UNITS_PER_STEP` in one: the model draws and
        completes each, so a step's work grows with its simulated time.

        Raises:
            ScenarioError: naming the workload, its throughput, the interval and the limit.
        """
        for profile in self.profiles:
            fastest = float(profile.units_per_s(min(profile.demand_cores, cores)))
            units = scenario.interval_s * fastest
            if MAX_UNITS_PER_STEP.exceeded(units):
                units_of = "batches" if profile.kind is JobKind.INFERENCE else "iterations"
                raise ScenarioError(
                    f"scenario {scenario.name!r}: a step of interval_s = {scenario.interval_s:g} s "
                    f"holds {units:.3g} {units_of} of workload {profile.workload!r} ({fastest:.3g} "
                    f"a second, uncapped): expected {MAX_UNITS_PER_STEP.expected()}; shorten "
                    "interval_s"
                )

    def _max_iterations(self, scenario: Scenario) -> int:
        """The most iterations an episode's training jobs run, summed: each group at its
        largest count, each job at its own iterations or its workloads' largest default.

        Raises:
            ScenarioError: above :data:`~dlsched.envs.size_bounds.MAX_ITERATIONS`.
        """
        total = 0
        for group in scenario.groups:
            defaults = [
                self.profiles[self.index[name]].iterations
                for name in group.workloads
                if name in self.index
            ]
            each = group.max_iterations or max((d for d in defaults if d is not None), default=0)
            total += group.max_count * each
        if scenario.kind is JobKind.TRAINING and MAX_ITERATIONS.exceeded(total):
            raise ScenarioError(
                f"scenario {scenario.name!r}: its training jobs run up to {total:,} iterations "
                f"an episode: expected {MAX_ITERATIONS.expected()}; set fewer iterations or jobs"
            )
        return total

    def total_iterations(self, job: JobSpec) -> int:
        """Iterations ``job`` runs (its own, else its workload's default); 0 for a service.

        Raises:
            UnknownNameError: its workload is not one of the table's.
            ScenarioError: its kind is not its workload's, or a training job sets no iterations
                and its workload has no default.
        """
        if job.workload not in self.index:
            raise UnknownNameError(f"workload (job {job.job_id})", job.workload, self.names)
        kind = self.profiles[self.index[job.workload]].kind
        if job.kind is not kind:
            raise ScenarioError(
                f"job {job.job_id} is a {job.kind.value} job but workload {job.workload!r} is a "
                f"{kind.value} profile; use a {job.kind.value} workload"
            )
        if job.kind is not JobKind.TRAINING:
            return 0
        if job.iterations is not None:
            return job.iterations
        profile = self.profiles[self.index[job.workload]]
        if profile.iterations is None:
            raise ScenarioError(
                f"job {job.job_id} sets no iterations and training workload "
                f"{profile.workload!r} has no default; set iterations in the scenario"
            )
        return profile.iterations


def _check(scenario: Scenario, name: str, profiles: dict[str, WorkloadProfile]) -> None:
    """Refuse workload ``name`` of ``scenario`` unless its set profiles it for the scenario's
    kind and threading."""
    if name not in profiles:
        raise UnknownNameError(f"workload (profile set {scenario.profile_set!r})", name, profiles)
    profile = profiles[name]
    if scenario.workload_threading not in (None, profile.threading):
        raise ScenarioError(
            f"scenario {scenario.name!r} runs {scenario.workload_threading} workloads but "
            f"workload {name!r} is profiled with {profile.threading} threading in set "
            f"{scenario.profile_set!r}; use a set profiled with "
            f"{scenario.workload_threading} threading"
        )
    if profile.kind is not scenario.kind:
        raise ScenarioError(
            f"workload {name!r} is a {profile.kind.value} profile in set "
            f"{scenario.profile_set!r} but scenario {scenario.name!r} runs "
            f"{scenario.kind.value} jobs; use a {scenario.kind.value} workload"
        )


def _padded(values: list[float] | list[bool], padding: float | bool) -> np.ndarray:
    return np.array([*values, padding])


def boot_demand(profile: WorkloadProfile, cores: float) -> float:
    """Cores a profile's start-up keeps busy (0: start-up uses no CPU)."""
    if not profile.startup_cpu_s or profile.startup_s <= 0:
        return 0.0
    return min(profile.startup_cpu_s / profile.startup_s, cores)


def lognormal_sigma(cv: float) -> float:
    """The sigma of the normal whose exponential has mean 1 and coefficient of variation ``cv``."""
    return math.sqrt(math.log1p(cv * cv))


def lognormal(rng: np.random.Generator, cv: float, count: int) -> np.ndarray:
    """``count`` lognormal factors of mean 1 and coefficient of variation ``cv``."""
    if cv == 0.0:
        return np.ones(count)
    sigma = lognormal_sigma(cv)
    return np.exp(sigma * rng.standard_normal(count) - 0.5 * sigma * sigma)
