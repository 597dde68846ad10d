"""Argument types shared by the subcommands.

Each is an ``argparse`` type: it returns the value, or raises ``argparse.ArgumentTypeError``
with what was expected, which argparse prints after the option's name with the usage line
(exit code 2) before the command does anything.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TypeVar

from dlsched.envs.errors import ArgumentError, OutputError, UnknownNameError
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading

N = TypeVar("N", int, float)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    return _whole_number(text, 1, "{} is not positive; expected 1 or more")


def sub_windows(text: str) -> int:
    """An argparse type: sub-windows of a probe, at least 2 (their spread is its interval)."""
    return _whole_number(
        text, 2, "{} sub-windows have no spread; expected 2 or more (each about 2 s of a probe)"
    )


def seed(text: str) -> int:
    """An argparse type: a seed, a whole number of at least 0 (Gymnasium's seeds)."""
    return _whole_number(
        text, 0, "{} is negative; expected a seed, a whole number >= 0 (e.g. --seed 0)"
    )


def tracking_uri(text: str) -> str:
    """An argparse type: an MLflow tracking URI, not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is empty; expected an MLflow tracking URI such as sqlite:///mlflow.db or "
            "http://127.0.0.1:5000 (leave the option out for the default)"
        )
    return text.strip()


def output_file(text: str) -> Path:
    """An argparse type: the path of a file to write, in a folder that exists or can be made."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; expected a file's path")
    _check_creatable(path.parent, text)
    return path


def image_file(text: str) -> Path:
    """An argparse type: the path of an image to write, its format one matplotlib writes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(text).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise argparse.ArgumentTypeError(
            f"{text!r} does not end in an image format; expected one of "
            f"{', '.join('.' + name for name in sorted(formats))} (e.g. comparison.png)"
        )
    return output_file(text)


def output_folder(text: str) -> Path:
    """An argparse type: a folder to write into, that exists or can be made."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file; expected a folder")
    _check_creatable(path, text)
    return path


def local_records_folder(args: argparse.Namespace, default: Path) -> Path:
    """The folder ``--out`` names (``default`` if not given), refusing it with ``--no-tracking``.

    ``--no-tracking`` keeps no local records, so an ``--out`` beside it would be ignored and the
    user would look for records that were never written. The default folder is held to what a
    given one is as it is parsed (:func:`output_folder`), before any store or run is made for
    records that could not be kept.

    Raises:
        ArgumentError: both options were given.
        OutputError: the default folder cannot be written (made read-only, say).
    """
    if args.no_tracking and args.out is not None:
        raise ArgumentError(
            f"--out {args.out} with --no-tracking: --no-tracking keeps no local records, so "
            "nothing would be written there; drop --no-tracking to keep the records (and track "
            "them in MLflow), or drop --out"
        )
    if args.out is not None:
        return args.out
    if not args.no_tracking:
        try:
            output_folder(str(default))
        except argparse.ArgumentTypeError as error:
            raise OutputError(
                f"--out (by default {default}, for the episode records): {error}; make it "
                "writable, or pass another folder with --out"
            ) from None
    return default


def _check_creatable(folder: Path, text: str) -> None:
    """Refuse ``folder`` unless it exists, or its nearest existing ancestor is a folder that
    this user may write in (so that it can be made)."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(
            f"cannot write under {text!r}: {str(existing)!r} is a file, not a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write under {text!r}: folder {str(existing)!r} is not writable"
        )


def _whole_number(text: str, least: int, too_small: str) -> int:
    """The whole number ``text`` spells, at least ``least``.

    Raises:
        argparse.ArgumentTypeError: not a whole number, or ``too_small`` (its ``{}`` the number)
            for one below ``least``.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(too_small.format(value))
    return value


def number_list(
    text: str, number: Callable[[str], N], unreadable: str, *, skip_empty: bool = False
) -> tuple[N, ...]:
    """The comma-separated numbers of ``text``, each read by ``number`` (``int``, ``float``),
    for an argparse type to check further.

    Args:
        text: the option's value.
        number: reads one item; a ``ValueError`` is an item that is not a number.
        unreadable: the refusal when an item is not a number.
        skip_empty: pass over empty items (``1,,2``) rather than refuse them.

    Raises:
        argparse.ArgumentTypeError: ``unreadable``.
    """
    parts = [part for part in text.split(",") if part.strip() or not skip_empty]
    try:
        return tuple(number(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(unreadable) from None


def positive_ints(text: str) -> tuple[int, ...]:
    """An argparse type: a comma-separated list of whole numbers of at least 1."""
    values = number_list(
        text,
        int,
        f"{text!r} is not a list of whole numbers; expected e.g. 1,16,256",
        skip_empty=True,
    )
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected one or more whole numbers of at least 1, e.g. 1,16,256"
        )
    return values


def _number(text: str, not_a_number: str) -> float:
    """The number ``text`` spells.

    Raises:
        argparse.ArgumentTypeError: ``not_a_number``, where it spells none.
    """
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(not_a_number) from None


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    value = _number(text, f"{text!r} is not a number; expected e.g. 2.5")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{value} is not a finite number above 0")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    seconds = _number(text, f"{text!r} is not a number of seconds")
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{seconds:g} s is not positive; give seconds > 0")
    return seconds


def fraction(text: str) -> float:
    """An argparse type: a fraction strictly between 0 and 1 (a tolerance, a share)."""
    value = _number(text, f"{text!r} is not a number; expected e.g. 0.05")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{value:g} is outside (0, 1); expected e.g. 0.05")
    return value


def cpu_limits(text: str) -> tuple[float, ...]:
    """An argparse type: comma-separated CPU limits, each a fraction of a host's cores in
    ``(0, 1]``."""
    limits = number_list(
        text, float, f"limits {text!r} are not comma-separated numbers; expected e.g. 0.25,0.5,1.0"
    )
    for limit in limits:
        if not 0 < limit <= 1:
            raise argparse.ArgumentTypeError(
                f"limit {limit} is outside (0, 1]; a limit is a fraction of the host's cores"
            )
    return limits


def name_list(text: str) -> tuple[str, ...]:
    """The comma-separated names of ``text``, stripped, empty ones left out."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def known_name_list(text: str, kind: str, known: Collection[str], expected: str) -> tuple[str, ...]:
    """The comma-separated names of ``text``: one or more, each one of ``known``.

    Raises:
        argparse.ArgumentTypeError: a name of no ``kind`` known (with the closest name), or no
            name (``expected`` says what is).
    """
    names = name_list(text)
    for name in names:
        if name not in known:
            raise argparse.ArgumentTypeError(str(UnknownNameError(kind, name, known)))
    if not names:
        raise argparse.ArgumentTypeError(f"no {kind} given; expected {expected}")
    return names


def workload_names(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated workload names of the catalogue, or ``all``."""
    if name_list(text) == ("all",):
        return tuple(sorted(WORKLOADS))
    return known_name_list(text, "workload", WORKLOADS, "e.g. mlp-digits,vgg-svc")


def threading_names(text: str) -> tuple[Threading, ...]:
    """An argparse type: comma-separated threadings (``tuned``, ``stock``)."""
    names = known_name_list(text, "threading", THREADINGS, "tuned, stock or both")
    return tuple("stock" if name == "stock" else "tuned" for name in names)


def profile_set_pair(text: str) -> tuple[str, str]:
    """An argparse type: two profile sets, names or folders, comma-separated."""
    sets = name_list(text)
    if len(sets) != 2:
        raise argparse.ArgumentTypeError(
            f"{text!r} names {len(sets)} profile set(s); expected two, e.g. measured,./my-profiles"
        )
    return sets[0], sets[1]


def job_counts(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated job counts, each at least 2 (contention needs
    company)."""
    counts = number_list(
        text, int, f"job counts {text!r} are not comma-separated whole numbers; expected e.g. 2,3,4"
    )
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError(
            f"job counts {text!r}: each must be at least 2 (contention needs company)"
        )
    return counts
