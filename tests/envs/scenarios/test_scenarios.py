"""Scenario files: the shipped scenarios, realisation, validation messages and the CLI."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from dlsched.envs.errors import ScenarioError, UnknownNameError
from dlsched.envs.scenarios import file_format as scenario_file
from dlsched.envs.scenarios.file_format import (
    dump_scenario,
    load_scenario,
    parse_scenario,
    scenario_names,
)
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
from dlsched.runs.cli import main

PAPER_SCENARIOS = {
    "dqoes-resnet50-burst-target20": JobKind.INFERENCE,
    "dqoes-resnet50-burst-target40": JobKind.INFERENCE,
    "dqoes-varied-burst": JobKind.INFERENCE,
    "dqoes-varied-fixed50": JobKind.INFERENCE,
    "dqoes-random-models": JobKind.INFERENCE,
    "dqoes-cluster-40": JobKind.INFERENCE,
    "flowcon-poc-3": JobKind.TRAINING,
    "flowcon-10-random": JobKind.TRAINING,
    "flowcon-15-random": JobKind.TRAINING,
    "flowcon-cluster-20": JobKind.TRAINING,
    "flowcon-cluster-40": JobKind.TRAINING,
    "flowcon-cluster-60-homogeneous": JobKind.TRAINING,
    "flowcon-cluster-60-heterogeneous": JobKind.TRAINING,
    "specon-7": JobKind.TRAINING,
    "specon-20": JobKind.TRAINING,
}

INFERENCE: dict[str, object] = {
    "name": "my-inference",
    "kind": "inference",
    "horizon_s": 600,
    "workers": {"count": 2, "cores": 8},
    "jobs": [
        {
            "workloads": ["resnet50", "vgg16"],
            "count": 3,
            "arrival": {"kind": "fixed", "every_s": 50},
            "targets_s": [20, 40],
        }
    ],
}
TRAINING: dict[str, object] = {
    "name": "my-training",
    "kind": "training",
    "horizon_s": 3000,
    "workers": [{"cores": 4}, {"cores": 8}],
    "jobs": [{"workload": "vae", "count": 2, "arrival": {"kind": "random", "window_s": 200}}],
}
DELETE = object()


def edited(base: dict[str, object], path: str, value: object) -> dict[str, object]:
    """A deep copy of ``base`` with the field at ``path`` (``jobs[0].arrival.every_s``) set to
    ``value``, or removed when ``value`` is DELETE."""
    data = copy.deepcopy(base)
    steps: list[str | int] = [
        int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", path)
    ]
    node: object = data
    for step in steps[:-1]:
        node = node[step]  # type: ignore[index]
    if value is DELETE:
        del node[steps[-1]]  # type: ignore[attr-defined]
    else:
        node[steps[-1]] = value  # type: ignore[index]
    return data


def problems_of(data: object) -> str:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(data, "test data")
    return str(raised.value)


# --- the shipped scenarios --------------------------------------------------------------------


def test_every_paper_scenario_is_shipped_with_its_kind_and_source() -> None:
    names = scenario_names()
    for name, kind in PAPER_SCENARIOS.items():
        assert name in names
        scenario = load_scenario(name)
        assert scenario.kind is kind
        assert scenario.source.split()[0] in ("DQoES", "FlowCon", "SpeCon")
        assert "Section" in scenario.source or "script" in scenario.source


@pytest.mark.parametrize("name", scenario_names())
def test_shipped_scenario_loads_and_round_trips(name: str, tmp_path: Path) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert scenario.description
    text = dump_scenario(scenario)
    assert parse_scenario(yaml.safe_load(text), "dumped") == scenario
    copy_path = tmp_path / "copy.yaml"
    copy_path.write_text(text, encoding="utf-8")
    reloaded = load_scenario(copy_path)
    assert reloaded == scenario
    assert reloaded.content_hash() == scenario.content_hash()


@pytest.mark.parametrize("name", scenario_names())
def test_shipped_scenario_realises_jobs_before_the_horizon(name: str) -> None:
    scenario = load_scenario(name)
    jobs = scenario.realise(np.random.default_rng(0))
    assert 0 < len(jobs) <= scenario.max_jobs
    assert all(0 <= job.arrival_s < scenario.horizon_s for job in jobs)
    assert all(job.kind is scenario.kind for job in jobs)


def test_paper_scenarios_carry_the_papers_setups() -> None:
    burst = load_scenario("dqoes-resnet50-burst-target20")
    assert [w.cores for w in burst.workers] == [8.0]
    assert [job.target_s for job in burst.realise(np.random.default_rng(0))] == [20.0] * 10
    varied = load_scenario("dqoes-varied-burst").realise(np.random.default_rng(0))
    assert [job.target_s for job in sorted(varied, key=lambda job: job.job_id)] == [
        75.0, 53.0, 61.0, 44.0, 31.0, 95.0, 82.0, 5.0, 13.0, 25.0,
    ]  # fmt: skip
    fixed = load_scenario("dqoes-varied-fixed50").realise(np.random.default_rng(0))
    assert [job.arrival_s for job in fixed] == [50.0 * i for i in range(10)]
    poc = load_scenario("flowcon-poc-3").realise(np.random.default_rng(0))
    assert [(job.workload, job.arrival_s) for job in poc] == [
        ("vae", 0.0),
        ("mnist-pytorch", 40.0),
        ("mnist-tensorflow", 80.0),
    ]
    specon = load_scenario("specon-7").realise(np.random.default_rng(0))
    assert [job.arrival_s for job in specon] == [25.0, 43.0, 50.0, 65.0, 86.0, 142.0, 192.0]
    hetero = load_scenario("flowcon-cluster-60-heterogeneous")
    assert sorted(w.cores for w in hetero.workers) == [2, 2, 4, 4, 8, 8, 16, 16]


# --- realise() --------------------------------------------------------------------------------


def scenario_with_arrival(arrival: dict[str, object], count: object = 4) -> Scenario:
    data = edited(edited(INFERENCE, "jobs[0].arrival", arrival), "jobs[0].count", count)
    return parse_scenario(data, "test")


def test_realise_is_deterministic_for_a_seed_and_differs_across_seeds() -> None:
    scenario = load_scenario("dqoes-random-models")
    first = scenario.realise(np.random.default_rng(7))
    assert first == scenario.realise(np.random.default_rng(7))
    other = scenario.realise(np.random.default_rng(8))
    assert [job.arrival_s for job in first] != [job.arrival_s for job in other]
    assert [job.target_s for job in first] != [job.target_s for job in other]


def test_burst_arrivals_all_come_at_the_start() -> None:
    jobs = scenario_with_arrival({"kind": "burst", "start_s": 30}).realise(np.random.default_rng(0))
    assert [job.arrival_s for job in jobs] == [30.0] * 4


def test_fixed_arrivals_are_evenly_spaced() -> None:
    jobs = scenario_with_arrival({"kind": "fixed", "every_s": 50, "start_s": 10}).realise(
        np.random.default_rng(0)
    )
    assert [job.arrival_s for job in jobs] == [10.0, 60.0, 110.0, 160.0]
    assert [job.job_id for job in jobs] == ["j00", "j01", "j02", "j03"]


def test_random_arrivals_fall_in_their_window_sorted() -> None:
    scenario = scenario_with_arrival({"kind": "random", "window_s": 300, "start_s": 100}, 20)
    for seed in range(5):
        times = [job.arrival_s for job in scenario.realise(np.random.default_rng(seed))]
        assert times == sorted(times)
        assert all(100 <= time <= 400 for time in times)
        assert len(set(times)) == 20


def test_explicit_arrivals_are_the_listed_times() -> None:
    jobs = scenario_with_arrival({"kind": "explicit", "times_s": [43, 25, 50, 65]}).realise(
        np.random.default_rng(0)
    )
    assert sorted(job.arrival_s for job in jobs) == [25.0, 43.0, 50.0, 65.0]
    by_id = {job.job_id: job.arrival_s for job in jobs}
    assert by_id == {"j00": 43.0, "j01": 25.0, "j02": 50.0, "j03": 65.0}


def test_count_ranges_targets_and_workloads_are_drawn_within_their_bounds() -> None:
    data = edited(INFERENCE, "jobs[0].count", {"low": 2, "high": 9})
    data = edited(data, "jobs[0].targets_s", DELETE)
    data = edited(data, "jobs[0].target_range_s", {"low": 5, "high": 95})
    data = edited(data, "jobs[0].arrival", {"kind": "burst"})
    scenario = parse_scenario(data, "test")
    counts: set[int] = set()
    workloads: set[str] = set()
    for seed in range(30):
        jobs = scenario.realise(np.random.default_rng(seed))
        counts.add(len(jobs))
        workloads.update(job.workload for job in jobs)
        assert all(job.target_s is not None and 5 <= job.target_s <= 95 for job in jobs)
    assert counts <= set(range(2, 10)) and len(counts) > 3
    assert workloads == {"resnet50", "vgg16"}


def test_an_iterations_range_is_drawn_per_job_and_round_trips() -> None:
    data = edited(TRAINING, "jobs[0].count", 6)
    data = edited(data, "jobs[0].iterations", {"low": 150, "high": 500})
    scenario = parse_scenario(data, "test")
    assert scenario.groups[0].iterations == IntRange(low=150, high=500)
    assert scenario.groups[0].max_iterations == 500
    drawn = [job.iterations for job in scenario.realise(np.random.default_rng(0))]
    assert all(iterations is not None and 150 <= iterations <= 500 for iterations in drawn)
    assert len(set(drawn)) > 1  # per job, not per group
    again = [job.iterations for job in scenario.realise(np.random.default_rng(0))]
    assert again == drawn
    assert parse_scenario(yaml.safe_load(dump_scenario(scenario)), "dumped") == scenario


def test_fixed_iterations_draw_nothing_more_from_the_episode_seed() -> None:
    """Scenarios without a range draw their jobs as before the range existed."""
    fixed = parse_scenario(edited(TRAINING, "jobs[0].iterations", 300), "test")
    plain = parse_scenario(TRAINING, "test")
    arrivals = [job.arrival_s for job in plain.realise(np.random.default_rng(3))]
    assert [job.arrival_s for job in fixed.realise(np.random.default_rng(3))] == arrivals
    assert {job.iterations for job in fixed.realise(np.random.default_rng(3))} == {300}


@pytest.mark.parametrize(
    ("iterations", "fragment"),
    [
        (
            {"low": 500, "high": 150},
            "jobs[0].iterations = {'low': 500, 'high': 150}: expected low <= high",
        ),
        ({"low": 0, "high": 150}, "jobs[0].iterations.low = 0"),
        ("many", "jobs[0].iterations = 'many': expected a whole number >= 1 or a range"),
    ],
)
def test_bad_iterations_are_reported(iterations: object, fragment: str) -> None:
    message = problems_of(edited(TRAINING, "jobs[0].iterations", iterations))
    assert fragment in message


def test_listed_targets_are_cycled_over_the_jobs() -> None:
    data = edited(INFERENCE, "jobs[0].count", 5)
    data = edited(data, "jobs[0].arrival", {"kind": "burst"})
    jobs = parse_scenario(data, "test").realise(np.random.default_rng(0))
    assert [job.target_s for job in jobs] == [20.0, 40.0, 20.0, 40.0, 20.0]


def test_targets_that_would_cycle_unevenly_are_refused() -> None:
    data = edited(INFERENCE, "jobs[0].count", 10)
    data = edited(data, "jobs[0].arrival", {"kind": "burst"})
    data = edited(data, "jobs[0].targets_s", [float(10 + 5 * i) for i in range(9)])
    report = problems_of(data)
    assert "jobs[0].targets_s" in report
    assert "one target per job, 10 (count = 10), or a pattern that repeats evenly (1, 2, 5" in (
        report
    )
    assert "9 would be cycled unevenly, job 10 getting the first target again" in report
    extra = problems_of(edited(data, "jobs[0].targets_s", [20.0] * 11))
    assert "1 target(s) would never be used" in extra
    five = [20.0, 30.0, 40.0, 50.0, 60.0]
    for fine in ([20.0], [20.0, 40.0], five, [float(t) for t in range(1, 11)]):
        parse_scenario(edited(data, "jobs[0].targets_s", fine), "test")  # a pattern, or one each
    three = edited(edited(data, "jobs[0].count", 3), "jobs[0].targets_s", [20.0, 40.0])
    parse_scenario(three, "test")  # two alternate, whatever the count
    ranged = edited(data, "jobs[0].count", {"low": 2, "high": 10})
    parse_scenario(ranged, "test")  # a drawn count cycles whatever the list's length


def test_arrival_choices_draw_one_pattern_per_episode() -> None:
    choices = [{"kind": "burst", "start_s": 5}, {"kind": "fixed", "every_s": 50}]
    data = edited(edited(INFERENCE, "jobs[0].arrival", DELETE), "jobs[0].arrival_choices", choices)
    scenario = parse_scenario(data, "test")
    assert scenario.groups[0].arrival_choices == (
        ArrivalPattern(kind=ArrivalKind.BURST, start_s=5.0),
        ArrivalPattern(kind=ArrivalKind.FIXED, every_s=50.0),
    )
    drawn = set()
    for seed in range(20):
        drawn.add(tuple(job.arrival_s for job in scenario.realise(np.random.default_rng(seed))))
    assert drawn == {(5.0, 5.0, 5.0), (0.0, 50.0, 100.0)}
    assert parse_scenario(yaml.safe_load(dump_scenario(scenario)), "dumped") == scenario


@pytest.mark.parametrize(
    ("choices", "fragment"),
    [
        ([], "jobs[0].arrival_choices = []: expected a non-empty list of arrival patterns"),
        ("burst", "jobs[0].arrival_choices = 'burst': expected a non-empty list"),
        (
            [{"kind": "burst"}, {"kind": "fixed", "every_s": 0}],
            "jobs[0].arrival_choices[1].every_s = 0: expected a number of seconds > 0",
        ),
        (
            [{"kind": "fixed", "every_s": 400}],
            "jobs[0].arrival_choices[0]: a job may arrive at 800 s, at or after horizon_s = 600",
        ),
    ],
)
def test_bad_arrival_choices_are_reported(choices: object, fragment: str) -> None:
    data = edited(edited(INFERENCE, "jobs[0].arrival", DELETE), "jobs[0].arrival_choices", choices)
    message = problems_of(data)
    assert "(1 problem)" in message
    assert fragment in message


def test_arrival_and_arrival_choices_together_are_refused() -> None:
    data = edited(INFERENCE, "jobs[0].arrival_choices", [{"kind": "burst"}])
    assert "jobs[0]: both arrival and arrival_choices are given; keep one" in problems_of(data)


# --- loading by name and by path --------------------------------------------------------------


def test_unknown_scenario_name_lists_the_known_ones_and_suggests_a_close_one() -> None:
    with pytest.raises(UnknownNameError) as raised:
        load_scenario("dqoes-varied-burts")
    message = str(raised.value)
    assert "unknown scenario 'dqoes-varied-burts'" in message
    assert "flowcon-poc-3" in message
    assert "Did you mean 'dqoes-varied-burst'?" in message


def test_a_users_file_loads_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(TRAINING, sort_keys=False), encoding="utf-8")
    scenario = load_scenario(path)
    assert scenario == load_scenario(str(path))
    assert scenario.name == "my-training"
    assert scenario.source == ""
    assert scenario.workers == (WorkerSpec(cores=4.0), WorkerSpec(cores=8.0))
    assert scenario.groups[0].arrival == ArrivalPattern(kind=ArrivalKind.RANDOM, window_s=200.0)
    assert (scenario.interval_s, scenario.slots_per_worker, scenario.profile_set) == (
        10.0,
        10,
        "paper",
    )


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ScenarioError, match=re.escape(f"scenario file '{missing}' does not exist")):
        load_scenario(missing)
    with pytest.raises(ScenarioError, match="is not a file"):
        load_scenario(tmp_path)


def test_a_file_that_is_not_utf8_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ScenarioError, match=r"cannot read scenario file .*UTF-8"):
        load_scenario(path)


def test_a_shipped_file_must_be_named_after_its_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "alpha.yaml").write_text(
        yaml.safe_dump(INFERENCE, sort_keys=False), encoding="utf-8"
    )
    monkeypatch.setattr(scenario_file, "SCENARIO_DIR", tmp_path)
    assert scenario_names() == ["alpha"]
    with pytest.raises(ScenarioError) as raised:
        load_scenario("alpha")
    assert "line 1: name = 'my-inference': expected 'alpha', the file's name" in str(raised.value)


# --- YAML-level problems ----------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, "name: x\nkind: inference\njobs:\n  - workloads: [resnet50\n    count: 3\n"
    )
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: YAML syntax error")
    assert "flow sequence at line 4" in message
    assert "line 5, column 10" in message


def test_a_tab_indentation_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\n\tkind: inference\n")
    with pytest.raises(ScenarioError, match=r"YAML syntax error: .*at line 2, column 1"):
        load_scenario(path)


def test_duplicate_keys_are_refused_with_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nkind: training\nhorizon_s: 60\nname: y\n")
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    assert "line 4: name is given again (first on line 1)" in str(raised.value)


@pytest.mark.parametrize("text", ["", "\n\n", "# just a comment\n"])
def test_an_empty_file_is_reported(tmp_path: Path, text: str) -> None:
    with pytest.raises(ScenarioError, match="the file is empty; a scenario file is a mapping"):
        load_scenario(write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "shown"), [("- a\n- b\n", "['a', 'b']"), ("just words\n", "'just words'")]
)
def test_a_top_level_that_is_not_a_mapping_is_reported(
    tmp_path: Path, text: str, shown: str
) -> None:
    with pytest.raises(ScenarioError) as raised:
        load_scenario(write(tmp_path, text))
    assert f"(top level) = {shown}: expected a mapping of scenario fields" in str(raised.value)


def test_several_documents_in_one_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="expected a single document"):
        load_scenario(write(tmp_path, "name: a\n---\nname: b\n"))


# --- field validation -------------------------------------------------------------------------


def case(
    case_id: str, base: dict[str, object], path: str, value: object, *fragments: str
) -> object:
    """One validation case: ``base`` with ``path`` set to ``value`` must be refused with exactly
    one problem whose message contains every fragment."""
    return pytest.param(base, path, value, fragments, id=case_id)


CASES = [
    # case(id, base, path, new value or DELETE, *fragments the message must contain)
    case(
        "name-missing",
        INFERENCE,
        "name",
        DELETE,
        "name is missing; expected the scenario's name",
    ),
    case(
        "name-spaces",
        INFERENCE,
        "name",
        "my test",
        "name = 'my test': expected a name of letters",
    ),
    case(
        "name-number",
        INFERENCE,
        "name",
        7,
        "name = 7: expected a name",
    ),
    case(
        "description-list",
        INFERENCE,
        "description",
        ["a"],
        "description = ['a']: expected a string",
    ),
    case(
        "kind-missing",
        INFERENCE,
        "kind",
        DELETE,
        "kind is missing; expected one of training, inference",
    ),
    case(
        "kind-typo",
        INFERENCE,
        "kind",
        "inferense",
        "kind = 'inferense': expected one of training, inference; did you mean 'inference'?",
    ),
    case(
        "top-unknown",
        INFERENCE,
        "horizon",
        600,
        "horizon: unknown field; expected one of name,",
        "did you mean 'horizon_s'?",
    ),
    case(
        "horizon-missing",
        INFERENCE,
        "horizon_s",
        DELETE,
        "horizon_s is missing; expected the episode length in seconds",
    ),
    case(
        "horizon-text",
        INFERENCE,
        "horizon_s",
        "long",
        "horizon_s: read the string 'long', not a number; horizon_s takes a number of seconds "
        "> 0, written in digits (e.g. 10 or 2.5)",
    ),
    case(
        "horizon-exponent-string",
        INFERENCE,
        "horizon_s",
        "1e3",
        "horizon_s: read the string '1e3', not a number; horizon_s takes a number of seconds > 0: "
        "write it unquoted and with a dot before the exponent (1.0e+3, not 1e3)",
    ),
    case(
        "interval-quoted",
        INFERENCE,
        "interval_s",
        "10",
        "interval_s: read the string '10', not a number; interval_s takes a number of seconds > "
        "0: write it without quotes",
    ),
    case(
        "horizon-negative",
        INFERENCE,
        "horizon_s",
        -1,
        "horizon_s = -1: expected a number of seconds > 0",
    ),
    case(
        "horizon-bool",
        INFERENCE,
        "horizon_s",
        True,
        "horizon_s = True: expected a number of seconds > 0",
    ),
    case(
        "horizon-infinite",
        INFERENCE,
        "horizon_s",
        float("inf"),
        "horizon_s = inf: expected a finite number of seconds > 0",
    ),
    case(
        "horizon-not-above-interval",
        INFERENCE,
        "interval_s",
        600,
        "horizon_s = 600: expected more than interval_s = 600",
    ),
    case(
        "interval-zero",
        INFERENCE,
        "interval_s",
        0,
        "interval_s = 0: expected a number of seconds > 0",
    ),
    case(
        "interval-nan",
        INFERENCE,
        "interval_s",
        float("nan"),
        "interval_s = nan: expected a finite number of seconds > 0",
    ),
    case(
        "slots-zero",
        INFERENCE,
        "slots_per_worker",
        0,
        "slots_per_worker = 0: expected a whole number >= 1",
    ),
    case(
        "slots-fraction",
        INFERENCE,
        "slots_per_worker",
        2.5,
        "slots_per_worker = 2.5: expected a whole number >= 1",
    ),
    case(
        "migration-negative",
        TRAINING,
        "migration_cost_s",
        -1,
        "migration_cost_s = -1: expected a number of seconds >= 0",
    ),
    case(
        "profile-set-unknown",
        INFERENCE,
        "profile_set",
        "papr",
        "profile_set = 'papr': ",
        "'paper'",
    ),
    case(
        "profile-set-number",
        INFERENCE,
        "profile_set",
        3,
        "profile_set = 3: expected a string",
    ),
    case(
        "workers-missing",
        INFERENCE,
        "workers",
        DELETE,
        "workers is missing; expected the workers, e.g. {count: 1, cores: 8}",
    ),
    case(
        "workers-number",
        INFERENCE,
        "workers",
        4,
        "workers = 4: expected a mapping {count: N, cores: C} or a non-empty list",
    ),
    case(
        "workers-empty",
        INFERENCE,
        "workers",
        [],
        "workers = []: expected a mapping {count: N, cores: C} or a non-empty list",
    ),
    case(
        "workers-cores-zero",
        INFERENCE,
        "workers.cores",
        0,
        "workers.cores = 0: expected a number of cores > 0",
    ),
    case(
        "workers-cores-missing",
        INFERENCE,
        "workers.cores",
        DELETE,
        "workers.cores is missing; expected the worker's CPU cores",
    ),
    case(
        "workers-count-zero",
        INFERENCE,
        "workers.count",
        0,
        "workers.count = 0: expected a whole number >= 1",
    ),
    case(
        "workers-typo",
        INFERENCE,
        "workers.core",
        8,
        "workers.core: unknown field; expected one of count, cores, endpoint; did you mean "
        "'cores'?",
    ),
    case(
        "worker-item-number",
        TRAINING,
        "workers[1]",
        8,
        "workers[1] = 8: expected a mapping {cores: C[, endpoint: URL]}",
    ),
    case(
        "worker-item-cores",
        TRAINING,
        "workers[1].cores",
        "many",
        "workers[1].cores: read the string 'many', not a number; workers[1].cores takes a "
        "number of cores > 0",
    ),
    case(
        "worker-endpoint",
        TRAINING,
        "workers[1].endpoint",
        "localhost:2375",
        "workers[1].endpoint = 'localhost:2375': expected a Docker endpoint URL such as "
        "tcp://host:2375",
    ),
    case(
        "jobs-missing",
        INFERENCE,
        "jobs",
        DELETE,
        "jobs is missing; expected a list of job groups",
    ),
    case(
        "jobs-empty",
        INFERENCE,
        "jobs",
        [],
        "jobs = []: expected a non-empty list of job groups",
    ),
    case(
        "jobs-item-number",
        INFERENCE,
        "jobs[0]",
        3,
        "jobs[0] = 3: expected a job group: a mapping",
    ),
    case(
        "group-typo",
        INFERENCE,
        "jobs[0].target_s",
        [20],
        "jobs[0].target_s: unknown field; expected one of workloads,",
        "did you mean 'targets_s'?",
    ),
    case(
        "workloads-and-workload",
        INFERENCE,
        "jobs[0].workload",
        "vgg16",
        "jobs[0]: both workload and workloads are given; keep one",
    ),
    case(
        "workloads-missing",
        INFERENCE,
        "jobs[0].workloads",
        DELETE,
        "jobs[0].workloads is missing; expected a list of workload names",
    ),
    case(
        "workloads-empty",
        INFERENCE,
        "jobs[0].workloads",
        [],
        "jobs[0].workloads = []: expected a non-empty list of workload names",
    ),
    case(
        "workloads-unknown",
        INFERENCE,
        "jobs[0].workloads[1]",
        "vgg61",
        "jobs[0].workloads[1] = 'vgg61': expected a workload of profile set 'paper': ",
        "resnet50",
        "did you mean 'vgg16'?",
    ),
    case(
        "workloads-of-another-set",
        INFERENCE,
        "jobs[0].workloads[1]",
        "resnet-svc",
        "jobs[0].workloads[1] = 'resnet-svc': expected a workload of profile set 'paper': ",
        "did you mean 'resnet50'? ('resnet-svc' is one of dlsched's own container workloads, "
        "measured on a host: profile sets 'measured' and 'measured-stock'; set profile_set: "
        "measured to use it)",
    ),
    case(
        "workloads-not-text",
        INFERENCE,
        "jobs[0].workloads[0]",
        5,
        "jobs[0].workloads[0] = 5: expected a string",
    ),
    case(
        "workload-wrong-kind",
        INFERENCE,
        "jobs[0].workloads[0]",
        "vae",
        "jobs[0].workloads[0] = 'vae': expected an inference workload (this scenario's "
        "kind), but 'vae' is a training workload; inference workloads: ",
        "resnet50",
    ),
    case(
        "workload-single-unknown",
        TRAINING,
        "jobs[0].workload",
        "vea",
        "jobs[0].workload = 'vea': expected a workload of profile set 'paper'",
        "did you mean 'vae'?",
    ),
    case(
        "workload-single-wrong-kind",
        TRAINING,
        "jobs[0].workload",
        "resnet50",
        "jobs[0].workload = 'resnet50': expected a training workload (this scenario's "
        "kind), but 'resnet50' is an inference workload",
    ),
    case(
        "count-zero",
        INFERENCE,
        "jobs[0].count",
        0,
        "jobs[0].count = 0: expected a whole number >= 1",
    ),
    case(
        "count-text",
        INFERENCE,
        "jobs[0].count",
        "ten",
        "jobs[0].count = 'ten': expected a whole number >= 1 or a range {low: L, high: H}",
    ),
    case(
        "count-range-reversed",
        INFERENCE,
        "jobs[0].count",
        {"low": 5, "high": 3},
        "jobs[0].count = {'low': 5, 'high': 3}: expected low <= high",
    ),
    case(
        "count-range-zero",
        INFERENCE,
        "jobs[0].count",
        {"low": 0, "high": 3},
        "jobs[0].count.low = 0: expected a whole number >= 1",
    ),
    case(
        "count-range-no-high",
        INFERENCE,
        "jobs[0].count",
        {"low": 2},
        "jobs[0].count.high is missing; expected a whole number >= 1",
    ),
    case(
        "arrival-number",
        INFERENCE,
        "jobs[0].arrival",
        5,
        "jobs[0].arrival = 5: expected a mapping such as {kind: burst}",
    ),
    case(
        "arrival-kind-missing",
        INFERENCE,
        "jobs[0].arrival.kind",
        DELETE,
        "jobs[0].arrival.kind is missing; expected one of burst, fixed, random, explicit",
    ),
    case(
        "arrival-kind-typo",
        INFERENCE,
        "jobs[0].arrival.kind",
        "fixd",
        "jobs[0].arrival.kind = 'fixd': expected one of burst, fixed, random, explicit; "
        "did you mean 'fixed'?",
    ),
    case(
        "fixed-every-missing",
        INFERENCE,
        "jobs[0].arrival.every_s",
        DELETE,
        "jobs[0].arrival.every_s is missing; expected the seconds between two arrivals, a "
        "number > 0",
    ),
    case(
        "fixed-every-zero",
        INFERENCE,
        "jobs[0].arrival.every_s",
        0,
        "jobs[0].arrival.every_s = 0: expected a number of seconds > 0",
    ),
    case(
        "fixed-every-negative",
        INFERENCE,
        "jobs[0].arrival.every_s",
        -5,
        "jobs[0].arrival.every_s = -5: expected a number of seconds > 0",
    ),
    case(
        "start-negative",
        INFERENCE,
        "jobs[0].arrival.start_s",
        -1,
        "jobs[0].arrival.start_s = -1: expected a number of seconds >= 0",
    ),
    case(
        "arrival-field-of-other-kind",
        INFERENCE,
        "jobs[0].arrival.window_s",
        30,
        "jobs[0].arrival.window_s: not used by arrival kind fixed (it takes every_s, "
        "start_s); remove it or change the kind",
    ),
    case(
        "arrival-typo",
        INFERENCE,
        "jobs[0].arrival.every",
        30,
        "jobs[0].arrival.every: unknown field; expected one of kind, every_s, start_s; did "
        "you mean 'every_s'?",
    ),
    case(
        "arrival-after-horizon",
        INFERENCE,
        "jobs[0].arrival.every_s",
        300,
        "jobs[0].arrival: a job may arrive at 600 s, at or after horizon_s = 600, and "
        "would never run",
    ),
    case(
        "random-window-missing",
        TRAINING,
        "jobs[0].arrival.window_s",
        DELETE,
        "jobs[0].arrival.window_s is missing; expected the length in seconds of the window",
    ),
    case(
        "random-window-negative",
        TRAINING,
        "jobs[0].arrival.window_s",
        -3,
        "jobs[0].arrival.window_s = -3: expected a number of seconds > 0",
    ),
    case(
        "random-window-past-horizon",
        TRAINING,
        "jobs[0].arrival.window_s",
        3000,
        "jobs[0].arrival: a job may arrive at 3000 s, at or after horizon_s = 3000",
    ),
    case(
        "explicit-times-missing",
        TRAINING,
        "jobs[0].arrival",
        {"kind": "explicit"},
        "jobs[0].arrival.times_s is missing; expected the list of arrival times in "
        "seconds, one per job",
    ),
    case(
        "explicit-too-few",
        TRAINING,
        "jobs[0].arrival",
        {"kind": "explicit", "times_s": [5]},
        "jobs[0].arrival.times_s = [5]: expected at least 2 times, one per job",
    ),
    case(
        "explicit-negative",
        TRAINING,
        "jobs[0].arrival",
        {"kind": "explicit", "times_s": [5, -2]},
        "jobs[0].arrival.times_s[1] = -2: expected a number of seconds >= 0",
    ),
    case(
        "explicit-start",
        TRAINING,
        "jobs[0].arrival",
        {"kind": "explicit", "times_s": [1, 2], "start_s": 4},
        "jobs[0].arrival.start_s: not used by arrival kind explicit (it takes times_s)",
    ),
    case(
        "explicit-not-list",
        TRAINING,
        "jobs[0].arrival",
        {"kind": "explicit", "times_s": 5},
        "jobs[0].arrival.times_s = 5: expected a non-empty list of numbers of seconds",
    ),
    case(
        "burst-every",
        TRAINING,
        "jobs[0].arrival",
        {"kind": "burst", "every_s": 5},
        "jobs[0].arrival.every_s: not used by arrival kind burst (it takes start_s)",
    ),
    case(
        "targets-missing",
        INFERENCE,
        "jobs[0].targets_s",
        DELETE,
        "jobs[0].targets_s is missing; expected latency targets, which inference jobs need",
    ),
    case(
        "targets-empty",
        INFERENCE,
        "jobs[0].targets_s",
        [],
        "jobs[0].targets_s = []: expected a non-empty list of numbers of seconds",
    ),
    case(
        "targets-scalar",
        INFERENCE,
        "jobs[0].targets_s",
        20,
        "jobs[0].targets_s = 20: expected a non-empty list of numbers of seconds, e.g. [20, 40]",
    ),
    case(
        "targets-negative",
        INFERENCE,
        "jobs[0].targets_s[1]",
        -4,
        "jobs[0].targets_s[1] = -4: expected a number of seconds > 0",
    ),
    case(
        "targets-and-range",
        INFERENCE,
        "jobs[0].target_range_s",
        {"low": 1, "high": 2},
        "jobs[0]: both targets_s and target_range_s are given; keep one",
    ),
    case(
        "tolerance-zero",
        INFERENCE,
        "jobs[0].tolerance",
        0,
        "jobs[0].tolerance = 0: expected a number in (0, 1), both excluded",
    ),
    case(
        "tolerance-one",
        INFERENCE,
        "jobs[0].tolerance",
        1,
        "jobs[0].tolerance = 1: expected a number in (0, 1), both excluded",
    ),
    case(
        "tolerance-percent",
        INFERENCE,
        "jobs[0].tolerance",
        10,
        "jobs[0].tolerance = 10: expected a number in (0, 1)",
    ),
    case(
        "iterations-in-inference",
        INFERENCE,
        "jobs[0].iterations",
        100,
        "jobs[0].iterations: only for training scenarios (kind: training); remove it",
    ),
    case(
        "loss-targets-in-inference",
        INFERENCE,
        "jobs[0].loss_targets",
        [0.5, 0.2],
        "jobs[0].loss_targets: only for training scenarios (kind: training); remove it",
    ),
    case(
        "targets-in-training",
        TRAINING,
        "jobs[0].targets_s",
        [20],
        "jobs[0].targets_s: only for inference scenarios (kind: inference); remove it",
    ),
    case(
        "tolerance-in-training",
        TRAINING,
        "jobs[0].tolerance",
        0.1,
        "jobs[0].tolerance: only for inference scenarios (kind: inference); remove it",
    ),
    case(
        "iterations-zero",
        TRAINING,
        "jobs[0].iterations",
        0,
        "jobs[0].iterations = 0: expected a whole number >= 1",
    ),
    case(
        "iterations-fraction",
        TRAINING,
        "jobs[0].iterations",
        12.5,
        "jobs[0].iterations = 12.5: expected a whole number >= 1",
    ),
    case(
        "loss-targets-increasing",
        TRAINING,
        "jobs[0].loss_targets",
        [0.2, 0.5],
        "jobs[0].loss_targets = [0.2, 0.5]: expected two losses [first tier, second tier], "
        "the first one larger",
    ),
    case(
        "loss-targets-one",
        TRAINING,
        "jobs[0].loss_targets",
        [0.5],
        "jobs[0].loss_targets = [0.5]: expected two losses",
    ),
    case(
        "loss-targets-negative",
        TRAINING,
        "jobs[0].loss_targets",
        [0.5, -1],
        "jobs[0].loss_targets[1] = -1: expected a number of loss > 0",
    ),
    case(
        "worker-out-of-range",
        TRAINING,
        "jobs[0].worker",
        2,
        "jobs[0].worker = 2: expected a worker index from 0 to 1 (the scenario has 2 worker(s))",
    ),
    case(
        "worker-negative",
        TRAINING,
        "jobs[0].worker",
        -1,
        "jobs[0].worker = -1: expected a whole number >= 0",
    ),
]


def test_cases_are_distinct() -> None:
    ids = [case.id for case in CASES]  # type: ignore[attr-defined]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("base", "path", "value", "fragments"), CASES)
def test_each_bad_field_is_reported_with_path_value_and_expectation(
    base: dict[str, object], path: str, value: object, fragments: tuple[str, ...]
) -> None:
    assert parse_scenario(base, "base")  # the base itself is valid
    message = problems_of(edited(base, path, value))
    assert message.startswith("invalid scenario test data (1 problem):\n")
    for fragment in fragments:
        assert fragment in message


def test_a_non_string_key_is_reported() -> None:
    data = dict(INFERENCE)
    data[3] = "x"  # type: ignore[index]
    assert "3 = 3: expected a field name (a string)" in problems_of(data)


def test_every_problem_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
name: broken
kind: inference
horizon_s: 600
workers: {count: 2, cores: 8}
jobs:
  - workload: resnet50
    count: 3
    arrival: {kind: fixed, every_s: 50}
    targets_s: [20]
  - workloads: [resnet50, vgg61]
    arrival:
      kind: fixed
      every_s: -5
    targets_s: [20]
    tolerance: 1.5
  - workload: resnet50
    worker: 4
    iterations: 10
""",
    )
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    lines = str(raised.value).splitlines()
    assert lines[0] == f"invalid scenario {path} (6 problems):"
    body = "\n".join(lines[1:])
    assert "line 10: jobs[1].workloads[1] = 'vgg61': expected a workload" in body
    assert "line 13: jobs[1].arrival.every_s = -5: expected a number of seconds > 0" in body
    assert "line 15: jobs[1].tolerance = 1.5: expected a number in (0, 1)" in body
    assert "line 16: jobs[2].targets_s is missing; expected latency targets" in body
    assert "line 17: jobs[2].worker = 4: expected a worker index from 0 to 1" in body
    assert "line 18: jobs[2].iterations: only for training scenarios" in body


# --- writing ----------------------------------------------------------------------------------


def test_a_scenario_built_in_code_round_trips_through_a_file(tmp_path: Path) -> None:
    scenario = Scenario(
        name="built",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(cores=4.0, endpoint="tcp://10.0.0.2:2375"), WorkerSpec(cores=2.5)),
        groups=(
            JobGroup(
                workloads=("vae", "gru"),
                count=IntRange(low=2, high=4),
                arrival=ArrivalPattern(kind=ArrivalKind.EXPLICIT, times_s=(1.5, 2.0, 30.0, 45.0)),
                iterations=300,
                worker=1,
                loss_targets=(0.5, 0.2),
            ),
            JobGroup(
                workloads=("lstm",),
                arrival=ArrivalPattern(kind=ArrivalKind.FIXED, every_s=12.5, start_s=3.0),
            ),
        ),
        interval_s=5.0,
        horizon_s=900.0,
        slots_per_worker=3,
        description="built in code: with a colon",
        profile_set="paper",
        migration_cost_s=0.0,
    )
    path = write(tmp_path, dump_scenario(scenario))
    assert load_scenario(path) == scenario


def test_an_inference_target_range_round_trips() -> None:
    data = edited(INFERENCE, "jobs[0].targets_s", DELETE)
    data = edited(data, "jobs[0].target_range_s", {"low": 5.5, "high": 95})
    scenario = parse_scenario(data, "test")
    assert scenario.groups[0].target_range_s == FloatRange(low=5.5, high=95.0)
    assert parse_scenario(yaml.safe_load(dump_scenario(scenario)), "dumped") == scenario


def test_dump_refuses_a_value_the_format_cannot_carry() -> None:
    scenario = parse_scenario(INFERENCE, "test")
    burst_with_period = ArrivalPattern(kind=ArrivalKind.BURST, every_s=5)
    odd = replace(scenario, groups=(replace(scenario.groups[0], arrival=burst_with_period),))
    with pytest.raises(ScenarioError) as raised:
        dump_scenario(odd)
    message = str(raised.value)
    assert "jobs[0].arrival.every_s: not used by arrival kind burst" in message
    assert "remove it or change the kind" in message


def test_dump_refuses_an_invalid_scenario() -> None:
    invalid = replace(parse_scenario(TRAINING, "test"), horizon_s=5.0)
    with pytest.raises(ScenarioError, match="horizon_s = 5: expected more than interval_s = 10"):
        dump_scenario(invalid)


# --- the CLI ----------------------------------------------------------------------------------


def test_cli_lists_every_shipped_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.split("\n\n")[0].splitlines()  # the legend follows
    assert lines[0].split() == ["NAME", "KIND", "WORKERS", "x", "CORES", "JOBS", "SOURCE"]
    listed = {line.split()[0]: line for line in lines[1:]}
    assert sorted(listed) == scenario_names()
    assert listed["flowcon-cluster-60-heterogeneous"].split()[1:6] == [
        "training", "8", "x", "2-16", "60",
    ]  # fmt: skip
    assert "DQoES journal, Section V-B-1" in listed["dqoes-resnet50-burst-target20"]


def test_cli_lists_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in listed] == scenario_names()
    cluster = next(entry for entry in listed if entry["name"] == "dqoes-cluster-40")
    assert cluster["worker_cores"] == [8.0] * 4
    assert (cluster["kind"], cluster["min_jobs"], cluster["max_jobs"]) == ("inference", 40, 40)


def test_cli_shows_one_scenario_file_with_its_comments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "flowcon-10-random"]) == 0
    captured = capsys.readouterr()
    shown = captured.out
    assert captured.err.startswith("dlsched scenarios: flowcon-10-random is valid: training ")
    assert "# paper: makespan 1350.7 s FlowCon vs 1384.9 s DS" in shown
    assert parse_scenario(yaml.safe_load(shown), "shown") == load_scenario("flowcon-10-random")


def test_cli_checks_a_scenario_file_with_its_verdict_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scenarios", "specon-7"]) == 0
    path = write(tmp_path, capsys.readouterr().out)  # the README's copy to edit
    assert main(["scenarios", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        f"dlsched scenarios: {path} is valid: training scenario 'specon-7', 7 jobs on 4 x 4 "
        "cores, at most 300 steps of 10 s"
    ]
    assert captured.err == ""
    assert main(["scenarios", str(path), "--show"]) == 0  # on request: as dlsched reads it
    captured = capsys.readouterr()
    assert parse_scenario(yaml.safe_load(captured.out), "shown") == load_scenario("specon-7")
    assert captured.err.startswith(f"dlsched scenarios: {path} is valid")


def test_cli_shows_one_scenario_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "specon-7", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert parse_scenario(data, "json") == load_scenario("specon-7")


def test_cli_reports_a_bad_file_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, yaml.safe_dump(edited(TRAINING, "horizon_s", -3)))
    assert main(["scenarios", str(path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"dlsched scenarios: error: invalid scenario {path} (1 problem)")
    assert "horizon_s = -3: expected a number of seconds > 0" in error


def test_a_word_for_a_number_is_named_as_the_string_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = yaml.safe_dump(INFERENCE, sort_keys=False) + "interval_s: ten\n"  # unquoted
    assert main(["scenarios", str(write(tmp_path, text))]) == 2
    error = capsys.readouterr().err
    assert (
        f"line {len(text.splitlines())}: interval_s: read the string 'ten', not a number; "
        "interval_s takes a number of seconds > 0, written in digits (e.g. 10 or 2.5)"
    ) in error
    assert "quotes" not in error  # there were none to take off


def test_cli_suggests_a_close_scenario_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "specon7"]) == 2
    assert "Did you mean 'specon-7'?" in capsys.readouterr().err


def test_cli_list_reports_an_invalid_shipped_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my-inference.yaml").write_text(
        yaml.safe_dump(INFERENCE, sort_keys=False), encoding="utf-8"
    )
    (tmp_path / "my-training.yaml").write_text(
        yaml.safe_dump(edited(TRAINING, "kind", "train")), encoding="utf-8"
    )
    monkeypatch.setattr(scenario_file, "SCENARIO_DIR", tmp_path)
    assert main(["scenarios"]) == 2
    captured = capsys.readouterr()
    listing = captured.out.split("\n\n")[0]
    assert [line.split()[0] for line in listing.splitlines()] == ["NAME", "my-inference"]
    assert "kind = 'train': expected one of training, inference" in captured.err
