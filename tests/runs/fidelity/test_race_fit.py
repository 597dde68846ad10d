"""Fitting the race from per-second paces: it recovers the chain that made them."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.envs.errors import ArgumentError
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.replay.race import RaceModel
from dlsched.runs.fidelity.race_fit import crowded_paces, fit_race

TRUE = RaceModel(
    levels=(0.4, 1.0, 1.8),
    holding_s=(30.0, 20.0, 40.0),
    jumps=((0.0, 0.7, 0.3), (0.5, 0.0, 0.5), (0.2, 0.8, 0.0)),
)


def _paces(model: RaceModel, rng: np.random.Generator, seconds: int, rate: float) -> np.ndarray:
    """A job's iterations per second at ``rate`` times its level, counted as whole iterations
    (the level within a second is its time-weighted mean)."""
    starts, levels = model.sample_path(rng, seconds)
    edges = np.append(starts, seconds)
    level_at = np.zeros(seconds)
    for begin, end, level in zip(edges[:-1], edges[1:], levels, strict=True):
        for second in range(int(begin), int(min(np.ceil(end), seconds))):
            overlap = min(end, second + 1) - max(begin, second)
            level_at[second] += overlap * model.levels[level]
    counts = rng.poisson(rate * level_at)
    return counts / counts.mean()


def test_the_fit_recovers_the_levels_holding_times_and_jumps_of_its_own_model() -> None:
    rng = np.random.default_rng(7)
    series = [_paces(TRUE, rng, 600, rate=60.0) for _ in range(20)]
    fit = fit_race(series, levels=3)
    # the series are normalised to their means, so levels come out relative to the mean level
    scale = np.mean([s.mean() for s in series]) / np.dot(TRUE.stationary(), TRUE.levels)
    assert np.asarray(fit.model.levels) == pytest.approx(np.asarray(TRUE.levels) * scale, rel=0.1)
    assert fit.model.holding_s == pytest.approx(TRUE.holding_s, rel=0.2)
    assert np.asarray(fit.model.jumps) == pytest.approx(np.asarray(TRUE.jumps), abs=0.12)
    assert (fit.seconds, fit.series, len(fit.residuals)) == (12_000, 20, 3)


def test_too_little_crowding_is_refused_with_what_it_needs() -> None:
    with pytest.raises(ArgumentError, match=r"0 bins of 1 s of crowded pace: expected at least 30"):
        fit_race([np.ones(5)], levels=3)
    with pytest.raises(ArgumentError, match=r"levels=1: expected at least 2"):
        fit_race([np.ones(50)], levels=1)


def test_crowded_paces_are_cut_where_two_jobs_run_at_once() -> None:
    # j00 runs 0-60 s at 10 units a second; j01 from 20 to 50 s at 5
    first = np.arange(1, 601)
    second = np.arange(1, 151)
    traces = (
        ProgressTrace("j00", "iteration", first / 10.0, first),
        ProgressTrace("j01", "iteration", 20.0 + second / 5.0, second),
    )
    paces = crowded_paces(traces)
    assert [len(p) for p in paces] == [29, 29]  # the whole seconds both ran: 21 to 50
    assert all(np.allclose(p, 1.0) for p in paces)  # steady paces: one level
    coarse = crowded_paces(traces, bin_s=2)  # 14 whole bins of 2 s in those 29 seconds
    assert [len(p) for p in coarse] == [14, 14] and all(np.allclose(p, 1.0) for p in coarse)
    with pytest.raises(ArgumentError, match=r"bin_s=0: expected whole seconds"):
        crowded_paces(traces, bin_s=0)


def test_holding_times_are_in_seconds_whatever_the_bins() -> None:
    rng = np.random.default_rng(3)
    series = [_paces(TRUE, rng, 600, rate=60.0) for _ in range(20)]
    # the same paces summed over 2-s bins: the holding times come out in seconds still
    binned = [s[: len(s) // 2 * 2].reshape(-1, 2).mean(axis=1) for s in series]
    fine, coarse = fit_race(series), fit_race(binned, bin_s=2.0)
    assert coarse.model.holding_s == pytest.approx(fine.model.holding_s, rel=0.25)
    assert coarse.seconds == fine.seconds
