"""Bounds on what any policy can achieve on a seed's episode of a replay scenario.

The oracle (:mod:`dlsched.baselines.oracle`) is a heuristic that reads the true profiles and
plans one interval ahead; it is not proven optimal. The bounds here say how far from the best
possible it, and every other policy, can be: each is computed from the seed's realised jobs
(arrival times, workloads, iterations, targets: :meth:`~dlsched.envs.scenarios.model.Scenario.
realise`), the replay model's draws for them (every unit's work, every racing job's levels:
:mod:`dlsched.envs.replay.episode_draws`) and their profiles, without simulating any policy.
No policy, whatever limits it sets and wherever it places or migrates jobs, does better on that
seed: a *true* bound of the metric the evaluation tables show, not an estimate.

**Training: a lower bound on the mean completion time** (``mean_completion_s``). In the replay
model a job's pace is its profile's throughput at the cores it gets, never above its demand nor
its worker's cores, times a factor that is 1 where its worker's runnable threads fit the cores
and otherwise its contention efficiency (at most 1) times its race's level term ``1 + (m - 1)
s(R)``, ``0 <= s(R) <= 1``. The last can exceed 1: a crowded job whose chain is at a level
``m > 1`` runs faster than alone at the same cores, so the bound lets it, by ``max(1, m)``
whenever another job of the episode has arrived (alone, no job is crowded). Two relaxations
follow, each a lower bound on every job's completion:

- *alone*: job ``j`` cannot start its first iteration before its arrival plus its start-up
  (a start-up on the CPU takes at least ``startup_cpu_s`` over its demand), and then completes
  its drawn work ``W_j`` no faster than at its profile's highest throughput (at its demand, on
  the largest worker) times that race factor, which gives ``lb_j``;
- *one machine*: a job needs at least ``W_j / (rho_j G_j)`` core-seconds, ``rho_j`` its
  profile's most units per core-second (the best ratio of throughput to cores up to its
  demand), ``G_j`` the highest race factor it can meet. However the jobs are placed and
  moved, the cores they get at any instant sum to at most the cluster's cores ``C``, so their
  core-seconds form a schedule of one machine of speed ``C`` with release dates (arrival plus
  start-up) and preemption, each job taking any share of it. Such a schedule can be made
  non-sharing with no completion later (run, at every instant, the released job that finishes
  first in it), and on one machine shortest remaining processing time first completes at
  least as many jobs as any schedule by every instant (Schrage, "A proof of the optimality of
  the shortest remaining processing time discipline", Operations Research 16(3), 1968). So the
  ``k``-th earliest completion of any policy is at least SRPT's ``k``-th, ``S_k``.

Every policy's completion times, sorted, are at least ``S_k`` rank by rank and at least
``lb_j`` job by job, so their sum is at least the least ``sum_k max(S_k, lb_pi(k))`` over the
assignments ``pi`` of jobs to ranks, which pairing both in ascending order gives (``max(a, b) =
(a + b + |a - b|) / 2``, and sorted pairing minimises the sum of ``|a - b|``). Minus the
arrivals, over the jobs: the bound. It ignores, each making it no higher: contention and quotas
(they only slow a job, but for the race's fast levels, which it grants), the demand cap within
the one machine, migrations' pauses, placement (the one machine pools every worker's cores, a
valid relaxation for any placement; bounds per worker would assume one), start-ups' CPU, and
the jobs that wait for a slot (none do where a bound is given, see below).

**Inference: an upper bound on the mean satisfied fraction** (``satisfied_fraction_mean``: at
every step after the reset with an active service, the services in S over the active ones,
averaged over those steps). Every service is placed when it arrives (see below) and runs until
the horizon, so the active services at each step are the same for every policy; the bound is
the mean of ``min(eligible_k, fitted_k) / active_k``:

- *eligible*: a service is in S at a step only if its last completed batch, some batch ``b``,
  took a latency within ``[(1 - alpha) o, (1 + alpha) o]`` of its target ``o`` and ended by
  then. Batch ``b`` ends no earlier than the arrival plus the start-up, plus the work of the
  batches before it at the profile's highest throughput, plus the larger of ``(1 - alpha) o``
  and its own work at that throughput; a batch whose work takes longer than ``(1 + alpha) o``
  even then is never satisfied (a target beyond the profile never is). ``eligible_k`` counts
  the services whose earliest such end is by step ``k``.
- *fitted*: such a service has completed the work of its batches up to the first it could
  satisfy, at least that work over ``rho_j`` core-seconds; shortest remaining processing time
  first on one machine of the cluster's cores completes the most of those by every instant
  (as for training), and ``fitted_k`` is its count by step ``k``.

It asks no more of a service than one satisfiable batch, because the metric counts a service by
the latency of its *last completed* batch: once a batch met the target, a policy can starve
the service (the floor, or migrations back and forth) and the batch in flight keeps it in S
until it completes, however long that takes. A count of the services whose cores at their
targets fit the workers at each interval (what the oracle admits) is therefore no bound: a
policy that satisfies one batch per service in turn and starves it after keeps more services
"satisfied" than fit (``tests/runs/evaluation/test_bounds.py`` runs one). The bound is what a
policy could show, not what it can sustain; where it stands far above the oracle, the distance
is that lag's as much as the oracle's.

**Where a bound is given** (:func:`bound_refusal`): on a backend that runs its jobs by the
scenario's profiles, deterministically, as built without options (on replay, a
``speed_spread`` would change the speeds the bound reads), and for a scenario in which every
job finds a slot the instant it arrives (no job pinned to a worker, at least as many slots as
jobs): then every job is placed at its arrival, in arrival order, whatever the policy, so its
draws are those :func:`~dlsched.envs.replay.episode_draws.job_draws` reads.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium.utils import seeding

from dlsched.envs.backend_registry import backend_class
from dlsched.envs.errors import ScenarioError
from dlsched.envs.loop import ARRIVED_EPS, episode_generators
from dlsched.envs.replay.episode_draws import JobDraws, job_draws
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.replay.profile_table import boot_demand
from dlsched.envs.replay.workload_profile import WorkloadProfile
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC
from dlsched.runs.evaluation.summaries import BoundSummary, summarise_bound

#: Relative slack that widens every comparison in the bound's favour (a satisfied band's ends,
#: a step's time), so that rounding in the engine's solved times never puts a policy past it.
SLACK = 1e-9


@dataclass(frozen=True)
class EpisodeBound:
    """The bound of one seed's episode.

    Attributes:
        seed: the ``reset`` seed.
        metric: the metric of :class:`~dlsched.runs.evaluation.metrics.EpisodeMetrics` it
            bounds (the scenario kind's primary metric).
        value: the bound: no policy's value of ``metric`` on this seed is better (lower for a
            completion time, higher for a fraction); ``None`` where the metric is undefined for
            every policy (an episode without jobs).
    """

    seed: int
    metric: str
    value: float | None


def bound_refusal(
    scenario: Scenario, backend: str, backend_options: Mapping[str, str]
) -> str | None:
    """Why no bound is given for ``scenario`` on ``backend`` with ``backend_options``; ``None``
    where one is (see the module docstring)."""
    capabilities = backend_class(backend).capabilities
    if not (capabilities.reads_profiles and capabilities.deterministic):
        return f"the {backend} backend does not run its jobs by the scenario's profiles"
    if backend_options:
        listed = ", ".join(f"{key}={value}" for key, value in sorted(backend_options.items()))
        return f"the {backend} backend runs with options ({listed}) the bound does not model"
    return _waiting(scenario)


def _waiting(scenario: Scenario) -> str | None:
    """Why a job of ``scenario`` may wait for a slot (then its placement, and its draws,
    depend on the policy); ``None`` if none can."""
    pinned = sorted({group.worker for group in scenario.groups if group.worker is not None})
    if pinned:
        return f"scenario {scenario.name!r} pins jobs to workers {pinned}, where they may wait"
    slots = len(scenario.workers) * scenario.slots_per_worker
    if scenario.max_jobs > slots:
        return (
            f"scenario {scenario.name!r} has up to {scenario.max_jobs} jobs for {slots} slots, "
            "so some may wait for one"
        )
    return None


def episode_bounds(scenario: Scenario, seeds: Sequence[int]) -> tuple[EpisodeBound, ...]:
    """The bound of each seed's episode of ``scenario``, in the order of ``seeds``.

    Raises:
        ScenarioError: a job of the scenario may wait for a slot (no bound holds then), or its
            workloads do not fit its profile set.
    """
    waiting = _waiting(scenario)
    if waiting is not None:
        raise ScenarioError(
            f"no bound: {waiting}; expected every job to find a slot when it arrives. Give "
            "every worker enough slots_per_worker for all the jobs and pin none"
        )
    metric = PRIMARY_METRIC[scenario.kind]
    return tuple(EpisodeBound(seed, metric, _seed_bound(scenario, seed)) for seed in seeds)


def evaluation_bound(
    scenario: Scenario, backend: str, backend_options: Mapping[str, str], seeds: Sequence[int]
) -> BoundSummary | None:
    """The bound of ``scenario``'s primary metric on ``seeds``, summarised across them, where
    one is given on ``backend`` with ``backend_options`` (:func:`bound_refusal`); else
    ``None``."""
    if bound_refusal(scenario, backend, backend_options) is not None:
        return None
    bounds = episode_bounds(scenario, seeds)
    return summarise_bound({bound.seed: bound.value for bound in bounds}, scenario.kind)


def _seed_bound(scenario: Scenario, seed: int) -> float | None:
    """The bound of the episode ``reset(seed=seed)`` runs: its jobs and draws as its reset
    makes them (the generator of Gymnasium's seeding, split as the loop splits it)."""
    rng, _ = seeding.np_random(seed)
    jobs_rng, backend_rng = episode_generators(rng)
    jobs = scenario.realise(jobs_rng)
    if not jobs:
        return None
    draws = job_draws(scenario, jobs, backend_rng)
    if scenario.kind is JobKind.TRAINING:
        return mean_completion_bound(scenario, jobs, draws)
    return satisfied_fraction_bound(scenario, jobs, draws)


# ------------------------------------------------------------------------------ training


def mean_completion_bound(
    scenario: Scenario, jobs: Sequence[JobSpec], draws: Sequence[JobDraws]
) -> float:
    """A lower bound on the mean completion time (seconds from arrival to finish) of ``jobs``
    under any policy (the module docstring argues it).

    Args:
        scenario: the scenario (workers, profile set).
        jobs: the episode's training jobs, each placed when it arrives.
        draws: their draws, in the same order (:func:`~dlsched.envs.replay.episode_draws.
            job_draws`).
    """
    paces = _paces(scenario, jobs)
    arrivals = np.array([job.arrival_s for job in jobs])
    alone, sizes, releases = [], [], []
    for index, (job, draw, pace) in enumerate(zip(jobs, draws, paces, strict=True)):
        others = np.delete(arrivals, index)
        crowded_from = float(others.min()) if len(others) else math.inf
        work = float(draw.unit_bounds[-1])
        release = job.arrival_s + pace.startup_s
        times, factors = _race_speedups(job.arrival_s, crowded_from, draw)
        alone.append(_finish(release, work, pace.fastest, times, factors))
        sizes.append(work / (pace.per_core * max(1.0, *factors)))
        releases.append(release)
    ranked = np.sort(_shortest_remaining_first(releases, sizes, scenario.cluster_cores))
    completions = np.maximum(ranked, np.sort(alone))
    return float(np.mean(completions) - np.mean(arrivals))


def _race_speedups(
    arrival_s: float, crowded_from_s: float, draw: JobDraws
) -> tuple[np.ndarray, np.ndarray]:
    """When a job's highest pace over its profile's changes, and to what: ``max(1, m)`` at its
    race's level ``m`` from the first instant another job may share its worker, 1 before (and
    throughout for a job that does not race)."""
    if not len(draw.race_levels) or crowded_from_s == math.inf:
        return np.zeros(1), np.ones(1)
    starts = arrival_s + draw.race_starts_s
    factors = np.maximum(1.0, draw.race_levels)
    # the levels a job holds before it can be crowded do not speed it
    begins = np.maximum(starts, crowded_from_s)
    held = np.append(starts[1:], math.inf) > crowded_from_s
    return np.concatenate(([0.0], begins[held])), np.concatenate(([1.0], factors[held]))


def _finish(
    start_s: float, work: float, rate: float, times: np.ndarray, factors: np.ndarray
) -> float:
    """When ``work`` units are done from ``start_s`` at ``rate`` times ``factors[i]`` from
    ``times[i]`` on (``times`` ascending, from 0)."""
    at = start_s
    left = work
    ends = np.append(times[1:], math.inf)
    for end, factor in zip(ends.tolist(), factors.tolist(), strict=True):
        if end <= at:
            continue
        done = (end - at) * rate * factor
        if done >= left:
            return at + left / (rate * factor)
        left -= done
        at = end
    raise AssertionError("the last speed-up lasts for ever")


# ------------------------------------------------------------------------------ inference


def satisfied_fraction_bound(
    scenario: Scenario, jobs: Sequence[JobSpec], draws: Sequence[JobDraws]
) -> float | None:
    """An upper bound on the mean over the steps of the satisfied share of the active services
    of ``jobs`` under any policy (the module docstring argues it); ``None`` if no step has an
    active service.

    Args:
        scenario: the scenario (workers, profile set, interval, horizon).
        jobs: the episode's services, each placed when it arrives.
        draws: their draws, in the same order (:func:`~dlsched.envs.replay.episode_draws.
            job_draws`).
    """
    paces = _paces(scenario, jobs)
    earliest, sizes, releases = [], [], []
    for job, draw, pace in zip(jobs, draws, paces, strict=True):
        target = job.target_s
        assert target is not None, "a service has a target"
        release = job.arrival_s + pace.startup_s
        ends = draw.unit_bounds
        works = np.diff(ends, prepend=0.0)
        fastest = works / pace.fastest
        satisfiable = fastest <= (1.0 + job.tolerance) * target * (1.0 + SLACK)
        if not satisfiable.any():
            continue  # never in S
        before = (ends - works) / pace.fastest
        shortest = (1.0 - job.tolerance) * target * (1.0 - SLACK)
        shown = release + before + np.maximum(shortest, fastest)
        first = int(np.argmax(satisfiable))
        earliest.append(float(shown[satisfiable].min()))
        sizes.append(float(ends[first]) / pace.per_core)
        releases.append(release)
    earliest_sorted = np.sort(earliest)
    fitted = np.sort(_shortest_remaining_first(releases, sizes, scenario.cluster_cores))
    arrivals = np.sort([job.arrival_s for job in jobs])
    fractions = []
    for time in _step_times(scenario):
        active = int(np.searchsorted(arrivals, time + ARRIVED_EPS, side="right"))
        if not active:
            continue
        late = time * (1.0 + SLACK) + SLACK
        shown_by = int(np.searchsorted(earliest_sorted, late, side="right"))
        fitted_by = int(np.searchsorted(fitted, late, side="right"))
        fractions.append(min(shown_by, fitted_by) / active)
    return statistics.fmean(fractions) if fractions else None


def _step_times(scenario: Scenario) -> list[float]:
    """The times of the steps after the reset, summed as the loop sums them, to the horizon."""
    times = []
    now = 0.0
    while now < scenario.horizon_s - 1e-9:
        now = now + scenario.interval_s
        times.append(now)
    return times


# ------------------------------------------------------------------------------ shared


@dataclass(frozen=True)
class _Pace:
    """What a job's profile allows at best: its highest throughput (units per second, at its
    demand on the largest worker), its most units per core-second, its shortest start-up."""

    fastest: float
    per_core: float
    startup_s: float


def _paces(scenario: Scenario, jobs: Sequence[JobSpec]) -> list[_Pace]:
    profiles = load_profile_set(scenario.profile_set)
    largest = max(worker.cores for worker in scenario.workers)
    known: dict[str, _Pace] = {}
    for job in jobs:
        if job.workload not in known:
            known[job.workload] = _pace(profiles[job.workload], largest)
    return [known[job.workload] for job in jobs]


def _pace(profile: WorkloadProfile, largest_cores: float) -> _Pace:
    cap = min(profile.demand_cores, largest_cores)
    # throughput is linear between its points from (0, 0) and flat beyond the last, so units
    # per core are monotone on each piece: their most is at a point or at the cap
    cores = np.array([c for c in profile.throughput.cores if c < cap] + [cap])
    per_core = float(np.max(profile.units_per_s(cores) / cores))
    booting = boot_demand(profile, largest_cores)
    startup = profile.startup_cpu_s / booting if booting > 0 and profile.startup_cpu_s else 0.0
    return _Pace(float(profile.units_per_s(cap)), per_core, max(profile.startup_s, startup))


def _shortest_remaining_first(
    releases: Sequence[float], sizes: Sequence[float], speed: float
) -> np.ndarray:
    """The completion times of jobs of ``sizes`` released at ``releases`` on one machine of
    ``speed``, preemptive shortest remaining processing time first (ties: the first job)."""
    count = len(sizes)
    done = np.full(count, math.inf)
    left = np.array(sizes, dtype=float)
    release = np.array(releases, dtype=float)
    order = np.argsort(release, kind="stable")
    now = float(release[order[0]]) if count else 0.0
    waiting: list[int] = []
    next_arrival = 0
    while next_arrival < count or waiting:
        while next_arrival < count and release[order[next_arrival]] <= now:
            waiting.append(int(order[next_arrival]))
            next_arrival += 1
        if not waiting:
            now = float(release[order[next_arrival]])
            continue
        job = min(waiting, key=lambda j: (left[j], j))
        arrival = release[order[next_arrival]] if next_arrival < count else math.inf
        finish = now + left[job] / speed
        if finish <= arrival:
            now = finish
            left[job] = 0.0
            done[job] = finish
            waiting.remove(job)
        else:
            left[job] -= (arrival - now) * speed
            now = float(arrival)
    return done
