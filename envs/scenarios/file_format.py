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

import dataclasses
from pathlib import Path

import yaml
from pydantic import ValidationError

from dlsched.envs.errors import ScenarioError, UnknownNameError
from dlsched.envs.scenarios.limits import MAX_FILE_BYTES
from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    IntRange,
    JobGroup,
    JobKind,
    Scenario,
    WorkerSpec,
)
from dlsched.envs.scenarios.problems import Report, join, report_validation_error, show
from dlsched.envs.scenarios.rules import check_rules
from dlsched.envs.scenarios.schema import SCHEMA_PATH, ScenarioFile
from dlsched.envs.scenarios.yaml_text import read_yaml

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
            :data:`~dlsched.envs.scenarios.limits.MAX_FILE_BYTES`, not YAML, or describes an
            invalid scenario; the message lists every problem with its line.
    """
    path = scenario_path(name_or_path)
    document = read_yaml(_read_text(path), str(path))
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
    text = _read_text(path)
    if path.parent.resolve() == SCENARIO_DIR.resolve() and text.startswith(SHIPPED_HEADER):
        return COPY_HEADER + text[len(SHIPPED_HEADER) :]
    return text


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
    if scenario.workload_threading is not None:
        data["workload_threading"] = scenario.workload_threading
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


def _read_text(path: Path) -> str:
    """The text of a scenario file, read only if it is within the size limit."""
    limit = MAX_FILE_BYTES.value
    try:
        with path.open("rb") as stream:
            # One byte more than the limit tells a file that is too long, however it grows.
            data = stream.read(limit + 1)
    except OSError as error:
        raise ScenarioError(
            f"cannot read scenario file {str(path)!r}: {error}; check the file is readable"
        ) from error
    if len(data) > limit:
        raise ScenarioError(
            f"scenario file {str(path)!r} is larger than {limit:,} bytes: expected "
            f"{MAX_FILE_BYTES.expected()}; a scenario file has tens of lines, is this the right "
            f"file?"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScenarioError(
            f"cannot read scenario file {str(path)!r}: {error}; expected UTF-8 text"
        ) from error


def is_scenario_file(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` is a file's path rather than a shipped scenario's name: a
    :class:`~pathlib.Path`, or a string containing a path separator or ending in
    ``.yaml``/``.yml``."""
    if isinstance(name_or_path, Path):
        return True
    return "/" in name_or_path or "\\" in name_or_path or name_or_path.endswith(_SCENARIO_SUFFIXES)


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
        if isinstance(group.iterations, IntRange):
            data["iterations"] = {"low": group.iterations.low, "high": group.iterations.high}
        elif group.iterations is not None:
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
            found += _differences(written[key], read.get(key), join(path, str(key)))
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
    return [] if written == read else [f"{path}: {show(written)} != {show(read)}"]
