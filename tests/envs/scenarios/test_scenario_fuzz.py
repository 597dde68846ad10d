"""Random YAML into the scenario reader: it returns a Scenario or raises a ScenarioError, nothing
else (no TypeError, KeyError, RecursionError, MemoryError, pydantic error, ...); and a scenario
it returns runs: ``gym.make``, ``reset`` and a few steps give a result or a project error.

Three sources of input: random nested data; the shipped scenarios mutated (a field deleted,
renamed, or its value replaced by a random one); and random YAML text, read from a file as
``load_scenario`` reads a user's file. And a fourth, past the reader: the shipped scenarios as
:class:`Scenario` objects with a field replaced, given to ``gym.make`` as a Python user builds
one; they are held to the same rules, refused with a ScenarioError naming the field, or run an
episode that ends. Integers and floats are unbounded (``count: 10**40``):
the reader's limits (:mod:`dlsched.envs.size_bounds`) keep every example small, and the
examples that run are held to lower limits still (:data:`SMALL`), set as a user would set them.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import tempfile
from pathlib import Path
from unittest import mock

import gymnasium as gym
import numpy as np
import yaml
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from dlsched.envs.errors import DlschedError, ScenarioError
from dlsched.envs.scenarios import (
    ArrivalKind,
    FloatRange,
    IntRange,
    JobKind,
    Scenario,
    WorkerSpec,
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
    "container_memory_mb", "container_pids",
]  # fmt: skip
SHIPPED = {
    name: yaml.safe_load(scenario_path(name).read_text(encoding="utf-8"))
    for name in scenario_names()
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**31, 2**63, 10**40, -(2**63), 73218310, 204907264580]),
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


SMALL = {
    "DLSCHED_MAX_WORKERS": "16",
    "DLSCHED_MAX_SLOTS": "256",
    "DLSCHED_MAX_JOBS": "64",
    "DLSCHED_MAX_STEPS": "5000",
}
"""Limits of the examples that run, so that each takes milliseconds."""
ENV_IDS = {"inference": "dlsched/Inference-v0", "training": "dlsched/Training-v0"}
SCALE = int(os.environ.get("DLSCHED_FUZZ_SCALE", "1"))
"""Examples per test, times the CI's; ``pytest --hypothesis-show-statistics`` counts them by
outcome (the events below)."""


def assert_loads_or_refuses(data: object) -> None:
    with mock.patch.dict(os.environ, SMALL):
        try:
            scenario = parse_scenario(data, "fuzzed")
        except ScenarioError:
            event("refused: ScenarioError")
            return
        assert isinstance(scenario, Scenario)
        assert_runs_or_refuses(scenario)


def assert_runs_or_refuses(scenario: Scenario) -> None:
    """A valid scenario through ``gym.make``, ``reset`` and three steps (replay backend)."""
    try:
        env = gym.make(ENV_IDS[scenario.kind.value], scenario=scenario)
        try:
            env.reset(seed=0)
            action = np.full(env.action_space.shape, 0.5, dtype=np.float32)
            for _ in range(3):
                env.step(action)
        finally:
            env.close()
    except DlschedError as error:
        event(f"loaded, refused by the environment: {type(error).__name__}")
        return
    event("loaded and ran")


@settings(max_examples=300 * SCALE, deadline=None)
@given(data=st.dictionaries(keys, values, max_size=8))
@example(data={"jobs": [{"arrival": {"kind": "burst", 0: 1}}]})
@example(data={"workers": {"count": 10**6, "cores": 1}, "jobs": [{"worker": 10**6}]})
@example(data={**SHIPPED["dqoes-varied-burst"], "workers": {"count": 2**63, "cores": 8}})
@example(data={**SHIPPED["dqoes-varied-burst"], "horizon_s": 1e12})
@example(data={**SHIPPED["flowcon-10-random"], "jobs": [{"workload": "vae", "count": 10**40}]})
def test_random_mappings_load_or_are_refused(data: dict[object, object]) -> None:
    assert_loads_or_refuses(data)


@settings(max_examples=100 * SCALE, deadline=None)
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


@settings(max_examples=300 * SCALE, deadline=None)
@given(data=mutated_scenarios())
@example(data={**SHIPPED["specon-7"], "kind": "inference"})
@example(data={**SHIPPED["train-training-mix"], "workers": {"count": 1, "cores": 8, "x": None}})
def test_mutated_shipped_scenarios_load_or_are_refused(data: object) -> None:
    assert_loads_or_refuses(data)


yaml_text = st.text(alphabet="abknrs012389 :-,[]{}&*!|>'\"#.\n\t", max_size=60)


@settings(max_examples=300 * SCALE, deadline=None)
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
        with mock.patch.dict(os.environ, SMALL):
            try:
                scenario = load_scenario(path)
            except ScenarioError:
                event("refused: ScenarioError")
                return
            assert isinstance(scenario, Scenario)
            assert_runs_or_refuses(scenario)


# --- scenario objects -------------------------------------------------------------------------

OBJECT_LIMITS = {**SMALL, "DLSCHED_MAX_STEPS": "1000"}
"""Limits of the objects that run: every accepted episode is run to its end."""


def _within_object_limits(scenario: Scenario) -> bool:
    with mock.patch.dict(os.environ, OBJECT_LIMITS):
        try:
            gym.make(ENV_IDS[scenario.kind.value], scenario=scenario).close()
        except ScenarioError:
            return False
    return True


SHIPPED_OBJECTS = {
    name: scenario
    for name in scenario_names()
    if _within_object_limits(scenario := load_scenario(name))
}
"""The shipped scenarios within :data:`OBJECT_LIMITS`, so that a refusal is the edit's."""
NAMED_IN_FILE = {"groups": "jobs", "profile_set": "profile set"}
"""Fields of a scenario object that a refusal names otherwise: by their name in the file (a
file's ``jobs`` are the object's ``groups``), or in words."""


object_values = st.one_of(
    scalars,
    st.sampled_from([math.nan, -math.inf, 0, 0.0, -5, -1.0, (), [], {}, object(), np.nan,
                     np.float64("nan"), np.float32(0.5), np.int64(3), np.int64(-2),
                     JobKind.TRAINING, ArrivalKind.FIXED, IntRange(3, 1), IntRange(1, 3),
                     FloatRange(math.nan, 1.0), WorkerSpec(cores=-1.0), np.array([1.0, 2.0])]),
    st.lists(scalars, max_size=3).map(tuple),
    st.lists(scalars, max_size=3),
    st.builds(IntRange, st.integers(-3, 5), st.integers(-3, 5)),
)  # fmt: skip


@st.composite
def mutated_objects(draw: st.DrawFn) -> tuple[Scenario, str]:
    """A shipped scenario object with one field of it, of its first job group, of that group's
    arrival or of its first worker replaced by a random value; and what a refusal of it names
    (the field, or the job groups or workers it is part of)."""
    scenario = SHIPPED_OBJECTS[draw(st.sampled_from(sorted(SHIPPED_OBJECTS)))]
    value = draw(object_values)
    where = draw(st.sampled_from(["scenario", "group", "arrival", "worker"]))
    if where == "scenario":
        field = draw(st.sampled_from([f.name for f in dataclasses.fields(Scenario)]))
        return dataclasses.replace(scenario, **{field: value}), NAMED_IN_FILE.get(field, field)
    if where == "worker":
        field = draw(st.sampled_from(["cores", "endpoint"]))
        worker = dataclasses.replace(scenario.workers[0], **{field: value})
        return dataclasses.replace(scenario, workers=(worker, *scenario.workers[1:])), "workers"
    group = scenario.groups[0]
    if where == "arrival":
        field = draw(st.sampled_from(["kind", "start_s", "every_s", "window_s", "times_s"]))
        arrival = dataclasses.replace(group.arrival, **{field: value})
        group = dataclasses.replace(group, arrival=arrival)
    else:
        field = draw(st.sampled_from([f.name for f in dataclasses.fields(type(group))]))
        group = dataclasses.replace(group, **{field: value})
    return dataclasses.replace(scenario, groups=(group, *scenario.groups[1:])), "jobs"


def specon(**change: object) -> Scenario:
    """``specon-20`` with fields replaced: the probes of issue 44."""
    return dataclasses.replace(SHIPPED_OBJECTS["specon-20"], **change)


@settings(max_examples=300 * SCALE, deadline=None)
@given(mutated=mutated_objects())
@example(mutated=(specon(interval_s=math.nan), "interval_s"))  # once endless, time_s NaN
@example(mutated=(specon(interval_s=0), "interval_s"))  # once endless, time_s 0
@example(mutated=(specon(interval_s=-5), "interval_s"))
@example(mutated=(specon(groups=()), "jobs"))  # once ran, no job at all
@example(mutated=(specon(workers=(WorkerSpec(cores=-2.0),)), "workers"))  # once ran
@example(mutated=(specon(workers=(WorkerSpec(cores=math.nan),)), "workers"))  # once ran
@example(mutated=(specon(migration_cost_s=math.nan), "migration_cost_s"))  # once ran
@example(mutated=(specon(slots_per_worker=-1), "slots_per_worker"))  # negative dimensions
@example(mutated=(specon(kind=5), "kind"))  # 'int' object has no attribute 'value'
@example(mutated=(specon(workers=None), "workers"))  # NoneType has no len()
@example(
    mutated=(specon(groups=(dataclasses.replace(specon().groups[0], count="3"),)), "jobs")
)  # '>' not supported between 'str' and 'int'
def test_scenario_objects_are_refused_by_the_file_rules_or_run_an_episode_that_ends(
    mutated: tuple[Scenario, str],
) -> None:
    """Never a raw TypeError, ValueError or AttributeError from inside, and never an episode
    that neither terminates nor is truncated (a NaN, zero or negative interval_s once ran
    one)."""
    scenario, named = mutated
    env_id = ENV_IDS.get(str(scenario.kind), ENV_IDS["inference"])
    with mock.patch.dict(os.environ, OBJECT_LIMITS):
        try:
            env = gym.make(env_id, scenario=scenario)
        except ScenarioError as error:
            event("refused: ScenarioError")
            assert named in str(error), str(error)
            return
        except DlschedError as error:
            event(f"refused: {type(error).__name__}")
            return
        try:
            checked = env.unwrapped.scenario
            ratio = checked.horizon_s / checked.interval_s if checked.interval_s else math.inf
            steps = math.ceil(ratio) if 0 < ratio <= 1000 else 1000  # at most OBJECT_LIMITS'
            terminated = truncated = False
            env.reset(seed=0)
            action = np.full(env.action_space.shape, 0.5, dtype=np.float32)
            for _ in range(steps):
                _, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
            assert terminated or truncated, f"no end after {steps} steps"
            assert math.isfinite(info["time_s"]) and info["time_s"] > 0
        except DlschedError as error:
            event(f"made, refused by the episode: {type(error).__name__}")
            return
        finally:
            env.close()
    event("accepted and ran to its end")
