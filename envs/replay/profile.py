"""Workload profiles: what the replay backend knows of a workload, read from versioned JSON files.

A profile says how fast a workload progresses on the CPU it gets (units per second against cores,
linear between the recorded points, 0 at 0 cores, flat above its demand), how much CPU it can use
when nothing caps it, how much each unit's work varies from run to run, how long it takes to
start, and, for training, its default length and its loss curve. It also says how the workload
sizes its thread pool (``tuned`` or ``stock``, :mod:`dlsched.envs.workloads.cpu_quota`), which
decides what it loses to contention (:mod:`.contention`). Every profile carries its provenance:
measured on which host, how and when, or derived from which paper figure.

Profile sets are folders of ``<workload>.json`` files, with the set's contention model in
``contention.json`` beside them. Shipped sets live in ``dlsched/envs/replay/profiles/<set>/`` and
are named by the folder (``paper``, ``measured``); a path to any folder of profile files works too
(a set calibrated on the user's own host). The file format is documented on :func:`load_profile`.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, overload

import numpy as np

from dlsched.envs.errors import ProfileError, UnknownNameError
from dlsched.envs.replay.contention import CONTENTION_FILE, ContentionModel, load_contention
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading

#: Version of the profile file format this module writes; it reads this one and every older one.
PROFILE_FORMAT = 2
#: The formats this module reads. Format 1 had no ``threading`` (its workloads were ``tuned``)
#: and no ``measured_on``.
READABLE_FORMATS = (1, 2)

#: Where the shipped profile sets live.
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


class WorkUnit(StrEnum):
    """What one unit of progress is: an inference batch or a training iteration."""

    BATCH = "batch"
    ITERATION = "iteration"


#: The unit each kind of job progresses in.
UNIT_OF_KIND: Mapping[JobKind, WorkUnit] = {
    JobKind.INFERENCE: WorkUnit.BATCH,
    JobKind.TRAINING: WorkUnit.ITERATION,
}


@dataclass(frozen=True)
class Throughput:
    """Units per second against the cores a job gets, as recorded points.

    Attributes:
        cores: strictly increasing positive core counts.
        units_per_s: the throughput at each of them, non-negative and non-decreasing.
    """

    cores: tuple[float, ...]
    units_per_s: tuple[float, ...]

    @overload
    def at(self, cores: float) -> float: ...

    @overload
    def at(self, cores: np.ndarray) -> np.ndarray: ...

    def at(self, cores: float | np.ndarray) -> float | np.ndarray:
        """Throughput at ``cores``: linear between points, from 0 at 0 cores, flat after the last.

        Args:
            cores: cores a job gets, a number or an array of them.
        """
        values = np.interp(cores, (0.0, *self.cores), (0.0, *self.units_per_s))
        return values if isinstance(cores, np.ndarray) else float(values)


@dataclass(frozen=True)
class LossCurve:
    """The loss a training job reports against the iterations it has done.

    Attributes:
        iterations: strictly increasing, non-negative iteration counts.
        loss: the loss at each of them (finite).
    """

    iterations: tuple[float, ...]
    loss: tuple[float, ...]

    @overload
    def at(self, iterations: float) -> float: ...

    @overload
    def at(self, iterations: np.ndarray) -> np.ndarray: ...

    def at(self, iterations: float | np.ndarray) -> float | np.ndarray:
        """Loss after ``iterations``: linear between points, flat outside them.

        Args:
            iterations: iterations done, a number or an array of them.
        """
        values = np.interp(iterations, self.iterations, self.loss)
        return values if isinstance(iterations, np.ndarray) else float(values)


@dataclass(frozen=True)
class Provenance:
    """Where a profile's numbers come from.

    Attributes:
        source: the host measurement or the paper (section, figure) they come from.
        method: how they were obtained (recording tool, or "derived from published figures").
        host: the machine they describe (CPU model and cores).
        date: when, ``YYYY-MM-DD``.
        derivation: how each number was obtained, in one line (details may live next to the
            files, as ``DERIVATION.md`` does for the ``paper`` set).
    """

    source: str
    method: str
    host: str
    date: str
    derivation: str


@dataclass(frozen=True)
class MeasuringHost:
    """The machine a measured profile describes, as ``dlsched validate`` compares it.

    Attributes:
        cpu_model: the processor, as ``/proc/cpuinfo`` names it.
        cores: the cores the engine reported.
    """

    cpu_model: str
    cores: int

    def describe(self) -> str:
        return f"{self.cpu_model}, {self.cores} cores"


@dataclass(frozen=True)
class WorkloadProfile:
    """What the replay backend knows of one workload.

    Attributes:
        workload: the workload's name (the file is ``<workload>.json``).
        kind: inference or training.
        unit: batch (inference) or iteration (training).
        batch_size: images per batch (inference) or samples per iteration (training).
        demand_cores: cores it keeps busy when uncapped and alone on a large enough worker.
        throughput: units per second against cores.
        noise_cv: coefficient of variation of each unit's work between runs.
        startup_s: seconds from container start to the start of its first unit.
        iterations: default iterations of a training job; ``None`` for inference.
        loss_curve: loss against iterations for training; ``None`` for inference.
        provenance: where the numbers come from.
        threading: how the workload sized its thread pool when it was measured (or, for a
            derived profile, how the paper's jobs ran): ``tuned`` or ``stock``.
        measured_on: the machine it was measured on; ``None`` for a profile derived from a
            paper.
        contention_exponent: how much this workload loses when a worker's runnable threads
            exceed its cores (:mod:`.contention`): its progress is ``R ** -a`` of what its CPU
            gives it alone. ``None`` takes the set's exponent for its threading
            (``contention.json``). Workloads differ: a service whose threads spend a batch in
            long convolutions barely loses, a small model's training step meets a barrier every
            few milliseconds and loses most.
        contention_floor: the share of its solo progress this workload keeps however crowded
            the worker: its efficiency is ``f + (1 - f) R ** -a`` (:mod:`.contention`). Stock
            jobs level off there (their threads still meet at barriers now and then);
            ``None`` is 0, the plain power law.
        efficiency_beside_startup: the share of its solo progress this workload keeps at the
            cores it gets while another job starts on its worker and the worker's threads do
            not fit its cores. Measured: an uncapped stock training keeps about a quarter beside
            one single-threaded start-up, far less than the start-up's one runnable thread
            explains (:mod:`.contention`). ``None``: no effect beyond the contention curve.
        startup_cpu_s: CPU-seconds the job uses during its start-up (the interpreter, torch and
            its data loading), measured alone. The start-up then competes for CPU: it keeps
            ``startup_cpu_s / startup_s`` cores busy and ends once they are delivered, so a busy
            worker starts jobs more slowly. ``None``: start-up takes ``startup_s`` and no CPU.
    """

    workload: str
    kind: JobKind
    unit: WorkUnit
    batch_size: int
    demand_cores: float
    throughput: Throughput
    noise_cv: float
    startup_s: float
    provenance: Provenance
    iterations: int | None = None
    loss_curve: LossCurve | None = None
    threading: Threading = "tuned"
    measured_on: MeasuringHost | None = None
    contention_exponent: float | None = None
    contention_floor: float | None = None
    efficiency_beside_startup: float | None = None
    startup_cpu_s: float | None = None

    @overload
    def units_per_s(self, cores: float) -> float: ...

    @overload
    def units_per_s(self, cores: np.ndarray) -> np.ndarray: ...

    def units_per_s(self, cores: float | np.ndarray) -> float | np.ndarray:
        """Units per second on ``cores`` (CPU above the demand brings nothing).

        Args:
            cores: cores the job gets, a number or an array of them.
        """
        return self.throughput.at(np.minimum(cores, self.demand_cores))

    def unit_seconds(self, cores: float) -> float:
        """Seconds one unit of average work takes on ``cores`` (``inf`` at no throughput).

        Args:
            cores: cores the job gets.
        """
        rate = float(self.units_per_s(float(cores)))
        return 1.0 / rate if rate > 0 else math.inf

    def loss_at(self, iterations: float | np.ndarray) -> float | np.ndarray:
        """The loss curve at ``iterations``.

        Args:
            iterations: iterations done, a number or an array of them.

        Raises:
            ProfileError: the profile is an inference one and has no loss curve.
        """
        if self.loss_curve is None:
            raise ProfileError(
                f"workload {self.workload!r} is an {self.kind.value} profile and has no "
                "loss_curve; only training profiles report a loss"
            )
        return self.loss_curve.at(iterations)


# ---------------------------------------------------------------------------------- loading


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
    reader = _FieldReader(data)
    reader.unknown_fields(data, _TOP_FIELDS)

    version = reader.raw(data, "format")
    if "format" in data and version not in READABLE_FORMATS:
        reader.problem(
            "format", version, f"one of {READABLE_FORMATS} (the versions this dlsched reads)"
        )

    threading: Threading = "tuned"
    if version == 1:
        for field in ("threading", "measured_on"):
            if field in data:
                reader.problem(field, data[field], "no such field in format 1 (write format 2)")
    elif version == PROFILE_FORMAT:
        threading_value = reader.raw(data, "threading")
        if "threading" in data:
            if threading_value in THREADINGS:
                threading = threading_value
            else:
                reader.problem("threading", threading_value, f"one of {list(THREADINGS)}")
    measured_on = _measured_on(reader, data.get("measured_on"))

    workload = reader.text(data, "workload")
    if workload is not None and workload != path.stem:
        reader.problems.append(
            f"workload: {workload!r} and the file name {path.stem!r} do not match: "
            f"{workload} != {path.stem}; rename the file or the workload"
        )

    kind: JobKind | None = None
    kind_value = reader.raw(data, "kind")
    if "kind" in data:
        try:
            kind = JobKind(kind_value)
        except ValueError:
            reader.problem("kind", kind_value, "'inference' or 'training'")

    unit: WorkUnit | None = None
    unit_value = reader.raw(data, "unit")
    if "unit" in data:
        try:
            unit = WorkUnit(unit_value)
        except ValueError:
            reader.problem("unit", unit_value, "'batch' or 'iteration'")
    if kind is not None and unit is not None and unit is not UNIT_OF_KIND[kind]:
        reader.problems.append(
            f"unit: {unit.value!r} does not suit kind {kind.value!r}; a {kind.value} profile "
            f"counts in {UNIT_OF_KIND[kind].value!r} units"
        )

    batch_size = reader.number(
        data, "batch_size", lambda v: v >= 1 and v == int(v), "a whole number >= 1"
    )
    demand = reader.number(data, "demand_cores", lambda v: v > 0, "a number of cores > 0")
    noise_cv = reader.number(data, "noise_cv", lambda v: 0 <= v < 1, "a number in [0, 1)")
    startup_s = reader.number(data, "startup_s", lambda v: v >= 0, "a number of seconds >= 0")
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
        for field in (
            "contention_exponent",
            "contention_floor",
            "efficiency_beside_startup",
            "startup_cpu_s",
        ):
            if field in data:
                reader.problem(field, data[field], "no such field in format 1 (write format 2)")

    throughput_points = reader.points(
        "throughput",
        "cores",
        "units_per_s",
        "cores > 0, strictly increasing",
        lambda value, previous: value > 0 and (previous is None or value > previous),
        "units per second >= 0, non-decreasing (more CPU is never slower)",
        lambda value, previous: value >= 0 and (previous is None or value >= previous),
    )

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

    provenance: Provenance | None = None
    provenance_data = reader.section("provenance")
    if provenance_data is not None:
        reader.unknown_fields(provenance_data, set(_PROVENANCE_FIELDS), "provenance.")
        texts = [reader.text(provenance_data, field, "provenance.") for field in _PROVENANCE_FIELDS]
        date = texts[3]
        if date is not None and not _is_iso_date(date):
            reader.problem("provenance.date", date, "a date YYYY-MM-DD")
        if all(value is not None for value in texts):
            provenance = Provenance(*(str(value) for value in texts))

    if reader.problems:
        listing = "\n  ".join(reader.problems)
        raise ProfileError(f"profile file {path} is malformed:\n  {listing}")
    # Every field was checked above; the asserts only narrow the types for the checker.
    assert workload is not None and kind is not None and unit is not None
    assert batch_size is not None and demand is not None and noise_cv is not None
    assert startup_s is not None and throughput_points is not None and provenance is not None
    return WorkloadProfile(
        workload=workload,
        kind=kind,
        unit=unit,
        batch_size=int(batch_size),
        demand_cores=demand,
        throughput=Throughput(*throughput_points),
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

    Shipped sets are read once per process and cached; a folder given by path is read on every
    call, so a set being calibrated can be reloaded.

    Args:
        name: a shipped set's name (``paper``), or a path (containing ``/``) to a folder of
            ``<workload>.json`` files.

    Raises:
        UnknownNameError: no shipped set has that name.
        ProfileError: the folder holds no profile, or a profile is malformed.
    """
    directory = profile_set_directory(name)
    if directory.parent == PROFILES_DIR:
        return dict(_load_shipped_set(directory.name))
    return _load_directory(directory)


@functools.cache
def _load_shipped_set(name: str) -> Mapping[str, WorkloadProfile]:
    return _load_directory(PROFILES_DIR / name)


def _profile_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.glob("*.json") if path.name != CONTENTION_FILE)


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
    directory = profile_set_directory(name)
    if directory.parent == PROFILES_DIR:
        return _load_shipped_contention(directory.name)
    return load_contention(directory)


@functools.cache
def _load_shipped_contention(name: str) -> ContentionModel:
    return load_contention(PROFILES_DIR / name)


def profile_names(name: str) -> list[str]:
    """The workload names a profile set provides, sorted (what a scenario may use with it).

    Args:
        name: a shipped set's name or a folder path, as for :func:`load_profile_set`.
    """
    return sorted(load_profile_set(name))
