"""Properties of CFS-with-quotas CPU sharing (water-filling)."""

from __future__ import annotations

from random import Random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.envs.replay.sharing import water_fill

EPS = 1e-9


def fill(capacity: float, limits: np.ndarray, demands: np.ndarray) -> np.ndarray:
    """The shares of one worker's jobs capped at ``limits`` and ``demands``."""
    return water_fill(np.array([capacity]), np.minimum(limits, demands)[None, :])[0]


# No subnormal floats (below 2.2e-308 cores): no scheduler sets such an amount, and the batched
# and single fills round one to 0 and the other to itself (Hypothesis found 5e-324 cores).
cores = st.floats(min_value=0.0, max_value=64.0, allow_nan=False, allow_subnormal=False)
amounts = st.floats(min_value=0.0, max_value=32.0, allow_nan=False, allow_subnormal=False)


@st.composite
def workers(draw: st.DrawFn) -> tuple[float, np.ndarray, np.ndarray]:
    count = draw(st.integers(min_value=0, max_value=12))
    capacity = draw(cores)
    limits = np.array(draw(st.lists(amounts, min_size=count, max_size=count)), dtype=float)
    demands = np.array(draw(st.lists(amounts, min_size=count, max_size=count)), dtype=float)
    return capacity, limits, demands


def progressive_filling(capacity: float, caps: np.ndarray) -> np.ndarray:
    """Reference max-min fair allocation: give every unsatisfied job an equal slice, repeat."""
    allocation = np.zeros_like(caps)
    left = capacity
    open_jobs = caps > 0
    while left > 1e-12 and open_jobs.any():
        slice_ = left / open_jobs.sum()
        grant = np.where(open_jobs, np.minimum(caps - allocation, slice_), 0.0)
        allocation += grant
        left -= grant.sum()
        open_jobs = allocation < caps - 1e-12
    return allocation


@given(workers())
@settings(max_examples=400)
def test_never_above_capacity_or_cap(worker: tuple[float, np.ndarray, np.ndarray]) -> None:
    capacity, limits, demands = worker
    shares = fill(capacity, limits, demands)
    assert shares.shape == limits.shape
    assert shares.sum() <= capacity * (1 + EPS) + EPS
    assert np.all(shares <= np.minimum(limits, demands) + EPS)
    assert np.all(shares >= 0.0)


@given(workers())
@settings(max_examples=400)
def test_work_conserving(worker: tuple[float, np.ndarray, np.ndarray]) -> None:
    capacity, limits, demands = worker
    shares = fill(capacity, limits, demands)
    if shares.sum() < capacity - 1e-7:
        np.testing.assert_allclose(shares, np.minimum(limits, demands), rtol=0, atol=1e-9)


@given(workers())
@settings(max_examples=400)
def test_max_min_fair(worker: tuple[float, np.ndarray, np.ndarray]) -> None:
    capacity, limits, demands = worker
    shares = fill(capacity, limits, demands)
    below_cap = shares < np.minimum(limits, demands) - 1e-9
    if below_cap.any():
        # A job held below its cap got the common level, which no other job exceeds.
        assert shares[below_cap].min() >= shares.max() - 1e-9


@given(workers(), st.randoms(use_true_random=False))
@settings(max_examples=300)
def test_permutation_invariant(
    worker: tuple[float, np.ndarray, np.ndarray], random: Random
) -> None:
    capacity, limits, demands = worker
    order = list(range(limits.size))
    random.shuffle(order)
    shares = fill(capacity, limits, demands)
    permuted = fill(capacity, limits[order], demands[order])
    np.testing.assert_allclose(permuted, shares[order], rtol=1e-12, atol=1e-12)


@given(workers())
@settings(max_examples=300)
def test_matches_progressive_filling(worker: tuple[float, np.ndarray, np.ndarray]) -> None:
    capacity, limits, demands = worker
    expected = progressive_filling(capacity, np.minimum(limits, demands))
    np.testing.assert_allclose(fill(capacity, limits, demands), expected, atol=1e-7)


def test_no_jobs() -> None:
    assert fill(8.0, np.array([]), np.array([])).shape == (0,)


def test_even_split_when_all_want_more() -> None:
    shares = fill(8.0, np.full(10, 8.0), np.full(10, 6.0))
    np.testing.assert_allclose(shares, np.full(10, 0.8))
    assert shares.sum() == pytest.approx(8.0, abs=1e-12)


def test_capped_job_leaves_its_share_to_the_others() -> None:
    # One job capped at 0.5 cores, another wanting only 1 core: the third takes the rest.
    shares = fill(4.0, np.array([0.5, 4.0, 4.0]), np.array([6.0, 1.0, 6.0]))
    np.testing.assert_allclose(shares, [0.5, 1.0, 2.5])


def test_caps_below_capacity_leave_cores_idle() -> None:
    shares = fill(8.0, np.array([1.0, 2.0]), np.array([6.0, 1.5]))
    np.testing.assert_allclose(shares, [1.0, 1.5])


def test_zero_caps_and_zero_capacity() -> None:
    np.testing.assert_allclose(fill(8.0, np.array([0.0, 8.0]), np.array([5.0, 0.0])), 0.0)
    np.testing.assert_allclose(fill(0.0, np.array([1.0, 2.0]), np.array([1.0, 2.0])), 0.0)


def test_inputs_not_modified() -> None:
    limits = np.array([3.0, 3.0, 3.0])
    demands = np.array([1.0, 5.0, 5.0])
    fill(4.0, limits, demands)
    np.testing.assert_array_equal(limits, [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(demands, [1.0, 5.0, 5.0])


@given(st.lists(workers(), min_size=1, max_size=6))
@settings(max_examples=200)
def test_many_workers_at_once_are_each_alone(
    many: list[tuple[float, np.ndarray, np.ndarray]],
) -> None:
    slots = max(limits.size for _, limits, _ in many)
    caps = np.zeros((len(many), slots))
    for row, (_, limits, demands) in enumerate(many):
        caps[row, : limits.size] = np.minimum(limits, demands)
    shares = water_fill(np.array([capacity for capacity, _, _ in many]), caps)
    for row, (capacity, limits, demands) in enumerate(many):
        np.testing.assert_array_equal(shares[row, : limits.size], fill(capacity, limits, demands))
        assert not shares[row, limits.size :].any()


def test_caps_over_the_capacity_by_rounding_alone_are_met() -> None:
    """FlowCon spread these ten limits over a 4-core worker (flowcon-cluster-40, seed 202, step
    90): they sum to 4.0000000000000009 in floats, so no level lies below a cap, and the first
    level (4 / 10 cores each) capped six jobs and left 0.84 cores idle."""
    caps = np.array(
        [
            0.435341599479981,
            0.40305016953937006,
            0.18882757291040841,
            0.44399633617202117,
            0.201004016770291,
            0.6143164253417712,
            0.24680867817091137,
            0.5712116343287722,
            0.7695219090092346,
            0.12592165827723936,
        ]
    )
    assert caps.sum() > 4.0
    shares = fill(4.0, caps, np.full(10, 6.0))
    np.testing.assert_array_equal(shares, caps)
