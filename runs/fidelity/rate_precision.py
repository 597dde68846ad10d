"""How precisely a calibration run knows its rate, and whether two calibrations agree.

A calibration run (:class:`~dlsched.runs.fidelity.calibration_measurement.LimitRun`) counts one
workload's units over its window; split into consecutive sub-windows, the spread of their rates
gives the run's rate a 95% interval (:func:`rate_interval`, the same interval a speed probe's
sub-windows give in :mod:`.speed_interval`). A run whose interval is wider than half the
calibration's tolerance is measured again for as long as the interval says it needs
(:func:`longer_duration`), so that two calibrations of a host that holds its speed agree
within the tolerance, each within half of it. Longer runs narrow the noise within a run, not a
host's drift between runs (10-20% over twenty minutes on a 2-core VM, ``docs/fidelity.md``):
:func:`compare_sets` is what tells.

Two profile sets, say two calibrations run back to back (issue #36), are held against each
other by :func:`compare_sets`: each workload's throughput curve of the second set read at the
cores of the first's measured points, as a ratio (:class:`RateAgreement`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.profile import load_profile_set
from dlsched.runs.fidelity.calibration_measurement import LimitRun
from dlsched.runs.fidelity.speed_interval import SpeedInterval, speed_interval

#: Two calibrations of one quiet host agree when every speed differs by at most this fraction.
DEFAULT_TOLERANCE = 0.05
#: A run measured again lasts at most this many times the calibration's ``--duration``.
LONGEST_FACTOR = 4.0
#: Units a sub-window holds at least (fewer sub-windows where a run counts few units).
_UNITS_PER_WINDOW = 4
#: Sub-windows a run is split into at most: a rate over shorter ones mostly counts the unit.
_MOST_WINDOWS = 12


def rate_interval(run: LimitRun) -> SpeedInterval | None:
    """The 95% interval of ``run``'s rate, as ratios to its mean rate.

    The run's span (first to last completion) is split into equal consecutive sub-windows of at
    least :data:`_UNITS_PER_WINDOW` units each; each one's rate over the run's mean is a sample,
    and one unit per sub-window bounds what whole-unit counts can tell (:func:`speed_interval`).

    Returns:
        ``None`` where the run counted too few units for two sub-windows.
    """
    units = len(run.completions) - 1
    windows = min(_MOST_WINDOWS, units // _UNITS_PER_WINDOW)
    if windows < 2:
        return None
    start, end = run.completions[0], run.completions[-1]
    window_s = (end - start) / windows
    mean_rate = units / (end - start)
    edges = [start + index * window_s for index in range(windows + 1)]
    edges[-1] = end  # the last completion lands in the last window whatever the rounding
    ratios = []
    for low, high in itertools.pairwise(edges):
        # completions in (low, high]: the first completion starts the span, it ends no unit
        counted = bisect.bisect_right(run.completions, high) - bisect.bisect_right(
            run.completions, low
        )
        ratios.append(counted / window_s / mean_rate)
    return speed_interval([ratios], 1.0, window_s, unit=1.0 / (mean_rate * window_s))


def longer_duration(interval: SpeedInterval, tolerance: float, duration_s: float) -> float | None:
    """Seconds a run must measure for its rate's half-interval to fit in ``tolerance / 2``.

    Args:
        interval: the run's :func:`rate_interval`.
        tolerance: the calibration's tolerance (two calibrations agree within it).
        duration_s: the seconds the calibration measures a run for (``--duration``).

    Returns:
        ``None`` where the run is precise enough already; else the seconds needed, at most
        :data:`LONGEST_FACTOR` times ``duration_s``.
    """
    if interval.width <= tolerance:
        return None
    needed = interval.needed_for(tolerance / 2)
    longest = LONGEST_FACTOR * duration_s
    return longest if needed is None else min(max(needed, duration_s * 1.5), longest)


@dataclass(frozen=True)
class RateAgreement:
    """One workload's speed in two profile sets, at the cores of the first set's points.

    Attributes:
        workload: the workload's name.
        cores: the cores of the first set's measured throughput points.
        ratios: the second set's rate over the first's at each of those cores.
        threadings: each set's threading of the workload (sets of two threadings differ by
            what the threads do, not by how the host measured).
    """

    workload: str
    cores: tuple[float, ...]
    ratios: tuple[float, ...]
    threadings: tuple[str, str]

    @property
    def worst(self) -> float:
        """The largest ``|ratio - 1|``."""
        return max(abs(ratio - 1.0) for ratio in self.ratios)

    def agrees(self, tolerance: float) -> bool:
        """Whether every ratio is within ``tolerance`` of 1."""
        return self.worst <= tolerance

    def describe(self, tolerance: float) -> str:
        """``cnn-digits: x0.98 x1.01 ... at 0.2 0.5 ... cores: within 5%``."""
        ratios = " ".join(f"x{ratio:.3f}" for ratio in self.ratios)
        cores = " ".join(f"{cores:.2f}" for cores in self.cores)
        verdict = (
            f"within {tolerance:.0%}"
            if self.agrees(tolerance)
            else f"OFF by {self.worst:.1%}, beyond {tolerance:.0%}: measure it again, longer "
            "(--duration) or on a quieter host"
        )
        first, second = self.threadings
        threadings = "" if first == second else f" ({first} against {second} threading)"
        return f"{self.workload}{threadings}: {ratios} at {cores} cores: {verdict}"


def compare_sets(
    first: str, second: str, workloads: Sequence[str] | None = None
) -> list[RateAgreement]:
    """Each workload's speed in ``second`` against ``first``.

    Args:
        first: a profile set (a shipped set's name or a folder).
        second: another.
        workloads: the workloads compared (default: every one both sets hold).

    Raises:
        ProfileError: a workload named is missing from a set, or the sets share none.
        UnknownNameError: a set's name is neither shipped nor a folder.
    """
    profiles_a, profiles_b = load_profile_set(first), load_profile_set(second)
    shared = sorted(set(profiles_a) & set(profiles_b))
    names = list(workloads) if workloads is not None else shared
    missing = [name for name in names if name not in shared]
    if missing or not names:
        raise ProfileError(
            f"profile sets {first!r} ({', '.join(sorted(profiles_a))}) and {second!r} "
            f"({', '.join(sorted(profiles_b))}) do not both hold "
            f"{', '.join(missing) if missing else 'any workload'}; compare workloads both hold"
        )
    agreements = []
    for name in names:
        a, b = profiles_a[name], profiles_b[name]
        points = [
            (float(cores), float(b.units_per_s(cores)) / float(a.units_per_s(cores)))
            for cores in a.throughput.cores
            if float(a.units_per_s(cores)) > 0
        ]
        if not points or any(not math.isfinite(ratio) for _, ratio in points):
            raise ProfileError(f"{name}: no positive throughput to compare in {first!r}")
        agreements.append(
            RateAgreement(
                name,
                tuple(cores for cores, _ in points),
                tuple(ratio for _, ratio in points),
                (a.threading, b.threading),
            )
        )
    return agreements


def agreement_report(
    first: str, second: str, agreements: Sequence[RateAgreement], tolerance: float
) -> list[str]:
    """``second``'s speeds against ``first``'s (:func:`compare_sets`), workload by workload,
    and whether they all agree within ``tolerance``, line by line."""
    lines = [f"speed in {second} / speed in {first}, at the cores of {first}'s measured points:"]
    lines += [f"  {agreement.describe(tolerance)}" for agreement in agreements]
    off = [agreement for agreement in agreements if not agreement.agrees(tolerance)]
    if off:
        lines.append(
            f"{len(off)} of {len(agreements)} workload(s) differ by more than {tolerance:.0%}"
        )
    else:
        lines.append(f"all {len(agreements)} workload(s) agree within {tolerance:.0%}")
    return lines
