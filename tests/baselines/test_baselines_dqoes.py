"""DQoES, journal Algorithms 1 and 2, checked line by line on hand-computed rounds."""

from __future__ import annotations

from typing import Any

import pytest
from telemetry_factories import inference_job, snapshot

from dlsched.baselines.dqoes import (
    Container,
    DQoES,
    ListenerState,
    adaptive_listener,
    classify,
    performance_management,
)
from dlsched.envs.telemetry import JobState, JobTelemetry

TOL = 1e-9


def near(value: float, expected: float) -> bool:
    return abs(value - expected) <= TOL


def round_of_four() -> list[Container]:
    return [
        Container("c1", o=40.0, p=30.0, r=0.3, L=0.4),  # q = 10 > 4: G
        Container("c2", o=20.0, p=30.0, r=0.2, L=0.25),  # q = -10 < -2: B
        Container("c3", o=50.0, p=52.0, r=0.25, L=0.3),  # |q| = 2 <= 5: S
        Container("c4", o=10.0, p=6.0, r=0.1, L=0.2),  # q = 4 > 1: G
    ]


def test_classification_lines_2_to_15() -> None:
    classes = classify(round_of_four(), alpha=0.1)
    assert classes.G == ("c1", "c4")
    assert classes.S == ("c3",)
    assert classes.B == ("c2",)
    assert near(classes.Q_G, 14.0)
    assert near(classes.Q_B, -10.0)
    assert near(classes.R_G, 0.4)
    assert near(classes.R_B, 0.2)


def test_band_edges_are_satisfied() -> None:
    # q = alpha * o exactly is neither > (line 6) nor < - (line 10): S.
    classes = classify(
        [Container("a", o=40.0, p=36.0, r=0.1, L=0.1), Container("b", o=40.0, p=44.0, r=0.1, L=1)],
        alpha=0.1,
    )
    assert classes.S == ("a", "b")
    assert classes.G == () and classes.B == ()


def test_limits_lines_16_to_24() -> None:
    result = performance_management(round_of_four(), alpha=0.1, beta=0.1, C=5, T_R=1.0)
    # line 18: L * (1 - q/Q_G * R_G * beta), Q_G = 14, R_G = 0.4
    assert result.L["c1"] == pytest.approx(0.4 * (1 - 10 / 14 * 0.4 * 0.1), abs=TOL)
    assert result.L["c1"] == pytest.approx(0.388571428571, abs=TOL)
    assert result.L["c4"] == pytest.approx(0.2 * (1 - 4 / 14 * 0.4 * 0.1), abs=TOL)
    assert result.L["c4"] == pytest.approx(0.197714285714, abs=TOL)
    # line 22 as printed: L * (1 + q/Q_B * R_G * beta), with G's usage R_G = 0.4
    assert result.L["c2"] == pytest.approx(0.25 * (1 + 1 * 0.4 * 0.1), abs=TOL)
    assert result.L["c2"] == pytest.approx(0.26, abs=TOL)
    # S keeps its limit
    assert result.L["c3"] == pytest.approx(0.3, abs=TOL)


def test_b_resource_option_uses_r_b() -> None:
    result = performance_management(
        round_of_four(), alpha=0.1, beta=0.1, C=5, T_R=1.0, b_resource="R_B"
    )
    assert result.L["c2"] == pytest.approx(0.25 * (1 + 1 * 0.2 * 0.1), abs=TOL)
    assert result.L["c1"] == pytest.approx(0.388571428571, abs=TOL)


def test_floor_lines_19_20() -> None:
    # One G container with R_G = 6 (cores): factor 1 - 1 * 6 * 0.1 = 0.4, L = 0.8 -> 0.32, and
    # with |C| = 2 the floor 1 / (2 |C|) = 0.25 does not bind; with a bigger cut it does.
    mild = performance_management(
        [Container("g", o=40.0, p=10.0, r=6.0, L=0.8)], alpha=0.1, beta=0.1, C=2, T_R=8.0
    )
    assert mild.L["g"] == pytest.approx(0.8 * (1 - 1 * 6.0 * 0.1), abs=TOL)
    harsh = performance_management(
        [Container("g", o=40.0, p=10.0, r=9.0, L=0.8)], alpha=0.1, beta=0.1, C=2, T_R=8.0
    )
    # 0.8 * (1 - 0.9) = 0.08 < 0.25
    assert harsh.L["g"] == pytest.approx(1 / (2 * 2), abs=TOL)


def test_cap_lines_23_24() -> None:
    containers = [
        Container("g", o=40.0, p=20.0, r=0.5, L=0.5),
        Container("b", o=10.0, p=30.0, r=0.5, L=0.98),
    ]
    result = performance_management(containers, alpha=0.1, beta=0.1, C=2, T_R=1.0)
    # 0.98 * (1 + 1 * 0.5 * 0.1) = 1.029 > T_R
    assert result.L["b"] == pytest.approx(1.0, abs=TOL)
    assert result.L["g"] == pytest.approx(0.5 * (1 - 1 * 0.5 * 0.1), abs=TOL)


def test_empty_g_leaves_b_unchanged_as_printed() -> None:
    containers = [
        Container("a", o=20.0, p=31.0, r=0.1, L=0.1),
        Container("b", o=20.0, p=32.0, r=0.1, L=0.12),
    ]
    result = performance_management(containers, alpha=0.1, beta=0.1, C=2, T_R=1.0)
    assert result.classes.G == ()
    assert result.classes.R_G == 0.0
    assert set(result.L) == {"a", "b"}
    assert result.L["a"] == pytest.approx(0.1, abs=TOL)
    assert result.L["b"] == pytest.approx(0.12, abs=TOL)
    lifted = performance_management(containers, alpha=0.1, beta=0.1, C=2, T_R=1.0, b_resource="R_B")
    # Q_B = -23, R_B = 0.2
    assert lifted.L["a"] == pytest.approx(0.1 * (1 + 11 / 23 * 0.2 * 0.1), abs=TOL)
    assert lifted.L["b"] == pytest.approx(0.12 * (1 + 12 / 23 * 0.2 * 0.1), abs=TOL)


def test_empty_b() -> None:
    containers = [
        Container("a", o=40.0, p=20.0, r=0.4, L=0.5),
        Container("s", o=40.0, p=41.0, r=0.3, L=0.3),
    ]
    result = performance_management(containers, alpha=0.1, beta=0.1, C=2, T_R=1.0)
    assert result.classes.B == ()
    assert result.L["a"] == pytest.approx(0.5 * (1 - 1 * 0.4 * 0.1), abs=TOL)
    assert result.L["s"] == pytest.approx(0.3, abs=TOL)


def test_single_container() -> None:
    result = performance_management(
        [Container("x", o=40.0, p=30.0, r=0.6, L=0.6)], alpha=0.1, beta=0.1, C=1, T_R=1.0
    )
    assert result.classes.G == ("x",)
    assert result.L["x"] == pytest.approx(0.6 * (1 - 1 * 0.6 * 0.1), abs=TOL)
    assert result.L["x"] == pytest.approx(0.564, abs=TOL)


def test_listener_doubles_after_three_improving_rounds_journal() -> None:
    state = ListenerState(IV=10.0, i=0, Q_G=10.0, Q_B=-10.0, Q_S=2)
    trend = [(8.0, -8.0), (6.0, -6.0), (4.0, -4.0)]
    steps = []
    for Q_G, Q_B in trend:
        step = adaptive_listener(state, Q_G, Q_B, 2, IV_initial=10.0)
        steps.append(step)
        state = step.state
    assert [s.state.i for s in steps] == [1, 2, 0]
    assert [s.state.IV for s in steps] == [10.0, 10.0, 20.0]
    assert not any(s.execute_now for s in steps)
    assert (state.Q_G, state.Q_B, state.Q_S) == (4.0, -4.0, 2)


def test_listener_preprint_doubles_after_two() -> None:
    state = ListenerState(IV=10.0, i=0, Q_G=10.0, Q_B=-10.0, Q_S=2)
    first = adaptive_listener(state, 8.0, -8.0, 2, IV_initial=10.0, variant="preprint")
    second = adaptive_listener(first.state, 6.0, -6.0, 2, IV_initial=10.0, variant="preprint")
    assert (first.state.i, first.state.IV) == (1, 10.0)
    assert (second.state.i, second.state.IV) == (0, 20.0)


def test_listener_s_drop_resets_and_executes() -> None:
    state = ListenerState(IV=40.0, i=2, Q_G=4.0, Q_B=-4.0, Q_S=5)
    journal = adaptive_listener(state, 6.0, -4.0, 4, IV_initial=10.0)
    assert journal.execute_now
    assert (journal.state.IV, journal.state.i) == (10.0, 0)
    preprint = adaptive_listener(state, 6.0, -4.0, 4, IV_initial=10.0, variant="preprint")
    assert preprint.execute_now
    assert (preprint.state.IV, preprint.state.i) == (20.0, 0)


def test_listener_bouncing_keeps_interval_and_clears_count() -> None:
    state = ListenerState(IV=20.0, i=2, Q_G=4.0, Q_B=-4.0, Q_S=5)
    step = adaptive_listener(state, 5.0, -3.0, 5, IV_initial=10.0)
    assert not step.execute_now
    assert (step.state.IV, step.state.i) == (20.0, 0)


def test_listener_improving_trend_wins_over_s_drop() -> None:
    # Line 12 is tested before line 17.
    state = ListenerState(IV=10.0, i=0, Q_G=4.0, Q_B=-4.0, Q_S=5)
    step = adaptive_listener(state, 3.0, -3.0, 4, IV_initial=10.0)
    assert not step.execute_now
    assert step.state.i == 1


def test_listener_first_round_only_records() -> None:
    step = adaptive_listener(ListenerState(IV=10.0), 3.0, -3.0, 4, IV_initial=10.0)
    assert not step.execute_now
    assert step.state == ListenerState(IV=10.0, i=0, Q_G=3.0, Q_B=-3.0, Q_S=4)


# ----------------------------------------------------------------- the policy on telemetry


def service(
    job_id: str, *, target: float, latency: float | None, usage: float, **fields: Any
) -> JobTelemetry:
    """A service 100 s old that used ``usage`` cores all along; ``fields``: the rest of its
    telemetry (``limit``, ``state``)."""
    return inference_job(
        job_id,
        age_s=100.0,
        cpu_usage=usage,
        cpu_seconds=usage * 100.0,
        target_s=target,
        latency_s=latency,
        **fields,
    )


def twins(latencies: tuple[float, float], limit: float) -> tuple[JobTelemetry, ...]:
    """Services j0 and j1 of a 40 s target, each using 2 cores under ``limit``, their last
    batches at ``latencies``."""
    return tuple(
        service(f"j{index}", target=40.0, latency=latency, usage=2.0, limit=limit)
        for index, latency in enumerate(latencies)
    )


def test_policy_reads_uncapped_limit_as_usage_and_counts_unmeasured() -> None:
    policy = DQoES(resource_unit="fraction")
    jobs = (
        service("j0", target=40.0, latency=30.0, usage=2.0),  # G, uncapped: L = 2/8
        service("j1", target=20.0, latency=30.0, usage=4.0, limit=0.6),  # B
        service("j2", target=40.0, latency=None, usage=2.0),  # no batch yet: |C| counts it
    )
    decision = policy.act(snapshot(0.0, *jobs))
    # R_G = 0.25 (fraction), q/Q_G = 1
    assert decision.limits["j0"] == pytest.approx(0.25 * (1 - 1 * 0.25 * 0.1), abs=TOL)
    assert decision.limits["j1"] == pytest.approx(0.6 * (1 + 1 * 0.25 * 0.1), abs=TOL)
    assert "j2" not in decision.limits


def test_policy_cores_unit_is_the_default() -> None:
    policy = DQoES()
    jobs = (
        service("j0", target=40.0, latency=30.0, usage=2.0),
        service("j1", target=20.0, latency=30.0, usage=4.0, limit=0.6),
    )
    decision = policy.act(snapshot(0.0, *jobs))
    # in cores: L0 = 2, R_G = 2, factor 1 - 1 * 2 * 0.1; back to a fraction of 8 cores
    assert decision.limits["j0"] == pytest.approx(2.0 * (1 - 2.0 * 0.1) / 8, abs=TOL)
    assert decision.limits["j1"] == pytest.approx(0.6 * 8 * (1 + 2.0 * 0.1) / 8, abs=TOL)


def test_policy_holds_limits_between_runs_of_algorithm_1() -> None:
    policy = DQoES()
    policy.reset()
    # Three rounds in which G and B both approach 0 double IV to 20 s at t = 30.
    latencies = [(30.0, 30.0), (31.0, 29.0), (32.0, 28.0), (33.0, 27.0), (34.0, 26.5)]
    decisions = []
    for step, (g_latency, b_latency) in enumerate(latencies):
        jobs = (
            service("j0", target=40.0, latency=g_latency, usage=2.0, limit=0.3),
            service("j1", target=20.0, latency=b_latency, usage=4.0, limit=0.6),
        )
        decisions.append(policy.act(snapshot(10.0 * step, *jobs)))
    state = policy.listener_state(0)
    assert state is not None and state.IV == 20.0
    # The third improving round (t = 30) doubles IV before Alg. 1 is due, so Alg. 1 runs at
    # 0, 10, 20, then waits until 20 + 20 = 40; at 30 the limits in force hold.
    assert [bool(d.limits) for d in decisions] == [True, True, True, False, True]


def test_policy_runs_at_once_when_s_drops() -> None:
    policy = DQoES(iv_initial_s=10.0, resource_unit="fraction")
    satisfied = twins((40.0, 40.0), limit=0.3)
    policy.act(snapshot(0.0, *satisfied))
    # at t = 5 Alg. 1 is not due, but one container left S: the listener runs it now.
    dropped = twins((30.0, 50.0), limit=0.3)
    decision = policy.act(snapshot(5.0, *dropped))
    # R_G = 2 / 8; j0 alone in G, j1 alone in B
    assert decision.limits["j0"] == pytest.approx(0.3 * (1 - 1 * 0.25 * 0.1), abs=TOL)
    assert decision.limits["j1"] == pytest.approx(0.3 * (1 + 1 * 0.25 * 0.1), abs=TOL)


def test_policy_arrival_and_departure_between_rounds() -> None:
    policy = DQoES(resource_unit="fraction")
    first = twins((30.0, 30.0), limit=0.5)
    policy.act(snapshot(0.0, *first))
    # j1 finished (not active any more), j2 arrived without a batch yet: |C| = 2, j0 alone in G.
    second = (
        service("j0", target=40.0, latency=30.0, usage=4.0, limit=0.5),
        service("j1", target=40.0, latency=30.0, usage=0.0, state=JobState.FAILED),
        service("j2", target=40.0, latency=None, usage=1.0),
    )
    decision = policy.act(snapshot(10.0, *second))
    assert set(decision.limits) == {"j0"}
    assert decision.limits["j0"] == pytest.approx(0.5 * (1 - 1 * 0.5 * 0.1), abs=TOL)


def test_policy_floor_uses_all_containers_on_the_worker() -> None:
    policy = DQoES(resource_unit="cores")
    jobs = (
        service("j0", target=40.0, latency=4.0, usage=7.9, limit=0.1),  # G, huge R_G
        *(service(f"j{i}", target=40.0, latency=None, usage=0.0) for i in range(1, 5)),
    )
    decision = policy.act(snapshot(0.0, *jobs))
    # 0.8 cores * (1 - 1 * 7.9 * 0.1) = 0.168 cores, above the floor 1 / (2 |C|) = 0.1 cores
    assert decision.limits["j0"] == pytest.approx(0.8 * (1 - 7.9 * 0.1) / 8, abs=TOL)
    harsher = (
        service("j0", target=40.0, latency=4.0, usage=7.95, limit=0.05),
        *(service(f"j{i}", target=40.0, latency=None, usage=0.0) for i in range(1, 5)),
    )
    # 0.4 cores * (1 - 0.795) = 0.082 cores < 0.1: the floor, 1 / (2 * 5) cores
    decision = DQoES(resource_unit="cores").act(snapshot(0.0, *harsher))
    assert decision.limits["j0"] == pytest.approx(1 / (2 * 5) / 8, abs=TOL)
