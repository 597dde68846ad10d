"""Scenarios of MobileNet services with a 5 s target on one worker: the services the throttling
counters and the cores allocated are checked on."""

from __future__ import annotations

from dlsched.envs.scenarios.model import JobGroup, JobKind, Scenario, WorkerSpec


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
