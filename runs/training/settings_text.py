"""Training settings written as text, as ``dlsched train`` takes them: the hidden layer widths
of a network (``64,64``) and ``KEY=VALUE`` arguments of the SB3 algorithm or its policy, their
values read as YAML scalars (``3e-4`` is a number, ``true`` a bool)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import yaml

from dlsched.envs.errors import PolicyError
from dlsched.runs.training.config import HyperValue


def parse_widths(text: str) -> tuple[int, ...]:
    """``"64,64"`` as ``(64, 64)``.

    Raises:
        PolicyError: not a comma-separated list of positive integers.
    """
    try:
        widths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        widths = ()
    if not widths or any(width < 1 for width in widths):
        raise PolicyError(f"--net-arch {text!r} must be positive widths, e.g. 64,64")
    return widths


def parse_settings(settings: Sequence[str], option: str) -> tuple[tuple[str, HyperValue], ...]:
    """``KEY=VALUE`` strings as pairs, values read as YAML scalars (``3e-4`` is a number).

    Args:
        settings: the strings, as given.
        option: the option they came from, for messages.

    Raises:
        PolicyError: a malformed setting, a key given twice, or a value that is not a scalar.
    """
    parsed: dict[str, HyperValue] = {}
    for setting in settings:
        key, equals, text = setting.partition("=")
        key = key.strip()
        if not (equals and key and text.strip()):
            raise PolicyError(f"{option} {setting!r} is not KEY=VALUE; e.g. {option} gamma=0.95")
        if key in parsed:
            raise PolicyError(f"{option} sets {key!r} twice; give each once")
        value = yaml.safe_load(text)
        if isinstance(value, str):
            # YAML 1.1 reads 3e-4 (no dot) as a string; a number is what is meant
            with contextlib.suppress(ValueError):
                value = float(value)
        if not isinstance(value, bool | int | float | str):
            raise PolicyError(
                f"{option} {setting!r}: value {text!r} is not a number, a bool or a string"
            )
        parsed[key] = value
    return tuple(parsed.items())
