"""Scenario files: read, validate and write the YAML that describes a :class:`Scenario`.

A scenario is either *shipped* (``envs/scenarios/<name>.yaml``, loaded by its name) or a user's
own file, loaded by its path. The format::

    name: dqoes-resnet50-burst-target20
    description: one line
    source: DQoES journal, Section V-B-1, Figs. 2-3     # "" for a user's own
    kind: inference                  # or training
    interval_s: 10                   # optional, 10
    horizon_s: 600
    slots_per_worker: 10             # optional, 10
    profile_set: paper               # optional, paper
    migration_cost_s: 10             # optional, 10
    workers: {count: 1, cores: 8}    # or [{cores: 8}, {cores: 16, endpoint: "tcp://host:2375"}]
    jobs:
      - workloads: [resnet50]        # or `workload: resnet50`
        count: 10                    # or {low: 5, high: 15}; optional, 1
        arrival: {kind: burst}       # fixed (every_s), random (window_s), explicit (times_s)
        # or arrival_choices: [{kind: burst}, {kind: fixed, every_s: 50}]: one drawn per episode
        targets_s: [20]              # inference: targets_s or target_range_s: {low: 5, high: 95}
        tolerance: 0.1               # inference; optional, 0.1
        iterations: 1200             # training; optional, the workload profile's default
        worker: 0                    # optional pin
        loss_targets: [0.5, 0.2]     # training; optional, TRADL's two tiers

Validation never stops at the first mistake: every bad field of a file is reported in one
:class:`~dlsched.envs.errors.ScenarioError`, one line per problem, each naming the field's path in
the file (``jobs[2].arrival.every_s``), its line when the scenario came from a file, the value
found and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeGuard, TypeVar

import yaml

from dlsched.envs.errors import ProfileError, ScenarioError, UnknownNameError
from dlsched.envs.replay.profile import load_profile_set, profile_names
from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    FloatRange,
    IntRange,
    JobGroup,
    JobKind,
    Scenario,
    WorkerSpec,
)

_T = TypeVar("_T")

SCENARIO_DIR = Path(__file__).with_name("shipped")
"""Where the shipped scenarios live, one ``<name>.yaml`` each."""

_SCENARIO_KEYS = (
    "name",
    "description",
    "source",
    "kind",
    "interval_s",
    "horizon_s",
    "slots_per_worker",
    "profile_set",
    "migration_cost_s",
    "workers",
    "jobs",
)
_GROUP_KEYS = (
    "workloads",
    "workload",
    "count",
    "arrival",
    "arrival_choices",
    "targets_s",
    "target_range_s",
    "tolerance",
    "iterations",
    "worker",
    "loss_targets",
)
_INFERENCE_ONLY = ("targets_s", "target_range_s", "tolerance")
_TRAINING_ONLY = ("iterations", "loss_targets")
_ARRIVAL_KEYS: dict[ArrivalKind, tuple[str, ...]] = {
    ArrivalKind.BURST: ("kind", "start_s"),
    ArrivalKind.FIXED: ("kind", "every_s", "start_s"),
    ArrivalKind.RANDOM: ("kind", "window_s", "start_s"),
    ArrivalKind.EXPLICIT: ("kind", "times_s"),
}
_ALL_ARRIVAL_KEYS = ("kind", "start_s", "every_s", "window_s", "times_s")
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SCENARIO_SUFFIXES = (".yaml", ".yml")
# The dataclasses' own defaults, so that the file format's optional fields cannot drift from them.
_DEFAULTS = Scenario(name="defaults", kind=JobKind.INFERENCE, workers=(), groups=())
_GROUP_DEFAULTS = JobGroup(workloads=())


# --- public API -------------------------------------------------------------------------------


def scenario_names() -> list[str]:
    """The names of the shipped scenarios, sorted."""
    return sorted(path.stem for path in SCENARIO_DIR.glob("*.yaml"))


def scenario_path(name_or_path: str | Path) -> Path:
    """The YAML file a scenario name or path refers to.

    Args:
        name_or_path: a shipped scenario's name (``dlsched scenarios`` lists them) or the path of
            a YAML file. A :class:`~pathlib.Path`, or a string containing a path separator or
            ending in ``.yaml``/``.yml``, is a path; anything else is a name.

    Raises:
        UnknownNameError: no shipped scenario has that name (the message suggests a close one).
        ScenarioError: the path does not name an existing file.
    """
    if not _looks_like_path(name_or_path):
        name = str(name_or_path)
        if name not in scenario_names():
            raise UnknownNameError("scenario", name, scenario_names())
        return SCENARIO_DIR / f"{name}.yaml"
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ScenarioError(
            f"scenario file {str(path)!r} does not exist or is not a file; give the path of a "
            f"YAML scenario file, or a shipped scenario's name (see `dlsched scenarios`)"
        )
    return path


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load and validate a shipped scenario by name, or a user's scenario file by path.

    Args:
        name_or_path: see :func:`scenario_path`.

    Raises:
        UnknownNameError: an unknown shipped scenario name.
        ScenarioError: the file is missing, unreadable, not YAML, or describes an invalid
            scenario; the message lists every problem with its line.
    """
    path = scenario_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(
            f"cannot read scenario file {str(path)!r}: {error}; check the file is readable "
            f"UTF-8 text"
        ) from error
    data, lines = _read_yaml(text, str(path))
    report = _Report(lines)
    scenario = _ScenarioParser(report).parse(data)
    shipped = path.parent.resolve() == SCENARIO_DIR.resolve()
    # A shipped scenario is found by its file name, so the two must agree.
    if scenario is not None and shipped and scenario.name != path.stem:
        report.bad("name", scenario.name, f"{path.stem!r}, the file's name without .yaml")
    report.raise_if_any(str(path))
    assert scenario is not None  # raise_if_any raises whenever parsing returned None
    return scenario


def parse_scenario(data: object, origin: str) -> Scenario:
    """Validate already-parsed YAML data (a mapping of scenario fields) into a :class:`Scenario`.

    Args:
        data: what ``yaml.safe_load`` returns for a scenario file.
        origin: where the data came from, named in the error message (a file path, a label).

    Raises:
        ScenarioError: listing every problem found, one per line.
    """
    report = _Report({})
    scenario = _ScenarioParser(report).parse(data)
    report.raise_if_any(origin)
    assert scenario is not None
    return scenario


def scenario_to_data(scenario: Scenario) -> dict[str, object]:
    """The plain mapping (strings, numbers, lists, mappings) a scenario file holds for
    ``scenario``, in the file format's field order: an empty description or source is left out,
    fields the scenario's kind does not use are left out, and whole numbers are integers."""
    data: dict[str, object] = {"name": scenario.name}
    if scenario.description:
        data["description"] = scenario.description
    if scenario.source:
        data["source"] = scenario.source
    data["kind"] = scenario.kind.value
    data["interval_s"] = _plain(scenario.interval_s)
    data["horizon_s"] = _plain(scenario.horizon_s)
    data["slots_per_worker"] = scenario.slots_per_worker
    data["profile_set"] = scenario.profile_set
    data["migration_cost_s"] = _plain(scenario.migration_cost_s)
    data["workers"] = _workers_to_data(scenario.workers)
    data["jobs"] = [_group_to_data(group, scenario.kind) for group in scenario.groups]
    return data


def dump_scenario(scenario: Scenario) -> str:
    """YAML text of ``scenario`` that :func:`load_scenario` reads back equal.

    Raises:
        ScenarioError: ``scenario`` is invalid, or holds a value the file format cannot carry
            (a field its kind does not use, such as ``every_s`` on a burst arrival); the message
            names the fields.
    """
    text = yaml.safe_dump(
        scenario_to_data(scenario),
        sort_keys=False,
        default_flow_style=None,
        allow_unicode=True,
        width=100,
    )
    reloaded = parse_scenario(yaml.safe_load(text), f"scenario {scenario.name!r} as written")
    if reloaded != scenario:
        differences = _differences(dataclasses.asdict(scenario), dataclasses.asdict(reloaded), "")
        raise ScenarioError(
            f"scenario {scenario.name!r} cannot be written as YAML that loads back equal; these "
            f"fields hold values the file format does not carry (written != read back): "
            f"{'; '.join(differences)}; set them to their defaults"
        )
    return text


# --- YAML reading -----------------------------------------------------------------------------


def _looks_like_path(name_or_path: str | Path) -> bool:
    if isinstance(name_or_path, Path):
        return True
    return "/" in name_or_path or "\\" in name_or_path or name_or_path.endswith(_SCENARIO_SUFFIXES)


def _read_yaml(text: str, origin: str) -> tuple[object, dict[str, int]]:
    """The YAML document in ``text`` and the line of every field path in it.

    Duplicate keys, which plain YAML loading silently collapses to the last one, are errors.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError(
                f"{origin}: the file is empty; a scenario file is a mapping with at least "
                f"name, kind, horizon_s, workers and jobs (see `dlsched scenarios NAME` for an "
                f"example)"
            )
        lines: dict[str, int] = {}
        duplicates: list[str] = []
        _index_lines(node, "", lines, duplicates)
        if duplicates:
            raise ScenarioError(
                f"{origin}: {len(duplicates)} duplicate key(s):\n"
                + "\n".join(f"  {line}" for line in duplicates)
            )
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        problem = f"{error.problem or 'not valid YAML'}{_at(error.problem_mark)}"
        context = f"{error.context}{_at(error.context_mark)}; " if error.context else ""
        raise ScenarioError(
            f"{origin}: YAML syntax error: {context}{problem}; fix the YAML there (indentation, "
            f"a missing colon or an unclosed bracket are the usual causes)"
        ) from error
    except yaml.YAMLError as error:
        raise ScenarioError(f"{origin}: not valid YAML: {error}") from error
    finally:
        loader.dispose()
    return data, lines


def _at(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _index_lines(node: yaml.Node, path: str, lines: dict[str, int], duplicates: list[str]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                continue
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            line = key_node.start_mark.line + 1
            if key in seen:
                duplicates.append(
                    f"line {line}: {child} is given again (first on line {seen[key]})"
                )
            seen[key] = line
            _index_lines(value_node, child, lines, duplicates)
            lines[child] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, f"{path}[{index}]", lines, duplicates)


# --- problem reporting ------------------------------------------------------------------------


class _Report:
    """Collects every problem of one scenario; raised at the end as one ScenarioError."""

    def __init__(self, lines: Mapping[str, int]) -> None:
        self._lines = lines
        self._problems: list[tuple[int, str]] = []

    def add(self, path: str, text: str) -> None:
        """Record one problem about the field at ``path``; ``text`` is the full sentence."""
        self._problems.append((self._line(path), text))

    def bad(self, path: str, value: object, expected: str) -> None:
        """Record that the field at ``path`` holds ``value`` where ``expected`` was needed."""
        self.add(path, f"{path} = {_show(value)}: expected {expected}")

    def missing(self, path: str, expected: str) -> None:
        self.add(path, f"{path} is missing; expected {expected}")

    @property
    def count(self) -> int:
        return len(self._problems)

    def raise_if_any(self, origin: str) -> None:
        if not self._problems:
            return
        # Stable sort: file order, and discovery order within a line.
        ordered = sorted(self._problems, key=lambda problem: problem[0])
        entries = [f"line {line}: {text}" if line else text for line, text in ordered]
        plural = "s" if len(entries) > 1 else ""
        raise ScenarioError(
            f"invalid scenario {origin} ({len(entries)} problem{plural}):\n"
            + "\n".join(f"  {entry}" for entry in entries)
        )

    def _line(self, path: str) -> int:
        """The line of ``path`` in the file, or of its nearest ancestor (a missing field is
        reported at the mapping that lacks it); 0 without a file."""
        while path:
            if path in self._lines:
                return self._lines[path]
            path = _parent(path)
        return self._lines.get("", 0)


def _parent(path: str) -> str:
    cut = max(path.rfind("."), path.rfind("[") if path.endswith("]") else -1)
    return path[:cut] if cut > 0 else ""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _suggest(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --- value checks -----------------------------------------------------------------------------


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(
    value: object,
    path: str,
    report: _Report,
    *,
    minimum: float | None = None,
    strict: bool = True,
    maximum: float | None = None,
    unit: str = "",
) -> float | None:
    """``value`` as a float if it is a finite number within the bounds (``strict``: the minimum
    itself is refused; the maximum always is), else None with the problem reported."""
    noun = f"a number of {unit}" if unit else "a number"
    if maximum is not None and minimum is not None:
        expected = f"{noun} in ({minimum:g}, {maximum:g}), both excluded"
    elif minimum is not None:
        expected = f"{noun} {'>' if strict else '>='} {minimum:g}"
    else:
        expected = noun
    if not _is_number(value):
        hint = ""
        if isinstance(value, str):
            # PyYAML reads 1e3 (no dot) as a string, a classic trap.
            hint = "; write it without quotes (and 1e3 as 1000 or 1.0e+3)"
        report.bad(path, value, expected + hint)
        return None
    number = float(value)
    too_low = minimum is not None and (number <= minimum if strict else number < minimum)
    too_high = maximum is not None and number >= maximum
    if not math.isfinite(number):
        report.bad(path, value, expected.replace("a number", "a finite number", 1))
        return None
    if too_low or too_high:
        report.bad(path, value, expected)
        return None
    return number


def _positive_seconds(value: object, path: str, report: _Report) -> float | None:
    return _number(value, path, report, minimum=0, unit="seconds")


def _non_negative_seconds(value: object, path: str, report: _Report) -> float | None:
    return _number(value, path, report, minimum=0, strict=False, unit="seconds")


def _integer(value: object, path: str, report: _Report, *, minimum: int) -> int | None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        report.bad(path, value, f"a whole number >= {minimum}")
        return None
    return value


def _text(value: object, path: str, report: _Report) -> str | None:
    if not isinstance(value, str):
        report.bad(path, value, "a string (quote it if it contains ': ' or starts with a symbol)")
        return None
    return value


def _number_list(
    value: object, path: str, report: _Report, *, minimum: float, strict: bool, unit: str
) -> tuple[float, ...] | None:
    """A non-empty list of numbers, each checked; None if it or any item is bad."""
    if not isinstance(value, list) or not value:
        report.bad(path, value, f"a non-empty list of numbers of {unit}, e.g. [20, 40]")
        return None
    items = [
        _number(item, f"{path}[{index}]", report, minimum=minimum, strict=strict, unit=unit)
        for index, item in enumerate(value)
    ]
    if any(item is None for item in items):
        return None
    return tuple(item for item in items if item is not None)


class _Section:
    """One mapping of the file, read field by field.

    Unknown keys are reported on construction (with a close-match suggestion); ``misplaced``
    maps keys that exist elsewhere in the format to the reason they are wrong here.
    """

    def __init__(
        self,
        data: Mapping[object, object],
        path: str,
        report: _Report,
        known: Sequence[str],
        misplaced: Mapping[str, str] | None = None,
    ) -> None:
        self.data = data
        self.path = path
        self.report = report
        misplaced = misplaced or {}
        for key in data:
            if not isinstance(key, str):
                report.bad(_join(path, str(key)), key, "a field name (a string)")
            elif key in misplaced:
                report.add(self.at(key), f"{self.at(key)}: {misplaced[key]}")
            elif key not in known:
                report.add(
                    self.at(key),
                    f"{self.at(key)}: unknown field; expected one of {', '.join(known)}"
                    + _suggest(key, known),
                )

    def at(self, key: str) -> str:
        return _join(self.path, key)

    def has(self, key: str) -> bool:
        return key in self.data

    def get(
        self,
        key: str,
        check: Callable[[object, str, _Report], _T | None],
        *,
        required: str = "",
    ) -> _T | None:
        """``check(value, path, report)`` of the field, or None when it is absent (reported as
        missing when ``required`` says what was expected)."""
        if key not in self.data:
            if required:
                self.report.missing(self.at(key), required)
            return None
        return check(self.data[key], self.at(key), self.report)

    def optional(
        self, key: str, check: Callable[[object, str, _Report], _T | None], default: _T
    ) -> _T | None:
        """``check`` of the field, ``default`` when it is absent, None when it is bad."""
        return self.get(key, check) if key in self.data else default

    def choice(self, key: str, options: Sequence[str], *, required: bool) -> str | None:
        if key not in self.data:
            if required:
                self.report.missing(self.at(key), f"one of {', '.join(options)}")
            return None
        return _choice(self.data[key], self.at(key), self.report, options)


def _choice(value: object, path: str, report: _Report, options: Sequence[str]) -> str | None:
    if not isinstance(value, str) or value not in options:
        hint = _suggest(value, options) if isinstance(value, str) else ""
        report.bad(path, value, f"one of {', '.join(options)}{hint}")
        return None
    return value


def _mapping(
    value: object, path: str, report: _Report, expected: str
) -> Mapping[object, object] | None:
    if not isinstance(value, Mapping):
        report.bad(path, value, expected)
        return None
    return value


# --- the parser -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Context:
    """What the job groups are checked against; None where the scenario's own value is bad."""

    kind: JobKind | None
    worker_count: int | None
    horizon_s: float | None
    workload_kinds: Mapping[str, JobKind] | None
    profile_set: str | None


class _ScenarioParser:
    """Turns the data of one scenario file into a Scenario, reporting every problem."""

    def __init__(self, report: _Report) -> None:
        self.report = report

    def parse(self, data: object) -> Scenario | None:
        report = self.report
        if not isinstance(data, Mapping):
            report.bad(
                "(top level)",
                data,
                "a mapping of scenario fields (name: ..., kind: ..., jobs: ...); "
                "see `dlsched scenarios NAME` for an example",
            )
            return None
        top = _Section(data, "", report, _SCENARIO_KEYS)
        name = top.get("name", self._name, required="the scenario's name, e.g. my-burst-test")
        description = top.optional("description", _text, "")
        source = top.optional("source", _text, "")
        kind_text = top.choice("kind", [kind.value for kind in JobKind], required=True)
        kind = JobKind(kind_text) if kind_text else None
        interval_s = top.optional("interval_s", _positive_seconds, _DEFAULTS.interval_s)
        horizon_s = top.get(
            "horizon_s", _positive_seconds, required="the episode length in seconds, e.g. 600"
        )
        if interval_s is not None and horizon_s is not None and horizon_s <= interval_s:
            report.bad(
                "horizon_s",
                data["horizon_s"],
                f"more than interval_s = {interval_s:g}, so that an episode has steps",
            )
        slots = top.optional(
            "slots_per_worker",
            lambda v, p, r: _integer(v, p, r, minimum=1),
            _DEFAULTS.slots_per_worker,
        )
        profile_set = top.optional("profile_set", _text, _DEFAULTS.profile_set)
        migration_cost_s = top.optional(
            "migration_cost_s", _non_negative_seconds, _DEFAULTS.migration_cost_s
        )
        workers = top.get(
            "workers",
            self._workers,
            required="the workers, e.g. {count: 1, cores: 8} or [{cores: 8}, {cores: 16}]",
        )
        context = _Context(
            kind=kind,
            worker_count=len(workers) if workers is not None else None,
            horizon_s=horizon_s,
            workload_kinds=self._workload_kinds(profile_set) if profile_set else None,
            profile_set=profile_set,
        )
        groups = top.get(
            "jobs",
            lambda v, p, r: self._groups(v, p, context),
            required="a list of job groups, each with workloads, count, arrival, ...",
        )
        if (
            report.count
            or name is None
            or kind is None
            or description is None
            or source is None
            or interval_s is None
            or horizon_s is None
            or slots is None
            or profile_set is None
            or migration_cost_s is None
            or workers is None
            or groups is None
        ):
            return None
        return Scenario(
            name=name,
            kind=kind,
            workers=workers,
            groups=groups,
            interval_s=interval_s,
            horizon_s=horizon_s,
            slots_per_worker=slots,
            description=description,
            source=source,
            profile_set=profile_set,
            migration_cost_s=migration_cost_s,
        )

    # top-level fields

    @staticmethod
    def _name(value: object, path: str, report: _Report) -> str | None:
        if not isinstance(value, str) or not _NAME_PATTERN.fullmatch(value):
            report.bad(
                path,
                value,
                "a name of letters, digits, '.', '_' and '-' starting with a letter or digit, "
                "e.g. my-burst-test",
            )
            return None
        return value

    def _workload_kinds(self, profile_set: str) -> dict[str, JobKind] | None:
        """Each workload of the profile set with its kind; None (reported) if the set is
        unknown or cannot be read."""
        try:
            names = profile_names(profile_set)
            profiles = load_profile_set(profile_set)
        except (UnknownNameError, ProfileError) as error:
            self.report.add("profile_set", f"profile_set = {profile_set!r}: {error}")
            return None
        return {name: profiles[name].kind for name in names}

    def _workers(self, value: object, path: str, report: _Report) -> tuple[WorkerSpec, ...] | None:
        if isinstance(value, Mapping):
            section = _Section(value, path, report, ("count", "cores", "endpoint"))
            count = section.optional("count", lambda v, p, r: _integer(v, p, r, minimum=1), 1)
            worker = self._worker_fields(section)
            if worker is None or count is None:
                return None
            return (worker,) * count
        if isinstance(value, list) and value:
            workers: list[WorkerSpec | None] = []
            for index, item in enumerate(value):
                item_path = f"{path}[{index}]"
                mapping = _mapping(item, item_path, report, "a mapping {cores: C[, endpoint: URL]}")
                if mapping is None:
                    workers.append(None)
                    continue
                workers.append(
                    self._worker_fields(_Section(mapping, item_path, report, ("cores", "endpoint")))
                )
            if any(worker is None for worker in workers):
                return None
            return tuple(worker for worker in workers if worker is not None)
        report.bad(
            path,
            value,
            "a mapping {count: N, cores: C} or a non-empty list of {cores: C, endpoint: URL}",
        )
        return None

    @staticmethod
    def _worker_fields(section: _Section) -> WorkerSpec | None:
        cores = section.get(
            "cores",
            lambda v, p, r: _number(v, p, r, minimum=0, unit="cores"),
            required="the worker's CPU cores, e.g. 8",
        )
        endpoint = section.get("endpoint", _ScenarioParser._endpoint)
        if cores is None or (section.has("endpoint") and endpoint is None):
            return None
        return WorkerSpec(cores=cores, endpoint=endpoint)

    @staticmethod
    def _endpoint(value: object, path: str, report: _Report) -> str | None:
        if not isinstance(value, str) or "://" not in value:
            report.bad(
                path,
                value,
                "a Docker endpoint URL such as tcp://host:2375, ssh://user@host or "
                "unix:///var/run/docker.sock (leave it out for the local engine)",
            )
            return None
        return value

    # job groups

    def _groups(self, value: object, path: str, context: _Context) -> tuple[JobGroup, ...] | None:
        if not isinstance(value, list) or not value:
            self.report.bad(path, value, "a non-empty list of job groups (each a mapping)")
            return None
        groups = []
        for index, item in enumerate(value):
            item_path = f"{path}[{index}]"
            mapping = _mapping(
                item, item_path, self.report, "a job group: a mapping with workloads, count, ..."
            )
            groups.append(self._group(mapping, item_path, context) if mapping is not None else None)
        if any(group is None for group in groups):
            return None
        return tuple(group for group in groups if group is not None)

    def _group(
        self, data: Mapping[object, object], path: str, context: _Context
    ) -> JobGroup | None:
        report = self.report
        misplaced: dict[str, str] = {}
        if context.kind is JobKind.TRAINING:
            misplaced = {
                key: "only for inference scenarios (kind: inference); remove it"
                for key in _INFERENCE_ONLY
            }
        elif context.kind is JobKind.INFERENCE:
            misplaced = {
                key: "only for training scenarios (kind: training); remove it"
                for key in _TRAINING_ONLY
            }
        section = _Section(data, path, report, _GROUP_KEYS, misplaced)
        problems_before = report.count
        workloads = self._group_workloads(section, context)
        count = section.optional("count", self._count, 1)
        max_count = count.high if isinstance(count, IntRange) else count
        arrival = section.optional(
            "arrival", lambda v, p, r: self._arrival(v, p, max_count, context), ArrivalPattern()
        )
        arrival_choices: tuple[ArrivalPattern, ...] | None = ()
        if section.has("arrival_choices"):
            if section.has("arrival"):
                report.add(
                    section.path,
                    f"{section.path}: both arrival and arrival_choices are given; keep one "
                    f"(arrival_choices: [...] draws one of its patterns per episode)",
                )
            arrival_choices = self._arrival_choices(
                section.data["arrival_choices"], section.at("arrival_choices"), max_count, context
            )
        worker = section.get("worker", lambda v, p, r: self._worker_index(v, p, context))
        targets_s: tuple[float, ...] = ()
        target_range_s: FloatRange | None = None
        tolerance: float | None = _GROUP_DEFAULTS.tolerance
        iterations: int | None = None
        loss_targets: tuple[float, float] | None = None
        if context.kind is JobKind.INFERENCE:
            targets_s, target_range_s, tolerance = self._inference_fields(section)
        elif context.kind is JobKind.TRAINING:
            iterations = section.get("iterations", lambda v, p, r: _integer(v, p, r, minimum=1))
            loss_targets = self._loss_targets(section)
        if (
            report.count > problems_before
            or workloads is None
            or count is None
            or arrival is None
            or arrival_choices is None
            or tolerance is None
        ):
            return None
        return JobGroup(
            workloads=workloads,
            count=count,
            arrival=arrival,
            targets_s=targets_s,
            target_range_s=target_range_s,
            tolerance=tolerance,
            iterations=iterations,
            worker=worker,
            loss_targets=loss_targets,
            arrival_choices=arrival_choices,
        )

    def _arrival_choices(
        self, value: object, path: str, max_count: int | None, context: _Context
    ) -> tuple[ArrivalPattern, ...] | None:
        if not isinstance(value, list) or not value:
            self.report.bad(
                path,
                value,
                "a non-empty list of arrival patterns, e.g. [{kind: burst}, {kind: fixed, "
                "every_s: 50}]",
            )
            return None
        choices = [
            self._arrival(item, f"{path}[{index}]", max_count, context)
            for index, item in enumerate(value)
        ]
        if any(choice is None for choice in choices):
            return None
        return tuple(choice for choice in choices if choice is not None)

    def _group_workloads(self, section: _Section, context: _Context) -> tuple[str, ...] | None:
        report = self.report
        if section.has("workload") and section.has("workloads"):
            report.add(
                section.path,
                f"{section.path}: both workload and workloads are given; keep one "
                f"(workloads: [a, b] draws one of them per job)",
            )
            return None
        if section.has("workload"):
            name = section.get("workload", _text)
            if not isinstance(name, str):
                return None
            return (name,) if self._known_workload(name, section.at("workload"), context) else None
        raw = section.get(
            "workloads",
            lambda v, p, r: v,
            required="a list of workload names, e.g. [resnet50] (or workload: resnet50)",
        )
        if raw is None:
            return None
        path = section.at("workloads")
        if not isinstance(raw, list) or not raw:
            report.bad(path, raw, "a non-empty list of workload names, e.g. [resnet50, vgg16]")
            return None
        names: list[str] = []
        for index, item in enumerate(raw):
            name = _text(item, f"{path}[{index}]", report)
            if name is not None and self._known_workload(name, f"{path}[{index}]", context):
                names.append(name)
        return tuple(names) if len(names) == len(raw) else None

    def _known_workload(self, name: str, path: str, context: _Context) -> bool:
        known = context.workload_kinds
        if known is None:  # the profile set itself is bad, and reported
            return True
        if name not in known:
            self.report.bad(
                path,
                name,
                f"a workload of profile set {context.profile_set!r}: "
                f"{', '.join(sorted(known))}" + _suggest(name, sorted(known)),
            )
            return False
        if context.kind is not None and known[name] is not context.kind:
            same_kind = sorted(w for w, k in known.items() if k is context.kind)
            self.report.bad(
                path,
                name,
                f"{_a(context.kind.value)} workload (this scenario's kind), but {name!r} is "
                f"{_a(known[name].value)} workload; {context.kind.value} workloads: "
                f"{', '.join(same_kind)}",
            )
            return False
        return True

    def _count(self, value: object, path: str, report: _Report) -> int | IntRange | None:
        if isinstance(value, Mapping):
            section = _Section(value, path, report, ("low", "high"))
            low = section.get(
                "low", lambda v, p, r: _integer(v, p, r, minimum=1), required="a whole number >= 1"
            )
            high = section.get(
                "high", lambda v, p, r: _integer(v, p, r, minimum=1), required="a whole number >= 1"
            )
            if low is None or high is None:
                return None
            if low > high:
                report.bad(path, dict(value), "low <= high")
                return None
            return IntRange(low=low, high=high)
        if isinstance(value, int) and not isinstance(value, bool):
            return _integer(value, path, report, minimum=1)
        report.bad(path, value, "a whole number >= 1 or a range {low: L, high: H}")
        return None

    def _worker_index(self, value: object, path: str, context: _Context) -> int | None:
        index = _integer(value, path, self.report, minimum=0)
        if index is None or context.worker_count is None:
            return index
        if index >= context.worker_count:
            self.report.bad(
                path,
                value,
                f"a worker index from 0 to {context.worker_count - 1} "
                f"(the scenario has {context.worker_count} worker(s))",
            )
            return None
        return index

    def _arrival(
        self, value: object, path: str, max_count: int | None, context: _Context
    ) -> ArrivalPattern | None:
        report = self.report
        data = _mapping(
            value, path, report, "a mapping such as {kind: burst} or {kind: fixed, every_s: 50}"
        )
        if data is None:
            return None
        kinds = [kind.value for kind in ArrivalKind]
        kind_path = _join(path, "kind")
        if "kind" not in data:
            report.missing(kind_path, f"one of {', '.join(kinds)}")
            kind_text = None
        else:
            kind_text = _choice(data["kind"], kind_path, report, kinds)
        if kind_text is None:
            # Without a kind, only keys that no kind takes can be called wrong.
            _Section(data, path, report, _ALL_ARRIVAL_KEYS)
            return None
        kind = ArrivalKind(kind_text)
        known = _ARRIVAL_KEYS[kind]
        misplaced = {
            key: f"not used by arrival kind {kind.value} (it takes {', '.join(known[1:])}); "
            f"remove it or change the kind"
            for key in _ALL_ARRIVAL_KEYS
            if key not in known
        }
        section = _Section(data, path, report, known, misplaced)
        problems_before = report.count
        # A bad value reads as 0 here; the problem is reported and the pattern discarded below.
        start_s = section.get("start_s", _non_negative_seconds) or 0.0
        every_s = window_s = 0.0
        times_s: tuple[float, ...] = ()
        if kind is ArrivalKind.FIXED:
            every_s = (
                section.get(
                    "every_s",
                    _positive_seconds,
                    required="the seconds between two arrivals, a number > 0",
                )
                or 0.0
            )
        elif kind is ArrivalKind.RANDOM:
            window_s = (
                section.get(
                    "window_s",
                    _positive_seconds,
                    required="the length in seconds of the window arrivals are drawn from, > 0",
                )
                or 0.0
            )
        elif kind is ArrivalKind.EXPLICIT:
            times_s = (
                section.get(
                    "times_s",
                    lambda v, p, r: _number_list(v, p, r, minimum=0, strict=False, unit="seconds"),
                    required="the list of arrival times in seconds, one per job",
                )
                or ()
            )
            if times_s and max_count is not None and len(times_s) < max_count:
                report.bad(
                    section.at("times_s"),
                    data["times_s"],
                    f"at least {max_count} times, one per job (up to {max_count} jobs)",
                )
        if report.count > problems_before:
            return None
        arrival = ArrivalPattern(
            kind=kind, start_s=start_s, every_s=every_s, window_s=window_s, times_s=times_s
        )
        if max_count is not None and context.horizon_s is not None:
            last = _last_arrival(arrival, max_count)
            if last >= context.horizon_s:
                report.add(
                    path,
                    f"{path}: a job may arrive at {last:g} s, at or after horizon_s = "
                    f"{context.horizon_s:g}, and would never run; expected every arrival "
                    f"before the horizon (lengthen horizon_s or bring the arrivals forward)",
                )
                return None
        return arrival

    def _inference_fields(
        self, section: _Section
    ) -> tuple[tuple[float, ...], FloatRange | None, float | None]:
        report = self.report
        tolerance = section.optional(
            "tolerance",
            lambda v, p, r: _number(v, p, r, minimum=0, maximum=1),
            _GROUP_DEFAULTS.tolerance,
        )
        if section.has("targets_s") and section.has("target_range_s"):
            report.add(
                section.path,
                f"{section.path}: both targets_s and target_range_s are given; keep one",
            )
            return (), None, tolerance
        if section.has("target_range_s"):
            return (), self._target_range(section), tolerance
        targets = section.get(
            "targets_s",
            lambda v, p, r: _number_list(v, p, r, minimum=0, strict=True, unit="seconds"),
            required="latency targets, which inference jobs need: targets_s: [20] (cycled "
            "over the jobs) or target_range_s: {low: 5, high: 95}",
        )
        return targets or (), None, tolerance

    def _target_range(self, section: _Section) -> FloatRange | None:
        path = section.at("target_range_s")
        data = _mapping(
            section.data["target_range_s"], path, self.report, "a mapping {low: L, high: H}"
        )
        if data is None:
            return None
        bounds = _Section(data, path, self.report, ("low", "high"))

        low = bounds.get("low", _positive_seconds, required="the lowest target in seconds, > 0")
        high = bounds.get("high", _positive_seconds, required="the highest target in seconds, > 0")
        if low is None or high is None:
            return None
        if low > high:
            self.report.bad(path, dict(data), "low <= high")
            return None
        return FloatRange(low=low, high=high)

    def _loss_targets(self, section: _Section) -> tuple[float, float] | None:
        if not section.has("loss_targets"):
            return None
        path = section.at("loss_targets")
        value = section.data["loss_targets"]
        expected = (
            "two losses [first tier, second tier], the first one larger (reached first), "
            "e.g. [0.5, 0.2]"
        )
        if not isinstance(value, list) or len(value) != 2:
            self.report.bad(path, value, expected)
            return None
        first = _number(value[0], f"{path}[0]", self.report, minimum=0, unit="loss")
        second = _number(value[1], f"{path}[1]", self.report, minimum=0, unit="loss")
        if first is None or second is None:
            return None
        if first <= second:
            self.report.bad(path, value, expected)
            return None
        return (first, second)


def _last_arrival(arrival: ArrivalPattern, count: int) -> float:
    """The latest time any of ``count`` jobs may arrive with ``arrival``."""
    if arrival.kind is ArrivalKind.FIXED:
        return arrival.start_s + (count - 1) * arrival.every_s
    if arrival.kind is ArrivalKind.RANDOM:
        return arrival.start_s + arrival.window_s
    if arrival.kind is ArrivalKind.EXPLICIT:
        return max(arrival.times_s[:count])
    return arrival.start_s


# --- writing ----------------------------------------------------------------------------------


def _plain(value: float) -> int | float:
    """Whole numbers as ints, so that files read ``600`` rather than ``600.0``."""
    return int(value) if float(value).is_integer() else float(value)


def _workers_to_data(workers: tuple[WorkerSpec, ...]) -> object:
    def worker_data(worker: WorkerSpec) -> dict[str, object]:
        data: dict[str, object] = {"cores": _plain(worker.cores)}
        if worker.endpoint is not None:
            data["endpoint"] = worker.endpoint
        return data

    if workers and all(worker == workers[0] for worker in workers):
        return {"count": len(workers), **worker_data(workers[0])}
    return [worker_data(worker) for worker in workers]


def _group_to_data(group: JobGroup, kind: JobKind) -> dict[str, object]:
    data: dict[str, object] = {}
    if len(group.workloads) == 1:
        data["workload"] = group.workloads[0]
    else:
        data["workloads"] = list(group.workloads)
    if isinstance(group.count, IntRange):
        data["count"] = {"low": group.count.low, "high": group.count.high}
    else:
        data["count"] = group.count
    if group.arrival_choices:
        data["arrival_choices"] = [_arrival_to_data(choice) for choice in group.arrival_choices]
    else:
        data["arrival"] = _arrival_to_data(group.arrival)
    if kind is JobKind.INFERENCE:
        if group.target_range_s is not None:
            data["target_range_s"] = {
                "low": _plain(group.target_range_s.low),
                "high": _plain(group.target_range_s.high),
            }
        else:
            data["targets_s"] = [_plain(target) for target in group.targets_s]
        data["tolerance"] = _plain(group.tolerance)
    else:
        if group.iterations is not None:
            data["iterations"] = group.iterations
        if group.loss_targets is not None:
            data["loss_targets"] = [_plain(loss) for loss in group.loss_targets]
    if group.worker is not None:
        data["worker"] = group.worker
    return data


def _arrival_to_data(arrival: ArrivalPattern) -> dict[str, object]:
    data: dict[str, object] = {"kind": arrival.kind.value}
    if arrival.kind is ArrivalKind.FIXED:
        data["every_s"] = _plain(arrival.every_s)
    elif arrival.kind is ArrivalKind.RANDOM:
        data["window_s"] = _plain(arrival.window_s)
    elif arrival.kind is ArrivalKind.EXPLICIT:
        data["times_s"] = [_plain(time) for time in arrival.times_s]
    if arrival.kind is not ArrivalKind.EXPLICIT and arrival.start_s != 0:
        data["start_s"] = _plain(arrival.start_s)
    return data


def _differences(written: object, read: object, path: str) -> list[str]:
    """Paths at which two ``dataclasses.asdict`` trees differ, with both values."""
    if isinstance(written, dict) and isinstance(read, dict):
        found: list[str] = []
        for key in written:
            found += _differences(written[key], read.get(key), _join(path, str(key)))
        return found
    if (
        isinstance(written, list | tuple)
        and isinstance(read, list | tuple)
        and len(written) == len(read)
    ):
        found = []
        for index, (left, right) in enumerate(zip(written, read, strict=True)):
            found += _differences(left, right, f"{path}[{index}]")
        return found
    return [] if written == read else [f"{path}: {_show(written)} != {_show(read)}"]
