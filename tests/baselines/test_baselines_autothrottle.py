"""Autothrottle on hand-made telemetry: the Captain's rules (scale up past three times its target,
down to peak usage plus a margin of deviations, back after a throttling jump) and the Tower."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from telemetry_factories import inference_job, snapshot

from dlsched.baselines.autothrottle import (
    Autothrottle,
    Captain,
    CaptainRule,
    CaptainSettings,
    Tower,
    TowerSample,
    greedy_action,
    predicted_costs,
    sample_costs,
)
from dlsched.envs.telemetry import JobTelemetry


class OneService:
    """Drives one service through an Autothrottle's rounds, 10 s apart: each round the service
    used the given cores and was throttled in the given fraction of its CFS periods, under the
    limit the policy set last."""

    def __init__(
        self, policy: Autothrottle, cores: float = 16.0, limit: float = 1.0, **fields: object
    ) -> None:
        self.policy = policy
        self.cores = cores
        self.fields = {"target_s": 10.0, "latency_s": 10.0} | fields
        self.time_s = 0.0
        self.cpu_seconds = 0.0
        self.limit = limit
        self.policy.act(snapshot(0.0, self.job(0.0, None), cores=cores))  # first sight

    def job(self, usage: float, throttle_ratio: float | None) -> JobTelemetry:
        return inference_job(
            "j0",
            limit=self.limit,
            cpu_usage=usage,
            cpu_seconds=self.cpu_seconds,
            throttle_ratio=throttle_ratio,
            **self.fields,
        )

    def round(self, usage: float, throttle_ratio: float | None = None) -> float:
        """The limit (cores) the policy sets after an interval of ``usage`` cores."""
        self.time_s += 10.0
        self.cpu_seconds += usage * 10.0
        job = self.job(usage, throttle_ratio)
        decision = self.policy.act(snapshot(self.time_s, job, cores=self.cores))
        self.limit = decision.limits["j0"]
        return self.limit * self.cores

    def rule(self) -> tuple[float, float, bool]:
        captain = self.policy.captain("j0")
        assert captain is not None
        return captain.previous_limit, captain.margin, captain.scaled_down


def fixed(target: float, **params: Any) -> Autothrottle:
    return Autothrottle(tower="fixed", initial_target=target, **params)


# ------------------------------------------------------------------------------ the Captain


def test_the_first_round_only_reads_the_counter() -> None:
    policy = fixed(0.1)
    decision = policy.act(snapshot(0.0, inference_job("j0", target_s=10.0), cores=8.0))
    assert decision.limits == {} and policy.captain("j0") is None


def test_it_scales_up_only_past_three_times_its_target() -> None:
    service = OneService(fixed(0.1, usage_window=2), cores=16.0, limit=0.5)  # 8 cores
    # throttled in 30 % of periods, exactly three times the target: no scale-up, and peak usage
    # plus margin (8 + 3.2 * stdev(0, 8)) is above 0.9 of the limit: held
    assert service.round(8.0, throttle_ratio=0.3) == pytest.approx(8.0)
    # 50 %: the limit grows by the excess over three times the target, 0.5 - 0.3
    assert service.round(8.0, throttle_ratio=0.5) == pytest.approx(8.0 * 1.2)
    _, margin, _ = service.rule()
    assert margin == pytest.approx(3.0 + (0.3 - 0.1) + (0.5 - 0.1))


def test_it_scales_down_to_peak_usage_plus_margin_deviations_at_most_halving() -> None:
    service = OneService(fixed(0.0, usage_window=2, initial_margin=1.0), cores=16.0)
    # window (0, 3): 3 + 1 * 2.12 = 5.12 cores wanted, but one round at most halves 16 cores
    assert service.round(3.0) == pytest.approx(8.0)
    # window (3, 4): peak 4 plus one deviation of (3, 4), sqrt(1/2)
    assert service.round(4.0) == pytest.approx(4.0 + math.sqrt(0.5))
    # window (4, 4): no deviation, the peak alone
    assert service.round(4.0) == pytest.approx(4.0)
    # 4 cores wanted is more than 0.9 of the limit: held
    assert service.round(4.0) == pytest.approx(4.0)


def test_the_margin_learns_from_throttling_and_never_goes_below_zero() -> None:
    service = OneService(fixed(0.2, usage_window=2, initial_margin=0.1), cores=16.0)
    service.round(3.0, throttle_ratio=0.0)  # margin 0.1 - 0.2 < 0: 0
    _, margin, scaled_down = service.rule()
    assert margin == 0.0 and scaled_down
    assert service.round(3.0, throttle_ratio=0.0) == pytest.approx(4.0)  # 8 halved; wanted 3
    assert service.round(3.0, throttle_ratio=0.0) == pytest.approx(3.0)  # peak, no deviation


def test_it_rolls_a_scale_down_back_when_throttling_jumps_after_it() -> None:
    service = OneService(fixed(0.0, usage_window=2, initial_margin=1.0), cores=16.0)
    service.round(3.0)
    down = service.round(4.0)  # 8 -> 4.71 cores
    assert down == pytest.approx(4.0 + math.sqrt(0.5))
    # throttled in 40 % of periods right after: the scale-down is mirrored around 8 cores
    assert service.round(4.7, throttle_ratio=0.4) == pytest.approx(2 * 8.0 - down)
    previous, margin, scaled_down = service.rule()
    assert previous == pytest.approx(down) and margin == pytest.approx(1.4) and not scaled_down
    # the same throttling one round later is no rollback: the scale-up rule
    assert service.round(4.7, throttle_ratio=0.4) == pytest.approx((2 * 8.0 - down) * 1.4)


def test_without_a_throttle_measurement_there_is_no_rollback_and_no_scale_up() -> None:
    # an uncapped container cannot be throttled, and a backend that does not measure it reports
    # None: both read as 0
    service = OneService(fixed(0.0, usage_window=2, initial_margin=1.0), cores=16.0)
    service.round(3.0, throttle_ratio=None)
    down = service.round(4.0, throttle_ratio=None)
    assert down < 8.0
    # window (4, 4.7): 4.7 + 0.49 wanted is more than 0.9 of the limit: held
    assert service.round(4.7, throttle_ratio=None) == pytest.approx(down)


def test_the_limit_never_exceeds_the_worker_nor_falls_below_the_floor() -> None:
    service = OneService(fixed(0.0), cores=4.0, limit=0.9)
    assert service.round(3.6, throttle_ratio=0.9) == pytest.approx(4.0)  # 3.6 * 1.9 capped
    captain = Captain.start(0.015, margin=0.0, usage_window=2)
    assert captain.step(0.0, 0.0, 0.0, CaptainSettings()) is CaptainRule.SCALE_DOWN
    assert captain.limit == pytest.approx(0.01)


# -------------------------------------------------------------------------------- the Tower


def samples() -> list[TowerSample]:
    return [
        TowerSample(context=2, action=0, latency_s=8.0, allocation=4.0),  # met, most CPU
        TowerSample(context=2, action=1, latency_s=10.0, allocation=2.0),  # met, least CPU
        TowerSample(context=2, action=2, latency_s=14.0, allocation=1.0),  # missed, slowest
        TowerSample(context=2, action=2, latency_s=12.0, allocation=1.5),  # missed
        TowerSample(context=3, action=1, latency_s=20.0, allocation=2.0),  # missed, elsewhere
    ]


def test_costs_normalise_allocation_when_the_slo_is_met_and_latency_when_not() -> None:
    costs = sample_costs(samples(), slo_s=11.0)
    assert costs == pytest.approx([1.0, 0.0, 2 + (14 - 12) / 8, 2.0, 3.0])


def test_the_cheapest_target_of_the_context_wins_and_untried_ones_look_free() -> None:
    costs = predicted_costs(samples(), slo_s=11.0, context=2, actions=4)
    assert costs == pytest.approx([1.0, 0.0, (2.25 + 2.0) / 2, 0.0])
    # ties go to the target nearest the last one, then to the lower one
    assert greedy_action(costs, last=3) == 3
    assert greedy_action(costs, last=2) == 1
    assert greedy_action(costs, last=0) == 1
    assert predicted_costs(samples(), slo_s=11.0, context=3, actions=2) == [0.0, 3.0]


def test_a_window_without_a_batch_stays_open() -> None:
    tower = Tower(action=1, context=1, last_round_s=0.0)
    rng = np.random.default_rng(0)
    tower.watch(inference_job("j0", target_s=10.0), 2.0)  # no batch yet
    assert not tower.choose(context=1, slo_s=11.0, actions=3, explore=0.0, rng=rng)
    tower.watch(inference_job("j0", target_s=10.0, latency_s=9.0), 4.0)
    tower.watch(inference_job("j0", target_s=10.0, latency_s=7.0), 3.0)
    assert tower.choose(context=1, slo_s=11.0, actions=3, explore=0.0, rng=rng)
    assert tower.samples == [TowerSample(context=1, action=1, latency_s=9.0, allocation=3.0)]
    assert tower.action == 0  # the tried target costs 0.5, the untried ones 0: the lower


def test_the_bandit_changes_the_captains_target_every_tower_interval() -> None:
    policy = Autothrottle(tower_interval_s=20.0, explore=0.0, initial_target=0.0)
    service = OneService(policy, cores=8.0, target_s=10.0, latency_s=9.0)
    service.round(1.0)  # the Tower's first choice: the initial target
    assert policy.target("j0") == 0.0
    service.round(1.0)
    assert policy.target("j0") == 0.0
    service.round(1.0)  # a window that met the SLO: the untried neighbour next
    assert policy.target("j0") == 0.02


def test_fixed_targets_never_change() -> None:
    policy = fixed(0.1, tower_interval_s=10.0)
    service = OneService(policy, cores=8.0)
    for _ in range(4):
        service.round(1.0)
    assert policy.target("j0") == 0.1
