"""What a value given by a user is, and how a message shows it.

Shared by the checks of ``gym.make`` arguments (:mod:`.arguments`) and of decisions
(:mod:`.decision_checks`), which must not import each other's dependencies: the argument checks
know the backends, and the replay backend's batched environment checks decisions.
"""

from __future__ import annotations

import numbers
from typing import TypeGuard


def is_number(value: object) -> TypeGuard[numbers.Real]:
    """Whether ``value`` is a real number of Python or numpy (a bool is not one)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_whole(value: object) -> bool:
    """Whether ``value`` is a whole number of Python or numpy (a bool is not one)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def shown(value: object, width: int = 60) -> str:
    """``value``'s repr, cut to ``width`` characters: a message shows what was given, not all
    of an array of thousands."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
