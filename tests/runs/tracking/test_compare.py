"""``dlsched compare``: stored runs read back as ``evaluate`` printed them; many evaluations."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
from mlflow import MlflowClient

from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.cli import main
from dlsched.runs.evaluation import runners as evaluation_module
from dlsched.runs.tracking import episode_run
from dlsched.runs.tracking.compare import compare_stored
from dlsched.runs.tracking.comparison_run import COMPARE_EXPERIMENT
from dlsched.runs.tracking.run_logging import TAG_KIND
from dlsched.runs.tracking.target import ENV_VAR

SCENARIO = "dqoes-resnet50-burst-target40"


@pytest.fixture
def short_scenario(tmp_path: Path) -> Path:
    scenario = dataclasses.replace(load_scenario(SCENARIO), horizon_s=50.0)
    path = tmp_path / "short.yaml"
    path.write_text(dump_scenario(scenario))
    return path


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def evaluate(capsys, scenario: Path, experiment: str, policies: str, *extra: str) -> str:
    code, out, err = cli(
        capsys, "evaluate", "--no-progress", "--scenario", str(scenario), "--policy", policies,
        "--experiment", experiment, "--out", "runs", *extra,
    )  # fmt: skip
    assert code == 0, err
    return out


def test_compare_prints_the_numbers_evaluate_printed(
    capsys, new_experiment, short_scenario, monkeypatch
):
    table = evaluate(
        capsys, short_scenario, new_experiment, "default,dqoes,oracle", "--episodes", "3"
    )
    summary = json.loads(next(Path("runs").glob("*/summary.json")).read_text())

    def no_rerun(*args, **kwargs):
        raise AssertionError("compare reran an episode")

    monkeypatch.setattr(evaluation_module, "run_episode", no_rerun)
    code, compared_table, err = cli(capsys, "compare", "--experiment", new_experiment, "--no-plot")
    assert code == 0, err
    assert compared_table == table
    code, compared_json, _ = cli(
        capsys, "compare", "--experiment", new_experiment, "--format", "json", "--no-plot"
    )
    compared = json.loads(compared_json)["scenarios"]
    assert compared == summary["scenarios"]
    policies = {entry["policy"]: entry for entry in compared[0]["policies"]}
    assert list(policies) == ["default", "dqoes", "oracle"]
    primary = policies["dqoes"]["metrics"]["satisfied_fraction_mean"]
    assert primary["ratio_to_oracle"] == pytest.approx(
        primary["mean"] / policies["oracle"]["metrics"]["satisfied_fraction_mean"]["mean"]
    )
    assert primary["ci95_low"] <= primary["mean"] <= primary["ci95_high"]


def test_compare_reads_the_headline_of_a_store_written_before_it_was_renamed(
    capsys, new_experiment, short_scenario, monkeypatch
):
    """Episode runs logged before the headline had its capitalised name (``Satisfied
    fraction``) hold it as ``episode/satisfied_fraction_mean``: compare reads both."""
    with monkeypatch.context() as before:
        # every episode metric named episode/<name>, as dlsched logged them
        before.setattr(episode_run, "episode_metric_key", lambda name: f"episode/{name}")
        old = evaluate(capsys, short_scenario, new_experiment, "default,dqoes", "--episodes", "2")
    client = MlflowClient(os.environ[ENV_VAR])
    (experiment,) = [
        e.experiment_id for e in client.search_experiments() if e.name == new_experiment
    ]
    (episode, *_) = client.search_runs([experiment], f"tags.`{TAG_KIND}` = 'episode'")
    assert "episode/satisfied_fraction_mean" in episode.data.metrics
    assert "Satisfied fraction" not in episode.data.metrics
    code, table, err = cli(
        capsys, "compare", "--experiment", new_experiment, "--no-plot", "--no-log"
    )
    assert code == 0, err
    assert table == old


def test_evaluations_run_apart_are_compared_without_rerunning_and_never_pooled(
    capsys, new_experiment, short_scenario, tmp_path
):
    evaluate(capsys, short_scenario, new_experiment, "default,dqoes", "--episodes", "2")
    evaluate(
        capsys, short_scenario, new_experiment, "equal,dqoes", "--episodes", "2", "--seed", "5"
    )
    plot = tmp_path / "compare.png"
    code, out, err = cli(
        capsys, "compare", "--experiment", new_experiment, "--format", "json", "--plot", str(plot)
    )  # fmt: skip
    assert code == 0, err
    (scenario,) = json.loads(out)["scenarios"]
    labels = [entry["label"] for entry in scenario["policies"]]
    assert labels[0] == "default" and labels[-1] == "equal"  # a policy's evaluations together
    assert [label.split("@")[0] for label in labels[1:3]] == ["dqoes", "dqoes"]
    assert labels[1] != labels[2]  # one row per evaluation, labelled by its time
    seeds = {entry["label"]: entry["seeds"] for entry in scenario["policies"]}
    assert seeds[labels[1]] == [0, 1] and seeds[labels[2]] == [5, 6]
    equal = scenario["policies"][-1]["metrics"]["satisfied_fraction_mean"]
    default = scenario["policies"][0]["metrics"]["satisfied_fraction_mean"]
    if default["mean"]:
        assert equal["ratio_to_default"] == pytest.approx(equal["mean"] / default["mean"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {plot}" in err

    code, markdown, _ = cli(
        capsys, "compare", "--experiment", new_experiment, "--format", "markdown", "--no-plot"
    )
    assert code == 0
    assert markdown.startswith(f"### {scenario['scenario']} (inference, replay backend")
    assert "| policy | sat.frac mean |" in markdown and "|---|---:|" in markdown
    assert r"| \|S\| end |" in markdown  # a pipe in a header must not split the column


def test_compare_is_logged_as_a_run_with_its_plot_and_headlines(
    capsys, new_experiment, short_scenario, tmp_path, mlflow_store
):
    evaluate(capsys, short_scenario, new_experiment, "default,dqoes", "--episodes", "2")
    plot = tmp_path / "compare.png"
    code, table, err = cli(capsys, "compare", "--experiment", new_experiment, "--plot", str(plot))
    assert code == 0, err
    (run_id,) = re.findall(
        r"comparison logged: MLflow run (\w+) \(experiment dlsched-compare\)", err
    )
    client = MlflowClient(mlflow_store[1])
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[TAG_KIND] == "comparison"
    assert client.get_experiment(run.info.experiment_id).name == COMPARE_EXPERIMENT
    assert run.data.params["filter.experiment"] == new_experiment
    artifacts = {artifact.path for artifact in client.list_artifacts(run_id)}
    assert {"compare.png", "compare.txt", "compare.json"} == artifacts
    # the headline of every row, and nothing else
    summary = json.loads(next(Path("runs").glob("*/summary.json")).read_text())["scenarios"][0]
    expected = {
        f"Satisfied fraction/{summary['scenario']}/{entry['label']}": (
            entry["metrics"]["satisfied_fraction_mean"]["mean"]
        )
        for entry in summary["policies"]
    }
    assert run.data.metrics == pytest.approx(expected)
    # a comparison run is never read back as an episode; --no-log logs none
    code, again, err = cli(
        capsys, "compare", "--experiment", new_experiment, "--no-plot", "--no-log"
    )
    assert code == 0 and again == table and "comparison logged" not in err


def test_compare_with_nothing_stored_says_so(capsys, new_experiment, monkeypatch, tmp_path):
    code, _, err = cli(capsys, "compare", "--experiment", f"none-{new_experiment}", "--no-plot")
    assert code == 2 and f"no experiment 'none-{new_experiment}'" in err
    monkeypatch.setenv(ENV_VAR, f"sqlite:///{tmp_path / 'empty.db'}")
    code, out, err = cli(capsys, "compare", "--scenario", f"none-{new_experiment}", "--no-plot")
    assert code == 2 and out == ""
    assert "dlsched compare: error: no MLflow store at" in err and "empty.db" in err


def test_compare_in_a_folder_without_a_store_creates_none_and_says_where(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "compare")
    assert code == 2 and out == ""
    assert f"dlsched compare: error: no MLflow store at {tmp_path / 'mlflow.db'}" in err
    assert "--no-tracking" not in err  # compare has no such option
    assert not (tmp_path / "mlflow.db").exists()


@pytest.fixture
def training_episode(stored_episode):
    """``make(evaluation, started, policy, seed, value)``: an episode of a training scenario
    whose mean completion time is ``value``."""

    def make(evaluation: str, started: int, policy: str, seed: int, value: float):
        return stored_episode(
            policy, evaluation=evaluation, started=started, seed=seed, kind=JobKind.TRAINING,
            mean_completion_s=value, unfinished_jobs=0.0,
        )  # fmt: skip

    return make


def test_rows_take_their_ratios_from_their_own_evaluations_default(training_episode):
    episodes = [
        training_episode("s-20260101-000000-aaaaaa", 1, "default", 0, 100.0),
        training_episode("s-20260101-000000-aaaaaa", 2, "flowcon", 0, 80.0),
        training_episode("s-20260108-000000-bbbbbb", 3, "default", 0, 200.0),
        training_episode("s-20260108-000000-bbbbbb", 4, "flowcon", 0, 150.0),
        training_episode("s-20260109-000000-cccccc", 5, "specon", 0, 120.0),
    ]
    (comparison,) = compare_stored(episodes)
    rows = {s.label: s.metric("mean_completion_s") for s in comparison.summaries}
    assert list(rows) == [
        "default@20260101-000000-aaaaaa",
        "default@20260108-000000-bbbbbb",
        "flowcon@20260101-000000-aaaaaa",
        "flowcon@20260108-000000-bbbbbb",
        "specon",
    ]
    assert rows["flowcon@20260101-000000-aaaaaa"].ratio_to_default == pytest.approx(0.8)
    assert rows["flowcon@20260108-000000-bbbbbb"].ratio_to_default == pytest.approx(0.75)
    assert rows["specon"].ratio_to_default == pytest.approx(0.6)  # the newest default
    assert comparison.best("mean_completion_s") == {2}  # lower is better


def test_identical_evaluations_are_one_row_with_their_count(training_episode):
    """Rerunning the main job (a deterministic replay) four times gives one row, not four."""
    episodes = [
        training_episode(
            f"s-2026010{day}-000000-{day}{day}", day * 10 + seed, policy, seed, value + seed
        )
        for day in (1, 2, 3, 4)
        for policy, value in (("default", 100.0), ("flowcon", 80.0))
        for seed in (0, 1)
    ]
    episodes.append(training_episode("s-20260105-000000-55", 60, "flowcon", 0, 70.0))  # another
    (comparison,) = compare_stored(episodes)
    labels = [summary.label for summary in comparison.summaries]
    assert labels == [
        "default x4",
        "flowcon@20260104-000000-44 x4",
        "flowcon@20260105-000000-55",
    ]
    assert comparison.evaluations[:2] == ("s-20260104-000000-44",) * 2  # the newest copy's
    assert comparison.summaries[0].seeds == (0, 1)  # merged, not pooled
    flowcon = comparison.summaries[1].metric("mean_completion_s")
    assert flowcon.ratio_to_default == pytest.approx(80.5 / 100.5)
