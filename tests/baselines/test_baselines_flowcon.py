"""FlowCon, journal Algorithms 1-4, checked line by line on hand-computed rounds."""

from __future__ import annotations

from typing import Any

import pytest
from telemetry_factories import training_job

from dlsched.baselines.flowcon import (
    DEACTIVATED,
    FlowCon,
    FlowConPlacer,
    Lists,
    WorkerLists,
    adaptive_threshold,
    dynamic_resource_management,
    listener,
    select_worker,
)
from dlsched.envs.scenarios.model import JobKind, JobSpec
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry, WorkerTelemetry

TOL = 1e-9


def lists(NL: str = "", WL: str = "", CL: str = "") -> Lists:
    return Lists(frozenset(NL.split()), frozenset(WL.split()), frozenset(CL.split()))


# ----------------------------------------------------------------- Algorithm 1


def test_alg1_moves_and_limits() -> None:
    before = lists(NL="a d", WL="b e", CL="c f")
    G = {"a": 0.5, "b": 0.05, "c": 0.02, "d": 0.3, "e": 0.2, "f": 0.4}
    L = {"a": 0.6, "b": 0.4, "c": 0.3, "d": 0.5, "e": 0.35, "f": 0.2}
    result = dynamic_resource_management(G, L, before, alpha=0.1, itval=30.0)
    # a: G >= alpha stays NL; b: WL -> CL (line 7); c: stays CL; d: NL; e: WL -> NL (line 10);
    # f: CL -> NL (line 10)
    assert result.lists == lists(NL="a d e f", CL="b c")
    sum_G = 0.5 + 0.05 + 0.02 + 0.3 + 0.2 + 0.4  # 1.47
    # CL: max(G / sum G, 1 / n) with n = 6 (lines 20-22)
    assert result.L["b"] == pytest.approx(max(0.05 / sum_G, 1 / 6), abs=TOL)
    assert result.L["b"] == pytest.approx(1 / 6, abs=TOL)
    assert result.L["c"] == pytest.approx(1 / 6, abs=TOL)
    # NL: min(G / sum G, 1) (lines 25-26, 2018 code)
    assert result.L["a"] == pytest.approx(0.5 / 1.47, abs=TOL)
    assert result.L["d"] == pytest.approx(0.3 / 1.47, abs=TOL)
    assert result.L["e"] == pytest.approx(0.2 / 1.47, abs=TOL)
    assert result.L["f"] == pytest.approx(0.4 / 1.47, abs=TOL)
    assert result.itval == 30.0


def test_alg1_nl_to_wl_and_wl_limit_held() -> None:
    before = lists(NL="a b")
    G = {"a": 0.05, "b": 0.6}
    L = {"a": 0.7, "b": 0.3}
    result = dynamic_resource_management(G, L, before, alpha=0.1, itval=10.0)
    assert result.lists == lists(NL="b", WL="a")  # lines 4-6
    assert result.L["a"] == pytest.approx(0.7, abs=TOL)  # line 24: WL unchanged
    assert result.L["b"] == pytest.approx(0.6 / 0.65, abs=TOL)


def test_alg1_cl_share_above_floor() -> None:
    before = lists(NL="a", CL="b")
    G = {"a": 0.1, "b": 0.3}  # b grows but stays below alpha = 0.35: it stays in CL
    L = {"a": 1.0, "b": 1.0}
    result = dynamic_resource_management(G, L, before, alpha=0.35, itval=10.0)
    assert result.lists == lists(WL="a", CL="b")
    assert result.L["b"] == pytest.approx(max(0.3 / 0.4, 1 / 2), abs=TOL)
    assert result.L["b"] == pytest.approx(0.75, abs=TOL)


def test_alg1_all_in_cl_frees_everyone_and_doubles_itval() -> None:
    before = lists(WL="a", CL="b c")
    G = {"a": 0.01, "b": 0.02, "c": 0.03}
    L = {"a": 0.5, "b": 0.2, "c": 0.3}
    result = dynamic_resource_management(G, L, before, alpha=0.1, itval=30.0)
    assert result.lists == lists(CL="a b c")
    assert result.L == {"a": 1.0, "b": 1.0, "c": 1.0}  # lines 14-16
    assert result.itval == 60.0  # line 17


def test_alg1_deactivated_threshold_skips_reclassification() -> None:
    before = lists(NL="n", CL="b")
    G = {"n": 0.001, "b": 0.9}
    L = {"n": 1.0, "b": 1.0}
    result = dynamic_resource_management(G, L, before, alpha=DEACTIVATED, itval=10.0)
    assert result.lists == before  # line 2: alpha = -1
    assert result.L["b"] == pytest.approx(max(0.9 / 0.901, 0.5), abs=TOL)
    assert result.L["n"] == pytest.approx(0.001 / 0.901, abs=TOL)


def test_alg1_new_container_without_growth_is_uncapped() -> None:
    before = lists(NL="new", CL="old")
    result = dynamic_resource_management(
        {"old": 0.01}, {"new": 1.0, "old": 1.0}, before, alpha=0.1, itval=10.0
    )
    assert result.L["new"] == 1.0
    assert result.L["old"] == pytest.approx(max(0.01 / 0.01, 1 / 2), abs=TOL)


def test_alg1_options() -> None:
    before = lists(NL="a", CL="b c d")
    G = {"a": 0.9, "b": 0.01, "c": 0.01, "d": 0.01}
    L = {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.5}
    code = dynamic_resource_management(G, L, before, alpha=0.1, itval=10.0, cl_floor="code2018")
    # 1 / (beta n), beta = 1 + 1/n, n = 4: 1 / 5
    assert code.L["b"] == pytest.approx(1 / ((1 + 1 / 4) * 4), abs=TOL)
    assert code.L["b"] == pytest.approx(0.2, abs=TOL)
    uncapped = dynamic_resource_management(G, L, before, alpha=0.1, itval=10.0, nl_limit="uncapped")
    assert uncapped.L["a"] == 1.0
    assert uncapped.L["b"] == pytest.approx(0.25, abs=TOL)


def test_alg1_single_container() -> None:
    result = dynamic_resource_management(
        {"x": 0.2}, {"x": 0.4}, lists(NL="x"), alpha=0.1, itval=10.0
    )
    assert result.lists == lists(NL="x")
    assert result.L["x"] == pytest.approx(min(0.2 / 0.2, 1), abs=TOL)


# ----------------------------------------------------------------- Algorithm 2


def test_alg2_arrival() -> None:
    heard = listener(lists(NL="a", CL="b"), ["a", "b", "c"], itval=120.0, itval_initial=30.0)
    assert heard.lists == lists(NL="a c", CL="b")  # lines 5-7
    assert heard.itval == 30.0  # line 8
    assert heard.run_now  # line 9


def test_alg2_departure() -> None:
    heard = listener(lists(NL="a", WL="d", CL="b"), ["a", "b"], itval=60.0, itval_initial=30.0)
    assert heard.lists == lists(NL="a", CL="b")  # lines 10-15
    assert heard.itval == 30.0  # line 16
    assert heard.run_now  # line 17


def test_alg2_arrival_and_departure_in_one_interval() -> None:
    heard = listener(lists(NL="a", CL="b"), ["a", "c"], itval=60.0, itval_initial=30.0)
    assert heard.lists == lists(NL="a c")
    assert heard.itval == 30.0
    assert heard.run_now


def test_alg2_no_change() -> None:
    before = lists(NL="a", CL="b")
    heard = listener(before, ["b", "a"], itval=60.0, itval_initial=30.0)
    assert heard.lists == before and heard.itval == 60.0 and not heard.run_now


# ----------------------------------------------------------------- Algorithm 3


def test_alg3_all_in_cl() -> None:
    assert adaptive_threshold(lists(CL="a b"), {"a": 0.1, "b": 0.2}, alpha=0.03) == DEACTIVATED


def test_alg3_single_container() -> None:
    assert adaptive_threshold(lists(WL="a"), {"a": 0.08}, alpha=0.03) == pytest.approx(0.04)
    # no progress score yet: the threshold in force is kept
    assert adaptive_threshold(lists(NL="a"), {}, alpha=0.03) == 0.03


def test_alg3_mean_of_nl_and_wl() -> None:
    current = lists(NL="a b", WL="c", CL="d")
    P = {"a": 0.2, "b": 0.4, "c": 0.1, "d": 0.9}
    # line 13: (alpha_nl / |NL| + alpha_wl / |WL|) / 2
    assert adaptive_threshold(current, P, alpha=0.03) == pytest.approx(
        ((0.2 + 0.4) / 2 + 0.1 / 1) / 2, abs=TOL
    )
    assert adaptive_threshold(current, P, alpha=0.03, pair="NL+CL") == pytest.approx(
        ((0.2 + 0.4) / 2 + 0.9 / 1) / 2, abs=TOL
    )


def test_alg3_empty_list_adds_zero() -> None:
    assert adaptive_threshold(lists(NL="a b", CL="c"), {"a": 0.2, "b": 0.4}, alpha=0.03) == (
        pytest.approx((0.3 + 0.0) / 2, abs=TOL)
    )
    # the new container without a score is left out of NL's average
    assert adaptive_threshold(lists(NL="a n", WL="c"), {"a": 0.2, "c": 0.1}, alpha=0.03) == (
        pytest.approx((0.2 + 0.1) / 2, abs=TOL)
    )


def test_alg3_nothing_measured_keeps_threshold() -> None:
    assert adaptive_threshold(lists(NL="a", CL="b"), {}, alpha=DEACTIVATED) == DEACTIVATED


# ----------------------------------------------------------------- Algorithm 4


def test_alg4_worker_all_in_cl_wins_with_fewest() -> None:
    workers = [
        WorkerLists(0, lists(NL="a"), {"a": 0.01}),
        WorkerLists(1, lists(CL="b c d"), {"b": 0.5, "c": 0.5, "d": 0.5}),
        WorkerLists(2, lists(CL="e f"), {"e": 0.9, "f": 0.9}),
    ]
    assert select_worker(workers) == 2


def test_alg4_empty_worker_wins() -> None:
    workers = [WorkerLists(0, lists(CL="a")), WorkerLists(1, lists())]
    assert select_worker(workers) == 1


def test_alg4_scores() -> None:
    w0 = WorkerLists(0, lists(NL="a", WL="b", CL="c"), {"a": 0.4, "b": 0.1, "c": 0.05})
    w1 = WorkerLists(1, lists(NL="d e"), {"d": 0.2, "e": 0.1})
    # line 10: |NL + 1| D_NL + |WL| D_WL + |CL| D_CL
    assert w0.score == pytest.approx(2 * 0.4 + 1 * 0.1 + 1 * 0.05, abs=TOL)  # 0.95
    assert w1.score == pytest.approx(3 * (0.2 + 0.1), abs=TOL)  # 0.9
    assert select_worker([w0, w1]) == 1


def test_alg4_recently_placed_count_in_nl() -> None:
    w0 = WorkerLists(0, lists(NL="a"), {"a": 0.3}, unlisted=2)
    w1 = WorkerLists(1, lists(NL="b"), {"b": 0.5})
    assert w0.score == pytest.approx((1 + 2 + 1) * 0.3, abs=TOL)  # 1.2 > 2 * 0.5
    assert select_worker([w0, w1]) == 1
    assert not WorkerLists(2, lists(), unlisted=1).all_completing


# ----------------------------------------------------------------- the policy on telemetry


def trainer(job_id: str, *, loss: float | None, cpu_seconds: float, **fields: Any) -> JobTelemetry:
    """A training of 100 iterations; ``fields``: the rest of its telemetry (``limit``,
    ``worker``, ``state``)."""
    return training_job(job_id, cpu_seconds=cpu_seconds, loss=loss, total_iterations=100, **fields)


def snapshot(time_s: float, *jobs: JobTelemetry, workers: int = 1) -> Telemetry:
    return Telemetry(
        time_s=time_s,
        interval_s=10.0,
        workers=tuple(WorkerTelemetry(w, 4.0, 0.0) for w in range(workers)),
        jobs=jobs,
    )


def test_policy_measures_growth_and_sets_limits() -> None:
    policy = FlowCon(itval_s=10.0)
    policy.act(snapshot(0.0, trainer("j0", loss=2.0, cpu_seconds=0.0)))
    assert policy.lists(0) == lists(NL="j0")
    decision = policy.act(
        snapshot(
            10.0,
            trainer("j0", loss=1.0, cpu_seconds=15.0),
            trainer("j1", loss=None, cpu_seconds=0.0),
        )
    )
    # j1 arrived: NL, uncapped. j0: E normalised by its max 2: P = |0.5 - 1| / 10 = 0.05,
    # R = 15 cpu-s / 10 s = 1.5 cores, G = 0.05 / 1.5; alone with a score, alpha = 0.05 / 2.
    assert policy.threshold(0) == pytest.approx(0.05 / 2, abs=TOL)
    assert policy.last_growth()["j0"] == pytest.approx(0.05 / 1.5, abs=TOL)
    assert policy.lists(0) == lists(NL="j0 j1")
    assert decision.limits == {"j0": pytest.approx(1.0, abs=TOL), "j1": 1.0}


def test_policy_holds_limits_until_itval_then_reacts_to_departure() -> None:
    policy = FlowCon(itval_s=30.0)
    policy.act(snapshot(0.0, trainer("j0", loss=2.0, cpu_seconds=0.0)))
    quiet = policy.act(snapshot(10.0, trainer("j0", loss=1.5, cpu_seconds=40.0)))
    assert quiet.limits == {}  # not due: the limits in force hold
    gone = policy.act(
        snapshot(
            20.0,
            trainer("j0", loss=1.4, cpu_seconds=80.0),
            trainer("j9", loss=0.1, cpu_seconds=5.0, state=JobState.DONE),
        )
    )
    assert gone.limits == {}
    arrived = policy.act(
        snapshot(
            25.0,
            trainer("j0", loss=1.3, cpu_seconds=100.0),
            trainer("j1", loss=None, cpu_seconds=0.0),
        )
    )
    assert set(arrived.limits) == {"j0", "j1"}  # Alg. 2 ran Alg. 1 at once


def test_placer_uses_algorithm_4() -> None:
    # A fixed threshold: alone on its worker, a job never falls below Alg. 3's half of its own
    # progress, since its usage is at most the whole worker.
    policy = FlowCon(itval_s=10.0, adaptive_threshold=False, alpha_initial=0.03)
    policy.act(
        snapshot(
            0.0,
            trainer("j0", loss=2.0, cpu_seconds=0.0, worker=0),
            trainer("j1", loss=2.0, cpu_seconds=0.0, worker=1),
            workers=2,
        )
    )
    # 1 core each (10 cpu-s per 10 s). j0 grows fast: E = 0.5 then 0.15, G = 0.05 then 0.035,
    # above 0.03: NL. j1 has converged (G about 5e-5): WL, then CL.
    for t, (loss0, loss1) in enumerate([(1.0, 1.999), (0.3, 1.998)], start=1):
        policy.act(
            snapshot(
                10.0 * t,
                trainer("j0", loss=loss0, cpu_seconds=10.0 * t, worker=0),
                trainer("j1", loss=loss1, cpu_seconds=10.0 * t, worker=1),
                workers=2,
            )
        )
    assert policy.lists(1) == lists(CL="j1")
    view = snapshot(
        20.0,
        trainer("j0", loss=0.3, cpu_seconds=20.0, worker=0),
        trainer("j1", loss=1.998, cpu_seconds=20.0, worker=1),
        workers=2,
    )
    job = JobSpec("j2", "vae", JobKind.TRAINING, 20.0)
    assert isinstance(policy.placer, FlowConPlacer)
    assert policy.placer.place(job, view, [0, 1]) == 1
