"""Scenarios built by hand that several test modules share (the crowds of one training
workload are in :mod:`mlp_crowds`)."""

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


def mobilenet_services(
    name: str,
    cores: float,
    services: int = 1,
    *,
    interval_s: float,
    horizon_s: float,
    profile_set: str = "measured",
) -> Scenario:
    """``services`` mobilenet-svc services of a 5 s target, all there from the start, one a slot
    on one worker of ``cores``.

    Args:
        name: the scenario's name.
        cores: the worker's cores.
        services: how many services (and slots).
        interval_s: the decision interval.
        horizon_s: the episode's horizon.
        profile_set: the profile set (a shipped name or a folder).
    """
    return Scenario(
        name=name,
        kind=JobKind.INFERENCE,
        workers=(WorkerSpec(cores=cores),),
        groups=(JobGroup(workloads=("mobilenet-svc",), count=services, targets_s=(5.0,)),),
        interval_s=interval_s,
        horizon_s=horizon_s,
        slots_per_worker=services,
        profile_set=profile_set,
    )
