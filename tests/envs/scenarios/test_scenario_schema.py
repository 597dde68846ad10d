"""The scenario file format's one definition: the JSON Schema it generates and ships, the editor
header of the shipped files, the schema against the loader, and the workload_threading field."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from dlsched.envs.errors import ScenarioError
from dlsched.envs.scenarios import (
    SCHEMA_PATH,
    ArrivalKind,
    dump_scenario,
    load_scenario,
    parse_scenario,
    scenario_json_schema,
    scenario_names,
    scenario_path,
)
from dlsched.envs.scenarios.file_format import COPY_HEADER, SHIPPED_HEADER
from dlsched.envs.scenarios.schema import RULE_ERROR, ScenarioFile
from dlsched.runs.cli import main

REGENERATE = "dlsched scenarios --schema > envs/scenarios/scenario.schema.json"

# Every field of the format, so that every value type of the definition is exercised.
FULL_INFERENCE: dict[str, Any] = {
    "name": "full-inference",
    "description": "every field",
    "source": "",
    "kind": "inference",
    "interval_s": 5,
    "horizon_s": 600,
    "slots_per_worker": 4,
    "profile_set": "paper",
    "workload_threading": "stock",
    "migration_cost_s": 0,
    "container_memory_mb": 4096,
    "container_pids": 256,
    "workers": [{"cores": 8, "endpoint": "tcp://host:2375"}, {"cores": 4}],
    "jobs": [
        {
            "workloads": ["resnet50", "vgg16"],
            "count": {"low": 1, "high": 3},
            "arrival_choices": [{"kind": "burst", "start_s": 1}, {"kind": "random", "window_s": 9}],
            "target_range_s": {"low": 5, "high": 95},
            "tolerance": 0.2,
            "worker": 1,
        },
        {
            "workload": "resnet50",
            "count": 2,
            "arrival": {"kind": "fixed", "every_s": 50, "start_s": 3},
            "targets_s": [20],
        },
    ],
}
FULL_TRAINING: dict[str, Any] = {
    "name": "full-training",
    "kind": "training",
    "horizon_s": 900,
    "workers": {"count": 2, "cores": 8, "endpoint": "ssh://user@host"},
    "jobs": [
        {
            "workload": "vae",
            "count": 2,
            "arrival": {"kind": "explicit", "times_s": [0, 30]},
            "iterations": 100,
            "loss_targets": [0.5, 0.2],
        }
    ],
}


@functools.cache
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def value_paths(node: object, prefix: str = "") -> list[str]:
    """The path of every value in ``node``, as the loader names them (``jobs[0].count``)."""
    found = []
    if isinstance(node, dict):
        for key, child in node.items():
            path = f"{prefix}.{key}" if prefix else key
            found += [path, *value_paths(child, path)]
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += [f"{prefix}[{index}]", *value_paths(child, f"{prefix}[{index}]")]
    return found


def replaced(data: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    copied = copy.deepcopy(data)
    steps = path.replace("[", ".").replace("]", "").split(".")
    node: Any = copied
    for step in steps[:-1]:
        node = node[int(step)] if step.isdigit() else node[step]
    last = steps[-1]
    node[int(last) if last.isdigit() else last] = value
    return copied


# --- the schema file --------------------------------------------------------------------------


def test_the_shipped_schema_is_the_one_the_definition_generates() -> None:
    shipped = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert shipped == scenario_json_schema(), f"the schema file is stale; run `{REGENERATE}`"


def test_cli_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == SCHEMA_PATH.read_text(encoding="utf-8")


def test_cli_refuses_a_schema_and_a_scenario_together(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["scenarios", "--schema", "specon-7"])
    assert raised.value.code == 2
    assert "not allowed with argument --schema" in capsys.readouterr().err


def test_the_schema_documents_every_field_for_an_editor() -> None:
    schema = scenario_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert list(schema["properties"]) == list(ScenarioFile.model_fields)
    missing = [
        f"{name}.{field}"
        for name, definition in [("(top)", schema), *schema["$defs"].items()]
        for field, spec in definition.get("properties", {}).items()
        if field != "kind" and not spec.get("description")
    ]
    assert missing == []
    fixed = schema["$defs"]["FixedArrival"]
    assert fixed["required"] == ["kind", "every_s"]
    assert fixed["properties"]["every_s"]["exclusiveMinimum"] == 0
    threading = schema["properties"]["workload_threading"]
    assert threading["enum"] == ["tuned", "stock"]
    assert "default" not in threading and "anyOf" not in threading  # no null for "left out"


def test_the_arrival_kinds_of_the_file_are_the_models() -> None:
    arrivals = scenario_json_schema()["$defs"]["JobGroupFile"]["properties"]["arrival"]
    assert sorted(arrivals["discriminator"]["mapping"]) == sorted(
        kind.value for kind in ArrivalKind
    )


@pytest.mark.parametrize("name", scenario_names())
def test_every_shipped_file_names_the_schema_for_editors_and_validates(name: str) -> None:
    path = scenario_path(name)
    text = path.read_text(encoding="utf-8")
    assert text.startswith(SHIPPED_HEADER)
    schema = SHIPPED_HEADER.strip().split("$schema=")[1]
    assert (path.parent / schema).resolve() == SCHEMA_PATH.resolve()
    validator().validate(yaml.safe_load(text))


def test_a_shown_scenario_names_the_schema_beside_the_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scenarios", "specon-7"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(COPY_HEADER)
    assert shown[len(COPY_HEADER) :] == scenario_path("specon-7").read_text()[len(SHIPPED_HEADER) :]
    assert main(["scenarios", "--schema"]) == 0
    (tmp_path / "scenario.schema.json").write_text(capsys.readouterr().out, encoding="utf-8")
    (tmp_path / "mine.yaml").write_text(shown, encoding="utf-8")
    schema = COPY_HEADER.strip().split("$schema=")[1]
    assert (tmp_path / schema).is_file()
    assert main(["scenarios", str(tmp_path / "mine.yaml")]) == 0
    assert capsys.readouterr().out.startswith(
        f"dlsched scenarios: {tmp_path / 'mine.yaml'} is valid"
    )


@pytest.mark.parametrize(
    ("path", "misspelt", "suggestion"),
    [
        ("", "horizon", "horizon_s"),
        ("jobs[0]", "target_s", "targets_s"),
        ("jobs[0].arrival", "every", "every_s"),
        ("workers", "core", "cores"),
    ],
)
def test_a_misspelt_key_is_refused_by_the_schema_and_the_loader(
    path: str, misspelt: str, suggestion: str
) -> None:
    data = copy.deepcopy(FULL_INFERENCE)
    data["workers"] = {"count": 2, "cores": 8}
    data["jobs"][0]["arrival"] = {"kind": "fixed", "every_s": 5}
    del data["jobs"][0]["arrival_choices"]
    node: Any = data
    for step in path.replace("[", ".").replace("]", "").split(".") if path else []:
        node = node[int(step)] if step.isdigit() else node[step]
    node[misspelt] = 1
    errors = list(validator().iter_errors(data))
    assert any(misspelt in error.message for error in errors), [e.message for e in errors]
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(data, "test")
    assert f"did you mean {suggestion!r}?" in str(raised.value)


# --- the schema against the loader ------------------------------------------------------------


@pytest.mark.parametrize("data", [FULL_INFERENCE, FULL_TRAINING], ids=["inference", "training"])
def test_a_scenario_with_every_field_passes_both(data: dict[str, Any]) -> None:
    validator().validate(data)
    scenario = parse_scenario(data, "test")
    assert parse_scenario(yaml.safe_load(dump_scenario(scenario)), "dumped") == scenario


WRONG_TYPES = [{"a": 1}, ["a"], "text", True, None, 2.5, -1]


@pytest.mark.parametrize("data", [FULL_INFERENCE, FULL_TRAINING], ids=["inference", "training"])
def test_every_field_refuses_a_wrong_value_with_its_path_and_expectation(
    data: dict[str, Any],
) -> None:
    """Every value of the format, replaced by each of several wrong ones: the loader names the
    path and says what was expected (so every value type of the definition has words for it),
    and where the schema alone decides, the JSON Schema agrees with the loader."""
    checked = 0
    for path in value_paths(data):
        for wrong in WRONG_TYPES:
            edited = replaced(data, path, wrong)
            try:
                ScenarioFile.model_validate(edited)
            except ValidationError as error:
                beyond_json_schema = {RULE_ERROR, "finite_number"}
                if {details["type"] for details in error.errors()} - beyond_json_schema:
                    assert list(validator().iter_errors(edited)), (path, wrong)
            else:
                continue  # a value of the right type (a name as a string, ...)
            with pytest.raises(ScenarioError) as raised:
                parse_scenario(edited, "test")
            first = str(raised.value).splitlines()[1].split()[0].rstrip(":")
            # The value's own path, a field holding it (a rule on a list), or one inside it.
            assert path.startswith(first) or first.startswith(path), (path, wrong, first)
            checked += 1
    assert checked > 5 * len(value_paths(data))


def test_what_json_schema_cannot_say_is_checked_by_the_loader() -> None:
    """Finite numbers, whole numbers written as floats, and the order of ranges are beyond the
    JSON Schema; the loader refuses them all the same."""
    for path, value, expected in [
        ("horizon_s", float("inf"), "expected a finite number of seconds > 0"),
        ("slots_per_worker", 4.0, "expected a whole number >= 1"),
        ("jobs[0].count", {"low": 3, "high": 1}, "expected low <= high"),
    ]:
        data = replaced(FULL_INFERENCE, path, value)
        validator().validate(data)
        with pytest.raises(ScenarioError, match=expected):
            parse_scenario(data, "test")


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("description", "expected a string"),
        ("workload_threading", "expected one of tuned, stock"),
        ("jobs[0].worker", "expected a whole number >= 0"),
        ("jobs[0].arrival_choices[0].start_s", "expected a number of seconds >= 0"),
    ],
)
def test_an_empty_value_is_refused_rather_than_taken_for_left_out(
    field: str, expected: str
) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(replaced(FULL_INFERENCE, field, None), "test")
    assert f"{field} = None: {expected}" in str(raised.value)


# --- workload_threading -----------------------------------------------------------------------


@pytest.mark.parametrize("threading", ["tuned", "stock"])
def test_workload_threading_is_read_and_written(threading: str, tmp_path: Path) -> None:
    data = {**FULL_TRAINING, "workload_threading": threading}
    scenario = parse_scenario(data, "test")
    assert scenario.workload_threading == threading
    path = tmp_path / "threading.yaml"
    path.write_text(dump_scenario(scenario), encoding="utf-8")
    assert f"workload_threading: {threading}\n" in path.read_text(encoding="utf-8")
    assert load_scenario(path) == scenario


def test_workload_threading_is_absent_by_default_and_checked() -> None:
    scenario = parse_scenario(FULL_TRAINING, "test")
    assert scenario.workload_threading is None
    assert "workload_threading" not in dump_scenario(scenario)
    with pytest.raises(ScenarioError) as raised:
        parse_scenario({**FULL_TRAINING, "workload_threading": "tunned"}, "test")
    assert (
        "workload_threading = 'tunned': expected one of tuned, stock; did you mean 'tuned'?"
        in str(raised.value)
    )


def test_workload_threading_changes_the_hash_only_when_set() -> None:
    # Recorded runs are grouped by this hash (dlsched compare): the field's addition keeps it.
    assert load_scenario("dqoes-resnet50-burst-target20").content_hash() == "5613cd76e5de"
    tuned = parse_scenario({**FULL_TRAINING, "workload_threading": "tuned"}, "test")
    assert tuned.content_hash() != parse_scenario(FULL_TRAINING, "test").content_hash()


# --- the Docker backend's container limits ---------------------------------------------------


def test_container_limits_are_read_written_and_hashed_only_when_set(tmp_path: Path) -> None:
    default = parse_scenario(FULL_TRAINING, "test")
    assert (default.container_memory_mb, default.container_pids) == (2048, 512)
    assert "container_" not in dump_scenario(default)
    data = {**FULL_TRAINING, "container_memory_mb": 4096, "container_pids": 64}
    scenario = parse_scenario(data, "test")
    assert (scenario.container_memory_mb, scenario.container_pids) == (4096, 64)
    path = tmp_path / "limits.yaml"
    path.write_text(dump_scenario(scenario), encoding="utf-8")
    assert "container_memory_mb: 4096\ncontainer_pids: 64\n" in path.read_text(encoding="utf-8")
    assert load_scenario(path) == scenario
    # Recorded runs are grouped by this hash (dlsched compare): the fields' addition keeps it.
    assert load_scenario("dqoes-resnet50-burst-target20").content_hash() == "5613cd76e5de"
    assert scenario.content_hash() != default.content_hash()


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("container_memory_mb", 32, "expected a whole number of MiB from 64 to 1048576 (1 TiB)"),
        ("container_pids", 0, "expected a whole number of processes from 8 to 4194304"),
    ],
)
def test_container_limits_out_of_range_are_refused(field: str, value: object, expected: str):
    with pytest.raises(ScenarioError) as raised:
        parse_scenario({**FULL_TRAINING, field: value}, "test")
    assert f"{field} = {value!r}: {expected}" in str(raised.value)


def test_a_container_limit_written_with_a_unit_is_named_as_the_string_read():
    with pytest.raises(ScenarioError) as raised:
        parse_scenario({**FULL_TRAINING, "container_memory_mb": "2g"}, "test")
    assert (
        "container_memory_mb: read the string '2g', not a number; container_memory_mb takes a "
        "whole number of MiB from 64 to 1048576 (1 TiB), written in digits"
    ) in str(raised.value)


# --- YAML the reader must survive -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("name: &x [*x]\n", "line 1: an alias (*name) used inside the value its anchor"),
        ("[" * 5000, "nested too deeply"),
        ("jobs: &j [{workloads: *j}]\n", "repeats that value endlessly; write the value out"),
    ],
    ids=["self-containing", "deep", "alias-loop"],
)
def test_yaml_aliases_and_nesting_are_reported_not_crashed_on(
    text: str, fragment: str, tmp_path: Path
) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    assert fragment in str(raised.value)
