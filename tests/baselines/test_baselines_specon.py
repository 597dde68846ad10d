"""SpeCon (reconstruction): one round's flags and migrations, computed by hand."""

from __future__ import annotations

import pytest
from telemetry_factories import training_job

from dlsched.baselines.specon import (
    JobGrowth,
    SpeCon,
    SpeculationRound,
    SpeculationRules,
    WorkerLoad,
    slowness,
    speculate,
)
from dlsched.envs.decision import Migration
from dlsched.envs.telemetry import JobTelemetry, Telemetry, WorkerTelemetry


def loads(*jobs_per_worker: int, free: int = 5) -> list[WorkerLoad]:
    return [WorkerLoad(i, n, free) for i, n in enumerate(jobs_per_worker)]


def test_relative_slowness() -> None:
    job = JobGrowth("a", 0, G=0.02, G_peak=0.4, R=0.3)
    assert slowness(job, "relative") == pytest.approx(0.05)
    assert slowness(job, "absolute") == pytest.approx(0.02)


#: Three jobs on worker 0: two slow ones beside a fast one.
SLOW_BESIDE_FAST = (
    JobGrowth("a", 0, G=0.02, G_peak=0.4, R=0.3),  # 0.05 of its peak: slow
    JobGrowth("b", 0, G=0.3, G_peak=0.4, R=0.4),  # fast
    JobGrowth("c", 0, G=0.01, G_peak=0.5, R=0.3),  # 0.02: slow, the slowest
)


def test_slow_job_next_to_a_fast_one_moves_to_the_emptiest_worker() -> None:
    jobs = [*SLOW_BESIDE_FAST, JobGrowth("d", 1, G=0.2, G_peak=0.2, R=0.5)]
    result = speculate(jobs, loads(3, 1, 0), SpeculationRules(alpha=0.1))
    assert result.slow == ("a", "c")
    assert result.migrations == (Migration("c", 2),)  # one per round, to the empty worker


def test_more_migrations_per_round_update_the_loads() -> None:
    jobs = [*SLOW_BESIDE_FAST, JobGrowth("e", 0, G=0.3, G_peak=0.3, R=0.3)]
    result = speculate(
        jobs, loads(4, 1, 1), SpeculationRules(alpha=0.1, max_migrations_per_round=3)
    )
    # c to worker 1 (4 - 1 >= 2); then a: worker 1 has 2, worker 2 has 1, source 3: worker 2
    assert result.migrations == (Migration("c", 1), Migration("a", 2))


def test_flagged_but_not_moved() -> None:
    # alone with slow jobs only: nobody to release CPU for
    lonely = [JobGrowth("a", 0, G=0.01, G_peak=0.5, R=0.5), JobGrowth("b", 1, 0.3, 0.3, 0.5)]
    assert speculate(lonely, loads(1, 1), SpeculationRules(alpha=0.1)).migrations == ()
    # no worker lighter by min_job_gap
    crowded = [JobGrowth("a", 0, 0.01, 0.5, 0.5), JobGrowth("b", 0, 0.3, 0.3, 0.5)]
    result = speculate(crowded, loads(2, 1), SpeculationRules(alpha=0.1))
    assert result.slow == ("a",) and result.migrations == ()
    # no free slot
    assert speculate(crowded, loads(2, 0, free=0), SpeculationRules(alpha=0.1)).migrations == ()
    # already moved once
    moved = [JobGrowth("a", 0, 0.01, 0.5, 0.5, moves=1), JobGrowth("b", 0, 0.3, 0.3, 0.5)]
    assert speculate(moved, loads(2, 0), SpeculationRules(alpha=0.1)).migrations == ()
    # about to finish: the pause would not pay back
    ending = [JobGrowth("a", 0, 0.01, 0.5, 0.5, remaining_s=20.0), JobGrowth("b", 0, 0.3, 0.3, 0.5)]
    assert speculate(ending, loads(2, 0), SpeculationRules(alpha=0.1)).migrations == ()


def test_victim_and_destination_options() -> None:
    jobs = [
        JobGrowth("a", 0, G=0.02, G_peak=0.4, R=0.6),
        JobGrowth("c", 0, G=0.01, G_peak=0.5, R=0.1),
        JobGrowth("b", 0, G=0.3, G_peak=0.4, R=0.3),
        JobGrowth("f", 1, G=0.3, G_peak=0.3, R=0.3),
    ]
    assert speculate(
        jobs, loads(3, 1, 1), SpeculationRules(alpha=0.1, victim="most_cpu")
    ).migrations == (Migration("a", 1),)
    # worker 1 holds a fast job, worker 2 a slow one: fewest_fast prefers 2
    jobs.append(JobGrowth("s", 2, G=0.001, G_peak=0.3, R=0.3))
    assert speculate(
        jobs, loads(3, 1, 1), SpeculationRules(alpha=0.1, destination="fewest_fast")
    ).migrations == (Migration("c", 2),)


def test_absolute_rule() -> None:
    jobs = [JobGrowth("a", 0, G=0.05, G_peak=0.05, R=0.5), JobGrowth("b", 0, 0.5, 0.5, 0.5)]
    assert speculate(jobs, loads(2, 0), SpeculationRules(alpha=0.1)).slow == ()
    result = speculate(jobs, loads(2, 0), SpeculationRules(alpha=0.1, slow_rule="absolute"))
    assert result.slow == ("a",) and result.migrations == (Migration("a", 1),)


def trainer(
    job_id: str, worker: int, loss: float, cpu_seconds: float, iterations: int
) -> JobTelemetry:
    return training_job(
        job_id,
        worker=worker,
        cpu_seconds=cpu_seconds,
        loss=loss,
        iterations=iterations,
        total_iterations=10_000,
    )


def test_policy_migrates_from_telemetry_every_interval() -> None:
    policy = SpeCon()

    def at(t: float, loss_slow: float, loss_fast: float) -> Telemetry:
        jobs = (
            trainer("j0", 0, loss_slow, 2.0 * t, int(10 * t)),
            trainer("j1", 0, loss_fast, 2.0 * t, int(10 * t)),
        )
        workers = (WorkerTelemetry(0, 4.0, 4.0), WorkerTelemetry(1, 4.0, 0.0))
        return Telemetry(t, 10.0, workers, jobs)

    assert policy.act(at(0.0, 2.0, 2.0)).migrations == ()
    # both fall fast: j0 reaches its peak growth efficiency
    assert policy.act(at(10.0, 1.0, 1.0)).migrations == ()
    # not due at 15 s
    assert policy.act(at(15.0, 0.999, 0.8)).migrations == ()
    # j0 now falls at under 10% of its peak rate while j1 still falls fast
    decision = policy.act(at(20.0, 0.99, 0.6))
    assert policy.last_round.slow == ("j0",)
    assert decision.migrations == (Migration("j0", 1),)
    assert decision.limits == {}


def test_single_job_and_single_worker_never_move() -> None:
    alone = [JobGrowth("a", 0, G=0.001, G_peak=0.5, R=0.5)]
    assert speculate(alone, loads(1, 0), SpeculationRules(alpha=0.1)) == SpeculationRound(
        ("a",), ()
    )
    pair = [JobGrowth("a", 0, 0.001, 0.5, 0.5), JobGrowth("b", 0, 0.4, 0.5, 0.5)]
    assert speculate(pair, loads(2), SpeculationRules(alpha=0.1)).migrations == ()
