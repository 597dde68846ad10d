"""Scenarios built by hand that several test modules share."""

from __future__ import annotations

from collections.abc import Sequence

from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    JobGroup,
    JobKind,
    Scenario,
    WorkerSpec,
)


def jobs_alone(
    kind: JobKind,
    workload: str,
    times_s: Sequence[float],
    *,
    target_s: float | None = None,
    slots_per_worker: int,
    horizon_s: float,
) -> Scenario:
    """One job of ``workload`` arriving at each of ``times_s``, as many 8-core workers as jobs:
    placed apart, each runs alone at its profile's full pace (paper profiles, a step every
    10 s).

    Args:
        kind: the jobs' kind.
        workload: their workload.
        times_s: when each arrives.
        target_s: every service's latency target (``None``: none, as for training).
        slots_per_worker: slots of each worker.
        horizon_s: the episode's horizon.
    """
    return Scenario(
        name=f"alone-{workload}",
        kind=kind,
        workers=(WorkerSpec(8.0),) * len(times_s),
        groups=(
            JobGroup(
                workloads=(workload,),
                count=len(times_s),
                arrival=ArrivalPattern(ArrivalKind.EXPLICIT, times_s=tuple(times_s)),
                targets_s=(target_s,) if target_s is not None else (),
            ),
        ),
        interval_s=10.0,
        horizon_s=horizon_s,
        slots_per_worker=slots_per_worker,
        profile_set="paper",
    )
