"""SpeCon: speculative migration of slow-growing training jobs (a reconstruction).

Source: only the SpeCon abstract (arXiv 2010.11307) and a few facts from the authors' deployment
are available; ``docs/papers/specon.md`` records them and this reconstruction. From them: SpeCon
monitors the training progress of every job, and speculatively migrates slow-growing jobs to
other nodes to release CPU for the fast-growing ones; its two parameters are ``alpha`` and the
monitoring interval, deployed as 0.1 and 10 s; new jobs are placed by the default Kubernetes
scheduler (dlsched's spread placer); migration is delete-and-recreate from a checkpoint (the
environment pauses a migrated job for the scenario's ``migration_cost_s``); decisions come in
rounds with at most one migration each, and some jobs flagged slow were not moved. SpeCon sets
no CPU limits: every container competes freely, as under Kubernetes without limits. The progress
measure is FlowCon's growth efficiency (Eq. 1-2, same group and notation), measured by
:mod:`dlsched.baselines.growth`.

Every choice the sources leave open is a parameter:

- **What "slow-growing" means** (``slow_rule``). ``"relative"`` (default): a job is slow when its
  growth efficiency has fallen below ``alpha`` times the highest it has shown, i.e. it grows at
  less than 10% of its best rate. ``"absolute"``: below ``alpha`` itself, in Eq. 2's units (with
  losses normalised, a fraction of the loss per second per core used). A fixed absolute 0.1 flags
  almost every job at dlsched's loss scales, which is why the relative reading is the default.
- **Which job moves** (``victim``). Only a slow job that shares its worker with at least one job
  that is not slow is a candidate (moving it releases CPU for someone). ``"slowest"`` (default):
  the candidate growing slowest by the slow rule; ``"most_cpu"``: the one using the most CPU.
- **Where it goes** (``destination``). A worker other than its own with a free slot and at least
  ``min_job_gap`` fewer active jobs than the source, so that the move evens the load;
  ``"fewest_jobs"`` (default, as the Kubernetes spread scheduler would) or ``"fewest_fast"`` (the
  fewest jobs that are not slow, then the fewest jobs). Ties go to the lowest index.
- **Whether the move pays** (``min_remaining_s``). The migration pauses a job; one expected to
  finish within ``min_remaining_s`` at its current iteration rate is not moved.
- **How often** (``max_migrations_per_round``, ``max_moves_per_job``): one migration per round
  (the authors' logs) and one move per job, so a job is never bounced back and forth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.baselines.growth import GrowthMeter, GrowthRounds
from dlsched.baselines.parameters import check_choice, check_flag, check_integer, check_number
from dlsched.envs.decision import Decision, Migration
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState, Telemetry

SLOW_RULES = ("relative", "absolute")
VICTIMS = ("slowest", "most_cpu")
DESTINATIONS = ("fewest_jobs", "fewest_fast")


@dataclass(frozen=True)
class JobGrowth:
    """One running job in one SpeCon round.

    Attributes:
        job_id: the job.
        worker: the worker it runs on.
        G: its growth efficiency over the round (Eq. 2).
        G_peak: the highest growth efficiency it has shown.
        R: its mean CPU usage over the round, a fraction of its worker.
        remaining_s: seconds it needs at its current iteration rate (``None``: unknown).
        moves: how often it has been migrated.
    """

    job_id: str
    worker: int
    G: float
    G_peak: float
    R: float
    remaining_s: float | None = None
    moves: int = 0


@dataclass(frozen=True)
class WorkerLoad:
    """One worker as SpeCon sees it: its active jobs (measured or not) and free slots."""

    index: int
    jobs: int
    free_slots: int


@dataclass(frozen=True)
class SpeculationRound:
    """The outcome of one round: the jobs flagged slow and the migrations decided."""

    slow: tuple[str, ...]
    migrations: tuple[Migration, ...]


def slowness(job: JobGrowth, slow_rule: str) -> float:
    """How slowly a job grows under the slow rule: its G, relative to its peak or absolute."""
    if slow_rule == "relative":
        return job.G / job.G_peak if job.G_peak > 0 else 1.0
    return job.G


@dataclass(frozen=True)
class SpeculationRules:
    """How a SpeCon round decides: the threshold and the choices of the module docstring.

    Attributes:
        alpha: the slow threshold.
        slow_rule: ``"relative"`` or ``"absolute"``.
        victim: ``"slowest"`` or ``"most_cpu"``.
        destination: ``"fewest_jobs"`` or ``"fewest_fast"``.
        max_migrations_per_round: migrations per round.
        max_moves_per_job: how often one job may be migrated.
        min_remaining_s: a job expected to finish sooner is not moved (seconds).
        min_job_gap: how many more active jobs the source must have than the destination.
    """

    alpha: float
    slow_rule: str = "relative"
    victim: str = "slowest"
    destination: str = "fewest_jobs"
    max_migrations_per_round: int = 1
    max_moves_per_job: int = 1
    min_remaining_s: float = 30.0
    min_job_gap: int = 2


def speculate(
    jobs: Sequence[JobGrowth], workers: Sequence[WorkerLoad], rules: SpeculationRules
) -> SpeculationRound:
    """One SpeCon round: flag slow-growing jobs and choose which of them move where.

    Args:
        jobs: the measured running jobs.
        workers: every worker's load.
        rules: the threshold and the choices.

    Returns:
        The slow jobs (in job order) and at most ``rules.max_migrations_per_round`` migrations.
    """
    slow = [job for job in jobs if slowness(job, rules.slow_rule) < rules.alpha]
    slow_ids = {job.job_id for job in slow}
    fast_on = {w.index: 0 for w in workers}
    for job in jobs:
        if job.job_id not in slow_ids:
            fast_on[job.worker] += 1
    candidates = [
        job
        for job in slow
        if fast_on[job.worker] > 0
        and job.moves < rules.max_moves_per_job
        and (job.remaining_s is None or job.remaining_s > rules.min_remaining_s)
    ]
    if rules.victim == "slowest":
        candidates.sort(key=lambda job: (slowness(job, rules.slow_rule), job.job_id))
    else:
        candidates.sort(key=lambda job: (-job.R, job.job_id))
    load = {w.index: w.jobs for w in workers}
    free = {w.index: w.free_slots for w in workers}
    migrations: list[Migration] = []
    for job in candidates:
        if len(migrations) >= rules.max_migrations_per_round:
            break
        targets = [
            w.index
            for w in workers
            if w.index != job.worker
            and free[w.index] > 0
            and load[job.worker] - load[w.index] >= rules.min_job_gap
        ]
        if not targets:
            continue
        if rules.destination == "fewest_jobs":
            target = min(targets, key=lambda index: (load[index], index))
        else:
            target = min(targets, key=lambda index: (fast_on[index], load[index], index))
        migrations.append(Migration(job.job_id, target))
        load[job.worker] -= 1
        load[target] += 1
        free[target] -= 1
    return SpeculationRound(tuple(job.job_id for job in slow), tuple(migrations))


class SpeCon(GrowthRounds):
    """SpeCon (reconstructed): migrate slow-growing jobs away from fast-growing ones.

    Every ``interval_s`` seconds it measures each running job's growth efficiency and runs
    :func:`speculate`; limits are never set (free competition). See the module docstring.

    Args:
        alpha: the slow threshold (the authors' deployment: 0.1).
        interval_s: the monitoring interval ``|t_m - t_{m-1}|`` (the deployment: 10 s).
        slow_rule: ``"relative"`` or ``"absolute"``.
        victim: ``"slowest"`` or ``"most_cpu"``.
        destination: ``"fewest_jobs"`` or ``"fewest_fast"``.
        max_migrations_per_round: migrations per round (the authors' logs: 1).
        max_moves_per_job: how often one job may be migrated.
        min_remaining_s: a job expected to finish sooner is not moved (seconds).
        min_job_gap: how many more active jobs the source must have than the destination.
        normalise_loss: divide each loss by its running maximum (as FlowCon's 2018 code).
    """

    name = "specon"
    kinds = (JobKind.TRAINING,)

    def __init__(
        self,
        alpha: float = 0.1,
        interval_s: float = 10.0,
        slow_rule: str = "relative",
        victim: str = "slowest",
        destination: str = "fewest_jobs",
        max_migrations_per_round: int = 1,
        max_moves_per_job: int = 1,
        min_remaining_s: float = 30.0,
        min_job_gap: int = 2,
        normalise_loss: bool = True,
    ) -> None:
        super().__init__()
        self.alpha = check_number(self.name, "alpha", alpha, low=0.0)
        self.interval_s = check_number(self.name, "interval_s", interval_s, low=0.0, low_open=True)
        self.slow_rule = check_choice(self.name, "slow_rule", slow_rule, SLOW_RULES)
        self.victim = check_choice(self.name, "victim", victim, VICTIMS)
        self.destination = check_choice(self.name, "destination", destination, DESTINATIONS)
        self.max_migrations_per_round = check_integer(
            self.name, "max_migrations_per_round", max_migrations_per_round, low=0
        )
        self.max_moves_per_job = check_integer(
            self.name, "max_moves_per_job", max_moves_per_job, low=0
        )
        self.min_remaining_s = check_number(self.name, "min_remaining_s", min_remaining_s, low=0.0)
        self.min_job_gap = check_integer(self.name, "min_job_gap", min_job_gap, low=1)
        self.normalise_loss = check_flag(self.name, "normalise_loss", normalise_loss)
        self._rules = SpeculationRules(
            alpha=self.alpha,
            slow_rule=self.slow_rule,
            victim=self.victim,
            destination=self.destination,
            max_migrations_per_round=self.max_migrations_per_round,
            max_moves_per_job=self.max_moves_per_job,
            min_remaining_s=self.min_remaining_s,
            min_job_gap=self.min_job_gap,
        )
        self._meter = GrowthMeter(normalise_loss=self.normalise_loss)
        self._peak: dict[str, float] = {}
        self._moves: dict[str, int] = {}
        self.last_round = SpeculationRound((), ())

    def reset(self) -> None:
        super().reset()
        self._peak = {}
        self._moves = {}
        self.last_round = SpeculationRound((), ())

    def run_round(self, telemetry: Telemetry) -> Decision:
        now = telemetry.time_s
        measured: list[JobGrowth] = []
        for job in telemetry.active_jobs:
            if job.state is not JobState.RUNNING or job.worker is None:
                continue
            cores = telemetry.workers[job.worker].cores
            sample = self._meter.take(job, now, cores)
            if sample is None or sample.G is None:
                continue
            peak = max(self._peak.get(job.job_id, sample.G), sample.G)
            self._peak[job.job_id] = peak
            remaining = None
            if job.total_iterations is not None and sample.iterations_per_s > 0:
                remaining = (job.total_iterations - job.iterations) / sample.iterations_per_s
            measured.append(
                JobGrowth(
                    job.job_id,
                    job.worker,
                    sample.G,
                    peak,
                    sample.R,
                    remaining,
                    self._moves.get(job.job_id, 0),
                )
            )
        slots_in_use = {w.index: len(telemetry.on_worker(w.index)) for w in telemetry.workers}
        slots = self._slots_per_worker()
        workers = [
            WorkerLoad(w.index, slots_in_use[w.index], slots - slots_in_use[w.index])
            for w in telemetry.workers
        ]
        self.last_round = speculate(measured, workers, self._rules)
        for migration in self.last_round.migrations:
            self._moves[migration.job_id] = self._moves.get(migration.job_id, 0) + 1
        return Decision(migrations=self.last_round.migrations)

    def _slots_per_worker(self) -> int:
        # The slot count is the scenario's layout, not a measurement; without a scenario (the
        # policy driven directly) every worker is taken to have room.
        if self._scenario is None:
            return 1 << 30
        return self._scenario.slots_per_worker
