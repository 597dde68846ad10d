"""The batched replay model's job streams: the states ``np.random.default_rng(seed)`` starts in."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.envs.replay.streams import pcg64_states

EDGES = [0, 1, 2**32 - 1, 2**32, 2**32 + 1, 2**62, 2**63 - 1]


@pytest.mark.parametrize("count", [3, 40, 2000])
def test_states_are_default_rngs_for_every_seed(count):
    seeds = np.random.default_rng(count).integers(2**63, size=count)
    seeds[: len(EDGES)] = EDGES[:count]
    states = pcg64_states(seeds)
    assert states == [np.random.default_rng(seed).bit_generator.state for seed in seeds.tolist()]


def test_a_generator_set_to_a_state_draws_default_rngs_numbers():
    seeds = np.random.default_rng(1).integers(2**63, size=64)
    stream = np.random.Generator(np.random.PCG64(0))
    for seed, state in zip(seeds.tolist(), pcg64_states(seeds), strict=True):
        stream.bit_generator.state = state
        expected = np.random.default_rng(seed).standard_normal(100)
        assert np.array_equal(stream.standard_normal(100), expected)


def test_one_call_draws_the_seeds_one_call_per_job_draws():
    # ReplayBatch.place draws a row's placement seeds in one call; the reference one per job.
    batched, single = np.random.default_rng(9), np.random.default_rng(9)
    seeds = batched.integers(2**63, size=50).tolist()
    assert seeds == [int(single.integers(2**63)) for _ in range(50)]


def test_a_numpy_that_seeds_otherwise_gets_its_own_generators(monkeypatch):
    """Were numpy ever to change its seeding, the vectorised hash would be wrong silently: the
    check at first use then falls back to building each generator."""
    from dlsched.envs.replay import streams

    assert streams._hash_matches_numpy()
    seeds = np.arange(100, 140)
    monkeypatch.setattr(streams, "_hashed_states", lambda seeds: [{}] * len(seeds))
    streams._hash_matches_numpy.cache_clear()
    try:
        assert not streams._hash_matches_numpy()
        assert pcg64_states(seeds) == [np.random.default_rng(s).bit_generator.state for s in seeds]
    finally:
        monkeypatch.undo()
        streams._hash_matches_numpy.cache_clear()
