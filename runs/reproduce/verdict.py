"""The verdict rule: is a paper's number reproduced by ours, in direction only, or not at all?

Ours is an :class:`~dlsched.runs.evaluation.Estimate`: the mean across seeds and its 95%
Student-t confidence interval (a single episode is an interval of one point). The paper's number
carries no interval, so each unit has a tolerance (the claims file's ``units``, the same for every
claim of that unit). A claim may also state a direction: its effect lies above (or below) a
*no-effect value* (0 for a reduction, 1 for a ratio, 50% for an equal split of two). The rule:

1. **reproduced**: the paper's value lies within our interval widened by the tolerance on both
   sides, and, if the claim states a direction, our whole interval lies on the claimed side of
   the no-effect value. A claim with a direction and no number is reproduced by the latter alone.
2. **direction only**: not reproduced, but the claim states a direction and our whole interval
   lies on the claimed side of the no-effect value: the effect is there, of another size.
3. **not reproduced**: anything else: the interval misses the paper's value and the claim states
   no direction, or it reaches the no-effect value (no clear effect) or lies beyond it (the wrong
   direction); or the statistic is undefined in every episode.

:data:`RULE` says this in one paragraph for the report; :func:`judge` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dlsched.runs.evaluation.summaries import Estimate


class Verdict(StrEnum):
    """How a claim fared."""

    REPRODUCED = "reproduced"
    DIRECTION_ONLY = "direction only"
    NOT_REPRODUCED = "not reproduced"


class Direction(StrEnum):
    """On which side of its null value a claim's effect lies."""

    HIGHER = "higher"
    LOWER = "lower"


RULE = (
    "Ours is the mean across seeds with its 95% Student-t confidence interval (CI); one episode "
    "is an interval of one point. Each unit has a tolerance, the same for every claim of that "
    "unit (below). Some claims state a direction: the effect lies above (or below) a no-effect "
    "value (0 for a reduction, 1 for a ratio, 50% for an equal split of two). "
    "**reproduced**: the paper's value lies within our CI widened by the tolerance on both sides "
    "and, for a claim with a direction, our whole CI lies on the claimed side of the no-effect "
    "value (a claim with a direction and no number needs only that). **direction only**: not "
    "reproduced, but the claim states a direction and our whole CI lies on its side: the effect "
    "is there, of another size. **not reproduced**: anything else: the CI misses the paper's "
    "value and the claim states no direction, or the CI reaches the no-effect value (no clear "
    "effect) or lies beyond it (the wrong direction), or the statistic is undefined in every "
    "episode."
)


@dataclass(frozen=True)
class Expectation:
    """What a claim says, as the rule reads it.

    Attributes:
        value: the paper's number, ``None`` for a qualitative claim (a direction only).
        tolerance: how far from ``value`` ours may lie, in the claim's unit.
        direction: the side of ``no_effect`` the claimed effect lies on, ``None`` if it states
            none.
        no_effect: the value of no effect (0 for a reduction, 1 for a ratio, an equal share).
    """

    value: float | None
    tolerance: float = 0.0
    direction: Direction | None = None
    no_effect: float = 0.0


@dataclass(frozen=True)
class Judgement:
    """A verdict and, unless reproduced, the one-line reason."""

    verdict: Verdict
    reason: str = ""


def interval(ours: Estimate) -> tuple[float, float] | None:
    """Our interval: the CI, or the mean alone with one episode; ``None`` with no value."""
    if ours.mean is None:
        return None
    if ours.ci_low is None or ours.ci_high is None:
        return ours.mean, ours.mean
    return ours.ci_low, ours.ci_high


def judge(expected: Expectation, ours: Estimate) -> Judgement:
    """Apply the rule (module docstring) to a claim and our estimate."""
    bounds = interval(ours)
    if bounds is None:
        return Judgement(Verdict.NOT_REPRODUCED, "undefined in every episode")
    low, high = bounds
    side = _side(expected, low, high)
    if expected.value is None:
        if side == "claimed":
            return Judgement(Verdict.REPRODUCED)
        return Judgement(Verdict.NOT_REPRODUCED, _direction_reason(expected, side, low, high))
    value, tolerance = expected.value, expected.tolerance
    within = low - tolerance <= value <= high + tolerance
    if within and side in ("none", "claimed"):
        return Judgement(Verdict.REPRODUCED)
    if side == "claimed":
        where = "below" if high + tolerance < value else "above"
        return Judgement(
            Verdict.DIRECTION_ONLY,
            f"the effect is there, but ours {_span(low, high)} is {where} the paper's {value:g} "
            f"± {format_number(tolerance)}",
        )
    if side == "none":
        where = "below" if high + tolerance < value else "above"
        margin = format_number(tolerance)
        return Judgement(
            Verdict.NOT_REPRODUCED,
            f"ours {_span(low, high)} is {where} the paper's {value:g} ± {margin}",
        )
    return Judgement(Verdict.NOT_REPRODUCED, _direction_reason(expected, side, low, high))


def _side(expected: Expectation, low: float, high: float) -> str:
    """Where our interval lies against the no-effect value: ``claimed``, ``straddles`` or
    ``wrong`` (``none`` for a claim without a direction)."""
    if expected.direction is None:
        return "none"
    null = expected.no_effect
    if expected.direction is Direction.HIGHER:
        return "claimed" if low > null else "wrong" if high <= null else "straddles"
    return "claimed" if high < null else "wrong" if low >= null else "straddles"


def _direction_reason(expected: Expectation, side: str, low: float, high: float) -> str:
    claimed = f"{expected.direction} than {expected.no_effect:g}"
    if side == "wrong":
        return f"wrong direction: ours {_span(low, high)}, the paper's effect is {claimed}"
    return f"no clear effect: ours {_span(low, high)} reaches the no-effect {expected.no_effect:g}"


def _span(low: float, high: float) -> str:
    if low == high:
        return format_number(low)
    return f"[{format_number(low)}, {format_number(high)}]"


def format_number(value: float) -> str:
    """A measured value with the digits that matter: ``1565``, ``31.6``, ``0.47``."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return "0" if value == 0 else f"{value:.2f}"
