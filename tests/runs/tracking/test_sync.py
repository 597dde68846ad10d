"""``dlsched runs sync``: syncs of one folder at once upload each episode once; what it reads
back is bounded.

The folder is a real tracked evaluation whose store missed every episode (the tracker fails
before the first is logged, as when its server dies), synced by real ``dlsched`` processes.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest
from mlflow import MlflowClient

from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.cli import main
from dlsched.runs.tracking.episode_run import log_episode_run
from dlsched.runs.tracking.tracker import EvaluationTracker
from dlsched.runs.tracking.trajectory import SCENARIO_FILE, EvaluationFolder, read_episode

SEEDS = 12
POLICIES = ("default", "dqoes")


@pytest.fixture
def missed_evaluation(capsys, monkeypatch, tmp_path, new_sqlite_store) -> tuple[Path, str]:
    """A tracked evaluation whose store got none of its episodes: ``(folder, store uri)``."""
    scenario = dataclasses.replace(load_scenario("dqoes-resnet50-burst-target40"), horizon_s=50.0)
    path = tmp_path / "short.yaml"
    path.write_text(dump_scenario(scenario))
    uri = f"sqlite:///{new_sqlite_store(tmp_path)}"
    original = EvaluationTracker.record_episode

    def store_lost(tracker, result):
        if tracker.failure is None:
            tracker._fail("the store was lost for the test")
        original(tracker, result)

    monkeypatch.setattr(EvaluationTracker, "record_episode", store_lost)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["evaluate", "--scenario", str(path), "--policy", ",".join(POLICIES),
                 "--episodes", str(SEEDS), "--no-progress", "--no-plots", "--tracking-uri", uri,
                 "--out", str(tmp_path / "out")])  # fmt: skip
    assert code == 2 and "dlsched runs sync" in capsys.readouterr().err
    (folder,) = (record.parent for record in (tmp_path / "out").glob("*/tracking.json"))
    return folder, uri


def _episode_runs(uri: str) -> list:
    client = MlflowClient(uri)
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    return client.search_runs(experiments, "tags.`dlsched.kind` = 'episode'", max_results=1000)


def test_two_syncs_of_one_folder_at_once_upload_each_episode_once(
    missed_evaluation, dlsched_process, tmp_path
):
    folder, uri = missed_evaluation
    assert _episode_runs(uri) == []
    syncs = [dlsched_process(["runs", "sync", folder], cwd=tmp_path) for _ in range(2)]
    for sync in syncs:
        assert sync.wait(timeout=240) == 0, sync.communicate()[1]

    runs = _episode_runs(uri)
    names = Counter(run.info.run_name for run in runs)
    expected = {f"{policy}-seed{seed}" for policy in POLICIES for seed in range(SEEDS)}
    assert set(names) == expected
    assert [name for name, count in names.items() if count > 1] == []
    assert {run.info.status for run in runs} == {"FINISHED"}
    said = "".join(sync.communicate()[0] for sync in syncs)
    assert said.count("status FINISHED") == 2  # one uploaded, the other found it all there
    assert f"{len(expected)} episodes were already there" in said


def test_an_episode_stored_twice_is_counted_once_by_compare(capsys, missed_evaluation):
    folder, uri = missed_evaluation
    assert main(["runs", "sync", str(folder)]) == 0
    # a second run of every episode, as two syncs at once uploaded them before
    record = json.loads((folder / "tracking.json").read_text())
    client = MlflowClient(uri)
    for episode_dir in EvaluationFolder(folder).episode_dirs():
        log_episode_run(client, record["experiment_id"], record["run_id"], record["name"],
                        read_episode(episode_dir), episode_dir, "copy", None)  # fmt: skip
    assert len(_episode_runs(uri)) == 2 * SEEDS * len(POLICIES)
    capsys.readouterr()

    assert main(["compare", "--tracking-uri", uri, "--format", "json", "--no-plot",
                 "--no-log"]) == 0  # fmt: skip
    (compared,) = json.loads(capsys.readouterr().out)["scenarios"]
    for policy in compared["policies"]:
        assert policy["seeds"] == list(range(SEEDS))
        assert {metric["n"] for metric in policy["metrics"].values()} <= {SEEDS, 0}


@pytest.mark.parametrize(
    ("file", "limit"),
    [
        ("trajectory.csv", "MAX_TRAJECTORY_BYTES"),
        ("episode.json", "MAX_RECORD_BYTES"),
        ("progress.csv", "MAX_PROGRESS_BYTES"),  # a Docker episode's; made here
    ],
)
def test_an_episode_file_over_its_limit_is_refused_before_anything_is_read_or_uploaded(
    capsys, missed_evaluation, file, limit
):
    folder, uri = missed_evaluation
    bomb = sorted(folder.glob("*/episode.json"))[-1].parent / file
    bomb.touch()
    with bomb.open("r+b") as stream:  # a sparse GiB: no disk used, but over the default limit
        stream.truncate(1 << 30)

    assert main(["runs", "sync", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"{bomb} has 1,073,741,824 bytes" in err and f"DLSCHED_{limit}=N" in err
    assert "Traceback" not in err
    assert _episode_runs(uri) == []  # refused before the first upload


def test_an_episode_stopped_as_its_folder_is_written_leaves_none_to_refuse(
    capsys, monkeypatch, missed_evaluation
):
    """A stop part-way through an episode's folder (its record written, its scenario not; a kill
    there too) leaves no folder: the evaluation's other episodes are synced, not refused."""
    folder, uri = missed_evaluation
    evaluation = EvaluationFolder(folder)
    episode = read_episode(evaluation.episode_dirs()[0])
    write_text = Path.write_text

    def stopped_at_the_scenario(path: Path, *args, **kwargs) -> int:
        if path.name == SCENARIO_FILE:
            raise KeyboardInterrupt
        return write_text(path, *args, **kwargs)

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(Path, "write_text", stopped_at_the_scenario)
        evaluation.write_episode(dataclasses.replace(episode, seed=SEEDS), "name: unused\n")
    assert len(evaluation.episode_dirs()) == SEEDS * len(POLICIES)
    assert main(["runs", "sync", str(folder)]) == 0, capsys.readouterr().err
    assert len(_episode_runs(uri)) == SEEDS * len(POLICIES)
