"""A profile's curves fitted to calibration's runs; no container runs here.

Each run is a :class:`~dlsched.runs.fidelity.calibration_measurement.LimitRun`: the workload
alone at one CPU limit.

- The throughput curve: units per second from the spacing of the unit completions after
  warm-up, against the cores each run got (its CPU-seconds over the same window: the quota,
  when alone). The fit is the closest non-decreasing curve to the measured rates (least
  squares, pooling adjacent violators): :func:`throughput_points`, :func:`monotone_rates`.
- The demand: the mean cores the uncapped run used over its measuring window (or a capped
  run's, if other processes held the uncapped one below it): :func:`demand_cores`.
- The loss curve (training): the uncapped run trains the whole default job; its minibatch
  losses are averaged over bins of iterations, finer at the start where the loss falls fast:
  :func:`loss_curve`.

:mod:`.calibration_profile` writes them into a profile with their provenance.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

import numpy as np

from dlsched.runs.fidelity.calibration_measurement import LimitRun

LOSS_CURVE_POINTS = 40


def demand_cores(runs: Sequence[LimitRun]) -> float:
    """The most cores the workload was seen to use: the uncapped run's usage when it had the
    host to itself; a capped run that used more (other processes held the uncapped one back)
    shows that the workload can use at least that much."""
    return max(run.cpu_cores for run in runs)


def throughput_points(runs: Sequence[LimitRun]) -> list[tuple[float, float]]:
    """``(cores, units per second)`` sorted by cores, one point per distinct CPU allowance.

    A run's cores are the CPU it got: the mean cores it used over its window (its quota when
    alone and CPU-bound; less if other processes took some). The last point is thus at
    :func:`demand_cores`. Runs at the same cores (within 1 %) are averaged. Rates that fall
    where cores rise (noise between nearby allowances, or a contended run) are pooled with
    their neighbours until they do not (pool-adjacent-violators): more CPU never slows a job.
    """
    merged: list[tuple[float, list[float]]] = []
    for run in sorted(runs, key=lambda item: item.cpu_cores):
        if merged and abs(merged[-1][0] - run.cpu_cores) <= 0.01 * run.cpu_cores:
            # The larger allowance names the point, so the last one stays at the demand.
            merged[-1] = (run.cpu_cores, [*merged[-1][1], run.units_per_s])
        else:
            merged.append((run.cpu_cores, [run.units_per_s]))
    rates = monotone_rates([statistics.mean(rates) for _, rates in merged])
    return [(cores, rate) for (cores, _), rate in zip(merged, rates, strict=True)]


def monotone_rates(rates: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence to ``rates`` (least squares, equal weights)."""
    blocks: list[tuple[float, int]] = []  # (mean, size) of pooled runs of values
    for rate in rates:
        blocks.append((rate, 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (low_mean, low_size), (high_mean, high_size) = blocks[-2], blocks[-1]
            size = low_size + high_size
            blocks[-2:] = [((low_mean * low_size + high_mean * high_size) / size, size)]
    return [mean for mean, size in blocks for _ in range(size)]


def loss_curve(
    losses: Sequence[tuple[int, float]], points: int = LOSS_CURVE_POINTS
) -> list[tuple[int, float]]:
    """Loss against iterations done: mean minibatch losses over geometrically growing bins.

    Iteration ``k`` reports the loss of its minibatch before its update, that is the loss of
    the model after ``k - 1`` iterations; so the first reported loss (initial weights) sits at
    0 iterations done. Bins grow geometrically, so the fast early fall keeps its shape while
    the long tail is averaged over many iterations.

    Args:
        losses: ``(iteration, loss)`` as the workload reported them.
        points: at most this many points (fewer where bins would repeat an iteration).
    """
    if not losses:
        return []
    done = np.array([iteration - 1 for iteration, _ in losses], dtype=float)
    values = np.array([loss for _, loss in losses], dtype=float)
    edges = np.unique(np.round(np.geomspace(1, done.max() + 2, points + 1))) - 1
    curve: list[tuple[int, float]] = []
    for low, high in itertools.pairwise(edges.tolist()):
        in_bin = (done >= low) & (done < high)
        if in_bin.any():
            iteration = round(float(done[in_bin].mean()))
            if not curve or iteration > curve[-1][0]:
                curve.append((iteration, float(values[in_bin].mean())))
    return curve
