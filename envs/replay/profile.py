"""Profile files and profile sets: reading and checking versioned JSON, and finding the sets.

A profile file, ``<workload>.json``, holds one :class:`~.workload_profile.WorkloadProfile`; its
format is documented on :func:`load_profile`, which reports every malformed field at once.

Profile sets are folders of ``<workload>.json`` files, with the set's contention model in
``contention.json`` and its throttling model in ``throttling.json`` beside them. Shipped sets
live in ``dlsched/envs/replay/profiles/<set>/`` and are named by the folder (``paper``,
``measured``); a path to any folder of profile files works too (a set calibrated on the user's
own host).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from dlsched.envs.errors import ProfileError, UnknownNameError
from dlsched.envs.replay.contention import CONTENTION_FILE, ContentionModel, load_contention
from dlsched.envs.replay.throttling import THROTTLING_FILE, ThrottlingModel, load_throttling
from dlsched.envs.replay.workload_profile import (
    UNIT_OF_KIND,
    LossCurve,
    MeasuringHost,
    Provenance,
    Throughput,
    WorkloadProfile,
    WorkUnit,
)
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading

#: Version of the profile file format this module writes; it reads this one and every older one.
PROFILE_FORMAT = 2
#: The formats this module reads. Format 1 had no ``threading`` (its workloads were ``tuned``)
#: and no ``measured_on``.
READABLE_FORMATS = (1, 2)

#: Where the shipped profile sets live.
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

_E = TypeVar("_E", bound=Enum)
#: What a profile set's file reads as (its contention model, its throttling model).
_Part = TypeVar("_Part")


class _FieldReader:
    """Reads typed fields of one profile file and collects every problem before raising."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.problems: list[str] = []

    def problem(self, field: str, value: Any, expected: str) -> None:
        self.problems.append(f"{field}: got {value!r}, expected {expected}")

    def raw(self, mapping: Mapping[str, Any], field: str, prefix: str = "") -> Any:
        if field not in mapping:
            self.problems.append(f"{prefix}{field}: missing")
            return None
        return mapping[field]

    def number(
        self,
        mapping: Mapping[str, Any],
        field: str,
        check: Callable[[float], bool],
        expected: str,
        prefix: str = "",
    ) -> float | None:
        value = self.raw(mapping, field, prefix)
        if value is None and field not in mapping:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not check(float(value))
        ):
            self.problem(prefix + field, value, expected)
            return None
        return float(value)

    def text(self, mapping: Mapping[str, Any], field: str, prefix: str = "") -> str | None:
        value = self.raw(mapping, field, prefix)
        if value is None and field not in mapping:
            return None
        if not isinstance(value, str) or not value.strip():
            self.problem(prefix + field, value, "a non-empty string")
            return None
        return value

    def member(
        self, mapping: Mapping[str, Any], field: str, enum: type[_E], expected: str
    ) -> _E | None:
        """The member of ``enum`` whose value the field holds."""
        value = self.raw(mapping, field)
        if field not in mapping:
            return None
        try:
            return enum(value)
        except ValueError:
            self.problem(field, value, expected)
            return None

    def section(self, field: str) -> Mapping[str, Any] | None:
        value = self.raw(self.data, field)
        if value is None and field not in self.data:
            return None
        if not isinstance(value, dict):
            self.problem(field, value, "an object")
            return None
        return value

    def points(
        self,
        section: str,
        x_field: str,
        y_field: str,
        x_expected: str,
        x_check: Callable[[float, float | None], bool],
        y_expected: str,
        y_check: Callable[[float, float | None], bool],
    ) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """Two equally long number lists of ``section``; ``*_check(value, previous)``."""
        mapping = self.section(section)
        if mapping is None:
            return None
        self.unknown_fields(mapping, {x_field, y_field}, f"{section}.")
        columns: list[tuple[float, ...] | None] = []
        for field, expected, check in (
            (x_field, x_expected, x_check),
            (y_field, y_expected, y_check),
        ):
            value = self.raw(mapping, field, f"{section}.")
            if field not in mapping:
                columns.append(None)
                continue
            if not isinstance(value, list) or not value:
                self.problem(f"{section}.{field}", value, "a non-empty list of numbers")
                columns.append(None)
                continue
            good = True
            previous: float | None = None
            for index, item in enumerate(value):
                if (
                    isinstance(item, bool)
                    or not isinstance(item, int | float)
                    or not math.isfinite(item)
                    or not check(float(item), previous)
                ):
                    self.problem(f"{section}.{field}[{index}]", item, expected)
                    good = False
                    break
                previous = float(item)
            columns.append(tuple(float(item) for item in value) if good else None)
        xs, ys = columns
        if xs is None or ys is None:
            return None
        if len(xs) != len(ys):
            self.problems.append(
                f"{section}: {x_field} and {y_field} lengths do not match: {len(xs)} != {len(ys)}"
            )
            return None
        return xs, ys

    def unknown_fields(self, mapping: Mapping[str, Any], known: set[str], prefix: str = "") -> None:
        for field in sorted(set(mapping) - known):
            self.problems.append(
                f"{prefix}{field}: unknown field; known fields: {', '.join(sorted(known))}"
            )


_TOP_FIELDS = {
    "format",
    "workload",
    "kind",
    "unit",
    "batch_size",
    "demand_cores",
    "throughput",
    "noise_cv",
    "startup_s",
    "iterations",
    "loss_curve",
    "provenance",
    "threading",
    "measured_on",
    "contention_exponent",
    "contention_floor",
    "efficiency_beside_startup",
    "startup_cpu_s",
}
_PROVENANCE_FIELDS = ("source", "method", "host", "date", "derivation")


def load_profile(path: str | Path) -> WorkloadProfile:
    """Read and check one profile file.

    The file is a JSON object with the fields of :class:`WorkloadProfile` and ``format``
    (:data:`PROFILE_FORMAT`)::

        {"format": 2, "workload": "resnet50", "kind": "inference", "unit": "batch",
         "threading": "stock", "batch_size": 100, "demand_cores": 6.0,
         "throughput": {"cores": [1.0, 2.0], "units_per_s": [0.04, 0.07]},
         "noise_cv": 0.011, "startup_s": 5.0,
         "provenance": {"source": "...", "method": "...", "host": "...",
                        "date": "2025-01-31", "derivation": "..."}}

    Training profiles also need ``iterations`` and ``loss_curve``
    (``{"iterations": [...], "loss": [...]}``); inference profiles must not have them. A measured
    profile says where: ``"measured_on": {"cpu_model": "...", "cores": 2}``. Format 1 files (no
    ``threading``, no ``measured_on``) are read as ``tuned``.

    Args:
        path: the ``<workload>.json`` file.

    Raises:
        ProfileError: the file is missing, is not JSON, or has malformed fields; the message
            names the file and lists every bad field with its value and what was expected.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ProfileError(f"cannot read profile file {path}: {error.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProfileError(
            f"profile file {path} is not valid JSON: {error.msg} at line {error.lineno}, column "
            f"{error.colno}; fix the syntax (JSON allows no comments or trailing commas)"
        ) from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile file {path} holds {type(data).__name__}, expected an object")
    return _parse(path, data)


def _parse(path: Path, data: Mapping[str, Any]) -> WorkloadProfile:
    """The profile ``data`` describes, every field checked and every problem raised at once."""
    reader = _FieldReader(data)
    reader.unknown_fields(data, _TOP_FIELDS)
    version, threading = _format_and_threading(reader, data)
    measured_on = _measured_on(reader, data.get("measured_on"))
    workload = _workload_name(reader, data, path)
    kind, unit = _kind_and_unit(reader, data)
    batch_size, demand, noise_cv, startup_s = _required_numbers(reader, data)
    contention_exponent, contention_floor, beside_startup, startup_cpu_s = _optional_numbers(
        reader, data, version, startup_s
    )
    throughput = _throughput(reader)
    iterations, loss_curve = _training_fields(reader, data, kind)
    provenance = _provenance(reader)

    if reader.problems:
        listing = "\n  ".join(reader.problems)
        raise ProfileError(f"profile file {path} is malformed:\n  {listing}")
    # Every field was checked above; the asserts only narrow the types for the checker.
    assert workload is not None and kind is not None and unit is not None
    assert batch_size is not None and demand is not None and noise_cv is not None
    assert startup_s is not None and throughput is not None and provenance is not None
    return WorkloadProfile(
        workload=workload,
        kind=kind,
        unit=unit,
        batch_size=int(batch_size),
        demand_cores=demand,
        throughput=throughput,
        noise_cv=noise_cv,
        startup_s=startup_s,
        provenance=provenance,
        iterations=iterations,
        loss_curve=loss_curve,
        threading=threading,
        measured_on=measured_on,
        contention_exponent=contention_exponent,
        contention_floor=contention_floor,
        efficiency_beside_startup=beside_startup,
        startup_cpu_s=startup_cpu_s,
    )


def _format_and_threading(reader: _FieldReader, data: Mapping[str, Any]) -> tuple[Any, Threading]:
    """The file's format version and its workload's threading (``tuned`` in format 1)."""
    version = reader.raw(data, "format")
    if "format" in data and version not in READABLE_FORMATS:
        reader.problem(
            "format", version, f"one of {READABLE_FORMATS} (the versions this dlsched reads)"
        )

    threading: Threading = "tuned"
    if version == 1:
        _reject_in_format_1(reader, data, ("threading", "measured_on"))
    elif version == PROFILE_FORMAT:
        threading_value = reader.raw(data, "threading")
        if "threading" in data:
            if threading_value in THREADINGS:
                threading = threading_value
            else:
                reader.problem("threading", threading_value, f"one of {list(THREADINGS)}")
    return version, threading


def _reject_in_format_1(
    reader: _FieldReader, data: Mapping[str, Any], fields: tuple[str, ...]
) -> None:
    """A problem for each of ``fields`` that a format 1 file holds (format 2 added them)."""
    for field in fields:
        if field in data:
            reader.problem(field, data[field], "no such field in format 1 (write format 2)")


def _workload_name(reader: _FieldReader, data: Mapping[str, Any], path: Path) -> str | None:
    """The workload's name, which the file's name must repeat."""
    workload = reader.text(data, "workload")
    if workload is not None and workload != path.stem:
        reader.problems.append(
            f"workload: {workload!r} and the file name {path.stem!r} do not match: "
            f"{workload} != {path.stem}; rename the file or the workload"
        )
    return workload


def _kind_and_unit(
    reader: _FieldReader, data: Mapping[str, Any]
) -> tuple[JobKind | None, WorkUnit | None]:
    """The job kind and the unit it progresses in, which must suit each other."""
    kind = reader.member(data, "kind", JobKind, "'inference' or 'training'")
    unit = reader.member(data, "unit", WorkUnit, "'batch' or 'iteration'")
    if kind is not None and unit is not None and unit is not UNIT_OF_KIND[kind]:
        reader.problems.append(
            f"unit: {unit.value!r} does not suit kind {kind.value!r}; a {kind.value} profile "
            f"counts in {UNIT_OF_KIND[kind].value!r} units"
        )
    return kind, unit


def _required_numbers(
    reader: _FieldReader, data: Mapping[str, Any]
) -> tuple[float | None, float | None, float | None, float | None]:
    """``batch_size``, ``demand_cores``, ``noise_cv`` and ``startup_s``, which every profile has."""
    batch_size = reader.number(
        data, "batch_size", lambda v: v >= 1 and v == int(v), "a whole number >= 1"
    )
    demand = reader.number(data, "demand_cores", lambda v: v > 0, "a number of cores > 0")
    noise_cv = reader.number(data, "noise_cv", lambda v: 0 <= v < 1, "a number in [0, 1)")
    startup_s = reader.number(data, "startup_s", lambda v: v >= 0, "a number of seconds >= 0")
    return batch_size, demand, noise_cv, startup_s


def _optional_numbers(
    reader: _FieldReader, data: Mapping[str, Any], version: Any, startup_s: float | None
) -> tuple[float | None, float | None, float | None, float | None]:
    """``contention_exponent``, ``contention_floor``, ``efficiency_beside_startup`` and
    ``startup_cpu_s``: numbers format 2 added, each ``None`` when the file leaves it out."""
    contention_exponent = None
    if "contention_exponent" in data:
        contention_exponent = reader.number(
            data, "contention_exponent", lambda v: v >= 0, "an exponent >= 0"
        )
    contention_floor = None
    if "contention_floor" in data:
        contention_floor = reader.number(
            data, "contention_floor", lambda v: 0 <= v < 1, "a share in [0, 1)"
        )
    beside_startup = None
    if "efficiency_beside_startup" in data:
        beside_startup = reader.number(
            data, "efficiency_beside_startup", lambda v: 0 < v <= 1, "a share in (0, 1]"
        )
    startup_cpu_s = None
    if "startup_cpu_s" in data:
        startup_cpu_s = reader.number(data, "startup_cpu_s", lambda v: v >= 0, "CPU-seconds >= 0")
    if startup_cpu_s and startup_s == 0:
        reader.problem(
            "startup_cpu_s", startup_cpu_s, "0 when startup_s is 0 (no start-up, no CPU for it)"
        )
    if version == 1:
        _reject_in_format_1(
            reader,
            data,
            (
                "contention_exponent",
                "contention_floor",
                "efficiency_beside_startup",
                "startup_cpu_s",
            ),
        )
    return contention_exponent, contention_floor, beside_startup, startup_cpu_s


def _throughput(reader: _FieldReader) -> Throughput | None:
    """The throughput curve: cores strictly increasing, rates never falling."""
    points = reader.points(
        "throughput",
        "cores",
        "units_per_s",
        "cores > 0, strictly increasing",
        lambda value, previous: value > 0 and (previous is None or value > previous),
        "units per second >= 0, non-decreasing (more CPU is never slower)",
        lambda value, previous: value >= 0 and (previous is None or value >= previous),
    )
    return None if points is None else Throughput(*points)


def _training_fields(
    reader: _FieldReader, data: Mapping[str, Any], kind: JobKind | None
) -> tuple[int | None, LossCurve | None]:
    """A training profile's ``iterations`` and ``loss_curve``, which an inference one lacks."""
    iterations: int | None = None
    loss_curve: LossCurve | None = None
    if kind is JobKind.TRAINING:
        count = reader.number(
            data, "iterations", lambda v: v >= 1 and v == int(v), "a whole number >= 1"
        )
        iterations = int(count) if count is not None else None
        loss_points = reader.points(
            "loss_curve",
            "iterations",
            "loss",
            "iterations >= 0, strictly increasing, at least two points",
            lambda value, previous: value >= 0 and (previous is None or value > previous),
            "a finite loss",
            lambda value, previous: True,
        )
        if loss_points is not None:
            if len(loss_points[0]) < 2:
                reader.problem("loss_curve.iterations", list(loss_points[0]), "at least two points")
            else:
                loss_curve = LossCurve(*loss_points)
    elif kind is JobKind.INFERENCE:
        for field in ("iterations", "loss_curve"):
            if field in data:
                reader.problem(field, data[field], "no such field in an inference profile")
    return iterations, loss_curve


def _provenance(reader: _FieldReader) -> Provenance | None:
    """Where the numbers come from: every field a non-empty text, the date ``YYYY-MM-DD``."""
    provenance_data = reader.section("provenance")
    if provenance_data is None:
        return None
    reader.unknown_fields(provenance_data, set(_PROVENANCE_FIELDS), "provenance.")
    texts = [reader.text(provenance_data, field, "provenance.") for field in _PROVENANCE_FIELDS]
    date = texts[3]
    if date is not None and not _is_iso_date(date):
        reader.problem("provenance.date", date, "a date YYYY-MM-DD")
    if all(value is not None for value in texts):
        return Provenance(*(str(value) for value in texts))
    return None


def _measured_on(reader: _FieldReader, value: Any) -> MeasuringHost | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        reader.problem("measured_on", value, 'an object {"cpu_model": ..., "cores": ...}')
        return None
    reader.unknown_fields(value, {"cpu_model", "cores"}, "measured_on.")
    cpu_model = reader.text(value, "cpu_model", "measured_on.")
    cores = reader.number(
        value, "cores", lambda v: v >= 1 and v == int(v), "a whole number >= 1", "measured_on."
    )
    if cpu_model is None or cores is None:
        return None
    return MeasuringHost(cpu_model, int(cores))


def _is_iso_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


def profile_set_names() -> list[str]:
    """The names of the shipped profile sets."""
    return sorted(p.name for p in PROFILES_DIR.iterdir() if p.is_dir() and _profile_files(p))


def profile_set_directory(name: str) -> Path:
    """The folder of a profile set: a shipped set's by name, or the folder a path names.

    Raises:
        UnknownNameError: no shipped set has that name.
        ProfileError: the folder a path names does not exist.
    """
    if "/" in name or "\\" in name or name.startswith("."):
        directory = Path(name).expanduser()
        if not directory.is_dir():
            raise ProfileError(
                f"profile set folder {name!r} does not exist; give a shipped set "
                f"({', '.join(profile_set_names())}) or a folder of <workload>.json files"
            )
        return directory
    directory = PROFILES_DIR / name
    if not directory.is_dir():
        raise UnknownNameError("profile set", name, profile_set_names())
    return directory


def load_profile_set(name: str) -> dict[str, WorkloadProfile]:
    """Every profile of a set, by workload name.

    Shipped sets are read once per process and cached until a file of theirs changes (a shipped
    set recalibrated in place is read anew); a folder given by path is read on every call, so a
    set being calibrated can be reloaded.

    Args:
        name: a shipped set's name (``paper``), or a path (containing ``/``) to a folder of
            ``<workload>.json`` files.

    Raises:
        UnknownNameError: no shipped set has that name.
        ProfileError: the folder holds no profile, or a profile is malformed.
    """
    directory = profile_set_directory(name)
    if directory.parent == PROFILES_DIR:
        return dict(_load_shipped_set(directory.name, _stamp(directory)))
    return _load_directory(directory)


def _stamp(directory: Path) -> tuple[tuple[str, int], ...]:
    """The files of a set and when each last changed: what its cached reading is keyed on."""
    return tuple((path.name, path.stat().st_mtime_ns) for path in sorted(directory.glob("*.json")))


@functools.cache
def _load_shipped_set(
    name: str, stamp: tuple[tuple[str, int], ...]
) -> Mapping[str, WorkloadProfile]:
    return _load_directory(PROFILES_DIR / name)


def _profile_files(directory: Path) -> list[Path]:
    return sorted(
        path
        for path in directory.glob("*.json")
        if path.name not in (CONTENTION_FILE, THROTTLING_FILE)
    )


def _load_directory(directory: Path) -> dict[str, WorkloadProfile]:
    files = _profile_files(directory)
    if not files:
        raise ProfileError(
            f"profile set folder {directory} holds no <workload>.json file; record or copy "
            "profiles into it"
        )
    return {path.stem: load_profile(path) for path in files}


def load_set_contention(name: str) -> ContentionModel:
    """The contention model of a profile set (:mod:`.contention`; none without its file).

    Args:
        name: a shipped set's name or a folder path, as for :func:`load_profile_set`.

    Raises:
        UnknownNameError: no shipped set has that name.
        ProfileError: the set's ``contention.json`` is malformed.
    """
    return _load_set_file(load_contention, name)


def load_set_throttling(name: str) -> ThrottlingModel | None:
    """The throttling model of a profile set (:mod:`.throttling`; ``None`` without its file).

    Args:
        name: a shipped set's name or a folder path, as for :func:`load_profile_set`.

    Raises:
        UnknownNameError: no shipped set has that name.
        ProfileError: the set's ``throttling.json`` is malformed.
    """
    return _load_set_file(load_throttling, name)


def _load_set_file(load: Callable[[Path], _Part], name: str) -> _Part:
    """What ``load`` reads from profile set ``name``'s folder; a shipped set's read once per
    version of its files (their stamp), a folder's at every call."""
    directory = profile_set_directory(name)
    if directory.parent == PROFILES_DIR:
        return _load_shipped_file(load, directory.name, _stamp(directory))
    return load(directory)


@functools.cache
def _load_shipped_file(
    load: Callable[[Path], _Part], name: str, stamp: tuple[tuple[str, int], ...]
) -> _Part:
    return load(PROFILES_DIR / name)


def profile_names(name: str) -> list[str]:
    """The workload names a profile set provides, sorted (what a scenario may use with it).

    Args:
        name: a shipped set's name or a folder path, as for :func:`load_profile_set`.
    """
    return sorted(load_profile_set(name))
