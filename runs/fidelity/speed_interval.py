"""How well a probe knows the host's speed, and what that uncertainty does to a verdict.

A probe (:mod:`~dlsched.runs.fidelity.host_speed`) measures each workload alone over several
consecutive sub-windows; each sub-window gives a ratio of this host's speed to the profile's.
:func:`speed_interval` turns them into a :class:`SpeedInterval`: per probe, the 95% Student-t
interval of the mean of its sub-window ratios, widened by one unit of work over the probe's
windows (a slow training makes the same whole number of iterations in every short window,
which no spread shows), and over the probes before and after a
validation's host episodes the hull of their intervals. The hull, not a pooled interval: two
probes minutes apart differ by the host's drift (on a 2-core VM, cnn-digits x0.82 in one probe,
x1.05 twenty minutes later), which no number of windows averages away, and the host's speed
during the episodes is anywhere between them.

Noise within a probe shrinks as 1/sqrt(windows); the drift does not. So
:meth:`SpeedInterval.needed_s` says how long one probe must measure for the interval to be
narrower than the rescale it corrects (``|ratio - 1|``), or that no length suffices, where the
probes' drift alone is wider.

:class:`SpeedNoise` is the verdict held through that interval: a validation's median per-job
error with replay rescaled to the probe, to every workload's low end and to its high end, and
on the profiles as they are.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

#: The confidence of a probe's interval.
CONFIDENCE = 0.95
#: The most sub-windows :meth:`SpeedInterval.needed_s` looks for before giving up.
_MOST_WINDOWS = 100_000


def _t(windows: int) -> float:
    """Student's t quantile of a two-sided :data:`CONFIDENCE` interval over ``windows``."""
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, windows - 1))


@dataclass(frozen=True)
class SpeedInterval:
    """The speed ratios one workload's probes allow.

    Attributes:
        low: the interval's low end (a ratio, > 0).
        high: its high end.
        spread: the standard deviation of a sub-window's ratio within a probe (pooled over the
            probes).
        drift: how far apart the probes' means are (0 for one probe).
        windows: sub-windows per probe (the fewest of the probes').
        window_s: seconds of one sub-window.
        unit: one unit of work (an iteration, a batch) in one sub-window, as a ratio: a rate
            counted in whole units is known to a unit over a probe's windows.
    """

    low: float
    high: float
    spread: float
    drift: float
    windows: int
    window_s: float
    unit: float = 0.0

    def half_width(self, windows: int) -> float:
        """One probe's half-interval over ``windows`` sub-windows of this spread and unit."""
        return _half_width(windows, self.spread, self.unit)

    @property
    def width(self) -> float:
        """The interval's width, in ratio."""
        return self.high - self.low

    def needed_s(self, ratio: float) -> float | None:
        """Seconds one probe must measure for the interval to be narrower than ``|ratio - 1|``.

        The interval is about the drift plus one half-width at each end; a half-width is
        ``t * spread / sqrt(windows) + unit / windows``, so the windows needed are the fewest
        whose half-width fits in half of what the drift leaves. ``None``: no probe length
        suffices (the drift alone is as wide as the rescale, or the rescale is nil).
        """
        room = abs(ratio - 1.0) - self.drift
        if room <= 0:
            return None
        return self.needed_for(room / 2)

    def needed_for(self, half_width: float) -> float | None:
        """Seconds one probe must measure for its half-interval to be below ``half_width``.

        ``None``: no length up to :data:`_MOST_WINDOWS` sub-windows suffices.
        """

        def fits(windows: int) -> bool:
            return self.half_width(windows) < half_width

        if fits(2):
            return 2 * self.window_s
        most = 4
        while not fits(most):
            most *= 2
            if most > _MOST_WINDOWS:
                return None
        fewest = most // 2  # does not fit: bisect between it and ``most``, which does
        while most - fewest > 1:
            middle = (fewest + most) // 2
            if fits(middle):
                most = middle
            else:
                fewest = middle
        return most * self.window_s

    def describe(self) -> str:
        """``0.78-1.08``."""
        return f"{self.low:.2f}-{self.high:.2f}"


def _half_width(windows: int, spread: float, unit: float) -> float:
    return _t(windows) * spread / math.sqrt(windows) + unit / windows


def speed_interval(
    windows: Sequence[Sequence[float]], ratio: float, window_s: float, unit: float = 0.0
) -> SpeedInterval | None:
    """The interval of one workload's probes.

    Args:
        windows: per probe, the ratio of each of its sub-windows.
        ratio: the ratio replay is rescaled to (always inside the interval).
        window_s: seconds of one sub-window.
        unit: one unit of work in one sub-window, as a ratio.

    Returns:
        ``None`` where a probe has fewer than two sub-windows (a probe saved before intervals).
    """
    if not windows or any(len(probe) < 2 for probe in windows):
        return None
    means = [statistics.fmean(probe) for probe in windows]
    halves = [_half_width(len(probe), statistics.stdev(probe), unit) for probe in windows]
    low = min(mean - half for mean, half in zip(means, halves, strict=True))
    if low <= 0:
        # a ratio is positive: where the t-interval reaches below 0, the slowest window bounds it
        low = min(min(probe) for probe in windows)
    return SpeedInterval(
        low=min(low, ratio),
        high=max(max(mean + half for mean, half in zip(means, halves, strict=True)), ratio),
        spread=math.sqrt(statistics.fmean(statistics.variance(probe) for probe in windows)),
        drift=max(means) - min(means),
        windows=min(len(probe) for probe in windows),
        window_s=window_s,
        unit=unit,
    )


@dataclass(frozen=True)
class WorkloadInterval:
    """One workload's rescale and its interval, as a report shows them.

    Attributes:
        workload: the workload's name.
        ratio: the ratio replay was rescaled by.
        interval: its interval (``None``: the probe holds none).
    """

    workload: str
    ratio: float
    interval: SpeedInterval | None

    def describe(self) -> str:
        """``cnn-digits x0.93 (0.78-1.08)``."""
        within = f" ({self.interval.describe()})" if self.interval is not None else ""
        return f"{self.workload} x{self.ratio:.2f}{within}"

    def length(self) -> str:
        """How long a probe must run for this interval to be narrower than the rescale."""
        interval = self.interval
        if interval is None:
            return f"{self.workload}: no interval"
        ran = (
            f"it ran {interval.windows} windows of {interval.window_s:.3g} s, spread "
            f"{interval.spread:.3f}"
        )
        needed = interval.needed_s(self.ratio)
        if needed is None:
            return (
                f"{self.workload}: no probe length (the probes differ by {interval.drift:.2f}, "
                f"at least its rescale {abs(self.ratio - 1.0):.2f}; {ran})"
            )
        return f"{self.workload} {needed:.0f} s per probe ({ran})"


@dataclass(frozen=True)
class SpeedNoise:
    """A validation's verdict held through the probe's uncertainty: median per-job |error|s.

    The verdict is *within the probe's noise* when the errors the interval allows span more
    than the verdict's error itself: the probe alone could then move the error by more than
    its size.

    Attributes:
        rescaled: replay rescaled to the probe (the report's error).
        unscaled: replay on the profiles as they are.
        at_low: every workload rescaled to its interval's low end (``None``: no interval).
        at_high: every workload rescaled to its interval's high end.
        workloads: every workload's rescale and interval.
    """

    rescaled: float | None
    unscaled: float | None
    at_low: float | None
    at_high: float | None
    workloads: tuple[WorkloadInterval, ...]

    def error_range(self) -> tuple[float, float] | None:
        """The lowest and highest median |error| the interval allows (its ends and the probe)."""
        errors = [self.rescaled, self.at_low, self.at_high]
        if any(error is None for error in errors):
            return None
        known = [error for error in errors if error is not None]
        return min(known), max(known)

    def within_noise(self) -> bool | None:
        """Whether the error range is wider than the verdict's error (``None``: no range)."""
        span = self.error_range()
        if span is None or self.rescaled is None:
            return None
        return span[1] - span[0] > self.rescaled
