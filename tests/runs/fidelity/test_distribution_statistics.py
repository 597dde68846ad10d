"""The statistics that hold replay's outcomes against the host's spread, on hand-made samples
whose answers are worked out by hand, and on the reruns the stock-training race was measured
with."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dlsched.envs.errors import ArgumentError
from dlsched.runs.fidelity.distribution_statistics import (
    SampleComparison,
    bootstrap_interval,
    ranking_check,
    split_half_floor,
)

STOCK_RACE_S = {
    "mlp-digits": (25.8, 231.3, 109.8, 27.6),
    "cnn-digits": (104.0, 312.3, 170.2, 217.9),
    "gru-digits": (298.6, 363.8, 294.6, 124.7),
    "vae-digits": (286.3, 350.9, 286.8, 202.1),
}
"""Completion times of docker-training-4-stock's jobs in four replicas of one seeded episode,
started together on disjoint core pairs of an idle 16-core host (stock threading, no limits)."""


def test_a_replay_twin_is_at_zero_distance_with_full_coverage() -> None:
    constant = SampleComparison(replay=(30.0,) * 5, host=(30.0,) * 3)
    assert (constant.w1, constant.ks, constant.coverage) == (0.0, 0.0, 1.0)
    spread = SampleComparison(replay=STOCK_RACE_S["cnn-digits"], host=STOCK_RACE_S["cnn-digits"])
    assert (spread.w1, spread.ks, spread.mean_error) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("replay", "host", "w1"),
    [
        ((0.0, 1.0), (2.0, 3.0), 2.0),  # every unit of mass moves by 2
        ((0.0,), (0.0, 2.0), 1.0),  # half the mass moves by 2
        ((1.0, 2.0, 3.0), (1.0, 2.0, 6.0), 1.0),  # a third moves by 3
    ],
)
def test_the_wasserstein_distance_of_hand_made_samples(replay, host, w1) -> None:
    comparison = SampleComparison(replay, host)
    assert comparison.w1 == pytest.approx(w1)
    assert comparison.relative_w1 == pytest.approx(w1 / np.mean(host))


def test_coverage_counts_host_outcomes_inside_replays_band() -> None:
    comparison = SampleComparison(replay=tuple(float(v) for v in range(101)), host=(5, 50, 95, 10))
    assert comparison.band == (10.0, 90.0)
    assert comparison.coverage == 0.5  # 50 and 10 (the band's end counts)
    point = SampleComparison(replay=(100.0,), host=STOCK_RACE_S["vae-digits"])
    assert point.coverage == 0.0  # a point model covers no spread host
    pair = SampleComparison(replay=(80.0, 120.0), host=(120.0, 80.0))
    assert (pair.band, pair.coverage) == ((80.0, 120.0), 1.0)  # few reruns cover themselves


def test_the_ks_statistic_is_the_largest_gap_between_the_distribution_functions() -> None:
    assert SampleComparison((1.0, 2.0), (3.0, 4.0)).ks == 1.0
    assert SampleComparison((1.0, 2.0, 3.0, 4.0), (3.0, 4.0, 5.0, 6.0)).ks == 0.5


def test_the_split_half_floor_of_hand_made_reruns() -> None:
    # halves of (1, 1, 3, 3): 2 of the 6 splits put both 1s together (W1 = 2), the others 0
    assert split_half_floor((1.0, 1.0, 3.0, 3.0)) == pytest.approx((2 * 2 / 6) / 2)
    assert split_half_floor((7.0, 7.0, 7.0)) == 0.0
    assert split_half_floor((7.0,)) is None


@pytest.mark.parametrize("job", sorted(STOCK_RACE_S))
def test_the_split_half_floor_of_the_stock_race(job: str) -> None:
    reruns = STOCK_RACE_S[job]
    # the same floor computed apart: each half's sorted values against the other's
    distances = []
    for half in itertools.combinations(range(4), 2):
        first = sorted(reruns[i] for i in half)
        second = sorted(reruns[i] for i in range(4) if i not in half)
        distances.append(np.mean(np.abs(np.subtract(first, second))))
    expected = np.mean(distances) / np.mean(reruns)
    assert split_half_floor(reruns) == pytest.approx(expected)
    # the race: the host is tens of percent away from itself, the mlp job most
    assert split_half_floor(reruns) > 0.1
    assert split_half_floor(STOCK_RACE_S["mlp-digits"]) == max(
        split_half_floor(values) for values in STOCK_RACE_S.values()
    )


def test_a_bootstrap_interval_holds_the_mean_and_repeats() -> None:
    interval = bootstrap_interval(STOCK_RACE_S["gru-digits"])
    assert interval.low < interval.mean < interval.high
    assert interval == bootstrap_interval(STOCK_RACE_S["gru-digits"])
    assert bootstrap_interval((3.0,)) == bootstrap_interval((3.0, 3.0))
    with pytest.raises(ArgumentError):
        bootstrap_interval(())


def test_the_ranking_is_held_only_where_the_host_separates_the_policies() -> None:
    host = {
        "default": (200.0, 205.0, 210.0),
        "flowcon": (150.0, 152.0, 155.0),
        "equal": (201.0, 207.0, 208.0),
    }
    same = ranking_check(host, {"default": (90.0,), "flowcon": (60.0,), "equal": (80.0,)})
    # default and equal overlap on the host: replay may order them either way
    assert set(same.separated) == {("default", "flowcon"), ("flowcon", "equal")}
    assert same.agrees
    reversed_ = ranking_check(host, {"default": (60.0,), "flowcon": (90.0,), "equal": (70.0,)})
    assert reversed_.disagreements == (("default", "flowcon"), ("flowcon", "equal"))
    with pytest.raises(ArgumentError, match="do not match"):
        ranking_check(host, {"default": (1.0,)})


def test_samples_must_be_finite_and_present() -> None:
    with pytest.raises(ArgumentError, match="host samples"):
        SampleComparison((1.0,), ())
    with pytest.raises(ArgumentError, match="replay samples"):
        SampleComparison((float("nan"),), (1.0,))
