"""What the CPU and the decisions cost, where a user reads them: ``evaluate``'s table and
``--json``, the MLflow runs, and ``compare``, which ranks the policies on the primary metric and
on the cores allocated."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os

import pytest
from mlflow import MlflowClient

from dlsched.baselines import make
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.envs.telemetry import JobState
from dlsched.runs.cli import main
from dlsched.runs.evaluation import run_episode
from dlsched.runs.tracking.compare import compare_stored, render_table
from dlsched.runs.tracking.target import ENV_VAR

COST = ("cores_allocated_mean", "cores_used_mean", "satisfied_per_core_s")
DECISION = ("decision_ms_median", "decision_ms_p99")


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _allocated_by_hand(step) -> float:
    """A step's cores allocated from its container rows: each worker's running jobs' limits in
    cores, at most the worker's (one worker of 8 cores here)."""
    held = sum(c.limit_cores for c in step.containers if c.state is JobState.RUNNING)
    return min(8.0, held)


def test_evaluate_prints_logs_and_compare_ranks_what_the_cpu_costs(
    capsys, new_experiment, tmp_path
):
    scenario = dataclasses.replace(load_scenario("dqoes-resnet50-burst-target40"), horizon_s=50.0)
    path = tmp_path / "short.yaml"
    path.write_text(dump_scenario(scenario))
    code, out, err = _cli(
        capsys, "evaluate", "--no-progress", "--scenario", str(path), "--policy",
        "default,dqoes,oracle", "--episodes", "2", "--experiment", new_experiment, "--out", "runs",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    printed = json.loads(out)
    (table,) = printed["scenarios"]
    assert table["ranked_on"] == ["satisfied_fraction_mean", "cores_allocated_mean"]
    policies = {entry["policy"]: entry for entry in table["policies"]}
    client = MlflowClient(os.environ[ENV_VAR])
    for name, entry in policies.items():
        reruns = [run_episode(scenario, make(name), seed) for seed in entry["seeds"]]
        for rerun in reruns:  # replay is deterministic: a rerun is the reference
            steps = rerun.steps
            seconds = [b.time_s - a.time_s for a, b in itertools.pairwise(steps)]
            allocated = [_allocated_by_hand(step) for step in steps[1:]]
            assert [step.cores_allocated for step in steps[1:]] == pytest.approx(allocated)
            core_s = math.fsum(a * s for a, s in zip(allocated, seconds, strict=True))
            assert rerun.metrics.cores_allocated_mean == pytest.approx(core_s / sum(seconds))
            satisfied = [step.satisfied for step in steps[1:]]
            satisfied_s = sum(n * s for n, s in zip(satisfied, seconds, strict=True))
            assert rerun.metrics.satisfied_per_core_s == pytest.approx(satisfied_s / core_s)
        for metric in COST:
            expected = sum(getattr(r.metrics, metric) for r in reruns) / len(reruns)
            assert entry["metrics"][metric]["mean"] == pytest.approx(expected), (name, metric)
        for metric in DECISION:  # measured in this evaluation, so only there
            assert entry["metrics"][metric]["mean"] > 0, (name, metric)
            assert entry["metrics"][metric]["n"] == 2
        # each episode run holds its own figures, and the policy's cores under its name
        for seed in entry["seeds"]:
            run = client.get_run(printed["evaluation"]["episode_runs"][f"{name}-seed{seed}"])
            for metric in (*COST, *DECISION):
                assert f"episode/{metric}" in run.data.metrics
            assert (
                run.data.metrics[f"{name} cores allocated"]
                == (run.data.metrics["episode/cores_allocated_mean"])
            )
    # the evaluation's run shows each policy's cores allocated beside its headline
    parent = client.get_run(printed["evaluation"]["parent_run_id"])
    for name, entry in policies.items():
        assert parent.data.metrics[f"{name} cores allocated"] == pytest.approx(
            entry["metrics"]["cores_allocated_mean"]["mean"]
        )
    # the oracle satisfies more with fewer cores than default and dqoes: first on both
    assert policies["oracle"]["ranks"] == {
        "satisfied_fraction_mean": 1,
        "cores_allocated_mean": 1,
    }
    assert [policies[name]["pareto"] for name in ("default", "dqoes", "oracle")] == [
        False,
        False,
        True,
    ]
    # compare reads the same back from the store, and prints the columns and ranks
    code, compared, err = _cli(
        capsys, "compare", "--experiment", new_experiment, "--format", "json", "--no-plot",
        "--no-log",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(compared)["scenarios"] == printed["scenarios"]
    code, text, err = _cli(
        capsys, "compare", "--experiment", new_experiment, "--no-plot", "--no-log"
    )
    assert code == 0, err
    header, *rows = text.split("\n\n")[0].splitlines()[1:]
    for label in ("cores alloc", "cores used", "sat.s/core.s", "decide ms p50", "decide ms p99"):
        assert label in header
    oracle_row = next(row for row in rows if row.startswith("oracle"))
    assert " 1/1 P " in oracle_row
    mean = policies["oracle"]["metrics"]["cores_allocated_mean"]["mean"]
    assert f"*{mean:.2f} ± " in oracle_row  # the fewest cores, marked best


@pytest.fixture
def costing_episode(stored_episode):
    """``make(started, policy, satisfied, cores)``: an episode of an inference scenario that
    satisfied a fraction ``satisfied`` of its services on ``cores`` cores."""

    def make(started: int, policy: str, satisfied: float, cores: float | None):
        return stored_episode(
            policy, started=started, satisfied_fraction_mean=satisfied, cores_allocated_mean=cores,
            cores_used_mean=None if cores is None else cores / 2,
        )  # fmt: skip

    return make


def test_compare_ranks_on_both_and_marks_the_pareto_front(costing_episode):
    episodes = [
        costing_episode(1, "wasteful", 0.5, 4.0),  # as satisfied as frugal, on more cores
        costing_episode(2, "frugal", 0.5, 2.0),
        costing_episode(3, "generous", 0.8, 6.0),  # the most satisfied
        costing_episode(4, "starving", 0.3, 2.0),  # as few cores as frugal, less satisfied
        costing_episode(5, "unmeasured", 0.1, None),  # stored before cores were measured
    ]
    (comparison,) = compare_stored(episodes)
    assert comparison.ranks("satisfied_fraction_mean") == [2, 2, 1, 4, 5]
    assert comparison.ranks("cores_allocated_mean") == [3, 1, 4, 1, None]
    assert comparison.pareto() == [False, True, True, False, False]
    assert comparison.best("cores_allocated_mean") == {1, 3}
    assert comparison.best("cores_used_mean") == set()  # no aim in itself: not ranked
    rows = render_table([comparison]).split("\n\n")[0].splitlines()[2:]
    ranks = {row.split()[0]: row for row in rows}
    assert " 2/3 " in ranks["wasteful"]
    assert " 2/1 P " in ranks["frugal"]
    assert " 1/4 P " in ranks["generous"]
    assert " 4/1 " in ranks["starving"]
    assert " 5/- " in ranks["unmeasured"]


def test_means_that_print_alike_tie(costing_episode):
    """A learned policy's float32 limits can hold a hair less than the worker: the same cost."""
    episodes = [
        costing_episode(1, "dqoes", 0.438, 8.0),
        costing_episode(2, "learned", 0.421, 7.9999996),
    ]
    (comparison,) = compare_stored(episodes)
    assert comparison.ranks("cores_allocated_mean") == [1, 1]
    assert comparison.best("cores_allocated_mean") == set()  # every row ties
    assert comparison.pareto() == [True, False]  # as cheap, and less satisfied
