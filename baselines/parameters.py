"""Validation of baseline parameters: every bad value raises a PolicyError that says the fix."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dlsched.envs.errors import PolicyError


def check_number(
    policy: str,
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float if it is a finite number within the given bounds.

    Args:
        policy: the baseline's registered name, for the message.
        name: the parameter's name.
        value: what the caller passed.
        low: the lowest accepted value (``None``: no lower bound).
        high: the highest accepted value (``None``: no upper bound).
        low_open: whether ``low`` itself is excluded.
        high_open: whether ``high`` itself is excluded.

    Raises:
        PolicyError: ``value`` is not a number, is NaN or infinite, or lies outside the bounds.
    """
    expected = _interval(low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(
            f"{policy}: parameter {name}={value!r} is not a number; expected a number in {expected}"
        )
    number = float(value)
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if not math.isfinite(number) or too_low or too_high:
        raise PolicyError(
            f"{policy}: parameter {name}={value!r} is out of range; expected a number in {expected}"
        )
    return number


def check_integer(policy: str, name: str, value: object, *, low: int) -> int:
    """Return ``value`` if it is an integer of at least ``low``.

    Raises:
        PolicyError: ``value`` is not an integer or is below ``low``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PolicyError(
            f"{policy}: parameter {name}={value!r} must be an integer >= {low}; pass one"
        )
    return value


def check_choice(policy: str, name: str, value: object, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``.

    Raises:
        PolicyError: ``value`` is not one of ``choices``; the message lists them.
    """
    if not isinstance(value, str) or value not in choices:
        raise PolicyError(
            f"{policy}: parameter {name}={value!r} is not a known option; expected one of "
            f"{', '.join(repr(choice) for choice in choices)}"
        )
    return value


def check_flag(policy: str, name: str, value: object) -> bool:
    """Return ``value`` if it is a bool.

    Raises:
        PolicyError: ``value`` is not ``True`` or ``False``.
    """
    if not isinstance(value, bool):
        raise PolicyError(f"{policy}: parameter {name}={value!r} must be True or False")
    return value


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    left = "(" if low_open or low is None else "["
    right = ")" if high_open or high is None else "]"
    low_text = "-inf" if low is None else f"{low:g}"
    high_text = "inf" if high is None else f"{high:g}"
    return f"{left}{low_text}, {high_text}{right}"
