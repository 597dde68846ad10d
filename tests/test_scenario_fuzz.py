"""Random YAML into the scenario reader: it returns a Scenario or raises a ScenarioError, nothing
else (no TypeError, KeyError, RecursionError, pydantic error, ...).

Three sources of input, each bounded so that an example takes milliseconds: random nested data;
the shipped scenarios mutated (a field deleted, renamed, or its value replaced by a random one);
and random YAML text, read from a file as ``load_scenario`` reads a user's file. Integers stay
within a million: a count beyond what memory holds (``workers: {count: 10**20, ...}``) is for
the reader's limits on counts, not for this test.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dlsched.envs.errors import ScenarioError
from dlsched.envs.scenarios import (
    Scenario,
    load_scenario,
    parse_scenario,
    scenario_names,
    scenario_path,
)

FIELD_NAMES = [
    "name", "kind", "horizon_s", "interval_s", "workers", "jobs", "count", "cores", "workload",
    "workloads", "arrival", "arrival_choices", "every_s", "window_s", "times_s", "start_s", "low",
    "high", "targets_s", "target_range_s", "tolerance", "iterations", "worker", "loss_targets",
    "profile_set", "workload_threading", "endpoint", "slots_per_worker", "migration_cost_s",
]  # fmt: skip
SHIPPED = {
    name: yaml.safe_load(scenario_path(name).read_text(encoding="utf-8"))
    for name in scenario_names()
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet="abcrstu019 .:-_/", max_size=8),
    st.sampled_from(["burst", "fixed", "random", "explicit", "training", "inference", "tuned",
                     "stock", "resnet50", "vae", "paper", "measured", "1e3", ""]),
)  # fmt: skip
keys = st.one_of(st.sampled_from(FIELD_NAMES), st.text(alphabet="abcdeiklnorstw_", max_size=6))
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(keys, st.integers(0, 3), st.booleans()), children, max_size=4),
    ),
    max_leaves=12,
)


def assert_loads_or_refuses(data: object) -> None:
    try:
        scenario = parse_scenario(data, "fuzzed")
    except ScenarioError:
        return
    assert isinstance(scenario, Scenario)


@settings(max_examples=300, deadline=None)
@given(data=st.dictionaries(keys, values, max_size=8))
@example(data={"jobs": [{"arrival": {"kind": "burst", 0: 1}}]})
@example(data={"workers": {"count": 10**6, "cores": 1}, "jobs": [{"worker": 10**6}]})
def test_random_mappings_load_or_are_refused(data: dict[object, object]) -> None:
    assert_loads_or_refuses(data)


@settings(max_examples=100, deadline=None)
@given(data=values)
def test_random_values_load_or_are_refused(data: object) -> None:
    assert_loads_or_refuses(data)


def paths(node: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every path to a value inside ``node`` (mapping keys and list indices)."""
    found: list[tuple[object, ...]] = []
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in children:
        found.append((*prefix, key))
        found += paths(child, (*prefix, key))
    return found


@st.composite
def mutated_scenarios(draw: st.DrawFn) -> object:
    """A shipped scenario's data with one to three random edits."""
    data = copy.deepcopy(SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))])
    for _ in range(draw(st.integers(1, 3))):
        targets = paths(data)
        if not targets:
            break
        *parents, last = draw(st.sampled_from(targets))
        parent = data
        for step in parents:
            parent = parent[step]
        edit = draw(st.sampled_from(["delete", "rename", "replace"]))
        if edit == "delete":
            del parent[last]
        elif edit == "rename" and isinstance(parent, dict):
            parent[draw(keys)] = parent.pop(last)
        else:
            parent[last] = draw(values)
    return data


@settings(max_examples=300, deadline=None)
@given(data=mutated_scenarios())
@example(data={**SHIPPED["specon-7"], "kind": "inference"})
@example(data={**SHIPPED["train-training-mix"], "workers": {"count": 1, "cores": 8, "x": None}})
def test_mutated_shipped_scenarios_load_or_are_refused(data: object) -> None:
    assert_loads_or_refuses(data)


yaml_text = st.text(alphabet="abknrs012389 :-,[]{}&*!|>'\"#.\n\t", max_size=60)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(yaml_text, mutated_scenarios().map(yaml.safe_dump)))
@example(text="a: &x [*x]\n")
@example(text="[" * 2000)
@example(text="jobs: &j [{workloads: *j}]\nname: x\n")
@example(text="horizon_s: 2020-13-31\n")  # PyYAML reads it as a date and raises ValueError
@example(text="jobs: [{count: !!float abc}]\n")
def test_random_yaml_files_load_or_are_refused(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzzed.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            scenario = load_scenario(path)
        except ScenarioError:
            return
        assert isinstance(scenario, Scenario)
