"""Fitting the race (:mod:`dlsched.envs.replay.race`) from fine host traces.

A host episode on Docker keeps every iteration of every job with its time
(:mod:`dlsched.envs.progress_trace`). Where several stock jobs share a worker, a job's pace in
each second, over its mean pace while they share it, is the race's level times the noise of
counting whole iterations: :func:`crowded_paces` cuts those series out of an episode's traces.
:func:`fit_race` then finds the levels and the chain between them:

1. **Levels**: a one-dimensional k-means of the log paces of every second of every series
   (started at evenly spaced quantiles, so the fit is deterministic).
2. **Which level each second is at**: a few rounds of hard expectation-maximisation on a hidden
   Markov chain: each series labelled by Viterbi (Gaussian log paces around the levels; a
   switch costs what the chain's switching rate says, so that the noise of counting whole
   units makes no switches of its own), then the levels and the rate estimated anew. A level's
   pace is the mean pace of its seconds.
3. **Holding times**: a level's mean holding time is the seconds spent in it over the runs that
   ended in it (the exponential's maximum likelihood, the runs a series' end cut short counted
   as censored).
4. **Jumps**: the counts of each level-to-level move, over the moves out of the level (a level
   never left gets the others' chances, evenly).

Seconds are the resolution: switches within a second are averaged into its pace, so holding
times of a few seconds are not recovered (the host's are tens of seconds, issue #32).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlsched.envs.errors import ArgumentError
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.replay.race import RaceModel

#: k-means rounds at most (it stops once no second changes level).
MAX_ROUNDS = 100
#: Rounds of labelling by Viterbi and re-estimating the levels.
HMM_ROUNDS = 5
#: Seconds a series needs to count: shorter spells of crowding tell nothing of holding times.
MIN_SERIES_S = 10


@dataclass(frozen=True)
class RaceFit:
    """A fitted race and how well it fits.

    Attributes:
        model: the race.
        seconds: the seconds of pace it was fitted to.
        series: how many series (crowded spells of a job) they came from.
        residuals: one line per level: its pace, its share of the seconds, its holding time and
            how many runs ended in it.
    """

    model: RaceModel
    seconds: int
    series: int
    residuals: tuple[str, ...]


def crowded_paces(
    traces: Sequence[ProgressTrace], least_jobs: int = 2, bin_s: int = 1
) -> list[np.ndarray]:
    """Per job and spell in which at least ``least_jobs`` jobs ran (each from its first
    reported unit to its last), the job's units in each bin of ``bin_s`` whole seconds over
    their mean.

    Args:
        traces: the jobs of one episode on one worker.
        least_jobs: how many jobs must run at once for a second to count as crowded.
        bin_s: seconds a pace is counted over: a crowded stock job can make well under one
            unit a second (on a 2-core host, 12% of such seconds held none), so per-second
            counts are mostly counting noise where a few seconds' are not.
    """
    if bin_s < 1:
        raise ArgumentError(f"bin_s={bin_s}: expected whole seconds, at least 1")
    spans = [(float(t.times_s[0]), float(t.times_s[-1])) for t in traces if len(t) >= 2]
    if not spans:
        return []
    end = int(np.ceil(max(last for _, last in spans)))
    running = np.zeros(end, dtype=np.int64)
    for first, last in spans:
        running[int(np.ceil(first)) : int(np.floor(last))] += 1
    crowded = running >= least_jobs
    series = []
    for trace in traces:
        if len(trace) < 2:
            continue
        first, last = int(np.ceil(trace.times_s[0])), int(np.floor(trace.times_s[-1]))
        mine = np.zeros(end, dtype=bool)
        mine[first:last] = True
        paces = trace.per_second(end)
        for spell in _spells(crowded & mine):
            seconds = paces[spell]
            bins = len(seconds) // bin_s
            values = seconds[: bins * bin_s].reshape(bins, bin_s).sum(axis=1)
            if bins >= MIN_SERIES_S and values.mean() > 0:
                series.append(values / values.mean())
    return series


def _spells(mask: np.ndarray) -> list[slice]:
    """The runs of ``True`` in ``mask``, as slices."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [slice(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def fit_race(
    series: Sequence[np.ndarray], levels: int = 3, full_at: float = 2.0, bin_s: float = 1.0
) -> RaceFit:
    """The race whose chain best explains ``series`` (see the module docstring).

    Args:
        series: per crowded spell of a job, its pace in each bin over its mean pace
            (:func:`crowded_paces`).
        levels: the chain's levels (at least 2).
        full_at: the oversubscription from which the levels apply whole (not fitted here: the
            series come from one oversubscription, at which the levels apply whole).
        bin_s: the seconds of a bin of ``series`` (holding times are in seconds).

    Raises:
        ArgumentError: too few seconds, a non-finite or negative pace, or fewer than 2 levels.
    """
    if levels < 2:
        raise ArgumentError(f"levels={levels}: expected at least 2")
    kept = [np.asarray(s, dtype=np.float64) for s in series if len(s) >= MIN_SERIES_S]
    paces = np.concatenate(kept) if kept else np.zeros(0)
    if len(paces) < levels * MIN_SERIES_S:
        raise ArgumentError(
            f"{len(paces)} bins of {bin_s:g} s of crowded pace: expected at least "
            f"{levels * MIN_SERIES_S} in series of {MIN_SERIES_S} bins or more; record longer "
            "host episodes"
        )
    if not np.isfinite(paces).all() or (paces < 0).any():
        raise ArgumentError("a pace is negative or not finite: expected units per second >= 0")
    logs = np.log(np.maximum(paces, 1e-3))
    centers = _kmeans(logs, levels)
    # Hard-EM rounds of a hidden Markov chain: each series' levels by Viterbi (a switch costs
    # what the chain's holding times say it does, so that the noise of counting whole units
    # makes no switch of its own), then the centers and the switching chance anew.
    switching = 1.0 / MIN_SERIES_S
    for _ in range(HMM_ROUNDS):
        labels = _label(logs, centers)
        spread = max(float(np.std(logs - centers[labels])), 1e-3)
        labels = np.concatenate(
            [_viterbi(piece, centers, spread, switching) for piece in _pieces(logs, kept)]
        )
        centers = np.array(
            [logs[labels == k].mean() if (labels == k).any() else centers[k] for k in range(levels)]
        )
        switches = sum(int(np.count_nonzero(np.diff(piece))) for piece in _pieces(labels, kept))
        switching = min(0.5, max(switches, 1) / len(logs))
    values = tuple(
        float(paces[labels == k].mean()) if (labels == k).any() else float(np.exp(centers[k]))
        for k in range(levels)
    )
    time_at = np.zeros(levels)
    exits = np.zeros(levels)
    moves = np.zeros((levels, levels))
    for mine in _pieces(labels, kept):
        boundaries = np.flatnonzero(np.diff(mine)) + 1
        runs = np.split(mine, boundaries)
        for index, run in enumerate(runs):
            time_at[run[0]] += len(run)
            if index + 1 < len(runs):  # the last run of a series is cut short: censored
                exits[run[0]] += 1
                moves[run[0], runs[index + 1][0]] += 1
    holding = tuple(float(bin_s * time_at[k] / max(exits[k], 1.0)) for k in range(levels))
    jumps = []
    for k in range(levels):
        row = (
            moves[k] / moves[k].sum()
            if moves[k].sum()
            else np.where(np.arange(levels) == k, 0.0, 1.0 / (levels - 1))
        )
        jumps.append(tuple(float(p) for p in row))
    model = RaceModel(
        levels=tuple(max(v, 0.0) for v in values),
        holding_s=tuple(max(h, 1.0) for h in holding),
        jumps=tuple(jumps),
        full_at=full_at,
    )
    residuals = tuple(
        f"level {k}: pace {values[k]:.3f}, {time_at[k] / len(paces):.0%} of "
        f"{len(paces) * bin_s:g} s, "
        f"held {holding[k]:.1f} s on average over {int(exits[k])} runs ended"
        for k in range(levels)
    )
    return RaceFit(model, round(len(paces) * bin_s), len(kept), residuals)


def _kmeans(logs: np.ndarray, levels: int) -> np.ndarray:
    """Ascending centers of a one-dimensional k-means of ``logs``, started at evenly spaced
    quantiles (deterministic)."""
    centers = np.quantile(logs, (np.arange(levels) + 0.5) / levels)
    labels = _label(logs, centers)
    for _ in range(MAX_ROUNDS):
        centers = np.array(
            [logs[labels == k].mean() if (labels == k).any() else centers[k] for k in range(levels)]
        )
        new = _label(logs, centers)
        if (new == labels).all():
            break
        labels = new
    return np.sort(centers)


def _label(logs: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Each value's nearest center."""
    return np.abs(logs[:, None] - centers[None, :]).argmin(axis=1)


def _pieces(values: np.ndarray, series: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``values`` (every series' seconds, one after another) cut back into the series."""
    return np.split(values, np.cumsum([len(piece) for piece in series])[:-1])


def _viterbi(logs: np.ndarray, centers: np.ndarray, spread: float, switching: float) -> np.ndarray:
    """The likeliest levels of one series: Gaussian log paces around ``centers`` (``spread``
    their deviation), a switch each second with chance ``switching`` (to any other level alike)."""
    levels = len(centers)
    emission = -0.5 * ((logs[:, None] - centers[None, :]) / spread) ** 2
    move = np.full((levels, levels), np.log(switching / (levels - 1)))
    np.fill_diagonal(move, np.log(1.0 - switching))
    score = emission[0].copy()
    back = np.zeros((len(logs), levels), dtype=np.int64)
    for second in range(1, len(logs)):
        options = score[:, None] + move
        back[second] = options.argmax(axis=0)
        score = options.max(axis=0) + emission[second]
    path = np.empty(len(logs), dtype=np.int64)
    path[-1] = int(score.argmax())
    for second in range(len(logs) - 1, 0, -1):
        path[second - 1] = back[second, path[second]]
    return path
