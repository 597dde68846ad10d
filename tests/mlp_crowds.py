"""Scenarios of copies of one training workload arriving together on one 2-core worker: the
crowds the contention term and the race are checked on."""

from __future__ import annotations

from dlsched.envs.scenarios.model import ArrivalPattern, JobGroup, JobKind, Scenario, WorkerSpec


def mlp_crowd(
    profile_set: str,
    jobs: int,
    iterations: int,
    *,
    slots: int | None = None,
    horizon_s: float = 3600.0,
    threading: str | None = "stock",
) -> Scenario:
    """``jobs`` mlp-digits jobs of ``iterations`` each, arriving at 0 s on one 2-core worker.

    Args:
        profile_set: the profile set (a shipped name or a folder).
        jobs: how many copies.
        iterations: each job's iterations.
        slots: slots of the worker (default: one per job).
        horizon_s: the episode's horizon.
        threading: the scenario's ``workload_threading`` (``None``: as its profiles).
    """
    return Scenario(
        name=f"mlp-crowd-{jobs}",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(cores=2.0),),
        groups=(
            JobGroup(
                workloads=("mlp-digits",),
                count=jobs,
                arrival=ArrivalPattern(),
                iterations=iterations,
            ),
        ),
        slots_per_worker=slots or jobs,
        interval_s=5.0,
        horizon_s=horizon_s,
        profile_set=profile_set,
        workload_threading=threading,
    )
