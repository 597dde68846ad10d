"""Scenario files: read, validate and write the YAML that describes a :class:`Scenario`.

A scenario is either *shipped* (``envs/scenarios/shipped/<name>.yaml``, loaded by its name) or a
user's own file, loaded by its path. The format is defined once, in :mod:`.schema`, whose JSON
Schema (``dlsched scenarios --schema``) editors use to complete and check the files::

    # yaml-language-server: $schema=scenario.schema.json
    name: dqoes-resnet50-burst-target20
    description: one line
    source: DQoES journal, Section V-B-1, Figs. 2-3     # "" for a user's own
    kind: inference                  # or training
    interval_s: 10                   # optional, 10
    horizon_s: 600
    slots_per_worker: 10             # optional, 10
    profile_set: paper               # optional, paper
    workload_threading: tuned        # optional: tuned or stock (Docker backend)
    migration_cost_s: 10             # optional, 10
    container_memory_mb: 2048        # optional, 2048: each job's container (Docker backend)
    container_pids: 512              # optional, 512: each job's container (Docker backend)
    workers: {count: 1, cores: 8}    # or [{cores: 8}, {cores: 16, endpoint: "tcp://host:2375"}]
    jobs:
      - workloads: [resnet50]        # or `workload: resnet50`
        count: 10                    # or {low: 5, high: 15}; optional, 1
        arrival: {kind: burst}       # fixed (every_s), random (window_s), explicit (times_s)
        # or arrival_choices: [{kind: burst}, {kind: fixed, every_s: 50}]: one drawn per episode
        targets_s: [20]              # inference: targets_s or target_range_s: {low: 5, high: 95}
        tolerance: 0.1               # inference; optional, 0.1
        iterations: 1200             # training; or {low: 300, high: 500} drawn per job; optional,
                                     # the workload profile's default
        worker: 0                    # optional pin
        loss_targets: [0.5, 0.2]     # training; optional, TRADL's two tiers

Reading a file takes three steps: the YAML text to data with the line of every field
(:mod:`.yaml_text`); the data against the schema (:mod:`.schema`) and the rules relating its
fields (:mod:`.rules`); the data to the :class:`Scenario` dataclasses. Validation never stops at
the first mistake: every problem of a file is reported in one
:class:`~dlsched.envs.errors.ScenarioError`, one line per problem, each naming the field's path in
the file (``jobs[2].arrival.every_s``), its line when the scenario came from a file, the value
found and what was expected (:mod:`.problems`).
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import yaml
from pydantic import ValidationError

from dlsched.envs.errors import ScenarioError, UnknownNameError
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
from dlsched.envs.scenarios.problems import Report, report_validation_error, show
from dlsched.envs.scenarios.rules import check_rules
from dlsched.envs.scenarios.schema import SCHEMA_PATH, ScenarioFile
from dlsched.envs.scenarios.yaml_text import SCENARIO_FILE, read_text, read_yaml

SCENARIO_DIR = Path(__file__).with_name("shipped")
"""Where the shipped scenarios live, one ``<name>.yaml`` each."""

_SCENARIO_SUFFIXES = (".yaml", ".yml")
SHIPPED_HEADER = f"# yaml-language-server: $schema=../{SCHEMA_PATH.name}\n"
"""The first line of every shipped scenario: for an editor, the schema its fields follow."""
COPY_HEADER = f"# yaml-language-server: $schema={SCHEMA_PATH.name}\n"
"""The same line in a copy of a shipped scenario, beside which the schema is saved."""


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
    if not is_scenario_file(name_or_path):
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
        ScenarioError: the file is missing, unreadable, larger than
            :data:`~dlsched.envs.size_bounds.MAX_FILE_BYTES`, not YAML, or describes an
            invalid scenario; the message lists every problem with its line.
    """
    path = scenario_path(name_or_path)
    document = read_yaml(read_text(path, SCENARIO_FILE), str(path), SCENARIO_FILE)
    report = Report(document.lines)
    scenario = _validate(document.data, report)
    shipped = path.parent.resolve() == SCENARIO_DIR.resolve()
    # A shipped scenario is found by its file name, so the two must agree.
    if scenario is not None and shipped and scenario.name != path.stem:
        report.bad("name", scenario.name, f"{path.stem!r}, the file's name without .yaml")
    report.raise_if_any(str(path))
    assert scenario is not None  # raise_if_any raises whenever validation returned None
    return scenario


def parse_scenario(data: object, origin: str) -> Scenario:
    """Validate already-parsed YAML data (a mapping of scenario fields) into a :class:`Scenario`.

    Args:
        data: what ``yaml.safe_load`` returns for a scenario file.
        origin: where the data came from, named in the error message (a file path, a label).

    Raises:
        ScenarioError: listing every problem found, one per line.
    """
    report = Report({})
    scenario = _validate(data, report)
    report.raise_if_any(origin)
    assert scenario is not None
    return scenario


def _validate(data: object, report: Report) -> Scenario | None:
    """The scenario ``data`` describes, or None with its problems in ``report``."""
    try:
        checked: ScenarioFile | None = ScenarioFile.model_validate(data)
    except ValidationError as error:
        report_validation_error(error, report)
        checked = None
    check_rules(data, report)
    return checked.to_scenario() if checked is not None and not report.count else None


def scenario_text(name_or_path: str | Path) -> str:
    """The text of a scenario file, comments included, as a copy of it should read: a shipped
    file's editor header names the schema as ``scenario.schema.json`` beside the copy (where
    ``dlsched scenarios --schema > scenario.schema.json`` puts it) rather than inside dlsched.

    Args:
        name_or_path: see :func:`scenario_path`.
    """
    path = scenario_path(name_or_path)
    text = read_text(path, SCENARIO_FILE)
    if path.parent.resolve() == SCENARIO_DIR.resolve() and text.startswith(SHIPPED_HEADER):
        return COPY_HEADER + text[len(SHIPPED_HEADER) :]
    return text


def check_scenario(scenario: Scenario, origin: str | None = None) -> Scenario:
    """``scenario``, built in Python, held to every rule a scenario file is held to: its data as a
    file would hold it (:func:`scenario_to_data`) is read as a file's data is, so that an object
    that no file could describe (a NaN or zero ``interval_s``, no job groups, a count that is a
    string) is refused with the same words as the file, rather than running an endless episode
    or failing deep inside.

    Args:
        scenario: the scenario.
        origin: what it is, for the message; by default a Scenario object named for its name.

    Returns:
        the scenario as that file gives it: equal to ``scenario``, with its values of the
        dataclasses' own types (a kind given by its name is the :class:`JobKind`, a list a
        tuple, a numpy number Python's), which what runs it may rely on.

    Raises:
        ScenarioError: listing every problem, each field named as the file names it (the
            file's ``jobs`` are the object's ``groups``).
    """
    if origin is None:
        origin = (
            f"{show(scenario.name)} (a Scenario object, checked as its file: jobs[i] is groups[i])"
        )
    return parse_scenario(scenario_to_data(scenario), origin)


def is_scenario_file(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` is a file's path rather than a shipped scenario's name: a
    :class:`~pathlib.Path`, or a string containing a path separator or ending in
    ``.yaml``/``.yml``."""
    if isinstance(name_or_path, Path):
        return True
    return "/" in name_or_path or "\\" in name_or_path or name_or_path.endswith(_SCENARIO_SUFFIXES)


# --- writing ----------------------------------------------------------------------------------


def scenario_to_data(scenario: Scenario) -> dict[str, object]:
    """The plain mapping (strings, numbers, lists, mappings) a scenario file holds for
    ``scenario``, in the file format's field order, whole numbers as integers.

    A field is written where the scenario's kind (or its arrival's kind) uses it, and wherever
    it differs from its default: a value that no file could hold (``every_s`` on a burst
    arrival, ``iterations`` in an inference scenario) is written too, for the file's own rules
    to refuse when the data is read (:func:`check_scenario`, :func:`dump_scenario`). A value
    that is not of its field's type is written as it is, for the schema to name.
    """
    data: dict[str, object] = {"name": _plain(scenario.name)}
    for key in ("description", "source"):
        if _differs(scenario, key, _SCENARIO_DEFAULTS):
            data[key] = _plain(getattr(scenario, key))
    data["kind"] = _plain(scenario.kind)
    for key in ("interval_s", "horizon_s", "slots_per_worker", "profile_set"):
        data[key] = _plain(getattr(scenario, key))
    if scenario.workload_threading is not None:
        data["workload_threading"] = _plain(scenario.workload_threading)
    data["migration_cost_s"] = _plain(scenario.migration_cost_s)
    for key in ("container_memory_mb", "container_pids"):  # Docker only: said where set
        if _differs(scenario, key, _SCENARIO_DEFAULTS):
            data[key] = _plain(getattr(scenario, key))
    data["workers"] = _workers_to_data(scenario.workers)
    groups = scenario.groups
    data["jobs"] = (
        [_group_to_data(group, scenario.kind) for group in groups]
        if isinstance(groups, tuple | list)
        else _plain(groups)
    )
    return data


def dump_scenario(scenario: Scenario) -> str:
    """YAML text of ``scenario`` that :func:`load_scenario` reads back equal.

    Raises:
        ScenarioError: ``scenario`` is invalid, or holds a value the file format cannot carry
            (a field its kind does not use, such as ``every_s`` on a burst arrival); the message
            names the fields.
    """
    return yaml.safe_dump(
        scenario_to_data(check_scenario(scenario)),
        sort_keys=False,
        default_flow_style=None,
        allow_unicode=True,
        width=100,
    )


_SCENARIO_DEFAULTS = Scenario(name="", kind=JobKind.INFERENCE, workers=(), groups=())
_GROUP_DEFAULTS = JobGroup(workloads=())
_ARRIVAL_DEFAULTS = ArrivalPattern()


def _differs(value: object, key: str, defaults: object) -> bool:
    """Whether the field ``key`` of ``value`` differs from its default (a NaN always does)."""
    return bool(_plain(getattr(value, key)) != _plain(getattr(defaults, key)))


def _plain(value: object) -> object:
    """``value`` as a file holds it: an enum as its value, a number as Python's (a whole float
    as an int, so that files read ``600`` rather than ``600.0``), a tuple or array as a list, an
    :class:`IntRange` or :class:`FloatRange` as ``{low, high}``, the values of a mapping alike;
    anything else as it is."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, IntRange | FloatRange):
        return {"low": _plain(value.low), "high": _plain(value.high)}
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    number = float(value)
    return int(number) if number.is_integer() else number


def _workers_to_data(workers: object) -> object:
    if not isinstance(workers, tuple | list) or not all(
        isinstance(worker, WorkerSpec) for worker in workers
    ):
        return _plain(workers)

    def worker_data(worker: WorkerSpec) -> dict[str, object]:
        data: dict[str, object] = {"cores": _plain(worker.cores)}
        if worker.endpoint is not None:
            data["endpoint"] = _plain(worker.endpoint)
        return data

    if workers and all(worker_data(worker) == worker_data(workers[0]) for worker in workers):
        return {"count": len(workers), **worker_data(workers[0])}
    return [worker_data(worker) for worker in workers]


def _group_to_data(group: object, kind: object) -> object:
    if not isinstance(group, JobGroup):
        return _plain(group)
    data: dict[str, object] = {}
    workloads = group.workloads
    if isinstance(workloads, tuple | list) and len(workloads) == 1:
        data["workload"] = _plain(workloads[0])
    else:
        data["workloads"] = _plain(workloads)
    data["count"] = _plain(group.count)
    if _differs(group, "arrival_choices", _GROUP_DEFAULTS):
        choices = group.arrival_choices
        data["arrival_choices"] = (
            [_arrival_to_data(choice) for choice in choices]
            if isinstance(choices, tuple | list)
            else _plain(choices)
        )
    arrival = _arrival_to_data(group.arrival)
    if "arrival_choices" not in data or arrival != _arrival_to_data(_GROUP_DEFAULTS.arrival):
        data["arrival"] = arrival
    inference = kind is JobKind.INFERENCE
    if group.target_range_s is not None:
        data["target_range_s"] = _plain(group.target_range_s)
    if _differs(group, "targets_s", _GROUP_DEFAULTS):
        data["targets_s"] = _plain(group.targets_s)
    if inference or _differs(group, "tolerance", _GROUP_DEFAULTS):
        data["tolerance"] = _plain(group.tolerance)
    for key in ("iterations", "loss_targets", "worker"):
        if getattr(group, key) is not None:
            data[key] = _plain(getattr(group, key))
    return data


_ARRIVAL_NEEDS = {
    ArrivalKind.FIXED: "every_s",
    ArrivalKind.RANDOM: "window_s",
    ArrivalKind.EXPLICIT: "times_s",
}
"""The field each arrival kind needs beside ``kind`` (a burst needs none)."""


def _arrival_to_data(arrival: object) -> object:
    """An arrival pattern's mapping: the field its kind needs, and any other set away from its
    default (``start_s`` where it is not 0)."""
    if not isinstance(arrival, ArrivalPattern):
        return _plain(arrival)
    data: dict[str, object] = {"kind": _plain(arrival.kind)}
    needed = _ARRIVAL_NEEDS.get(arrival.kind) if isinstance(arrival.kind, ArrivalKind) else None
    for key in ("every_s", "window_s", "times_s", "start_s"):
        if key == needed or _differs(arrival, key, _ARRIVAL_DEFAULTS):
            data[key] = _plain(getattr(arrival, key))
    return data
