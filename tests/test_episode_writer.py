"""The episode writer: episodes logged beside the evaluation, by a forked child or a thread."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from mlflow import MlflowClient

from dlsched.baselines import make
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.runs.tracking import episode_writer
from dlsched.runs.tracking.store import connect
from dlsched.runs.tracking.target import ENV_VAR, TrackingTarget
from dlsched.runs.tracking.tracked_evaluation import EvaluationRequest, evaluate_tracked

HORIZON_S = 60.0


@pytest.mark.parametrize(
    ("uri", "forked"),
    [
        ("sqlite:////tmp/x/mlflow.db", True),
        ("sqlite:///mlflow.db", True),
        ("sqlite://", False),  # in memory: this process's alone
        ("sqlite:///:memory:", False),
        ("http://127.0.0.1:5000", False),  # the server does the work: a thread waits on it
        ("file:///tmp/x/mlruns", False),
    ],
)
def test_only_a_sqlite_file_is_logged_from_a_forked_child(uri: str, forked: bool) -> None:
    assert episode_writer._forkable(uri) is forked


def _evaluate(uri: str, out: Path, episode_plots: bool = False):
    scenario = dataclasses.replace(
        load_scenario("dqoes-resnet50-burst-target40"), horizon_s=HORIZON_S
    )
    request = EvaluationRequest(scenario, (make("default"), make("dqoes")), (0, 1), "replay")
    target = TrackingTarget(uri, "--tracking-uri")
    return evaluate_tracked(
        request, connect(target), target, out, progress=False, episode_plots=episode_plots
    )


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
def test_every_episode_is_logged_finished_under_the_evaluating_process(
    monkeypatch, tmp_path: Path, scheme: str
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses it otherwise
    monkeypatch.chdir(tmp_path)  # a sqlite store's artifacts go beside it
    sqlite = f"sqlite:///{tmp_path / 'mlflow.db'}"
    uri = sqlite if scheme == "sqlite" else (tmp_path / "mlruns").as_uri()
    outcome = _evaluate(uri, tmp_path / "out", episode_plots=True)

    assert outcome.failure is None
    runs = outcome.location.episode_runs
    assert sorted(runs) == ["default-seed0", "default-seed1", "dqoes-seed0", "dqoes-seed1"]
    client = MlflowClient(uri)
    for name, run_id in runs.items():
        run = client.get_run(run_id)
        assert run.info.run_name == name and run.info.status == "FINISHED"
        # logged by the writer, owned by the evaluation: if it dies, the next command ends them
        assert run.data.tags["dlsched.owner.pid"] == str(os.getpid())
        artifacts = {info.path for info in client.list_artifacts(run_id)}
        assert {"latency.png", "limits.png", "trajectory.csv"} <= artifacts
    parent = client.get_run(outcome.location.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert "timeline.png" in {info.path for info in client.list_artifacts(parent.info.run_id)}


def test_a_writer_stuck_on_a_lock_held_at_the_fork_is_stopped_and_its_run_marked(
    monkeypatch, tmp_path: Path
) -> None:
    import multiprocessing
    import threading
    import time

    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    from dlsched.runs.tracking import tracker

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    # held when the writer is forked, as a library's thread may hold a lock: the child's copy
    # stays held for ever, and the child waits on it for ever
    held = threading.Lock()
    held.acquire()
    log_episode_run = tracker.log_episode_run

    def deadlocked(client, experiment_id, parent_run_id, evaluation_id, result, *args, **kwargs):
        if (result.policy.name, result.seed) == ("dqoes", 1):  # the last episode
            tags = {MLFLOW_PARENT_RUN_ID: parent_run_id, tracker.TAG_KIND: "episode",
                    tracker.TAG_EVALUATION: evaluation_id}  # fmt: skip
            client.create_run(experiment_id, run_name="stuck", tags=tags)
            held.acquire()
        return log_episode_run(
            client, experiment_id, parent_run_id, evaluation_id, result, *args, **kwargs
        )

    monkeypatch.setattr(tracker, "log_episode_run", deadlocked)
    monkeypatch.setattr(episode_writer, "STALL_TIMEOUT_S", 3.0)
    started = time.monotonic()
    outcome = _evaluate(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "out")

    assert time.monotonic() - started < 60
    said = str(outcome.failure)
    assert "the process logging the episodes said nothing for 3 s and was stopped" in said
    assert "1 episode run(s) it left RUNNING marked KILLED (stuck)" in said
    assert f"dlsched runs sync {tmp_path / 'out'}" in said
    assert multiprocessing.active_children() == []  # the child is gone
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = client.search_experiments(filter_string="name != 'Default'")
    runs = client.search_runs([experiment.experiment_id], "tags.`dlsched.kind` = 'episode'")
    assert sorted((run.info.run_name, run.info.status) for run in runs) == [
        ("default-seed0", "FINISHED"),
        ("default-seed1", "FINISHED"),
        ("dqoes-seed0", "FINISHED"),
        ("stuck", "KILLED"),
    ]
