"""The scenario limits: every count, length and size a scenario may have is bounded, and a
scenario beyond them is refused with one message naming the value, the limit and how to raise it
(exit code 2 from the command line), never a traceback, a hang or gigabytes of memory.

The unbounded cases (an alias bomb, huge counts, a huge file), each measured on an earlier
dlsched, run in a subprocess under a memory limit (``RLIMIT_AS``) with a generous wall-clock
ceiling that only catches a hang.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import yaml
from repo_paths import LIMITS_DOC, SCENARIO_BIG

import dlsched.envs  # registers the environments

MEMORY_LIMIT_BYTES = 6 << 30
"""Address space of a bounded command: what importing torch and MLflow maps (about 4 GiB, most of
it never touched) with room to spare, and far less than the unbounded cases took (tens of GB)."""
HANG_CEILING_S = 300
"""Only a hang takes this long; a refusal takes a second or two."""

BASE = SCENARIO_BIG.read_text()
"""The scenario file each case changes: one worker with ``count: 1``, one job group with
``targets_s: [20]``, ``horizon_s: 600`` (``tests/fixtures/scenario-big.yaml``)."""


def alias_bomb() -> str:
    """A 445-byte scenario whose workloads are aliases of aliases: 9 ** 9 strings expanded."""
    lines = ['xa: &a ["x","x","x","x","x","x","x","x","x"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"x{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n" + BASE.replace("workload: resnet50", "workloads: *i")


def mapping_bomb() -> str:
    """The variant whose anchors are mappings: 8 keys each, 8 ** 8 values expanded."""
    lines = ["xa: &a {a: x, b: x, c: x, d: x, e: x, f: x, g: x, h: x}"]
    for previous, name in zip("abcdefg", "bcdefgh", strict=True):
        keys = ", ".join(f"{key}: *{previous}" for key in "abcdefgh")
        lines.append(f"x{name}: &{name} {{{keys}}}")
    return "\n".join(lines) + "\n" + BASE.replace("workload: resnet50", "workloads: [*h]")


def training(jobs: str) -> str:
    """BASE as a training scenario of the job group ``jobs``."""
    return BASE.replace("kind: inference", "kind: training").replace(
        "jobs: [{workload: resnet50, targets_s: [20]}]", f"jobs: [{jobs}]"
    )


@dataclass(frozen=True)
class Unbounded:
    """A scenario that once took unbounded memory or time, and what its refusal names."""

    text: Callable[[], str]
    field: str
    limit: str


UNBOUNDED = {
    "alias-bomb": Unbounded(alias_bomb, "YAML values", "MAX_YAML_VALUES"),
    "mapping-bomb": Unbounded(mapping_bomb, "YAML values", "MAX_YAML_VALUES"),
    "huge-file": Unbounded(  # the measured case: 39 MB, 13 M targets
        lambda: BASE.replace("[20]", "[" + ",".join(["20"] * 13_000_000) + "]"),
        "larger than 1,048,576 bytes",
        "DLSCHED_MAX_FILE_BYTES",
    ),
    "horizon": Unbounded(
        lambda: BASE.replace("horizon_s: 600", "horizon_s: 1.0e+12"),
        "horizon_s / interval_s",
        "MAX_STEPS",
    ),
    "interval": Unbounded(
        lambda: BASE + "interval_s: 1.0e-9\n", "horizon_s / interval_s", "MAX_STEPS"
    ),
    "units-per-step": Unbounded(  # once minutes at step 0, completing 1e294 batches one by one
        lambda: BASE.replace("horizon_s: 600", "horizon_s: 1.0e+300\ninterval_s: 1.0e+295").replace(
            "[20]}", "[20], arrival: {kind: fixed, every_s: 1.0e+290}}"
        ),
        "interval_s = 1e+295",
        "MAX_UNITS_PER_STEP",
    ),
    "long-steps": Unbounded(  # once 4.4 s a step
        lambda: BASE.replace("horizon_s: 600", "horizon_s: 60000000\ninterval_s: 600000"),
        "interval_s = 600000",
        "MAX_UNITS_PER_STEP",
    ),
    "iterations": Unbounded(  # once an internal error: 10**9 iterations drawn at placement
        lambda: training("{workload: lstm, iterations: 1000000000}"),
        "up to 1,000,000,000 iterations",
        "MAX_ITERATIONS",
    ),
    "default-iterations": Unbounded(  # each job at its workload's default
        lambda: training("{workload: vae, count: 60000}"),
        "iterations an episode",
        "MAX_ITERATIONS",
    ),
    "workers-2^31": Unbounded(
        lambda: BASE.replace("count: 1", "count: 2147483648"), "workers.count", "MAX_WORKERS"
    ),
    "workers-2^63": Unbounded(
        lambda: BASE.replace("count: 1", "count: 9223372036854775808"),
        "workers.count",
        "MAX_WORKERS",
    ),
    "workers-73M": Unbounded(
        lambda: BASE.replace("count: 1", "count: 73218310"), "workers.count", "MAX_WORKERS"
    ),
    "jobs-2e11": Unbounded(
        lambda: BASE.replace("[20]", "[20], count: 204907264580"), "jobs[0].count", "MAX_JOBS"
    ),
    "jobs-1e40": Unbounded(
        lambda: BASE.replace("[20]", f"[20], count: {10**40}"), "jobs[0].count", "MAX_JOBS"
    ),
    "profile-set": Unbounded(
        lambda: BASE + "profile_set: " + "p" * 300 + "\n", "profile_set", "File name too long"
    ),
}

PEAK_RSS_CEILING_KIB = 1 << 20
"""Resident memory of the process that refuses every case: 1 GiB, most of it the imports (torch,
MLflow); the unbounded cases took gigabytes each."""

_REFUSE_EACH = """\
import contextlib, io, json, resource, sys, time
from dlsched.runs.cli import main
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"code": code, "err": err.getvalue(), "s": seconds, "rss_kib": rss}))
"""


def refuse_each(commands: list[list[str]], cwd: Path) -> list[dict[str, Any]]:
    """Run each ``dlsched`` command line in one subprocess under the memory limit: its exit
    code, stderr, seconds and the process's peak resident memory after it."""

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))

    result = subprocess.run(
        [sys.executable, "-c", _REFUSE_EACH, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=HANG_CEILING_S,
        preexec_fn=limit_memory,
        cwd=cwd,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[tuple[str, str], dict[str, Any]]:
    """How ``dlsched scenarios FILE`` and ``dlsched evaluate --scenario FILE`` answered each
    unbounded case, by (command, case)."""
    folder = tmp_path_factory.mktemp("unbounded")
    commands, keys = [], []
    for case, unbounded in UNBOUNDED.items():
        path = folder / f"{case}.yaml"
        path.write_text(unbounded.text())
        commands.append(["scenarios", str(path)])
        commands.append(["evaluate", "--scenario", str(path), "--policy", "default",
                         "--no-tracking", "--no-progress"])  # fmt: skip
        keys += [("scenarios", case), ("evaluate", case)]
    return dict(zip(keys, refuse_each(commands, folder), strict=True))


@pytest.mark.parametrize("command", ["scenarios", "evaluate"])
@pytest.mark.parametrize("case", sorted(UNBOUNDED))
def test_an_unbounded_scenario_is_refused_in_bounded_memory(refusals, command, case):
    result = refusals[command, case]
    assert result["code"] == 2, result["err"][-2000:]
    assert result["err"].startswith(f"dlsched {command}: error:")
    assert "Traceback" not in result["err"]
    assert UNBOUNDED[case].field in result["err"] and UNBOUNDED[case].limit in result["err"]
    assert result["rss_kib"] < PEAK_RSS_CEILING_KIB, result


# --- the limits, one by one -------------------------------------------------------------------


def test_a_limit_is_raised_by_its_environment_variable(monkeypatch):
    from dlsched.envs.scenarios import parse_scenario
    from dlsched.envs.size_bounds import MAX_WORKERS

    data = yaml.safe_load(BASE.replace("count: 1", "count: 5000"))
    with pytest.raises(dlsched.envs.ScenarioError) as caught:
        parse_scenario(data, "mine.yaml")
    message = str(caught.value)
    assert "workers.count = 5000: expected at most 4,096 workers" in message
    assert "MAX_WORKERS" in message and "DLSCHED_MAX_WORKERS=N" in message
    monkeypatch.setenv(MAX_WORKERS.variable, "5000")
    assert len(parse_scenario(data, "mine.yaml").workers) == 5000
    monkeypatch.setenv(MAX_WORKERS.variable, "many")
    with pytest.raises(dlsched.envs.ScenarioError, match="DLSCHED_MAX_WORKERS='many': expected"):
        parse_scenario(data, "mine.yaml")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"slots_per_worker": 2000}, "slots_per_worker = 2000: expected at most 1,024 slots"),
        (
            {"slots_per_worker": 1000, "workers": {"count": 100, "cores": 8}},
            "makes 100,000 slots: expected at most 65,536 slots",
        ),
        (
            {"jobs": [{"workload": "resnet50", "targets_s": [20], "count": 60_000}] * 2},
            "add up to 120,000 jobs per episode",
        ),
        (
            {"jobs": [{"workload": "resnet50", "targets_s": [20] * 100_001}]},
            "jobs[0].targets_s: a list of 100,001 items",
        ),
        ({"name": "n" * 101}, "of at most 100 characters"),
        ({"description": "d" * 1001}, "of at most 1000 characters"),
    ],
)
def test_each_count_and_length_is_bounded(change, named):
    from dlsched.envs.scenarios import parse_scenario

    with pytest.raises(dlsched.envs.ScenarioError) as caught:
        parse_scenario({**yaml.safe_load(BASE), **change}, "mine.yaml")
    assert named in str(caught.value)


def test_aliases_within_the_limit_are_read(tmp_path):
    from dlsched.envs.scenarios import load_scenario

    path = tmp_path / "aliases.yaml"
    path.write_text(
        BASE.replace("jobs: [{workload: resnet50, targets_s: [20]}]", "")
        + "jobs:\n"
        + "  - {workload: resnet50, targets_s: [20], arrival: &every {kind: fixed, every_s: 50}}\n"
        + "  - {workload: vgg16, targets_s: [40], arrival: *every}\n"
    )
    scenario = load_scenario(path)
    assert scenario.groups[0].arrival == scenario.groups[1].arrival


def test_an_alias_inside_its_own_anchor_is_named(tmp_path):
    from dlsched.envs.scenarios import load_scenario

    path = tmp_path / "loop.yaml"
    path.write_text("a: &x [*x]\n")
    with pytest.raises(dlsched.envs.ScenarioError, match=r"line 1: an alias .* repeats that value"):
        load_scenario(path)


def test_a_python_made_scenario_is_held_to_the_limits():
    from dlsched.envs.scenarios import load_scenario

    scenario = load_scenario("dqoes-resnet50-burst-target20")
    group = dataclasses.replace(scenario.groups[0], count=10**12)
    huge = dataclasses.replace(scenario, groups=(group,))
    with pytest.raises(dlsched.envs.ScenarioError, match=r"jobs\[0\]\.count = 1000000000000"):
        gym.make("dlsched/Inference-v0", scenario=huge)


def test_the_limits_are_documented_in_the_readme():
    readme = LIMITS_DOC.read_text()
    from dlsched.envs.size_bounds import COUNT_BOUNDS

    for limit in COUNT_BOUNDS:
        assert f"`{limit.variable}`" in readme, f"{limit.variable} is not in docs/limits.md"
        assert f"{limit.default:,}" in readme, f"{limit.name}'s default is not in docs/limits.md"
