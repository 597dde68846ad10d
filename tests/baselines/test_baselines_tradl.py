"""TRADL (reconstruction): stages, weights and limits of one round, computed by hand."""

from __future__ import annotations

import pytest
from telemetry_factories import training_job

from dlsched.baselines.tradl import TRADL, Stage, TieredJob, tiered_limits
from dlsched.envs.telemetry import JobTelemetry, Telemetry, WorkerTelemetry

TOL = 1e-9
TIERS = (0.5, 0.2)


def test_stages() -> None:
    assert TieredJob("a", 0.8, 0.01, TIERS).stage is Stage.BEFORE_FIRST
    assert TieredJob("a", 0.5, 0.01, TIERS).stage is Stage.BEFORE_SECOND
    assert TieredJob("a", 0.2, 0.01, TIERS).stage is Stage.PAST_BOTH
    assert TieredJob("a", None, None, TIERS).stage is Stage.BEFORE_FIRST
    assert TieredJob("a", 0.01, 0.01, None).stage is Stage.BEFORE_FIRST
    assert TieredJob("a", 0.01, 0.01, None).next_target == 0.0


def test_priority_by_rate_over_distance() -> None:
    jobs = [
        TieredJob("near", 0.6, 0.01, TIERS),  # 0.1 to go at 0.01/s: 10 s, weight 0.1
        TieredJob("far", 1.5, 0.02, TIERS),  # 1.0 to go at 0.02/s: 50 s, weight 0.02
        TieredJob("done", 0.4, 0.001, TIERS),  # past its first tier: deprioritised
        TieredJob("best", 0.1, 0.0, TIERS),  # past both tiers
    ]
    result = tiered_limits(jobs, deprioritised_share=0.5)
    assert result.priority is Stage.BEFORE_FIRST
    assert result.weights == {
        "near": pytest.approx(0.01 / 0.1, abs=TOL),
        "far": pytest.approx(0.02 / 1.0, abs=TOL),
    }
    low = 0.5 / 4
    pool = 1 - 2 * low
    assert result.limits["done"] == pytest.approx(low, abs=TOL)
    assert result.limits["best"] == pytest.approx(low, abs=TOL)
    assert result.limits["near"] == pytest.approx(pool * 0.1 / 0.12, abs=TOL)
    assert result.limits["far"] == pytest.approx(pool * 0.02 / 0.12, abs=TOL)


def test_second_tier_takes_over_when_every_first_tier_is_reached() -> None:
    jobs = [
        TieredJob("a", 0.4, 0.02, TIERS),  # 0.2 to the second tier: weight 0.1
        TieredJob("b", 0.3, 0.01, TIERS),  # 0.1: weight 0.1
        TieredJob("c", 0.1, 0.0, TIERS),
    ]
    result = tiered_limits(jobs, deprioritised_share=0.5)
    assert result.priority is Stage.BEFORE_SECOND
    low = 0.5 / 3
    assert result.limits["c"] == pytest.approx(low, abs=TOL)
    assert result.limits["a"] == pytest.approx((1 - low) / 2, abs=TOL)
    assert result.limits["b"] == pytest.approx((1 - low) / 2, abs=TOL)


def test_everyone_past_both_tiers_runs_uncapped() -> None:
    result = tiered_limits([TieredJob("a", 0.1, 0.0, TIERS)], deprioritised_share=0.5)
    assert result.priority is None and result.limits == {"a": 1.0}


def test_stalled_and_new_jobs() -> None:
    jobs = [
        TieredJob("stalled", 0.9, -0.01, TIERS),  # loss rose: weight 0, gets the low share
        TieredJob("moving", 0.9, 0.04, TIERS),  # 0.4 to go: weight 0.1
        TieredJob("new", None, None, TIERS),  # no rate yet: the largest weight of its stage
    ]
    result = tiered_limits(jobs, deprioritised_share=0.5)
    assert result.weights == {
        "stalled": 0.0,
        "moving": pytest.approx(0.1),
        "new": pytest.approx(0.1),
    }
    assert result.limits["stalled"] == pytest.approx(0.5 / 3, abs=TOL)
    assert result.limits["moving"] == pytest.approx(0.5, abs=TOL)
    assert result.limits["new"] == pytest.approx(0.5, abs=TOL)


def test_single_job() -> None:
    result = tiered_limits([TieredJob("a", 0.9, 0.01, TIERS)], deprioritised_share=0.5)
    assert result.limits == {"a": pytest.approx(1.0, abs=TOL)}


def test_policy_rounds_from_telemetry() -> None:
    policy = TRADL()

    def job(job_id: str, loss: float, t: float) -> JobTelemetry:
        return training_job(
            job_id,
            age_s=t,
            cpu_usage=2.0,
            cpu_seconds=2.0 * t,
            loss=loss,
            iterations=int(t),
            total_iterations=1000,
            loss_targets=TIERS,
        )

    def at(t: float, *jobs: JobTelemetry) -> Telemetry:
        return Telemetry(t, 10.0, (WorkerTelemetry(0, 4.0, 4.0),), jobs)

    first = policy.act(at(0.0, job("j0", 1.0, 0.0), job("j1", 2.0, 0.0)))
    # no rates yet: equal weights
    assert first.limits == {"j0": pytest.approx(0.5), "j1": pytest.approx(0.5)}
    assert policy.act(at(5.0, job("j0", 0.95, 5.0), job("j1", 1.9, 5.0))).limits == {}
    second = policy.act(at(10.0, job("j0", 0.9, 10.0), job("j1", 1.8, 10.0)))
    # j0: 0.01/s over 0.4 to go (0.025); j1: 0.02/s over 1.3 to go (0.0153...)
    w0, w1 = 0.01 / 0.4, 0.02 / 1.3
    assert second.limits["j0"] == pytest.approx(w0 / (w0 + w1), abs=TOL)
    assert second.limits["j1"] == pytest.approx(w1 / (w0 + w1), abs=TOL)
