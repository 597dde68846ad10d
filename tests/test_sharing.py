"""Properties of CFS-with-quotas CPU sharing (water-filling)."""

from __future__ import annotations

from random import Random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.envs.replay.sharing import water_fill

EPS = 1e-9

cores = st.floats(min_value=0.0, max_value=64.0, allow_nan=False)
amounts = st.floats(min_value=0.0, max_value=32.0, allow_nan=False)


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
    shares = water_fill(capacity, limits, demands)
    assert shares.shape == limits.shape
    assert shares.sum() <= capacity * (1 + EPS) + EPS
    assert np.all(shares <= np.minimum(limits, demands) + EPS)
    assert np.all(shares >= 0.0)


@given(workers())
@settings(max_examples=400)
def test_work_conserving(worker: tuple[float, np.ndarray, np.ndarray]) -> None:
    capacity, limits, demands = worker
    shares = water_fill(capacity, limits, demands)
    if shares.sum() < capacity - 1e-7:
        np.testing.assert_allclose(shares, np.minimum(limits, demands), rtol=0, atol=1e-9)


@given(workers())
@settings(max_examples=400)
def test_max_min_fair(worker: tuple[float, np.ndarray, np.ndarray]) -> None:
    capacity, limits, demands = worker
    shares = water_fill(capacity, limits, demands)
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
    shares = water_fill(capacity, limits, demands)
    permuted = water_fill(capacity, limits[order], demands[order])
    np.testing.assert_allclose(permuted, shares[order], rtol=1e-12, atol=1e-12)


@given(workers())
@settings(max_examples=300)
def test_matches_progressive_filling(worker: tuple[float, np.ndarray, np.ndarray]) -> None:
    capacity, limits, demands = worker
    expected = progressive_filling(capacity, np.minimum(limits, demands))
    np.testing.assert_allclose(water_fill(capacity, limits, demands), expected, atol=1e-7)


def test_no_jobs() -> None:
    assert water_fill(8.0, np.array([]), np.array([])).shape == (0,)


def test_even_split_when_all_want_more() -> None:
    shares = water_fill(8.0, np.full(10, 8.0), np.full(10, 6.0))
    np.testing.assert_allclose(shares, np.full(10, 0.8))
    assert shares.sum() == pytest.approx(8.0, abs=1e-12)


def test_capped_job_leaves_its_share_to_the_others() -> None:
    # One job capped at 0.5 cores, another wanting only 1 core: the third takes the rest.
    shares = water_fill(4.0, np.array([0.5, 4.0, 4.0]), np.array([6.0, 1.0, 6.0]))
    np.testing.assert_allclose(shares, [0.5, 1.0, 2.5])


def test_caps_below_capacity_leave_cores_idle() -> None:
    shares = water_fill(8.0, np.array([1.0, 2.0]), np.array([6.0, 1.5]))
    np.testing.assert_allclose(shares, [1.0, 1.5])


def test_zero_caps_and_zero_capacity() -> None:
    np.testing.assert_allclose(water_fill(8.0, np.array([0.0, 8.0]), np.array([5.0, 0.0])), 0.0)
    np.testing.assert_allclose(water_fill(0.0, np.array([1.0, 2.0]), np.array([1.0, 2.0])), 0.0)


def test_inputs_not_modified() -> None:
    limits = np.array([3.0, 3.0, 3.0])
    demands = np.array([1.0, 5.0, 5.0])
    water_fill(4.0, limits, demands)
    np.testing.assert_array_equal(limits, [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(demands, [1.0, 5.0, 5.0])
