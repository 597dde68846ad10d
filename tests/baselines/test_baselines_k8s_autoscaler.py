"""The Kubernetes-style autoscaler on hand-made telemetry: usage over a target utilisation, the
largest recommendation of its stabilisation window."""

from __future__ import annotations

import pytest
from telemetry_factories import inference_job, snapshot, training_job

from dlsched.baselines.k8s_autoscaler import K8sAutoscaler


def rounds(policy: K8sAutoscaler, usages: list[float], every_s: float = 10.0) -> list[float | None]:
    """The limit it sets for one job at each round, the job using ``usages[i]`` cores during the
    interval before round ``i`` (round 0 sees it first)."""
    limits: list[float | None] = []
    cpu_seconds = 0.0
    for index, usage in enumerate(usages):
        cpu_seconds += usage * every_s if index else 0.0
        job = training_job("j0", cpu_usage=usage, cpu_seconds=cpu_seconds)
        limits.append(policy.act(snapshot(index * every_s, job)).limits.get("j0"))
    return limits


def test_the_limit_is_the_largest_recommendation_of_the_window() -> None:
    # 50 %: each recommendation is twice the usage; the window holds 30 s / 10 s = 3 of them.
    policy = K8sAutoscaler(average_utilization=50, sync_period_s=10.0, stabilization_window_s=30.0)
    limits = rounds(policy, [0.0, 1.0, 3.0, 1.0, 1.0, 1.0, 0.5])
    cores = [None if limit is None else limit * 8 for limit in limits]
    # the first round only reads the counter; 6 cores hold for three rounds, then the max of
    # (2, 2, 2), then of (2, 2, 1)
    assert cores == [None, pytest.approx(2.0), pytest.approx(6.0), pytest.approx(6.0),
                     pytest.approx(6.0), pytest.approx(2.0), pytest.approx(2.0)]  # fmt: skip
    assert policy.recommendations("j0") == pytest.approx((2.0, 2.0, 1.0))


def test_scaling_up_is_immediate() -> None:
    policy = K8sAutoscaler(average_utilization=80)
    limits = rounds(policy, [0.0, 1.0, 4.0])
    assert limits[1] == pytest.approx(1.0 / 0.8 / 8)
    assert limits[2] == pytest.approx(4.0 / 0.8 / 8)


def test_limits_stay_within_the_worker_and_above_the_floor() -> None:
    policy = K8sAutoscaler(average_utilization=50)
    limits = rounds(policy, [0.0, 6.0])
    assert limits[1] == 1.0  # 12 cores recommended on 8: uncapped
    policy = K8sAutoscaler(average_utilization=50, stabilization_window_s=10.0)
    limits = rounds(policy, [0.0, 0.0])
    assert limits[1] == pytest.approx(0.01 / 8)


def test_between_syncs_the_limits_hold_and_usage_is_averaged_over_the_sync_period() -> None:
    policy = K8sAutoscaler(average_utilization=50, sync_period_s=20.0)
    limits = rounds(policy, [0.0, 1.0, 3.0, 1.0, 1.0])
    assert limits[1] is None and limits[3] is None  # no sync at 10 s or 30 s
    assert limits[2] == pytest.approx((1.0 + 3.0) / 2 / 0.5 / 8)  # 4 cores
    assert limits[4] == pytest.approx(4.0 / 8)  # the window's 4 cores over the new 2


def test_default_window_keeps_as_many_recommendations_as_kubernetes() -> None:
    # 300 s / 15 s in Kubernetes, 200 s / 10 s here
    assert K8sAutoscaler().window_size == 20


def test_it_schedules_services_too_and_forgets_them_at_reset() -> None:
    policy = K8sAutoscaler()
    first = inference_job("j1", target_s=10.0, cpu_seconds=0.0)
    assert policy.act(snapshot(0.0, first)).limits == {}
    later = inference_job("j1", target_s=10.0, cpu_seconds=20.0)
    assert policy.act(snapshot(10.0, later)).limits["j1"] == pytest.approx(4.0 / 8)
    policy.reset()
    assert policy.recommendations("j1") == ()
    assert policy.act(snapshot(0.0, first)).limits == {}
