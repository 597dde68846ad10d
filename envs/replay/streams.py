"""The state ``np.random.default_rng(seed)`` starts in, for many seeds at once.

Every job of the replay engine draws its noise from ``np.random.default_rng(seed)``, its seed
drawn from its episode's generator when it is placed (:mod:`.unit_work`), so that one seed is one
episode whatever else the batch holds. Building that generator costs about 10 us
(``SeedSequence`` coerces and hashes the seed in Python-level code, then ``PCG64`` seeds itself
from it), several times what a service then draws from it; a batched reset of 256 episodes of
10 jobs spent a fifth of its time there. :func:`pcg64_states` computes the same starting states
for a whole array of seeds with numpy's own algorithm (``SeedSequence``'s hash on 32-bit words,
vectorised, then ``PCG64``'s seeding step), so that the engine sets one generator's state per job
instead of building a generator per job: the same streams, the same numbers.
``tests/envs/replay/test_replay_streams.py`` holds them equal to ``default_rng``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

_Words = npt.NDArray[np.unsignedinteger[Any]]

__all__ = ["pcg64_states"]

# numpy.random.bit_generator's SeedSequence constants (the algorithm is stable: numpy promises
# the same streams for the same seed across versions).
_INIT_A = 0x43B0D7E5
_MULT_A = 0x931E8875
_INIT_B = 0x8B51F9DD
_MULT_B = 0x58F38DED
_MIX_MULT_L = 0xCA01F9DD
_MIX_MULT_R = 0x4973F715
_XSHIFT = np.uint32(16)
_POOL_SIZE = 4
#: PCG64's 128-bit LCG multiplier.
_PCG_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645
_MASK_128 = (1 << 128) - 1
#: Seeds from which hashing them as arrays is faster than building their generators (the
#: arrays' hash costs about 160 us whatever their length, a generator about 10 us).
_HASHED_FROM = 24


def _constants(start: int, multiplier: int, count: int) -> list[np.uint32]:
    """The hash constants a SeedSequence hash walks through: ``start * multiplier ** k``."""
    values = [start]
    for _ in range(count):
        values.append(values[-1] * multiplier & 0xFFFFFFFF)
    return [np.uint32(value) for value in values]


# mix_entropy hashes each pool word once, then each of the 4 x 3 (source, destination) pairs.
_HASH_A = _constants(_INIT_A, _MULT_A, _POOL_SIZE + _POOL_SIZE * (_POOL_SIZE - 1))
# generate_state(4, uint64) hashes 8 32-bit words.
_HASH_B = _constants(_INIT_B, _MULT_B, 8)


def _hashmix(value: _Words, step: int) -> _Words:
    value = (value ^ _HASH_A[step]) * _HASH_A[step + 1]
    return value ^ (value >> _XSHIFT)


def _mix(x: _Words, y: _Words) -> _Words:
    result: _Words = x * np.uint32(_MIX_MULT_L) - y * np.uint32(_MIX_MULT_R)
    return result ^ (result >> _XSHIFT)


def pcg64_states(seeds: np.ndarray) -> list[Mapping[str, Any]]:
    """Per seed, the ``bit_generator.state`` of ``np.random.default_rng(seed)``.

    Args:
        seeds: non-negative integers below ``2**64`` (int64 or uint64).
    """
    if len(seeds) < _HASHED_FROM or not _hash_matches_numpy():
        return _built_states(seeds)
    return _hashed_states(seeds)


def _built_states(seeds: np.ndarray) -> list[Mapping[str, Any]]:
    return [np.random.default_rng(seed).bit_generator.state for seed in seeds.tolist()]


@functools.cache
def _hash_matches_numpy() -> bool:
    """Whether the numpy installed seeds its generators as :func:`_hashed_states` does.

    Checked once per process on a few seeds (about a millisecond): a numpy that ever changed
    its seeding would otherwise give other episodes for a seed than it gave before (and than
    a host episode's recorded jobs), silently; it then builds the generators, slower and right.
    """
    seeds = np.array([0, 1, 2**32 - 1, 2**32, 2**63 - 1, *range(7, 7 + _HASHED_FROM)])
    return _hashed_states(seeds) == _built_states(seeds)


def _hashed_states(seeds: np.ndarray) -> list[Mapping[str, Any]]:
    seeds = np.asarray(seeds).astype(np.uint64)
    # SeedSequence(seed).entropy as 32-bit words, low first; a seed below 2**32 has one word,
    # and the pool pads it with the hash of 0, which the high word 0 hashes to alike.
    words = [
        (seeds & np.uint64(0xFFFFFFFF)).astype(np.uint32),
        (seeds >> np.uint64(32)).astype(np.uint32),
        np.zeros(len(seeds), dtype=np.uint32),
        np.zeros(len(seeds), dtype=np.uint32),
    ]
    pool = [_hashmix(word, step) for step, word in enumerate(words)]
    step = _POOL_SIZE
    for source in range(_POOL_SIZE):
        for target in range(_POOL_SIZE):
            if source != target:
                pool[target] = _mix(pool[target], _hashmix(pool[source], step))
                step += 1
    state = []
    for index in range(8):
        value = (pool[index % _POOL_SIZE] ^ _HASH_B[index]) * _HASH_B[index + 1]
        state.append((value ^ (value >> _XSHIFT)).astype(np.uint64))
    # generate_state(4, np.uint64): pairs of 32-bit words, low first.
    seed_high, seed_low, inc_high, inc_low = (
        (state[2 * k] | (state[2 * k + 1] << np.uint64(32))).tolist() for k in range(4)
    )
    states: list[Mapping[str, Any]] = []
    for high, low, sequence_high, sequence_low in zip(
        seed_high, seed_low, inc_high, inc_low, strict=True
    ):
        # pcg64_set_seed: state 0, increment 2 * initseq + 1, a step, add initstate, a step.
        increment = (((sequence_high << 64) | sequence_low) << 1 | 1) & _MASK_128
        current = (increment + ((high << 64) | low)) & _MASK_128
        current = (current * _PCG_MULTIPLIER + increment) & _MASK_128
        states.append(
            {
                "bit_generator": "PCG64",
                "state": {"state": current, "inc": increment},
                "has_uint32": 0,
                "uinteger": 0,
            }
        )
    return states
