"""``oracle``: a privileged heuristic that CHEATS by reading the replay model's true profiles.

No real scheduler could do this: it reads each job's workload profile (its throughput against the
CPU it gets, its CPU demand, its iterations), the very profile set the replay backend runs the
jobs by, which telemetry never shows. It exists so that every other policy's result can be read
against what a scheduler that knew the profiles achieves; it runs on the replay backend only and
refuses any other. It is not the best possible: how far it (and every policy) is from a bound no
policy can beat is what :mod:`dlsched.runs.evaluation.bounds` computes, the ``x bound`` column
of ``dlsched evaluate`` (its distance on the papers' scenarios: ``docs/papers/README.md``).

- **Inference**: every interval and on each worker, the allocation that maximises the number of
  satisfied services. A service needs the cores at which its profile gives a batch latency of
  ``aim`` times its target; services are admitted from the cheapest up while their needs fit in
  the worker (for a count of satisfied services, cheapest-first is optimal), each capped at its
  need, and the services left out share what remains equally. Services whose target is beyond
  their profile (faster than uncapped) are never admitted. Where an equal share of the worker
  would keep every service of it within its band (``equal_when_all_fit``), the worker is shared
  equally instead: as many are satisfied, and none is held at the exact edge of its need, which
  the run-to-run noise and a capped stock service's throttling push it over (on
  ``docker-inference-3-stock`` the exact needs satisfied 0.851 of the services, equal shares
  0.883; nothing changed on the other shipped inference scenarios).
- **Frugal** (``frugal=True``, a teacher for schedulers that save CPU): the same admission, but
  the cores no admitted service needs stay idle: the services left out get the floor, and a
  worker whose services all fit gives each its need rather than an equal share. A worker is
  shared equally only where an equal share keeps every service within its band and their needs,
  exactly met, do not all fit: there the equal share satisfies more, which outweighs its cores
  under the ``satisfied_fraction_cores`` reward (a satisfied service is worth more than the
  charge on a whole worker). It plans to satisfy at least the services the default oracle admits
  with the cores they need (the services it starves crowd the others less, so it may satisfy
  more), which is what a scheduler charged for the cores it holds should learn to do.
- **Training**: shortest remaining work first. On each worker, jobs ordered by the time they
  would still need alone (remaining iterations over their uncapped throughput) get their CPU
  demand in that order until the worker is full; the rest get the environment's floor.
- **Placement** (several workers): an arriving service goes where it raises the number of
  services that can be satisfied most (then the fewest jobs); an arriving training job goes where
  the remaining work per core, its own included, is lowest.

It plans in steady state, one interval at a time: it knows the profiles but not the per-batch
noise draws, and a batch in flight finishes at the speed of the limits it ran under.
Shortest-remaining-work-first aims at the mean completion time (on one machine it minimises it),
not at the makespan, which it may lengthen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dlsched.baselines.base import Baseline
from dlsched.baselines.parameters import check_flag, check_number
from dlsched.envs.decision import Decision
from dlsched.envs.errors import PolicyError
from dlsched.envs.placement import Placer
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.replay.workload_profile import WorkloadProfile
from dlsched.envs.scenarios.model import JobKind, JobSpec
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry

#: Bisection steps when inverting a throughput curve: 60 halvings reach float precision.
_BISECTION_STEPS = 60
#: Inversions the oracle remembers before it starts again (a profile set read from a folder is
#: read anew at every call, so its profiles are new objects each time).
_REMEMBERED = 4096


@dataclass(frozen=True)
class ServiceNeed:
    """The cores one inference service needs to meet its target (``None``: it cannot)."""

    job_id: str
    cores: float | None


@dataclass(frozen=True)
class TrainingWork:
    """One training job's remaining work: seconds it needs alone, and the cores it can use."""

    job_id: str
    remaining_s: float
    demand_cores: float


def cores_for_rate(
    units_per_s: Callable[[float], float], rate: float, demand_cores: float
) -> float | None:
    """The fewest cores at which ``units_per_s`` reaches ``rate`` (``None`` if it never does).

    Args:
        units_per_s: throughput against cores, non-decreasing, flat above ``demand_cores``.
        rate: the throughput wanted (units per second).
        demand_cores: the cores beyond which more CPU does not help.
    """
    if units_per_s(demand_cores) < rate:
        return None
    low, high = 0.0, demand_cores
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        if units_per_s(middle) >= rate:
            high = middle
        else:
            low = middle
    return high


def admitted(needs: Sequence[ServiceNeed], capacity: float) -> list[ServiceNeed]:
    """The services that can all be satisfied together, cheapest first, within ``capacity``."""
    chosen: list[ServiceNeed] = []
    left = capacity
    for need in sorted(needs, key=lambda n: (n.cores if n.cores is not None else 0.0, n.job_id)):
        if need.cores is None:
            continue
        if need.cores > left:
            break
        chosen.append(need)
        left -= need.cores
    return chosen


def satisfy_most(
    needs: Sequence[ServiceNeed], capacity: float, share_the_rest: bool = True
) -> dict[str, float]:
    """Cores per service that satisfy as many as fit in ``capacity`` (cheapest first).

    Admitted services get exactly their need; the others share the rest equally
    (``share_the_rest``) or get none of it (0 cores: the environment's floor).
    """
    cores = {need.job_id: need.cores for need in admitted(needs, capacity) if need.cores}
    left = capacity - sum(cores.values()) if share_the_rest else 0.0
    rest = [need.job_id for need in needs if need.job_id not in cores]
    for job_id in rest:
        cores[job_id] = left / len(rest)
    return cores


def equal_share_satisfies(need: ServiceNeed, share: float, tolerance: float) -> bool:
    """Whether ``share`` cores keep a service of ``need`` within its band: neither fewer than
    its need over ``1 + tolerance`` nor more than over ``1 - tolerance`` (a latency inversely
    proportional to the cores around the need)."""
    if need.cores is None:
        return False
    return need.cores / (1 + tolerance) <= share <= need.cores / (1 - tolerance)


def shortest_first(works: Sequence[TrainingWork], capacity: float) -> dict[str, float]:
    """Cores per job: their demand, shortest remaining time first, until ``capacity`` is used."""
    cores: dict[str, float] = {}
    left = capacity
    for work in sorted(works, key=lambda w: (w.remaining_s, w.job_id)):
        cores[work.job_id] = min(work.demand_cores, left)
        left -= cores[work.job_id]
    return cores


class CheatingOracle(Baseline):
    """A heuristic that cheats: it plans from the replay model's true profiles (replay only).

    See the module docstring for what it reads and how it plans.

    Args:
        aim: the batch latency it plans for, as a fraction of each service's target; 1 aims at
            the middle of the satisfied band, which leaves room for the run-to-run noise.
        equal_when_all_fit: share a worker equally where an equal share keeps each of its
            services within its band (see the module docstring).
        frugal: hold back the cores no admitted service needs: a service that cannot be
            satisfied gets the floor instead of a share of what is left, and a worker whose
            services' needs all fit gives each its need instead of an equal share (see the
            module docstring).
    """

    name = "oracle"

    def __init__(
        self, aim: float = 1.0, equal_when_all_fit: bool = True, frugal: bool = False
    ) -> None:
        super().__init__()
        self.aim = check_number(self.name, "aim", aim, low=0.0, low_open=True)
        self.equal_when_all_fit = check_flag(self.name, "equal_when_all_fit", equal_when_all_fit)
        self.frugal = check_flag(self.name, "frugal", frugal)
        self._placer = CheatingPlacer(self)
        self._cores_known: dict[tuple[int, float], tuple[WorkloadProfile, float | None]] = {}

    @property
    def placer(self) -> Placer:
        return self._placer

    def act(self, telemetry: Telemetry) -> Decision:
        profiles = self.profiles()
        limits: dict[str, float] = {}
        for worker in telemetry.workers:
            jobs = running_on(telemetry, worker.index)
            if not jobs:
                continue
            if jobs[0].kind is JobKind.INFERENCE:
                needs = [
                    self.need(job.job_id, job.workload, job.target_s, profiles) for job in jobs
                ]
                cores = self.services_cores(needs, [job.tolerance for job in jobs], worker.cores)
            else:
                works = [self.work(job.job_id, job.workload, _left(job), profiles) for job in jobs]
                cores = shortest_first(works, worker.cores)
            for job_id, given in cores.items():
                limits[job_id] = given / worker.cores
        return Decision(limits=limits)

    def services_cores(
        self, needs: Sequence[ServiceNeed], tolerances: Sequence[float], capacity: float
    ) -> dict[str, float]:
        """Cores per service of one worker of ``capacity`` cores (see the module docstring).

        Args:
            needs: each service's need at :attr:`aim`.
            tolerances: each service's tolerance (its band), in the order of ``needs``.
            capacity: the worker's cores.
        """
        share = capacity / len(needs)
        if (
            self.equal_when_all_fit
            # frugal: only where the needs, exactly met, would leave a service out
            and (not self.frugal or len(admitted(needs, capacity)) < len(needs))
            and all(
                equal_share_satisfies(need, share, tolerance)
                for need, tolerance in zip(needs, tolerances, strict=True)
            )
        ):
            return {need.job_id: share for need in needs}
        return satisfy_most(needs, capacity, share_the_rest=not self.frugal)

    def need(
        self,
        job_id: str,
        workload: str,
        target_s: float | None,
        profiles: Mapping[str, WorkloadProfile],
    ) -> ServiceNeed:
        """The cores a service of ``workload`` needs for a latency of ``aim * target_s``."""
        profile = profiles[workload]
        if target_s is None:
            return ServiceNeed(job_id, None)
        return ServiceNeed(job_id, self._cores_for(profile, 1.0 / (self.aim * target_s)))

    def _cores_for(self, profile: WorkloadProfile, rate: float) -> float | None:
        """:func:`cores_for_rate` on ``profile``'s curve, remembered.

        Every service of every worker needs it at every step and for every placement, and each
        answer is a bisection of 60 evaluations of the curve; the answer depends on the profile
        and the rate only. The entry holds the profile, so the ``id`` in its key stays its own.
        """
        key = (id(profile), rate)
        known = self._cores_known.get(key)
        if known is None:
            if len(self._cores_known) >= _REMEMBERED:
                self._cores_known.clear()
            known = (profile, cores_for_rate(profile.units_per_s, rate, profile.demand_cores))
            self._cores_known[key] = known
        return known[1]

    @staticmethod
    def work(
        job_id: str, workload: str, iterations_left: int, profiles: Mapping[str, WorkloadProfile]
    ) -> TrainingWork:
        """The remaining work of a training job with ``iterations_left`` to run."""
        profile = profiles[workload]
        speed = float(profile.units_per_s(profile.demand_cores))
        remaining = iterations_left / speed if speed > 0 else math.inf
        return TrainingWork(job_id, remaining, profile.demand_cores)

    def profiles(self) -> Mapping[str, WorkloadProfile]:
        """The true workload profiles: the privileged read, on a backend that runs its jobs by
        them (replay) only.

        Raises:
            PolicyError: the policy is not bound to a scenario, or its backend does not run its
                jobs by the scenario's profiles.
        """
        if self._scenario is None or self._backend is None:
            raise PolicyError(
                "the oracle does not know its scenario and backend yet; give it to a feed "
                "(dlsched.policies.TelemetryFeed(env, policy)) before resetting the environment"
            )
        if not self._backend.reads_profiles:
            raise PolicyError(
                "the oracle reads the replay model's true profiles and runs on a backend that "
                "runs its jobs by them (replay) only; make the environment with backend='replay'"
            )
        return load_profile_set(self._scenario.profile_set)


class CheatingPlacer(Placer):
    """The oracle's placement, from the same true profiles (see the module docstring)."""

    def __init__(self, oracle: CheatingOracle) -> None:
        self.oracle = oracle

    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        profiles = self.oracle.profiles()
        if job.kind is JobKind.INFERENCE:
            arriving = self.oracle.need(job.job_id, job.workload, job.target_s, profiles)

            def gain(worker: int) -> tuple[int, int, int]:
                jobs = running_on(telemetry, worker)
                needs = [self.oracle.need(j.job_id, j.workload, j.target_s, profiles) for j in jobs]
                cores = telemetry.workers[worker].cores
                more = len(admitted([*needs, arriving], cores)) - len(admitted(needs, cores))
                return (-more, len(jobs), worker)

            return min(candidates, key=gain)
        iterations = job.iterations or profiles[job.workload].iterations or 0
        arriving_work = self.oracle.work(job.job_id, job.workload, iterations, profiles)

        def load(worker: int) -> tuple[float, int]:
            works = [
                self.oracle.work(j.job_id, j.workload, _left(j), profiles)
                for j in running_on(telemetry, worker)
            ]
            core_seconds = sum(w.remaining_s * w.demand_cores for w in [*works, arriving_work])
            return (core_seconds / telemetry.workers[worker].cores, worker)

        return min(candidates, key=load)


def running_on(telemetry: Telemetry, worker: int) -> list[JobTelemetry]:
    """The running jobs of ``worker``."""
    return [job for job in telemetry.on_worker(worker) if job.state is JobState.RUNNING]


def _left(job: JobTelemetry) -> int:
    total = job.total_iterations if job.total_iterations is not None else job.iterations
    return max(total - job.iterations, 0)
