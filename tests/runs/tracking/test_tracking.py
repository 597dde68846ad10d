"""MLflow tracking of evaluations: a real server on loopback, the sqlite default, failures."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient

from dlsched.baselines import make
from dlsched.envs.docker.containers import LABEL_OWNER
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.bench.tracking import bench_tracking
from dlsched.runs.cli import main
from dlsched.runs.evaluation import METRIC_SPECS, backend_label, run_episode
from dlsched.runs.evaluation import runners as evaluation_module
from dlsched.runs.tracking.episode_run import episode_metric_key
from dlsched.runs.tracking.provenance import dlsched_version
from dlsched.runs.tracking.target import DEFAULT_TRACKING_URI, ENV_VAR, resolve_tracking_uri
from dlsched.runs.tracking.tracker import EvaluationTracker
from dlsched.runs.tracking.trajectory import TRAJECTORY_COLUMNS

SCENARIO = "dqoes-resnet50-burst-target40"
HORIZON_S = 60.0  # six steps: enough to see latencies, limits and classes change


@pytest.fixture
def short_scenario(tmp_path: Path) -> Path:
    """The shipped scenario with a short horizon, as a YAML file."""
    scenario = dataclasses.replace(load_scenario(SCENARIO), horizon_s=HORIZON_S)
    path = tmp_path / "short.yaml"
    path.write_text(dump_scenario(scenario))
    return path


@pytest.fixture
def no_env_uri(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def evaluate_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["evaluate", "--no-progress", *args])
    out, err = capsys.readouterr()
    return code, out, err


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------- URI


def test_the_environment_variable_wins_and_a_different_flag_is_warned_about():
    both = resolve_tracking_uri("sqlite:///flag.db", {ENV_VAR: "http://127.0.0.1:5000"})
    assert (both.uri, both.source, both.ignored) == (
        "http://127.0.0.1:5000",
        ENV_VAR,
        "sqlite:///flag.db",
    )
    assert "--tracking-uri sqlite:///flag.db is ignored" in both.describe()
    same = resolve_tracking_uri("sqlite:///a.db", {ENV_VAR: "sqlite:///a.db"})
    assert same.ignored is None and "warning" not in same.describe()
    flag = resolve_tracking_uri("sqlite:////data/flag.db", {})
    assert (flag.uri, flag.source) == ("sqlite:////data/flag.db", "--tracking-uri")
    default = resolve_tracking_uri(None, {ENV_VAR: ""}, Path("/home/me"))
    assert (default.uri, default.source) == ("sqlite:////home/me/mlflow.db", "default")
    assert default.describe() == "tracking: sqlite:////home/me/mlflow.db (from default)"


def test_a_relative_sqlite_store_is_named_from_the_working_directory():
    here = Path("/home/me/work")
    flag = resolve_tracking_uri("sqlite:///runs/a.db?timeout=20", {}, here)
    assert flag.uri == "sqlite:////home/me/work/runs/a.db?timeout=20"
    from_env = resolve_tracking_uri(None, {ENV_VAR: "sqlite:///a.db"}, here)
    assert (from_env.uri, from_env.source) == ("sqlite:////home/me/work/a.db", ENV_VAR)
    # the same file, named relative in one and absolute in the other, is no conflict
    same = resolve_tracking_uri("sqlite:////home/me/work/a.db", {ENV_VAR: "sqlite:///a.db"}, here)
    assert same.ignored is None
    for kept in ("sqlite:////abs/m.db", "sqlite:///:memory:", "sqlite://", "http://h:5000"):
        assert resolve_tracking_uri(kept, {}, here).uri == kept
    assert DEFAULT_TRACKING_URI == "sqlite:///mlflow.db"  # MLflow's own, as documented


def test_an_evaluation_after_a_change_of_folder_tracks_to_the_new_folder(
    capsys, monkeypatch, tmp_path, short_scenario, no_env_uri, new_sqlite_store
):
    # MLflow keeps a store object per URI for the process: a relative URI kept the first
    # folder's file after an in-process caller changed folder
    said = {}
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        new_sqlite_store(tmp_path / name)  # a default store in each folder, in use by none
        monkeypatch.chdir(tmp_path / name)
        code, _, said[name] = evaluate_cli(
            capsys, "--scenario", str(short_scenario), "--policy", "default",
            "--episodes", "1", "--no-plots", "--experiment", name,
        )  # fmt: skip
        assert code == 0, said[name]
    for name, err in said.items():
        store = f"sqlite:///{tmp_path / name / 'mlflow.db'}"
        assert {e.name for e in MlflowClient(store).search_experiments()} == {name, "Default"}
        assert f"tracking: {store} (from default)" in err


# ---------------------------------------------------------------------------------- failures


def _count_episodes(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = evaluation_module.run_episode

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(evaluation_module, "run_episode", counting)
    return calls


def test_an_unreachable_server_is_reported_before_any_episode_runs(
    capsys, monkeypatch, tmp_path, short_scenario, no_env_uri
):
    episodes = _count_episodes(monkeypatch)
    uri = f"http://127.0.0.1:{closed_port()}"
    code, out, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default",
        "--tracking-uri", uri, "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2
    assert f"MLflow tracking server {uri} (from --tracking-uri) is unreachable" in err
    assert "mlflow server --host 127.0.0.1" in err and "--no-tracking" in err
    assert episodes == [] and out == ""
    assert not (tmp_path / "out").exists()


def test_the_environment_variable_is_used_named_and_its_fix_given(
    capsys, monkeypatch, tmp_path, short_scenario
):
    uri = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv(ENV_VAR, uri)
    code, _, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default",
        "--tracking-uri", "sqlite:///ignored.db", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2
    assert f"tracking: {uri} (from {ENV_VAR})" in err
    assert "--tracking-uri sqlite:///ignored.db is ignored" in err
    assert f"Fix or unset {ENV_VAR}" in err


def test_a_store_in_a_missing_folder_is_reported_with_the_folder(
    capsys, tmp_path, short_scenario, no_env_uri
):
    missing = tmp_path / "no" / "such"
    code, _, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default",
        "--tracking-uri", f"sqlite:///{missing}/mlflow.db", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2
    assert f"is in folder {missing}, which does not exist" in err
    assert not missing.exists()


# ---------------------------------------------------------------------------------- read back


def check_store_matches_printed(
    client: MlflowClient, printed: dict, scenario_path: Path, episode_plots: bool = False
):
    """Runs, params, metric histories and artifacts in the store equal what evaluate printed.

    The episode runs are logged by the episode writer (a child process on sqlite, a thread on a
    server), under the owner tags of the evaluating process, this one.
    """
    scenario = load_scenario(scenario_path)
    location = printed["evaluation"]
    (table,) = printed["scenarios"]
    parent = client.get_run(location["parent_run_id"])
    # named for the runs table, which shows a name's first 20 characters or so: the start, the
    # id's suffix, the policies; the evaluation id is its tag
    assert parent.data.tags["dlsched.evaluation"] == location["id"]
    suffix = location["id"].rsplit("-", 1)[-1]
    assert re.fullmatch(rf"\d\d:\d\d:\d\d-{suffix} [\w, -]+", parent.info.run_name)
    assert parent.info.status == "FINISHED"
    assert parent.data.params["scenario.hash"] == scenario.content_hash()
    # MLflow 3's UI opens the experiment in its classic ML view, not the GenAI one
    experiment = client.get_experiment(location["experiment_id"])
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    # the parent holds the headline per policy (a column each in the run table), not one
    # single-bar chart per policy, metric and interval end; the rest is in its summary files
    # named by the policy first, as the run table cuts a column's header to its first 15
    # characters or so; the episodes hold the same key, each its own value
    assert parent.data.metrics == {
        f"{entry['label']} {headline}": entry["metrics"][metric]["mean"]
        for entry in table["policies"]
        for headline, metric in (
            ("satisfied fraction", "satisfied_fraction_mean"),
            ("cores allocated", "cores_allocated_mean"),
        )
    }
    parent_files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"timeline.png", "policies.png", "summary.json", "summary.txt"} <= parent_files
    # MLflow's UI renders these notes as Markdown: the run's on its page, the experiment's
    # above its runs table; both give every policy's headline, rounded, on their first line,
    # then the table evaluate printed (a code block: MLflow's tables have no cell padding)
    note = parent.data.tags["mlflow.note.content"]
    first = note.splitlines()[0]
    for entry in table["policies"]:
        mean = entry["metrics"]["satisfied_fraction_mean"]["mean"]
        assert f"{entry['label']} {mean:.3f}" in first
        assert re.search(rf"^{entry['label']} +\*?{mean:.3f} ± ", note, re.MULTILINE)
    assert "\n```\n" in note and "|S| end: services satisfied" in note
    for image in ("policies.png", "timeline.png"):
        assert f"get-artifact?path={image}&run_uuid={parent.info.run_id}" in note
    experiment_note = experiment.tags["mlflow.note.content"]
    # the experiments list shows its first 25-40 characters: the scores, the best first
    best = max(table["policies"], key=lambda e: e["metrics"]["satisfied_fraction_mean"]["mean"])
    assert experiment_note.startswith(f"{best['label']} 0.")
    assert (
        f"(#/experiments/{experiment.experiment_id}/runs/{parent.info.run_id})" in experiment_note
    )
    assert note in experiment_note
    # the link to the runs table with every policy's headline column, as MLflow shares a view
    view = json.loads(experiment.tags["mlflow.sharedViewState.dlsched-scores"])
    assert view["selectedColumns"] == view["columnOrder"]
    assert {f"metrics.`{e['label']} satisfied fraction`" for e in table["policies"]} <= set(
        view["selectedColumns"]
    )
    link = f"#/experiments/{experiment.experiment_id}/runs?viewStateShareKey=dlsched-scores"
    assert link in experiment_note.splitlines()[0]
    children = client.search_runs(
        [location["experiment_id"]],
        f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
    )
    assert sorted(run.info.run_name for run in children) == sorted(location["episode_runs"])
    for entry in table["policies"]:
        policy = entry["policy"]
        episode_metrics = {}
        for seed in entry["seeds"]:
            run = client.get_run(location["episode_runs"][f"{policy}-seed{seed}"])
            params = run.data.params
            assert params["policy"] == policy and params["seed"] == str(seed)
            assert run.info.status == "FINISHED"
            assert run.data.tags["dlsched.owner.pid"] == str(os.getpid())
            assert params["scenario"] == scenario.name
            assert params["scenario.hash"] == scenario.content_hash()
            assert params["backend"] == "replay"
            assert params["dlsched.version"] == dlsched_version()
            if "git.commit" in params:  # recorded when the code runs from a git checkout
                assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", params["git.commit"])
            for name, value in entry["params"].items():
                assert params[f"policy.{name}"] == str(value)
            # the replay backend is deterministic: a rerun is the reference
            expected = run_episode(scenario, make(policy, **entry["params"]), seed)
            history = client.get_metric_history(run.info.run_id, "satisfied")
            assert [(m.step, m.value) for m in history] == [
                (round(step.time_s), float(step.satisfied)) for step in expected.steps
            ]  # MLflow's step is the simulated second: the chart's x-axis reads seconds
            for name, value in expected.metrics.defined().items():
                if METRIC_SPECS[name].reproducible:  # not a wall time, which no rerun gives
                    assert run.data.metrics[episode_metric_key(name)] == value
            # its headline first, and under its policy's name: one column of the runs table
            # holds the policy's mean (the parent) and each of its episodes'
            keys = sorted(run.data.metrics)
            assert keys[0] == "Satisfied fraction" and all(k == k.lower() for k in keys[1:])
            headline = run.data.metrics["Satisfied fraction"]
            assert run.data.metrics[f"{policy} satisfied fraction"] == headline
            # MLflow's runs table opens the parent of runs so tagged, in a browser without state
            assert run.data.tags["mlflow.runType"] == "evaluation"
            episode_metrics[seed] = run.data.metrics
            artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
            assert {"trajectory.csv", "episode.json", "scenario.yaml"} <= artifacts
            # each episode's plots are opt-in (--episode-plots); the parent's timeline is not
            plots = {"latency.png", "limits.png"}
            assert plots & artifacts == (plots if episode_plots else set())
            local = Path(client.download_artifacts(run.info.run_id, "trajectory.csv"))
            with local.open() as stream:
                rows = list(csv.DictReader(stream))
            assert tuple(rows[0]) == TRAJECTORY_COLUMNS
            assert len(rows) == sum(len(step.containers) for step in expected.steps)
            last = expected.steps[-1].containers[0]
            row = rows[-len(expected.steps[-1].containers)]
            assert (row["job_id"], row["limit"], row["latency_s"], row["qoe_class"]) == (
                last.job_id,
                repr(last.limit),
                "" if last.latency_s is None else repr(last.latency_s),
                "" if last.qoe_class is None else last.qoe_class.value,
            )
            scenario_file = client.download_artifacts(run.info.run_id, "scenario.yaml")
            assert load_scenario(scenario_file) == scenario
        # the printed means are those of the stored per-episode metrics
        for name, printed_metric in entry["metrics"].items():
            key = episode_metric_key(name)
            stored = [m[key] for m in episode_metrics.values() if key in m]
            if printed_metric["mean"] is None:
                assert stored == []
            else:
                assert printed_metric["mean"] == pytest.approx(sum(stored) / len(stored), rel=1e-12)


def test_an_evaluation_on_the_sqlite_default_store_reads_back_as_printed(
    capsys, monkeypatch, tmp_path, short_scenario, mlflow_store, no_env_uri
):
    folder, _ = mlflow_store
    monkeypatch.chdir(folder)
    experiment = f"sqlite-default-{uuid.uuid4().hex[:8]}"
    code, out, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default,dqoes",
        "--episodes", "2", "--seed", "10", "--json", "--experiment", experiment,
        "--out", str(tmp_path / "out"), "--episode-plots",
    )  # fmt: skip
    assert code == 0, err
    store = f"sqlite:///{folder / 'mlflow.db'}"
    assert f"tracking: {store} (from default)" in err
    printed = json.loads(out)
    assert printed["evaluation"]["tracking_uri"] == store
    check_store_matches_printed(MlflowClient(store), printed, short_scenario, episode_plots=True)
    local = Path(printed["evaluation"]["local_folder"])
    assert local.parent == tmp_path / "out"
    assert sorted(p.name for p in local.iterdir() if p.is_dir()) == [
        "default-seed10", "default-seed11", "dqoes-seed10", "dqoes-seed11"
    ]  # fmt: skip


@pytest.mark.slow
def test_an_evaluation_against_a_tracking_server_reads_back_as_printed(
    capsys, tmp_path, short_scenario, mlflow_server_factory, no_env_uri
):
    uri, _, _ = mlflow_server_factory()
    code, out, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default,dqoes",
        "--episodes", "2", "--json", "--tracking-uri", uri, "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    printed = json.loads(out)
    assert printed["evaluation"]["experiment"] == load_scenario(short_scenario).name
    check_store_matches_printed(MlflowClient(uri), printed, short_scenario)


def test_a_second_evaluation_never_overwrites_the_first(
    capsys, monkeypatch, tmp_path, short_scenario, mlflow_store, no_env_uri
):
    _, uri = mlflow_store
    experiment = f"twice-{uuid.uuid4().hex[:8]}"
    args = (
        "--scenario", str(short_scenario), "--policy", "dqoes", "--episodes", "1", "--json",
        "--tracking-uri", uri, "--experiment", experiment, "--out", str(tmp_path / "out"),
    )  # fmt: skip
    first = json.loads(evaluate_cli(capsys, *args)[1])["evaluation"]
    client = MlflowClient(uri)
    before = client.get_run(first["episode_runs"]["dqoes-seed0"]).data
    second = json.loads(evaluate_cli(capsys, *args)[1])["evaluation"]

    assert first["id"] != second["id"] and first["parent_run_id"] != second["parent_run_id"]
    assert first["experiment_id"] == second["experiment_id"]
    runs = client.search_runs([first["experiment_id"]])
    assert len(runs) == 4  # two parents, two episodes
    assert len({run.info.run_name for run in runs}) == 3  # the episode name repeats, no more
    after = client.get_run(first["episode_runs"]["dqoes-seed0"]).data
    assert (after.metrics, after.params) == (before.metrics, before.params)
    assert Path(first["local_folder"]).is_dir() and Path(second["local_folder"]).is_dir()


@pytest.mark.slow
def test_a_store_failing_mid_evaluation_leaves_every_episode_on_disk_and_says_where(
    capsys, monkeypatch, tmp_path, short_scenario, mlflow_server_factory, no_env_uri
):
    uri, server, backend_db = mlflow_server_factory()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    original = EvaluationTracker.record_episode
    watcher = MlflowClient(uri)

    def stop_server_after_first(tracker, result):
        original(tracker, result)
        if server.poll() is None:
            # the writer logs beside the episodes: the server dies once the first is in
            query = "tags.`dlsched.kind` = 'episode' and attributes.status = 'FINISHED'"
            while not watcher.search_runs([tracker.experiment_id], query):
                time.sleep(0.01)
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

    monkeypatch.setattr(EvaluationTracker, "record_episode", stop_server_after_first)
    code, out, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default,dqoes",
        "--episodes", "2", "--json", "--tracking-uri", uri, "--out", str(tmp_path / "out"),
    )  # fmt: skip

    assert code == 2
    printed = json.loads(out)  # the summary of all four episodes is still printed
    assert [len(p["seeds"]) for p in printed["scenarios"][0]["policies"]] == [2, 2]
    local = Path(printed["evaluation"]["local_folder"])
    assert re.search(r"(logging episode default-seed1 failed|before episode default-seed1)", err)
    assert (
        f"every episode is on disk, upload them when the store answers: dlsched runs sync {local}"
        in err
    )
    assert f"dlsched runs sync {local}" in err
    for name in ("default-seed0", "default-seed1", "dqoes-seed0", "dqoes-seed1"):
        record = json.loads((local / name / "episode.json").read_text())
        assert (local / name / "trajectory.csv").stat().st_size > 0
        assert f"{record['policy']['name']}-seed{record['seed']}" == name
    assert (local / "summary.json").is_file()
    # what reached the store before it died is intact: the first episode, complete
    stored = MlflowClient(f"sqlite:///{backend_db}")
    episodes = stored.search_runs(
        [printed["evaluation"]["experiment_id"]], "tags.`dlsched.kind` = 'episode'"
    )
    assert [run.info.run_name for run in episodes] == ["default-seed0"]
    assert episodes[0].info.status == "FINISHED"


def test_the_tracking_benchmark_times_the_same_evaluation_four_ways(
    monkeypatch, tmp_path, short_scenario, no_env_uri
):
    monkeypatch.chdir(tmp_path)
    result = bench_tracking(str(short_scenario), ("default",), episodes=2)

    assert result.episodes == 2
    assert result.tracking_uri.startswith("sqlite:////") and result.tracking_uri.endswith(".db")
    assert result.ratio == result.tracked_s / result.untracked_s
    assert result.ratio_no_plots == result.tracked_no_plots_s / result.untracked_s
    assert result.ratio_episode_plots == result.tracked_episode_plots_s / result.untracked_s
    assert "ratio" in result.report()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short.yaml"]  # nothing left behind


def test_a_deleted_experiment_is_reported_with_how_to_restore_it(
    capsys, tmp_path, short_scenario, mlflow_store, no_env_uri
):
    _, uri = mlflow_store
    client = MlflowClient(uri)
    name = f"deleted-{uuid.uuid4().hex[:8]}"
    experiment_id = client.create_experiment(name)
    client.delete_experiment(experiment_id)
    code, out, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default",
        "--tracking-uri", uri, "--experiment", name, "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2 and out == ""
    assert f"experiment {name!r} (id {experiment_id})" in err
    assert f"mlflow experiments restore --experiment-id {experiment_id}" in err
    assert list((tmp_path / "out").iterdir()) == []  # its evaluation folder was removed


# ---------------------------------------------------------------------------------- backends


def test_a_backend_with_options_is_labelled_by_them_in_a_fixed_order():
    assert backend_label("replay", {}) == "replay"
    assert backend_label("docker", {"b": "2", "a": "1"}) == "docker[a=1,b=2]"


def test_workload_threading_on_the_replay_backend_is_refused_with_the_fix(
    capsys, tmp_path, short_scenario, mlflow_store, no_env_uri
):
    _, uri = mlflow_store
    code, _, err = evaluate_cli(
        capsys, "--scenario", str(short_scenario), "--policy", "default", "--episodes", "1",
        "--workload-threading", "stock", "--tracking-uri", uri, "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2
    assert "--workload-threading stock applies to the docker backend, not 'replay'" in err
    assert "add --backend docker" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.docker
def test_a_docker_evaluation_with_stock_workloads_records_the_threading(
    capsys, tmp_path, mlflow_store, no_env_uri, docker_engine, workload_image
):
    _, uri = mlflow_store
    cores = float(docker_engine.info()["NCPU"])
    scenario = load_scenario("docker-smoke-training")
    workers = tuple(dataclasses.replace(worker, cores=cores) for worker in scenario.workers)
    path = tmp_path / "smoke.yaml"
    path.write_text(dump_scenario(dataclasses.replace(scenario, workers=workers)))
    code, out, err = evaluate_cli(
        capsys, "--scenario", str(path), "--policy", "default", "--episodes", "1", "--json",
        "--backend", "docker", "--workload-threading", "stock", "--tracking-uri", uri,
        "--experiment", f"stock-{uuid.uuid4().hex[:8]}", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    printed = json.loads(out)
    evaluation = printed["evaluation"]
    assert printed["scenarios"][0]["backend"] == "docker[workload_threading=stock]"
    compare_code = main(
        ["compare", "--tracking-uri", uri, "--experiment", evaluation["experiment"], "--format",
         "json", "--no-plot"]
    )  # fmt: skip
    compared, _ = capsys.readouterr()
    assert compare_code == 0
    assert json.loads(compared)["scenarios"] == printed["scenarios"]
    client = MlflowClient(uri)
    episode = client.get_run(evaluation["episode_runs"]["default-seed0"]).data.params
    parent = client.get_run(evaluation["parent_run_id"]).data.params
    for params in (episode, parent):
        assert (params["backend"], params["backend.workload_threading"]) == ("docker", "stock")
    record = json.loads(
        (Path(evaluation["local_folder"]) / "default-seed0" / "episode.json").read_text()
    )
    assert record["backend_options"] == {"workload_threading": "stock"}
    # none of this evaluation's containers is left (others' may run on the shared engine)
    mine = [f"{LABEL_OWNER}.pid={os.getpid()}", f"{LABEL_OWNER}.host={socket.gethostname()}"]
    assert not docker_engine.containers.list(all=True, ignore_removed=True, filters={"label": mine})


def test_plots_are_sharp_and_latency_panels_name_their_model(tmp_path, monkeypatch):
    import matplotlib.image

    from dlsched.runs.tracking import plots

    scenario = dataclasses.replace(load_scenario(SCENARIO), horizon_s=HORIZON_S)
    result = run_episode(scenario, make("dqoes"), seed=0)
    limits = plots.plot_limits(result, tmp_path / "limits.png")
    height, width, _ = matplotlib.image.imread(limits).shape
    assert (width, height) == (9 * plots.DPI, 6 * plots.DPI) and plots.DPI >= 100
    figures = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: figures.append(figure) or path)
    plots.plot_latency(result, tmp_path / "latency.png")
    titles = [ax.get_title() for ax in figures[0].axes if ax.get_visible()]
    workloads = {job.job_id: job.workload for job in result.jobs}
    assert titles and all(title.split(":")[0].split()[1] == workloads[title.split()[0]]
                          for title in titles)  # fmt: skip


def test_an_edited_scenario_that_kept_its_name_gets_an_experiment_of_its_own(
    capsys, tmp_path, mlflow_store, no_env_uri
):
    _, uri = mlflow_store
    original = dataclasses.replace(
        load_scenario(SCENARIO), name=f"edited-{uuid.uuid4().hex[:8]}", horizon_s=HORIZON_S
    )
    edited = dataclasses.replace(original, horizon_s=HORIZON_S - 10)
    paths = {}
    for label, scenario in (("original", original), ("edited", edited)):
        paths[label] = tmp_path / f"{label}.yaml"
        paths[label].write_text(dump_scenario(scenario))

    def evaluate(label: str, *extra: str) -> tuple[str, str]:
        code, out, err = evaluate_cli(
            capsys, "--scenario", str(paths[label]), "--policy", "default", "--episodes", "1",
            "--json", "--tracking-uri", uri, "--out", str(tmp_path / "out"), *extra,
        )  # fmt: skip
        assert code == 0, err
        return json.loads(out)["evaluation"]["experiment"], err

    old, new = original.content_hash(), edited.content_hash()
    experiment, err = evaluate("original")
    assert experiment == original.name and "content hash" not in err
    experiment, err = evaluate("edited")
    assert experiment == f"{original.name}@{new}"
    assert f"has content hash {new}, but experiment {original.name!r} holds" in err
    assert f"scenario content hash {old}" in err
    experiment, err = evaluate("original")  # back where it belongs, unwarned
    assert experiment == original.name and "content hash" not in err
    assert evaluate("edited")[0] == f"{original.name}@{new}"
    # a name the user chose is kept, with the same warning
    experiment, err = evaluate("edited", "--experiment", original.name)
    assert experiment == original.name and f"scenario content hash {old}" in err
    hashes = MlflowClient(uri).get_experiment_by_name(f"{original.name}@{new}").tags
    assert hashes["dlsched.scenario.hash"] == new
