"""A tracking store shared by concurrent users: created once, never broken, failures said briefly.

Real processes (``dlsched evaluate`` each), real sqlite stores in tmp folders and a real
``mlflow server`` on loopback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.cli import main
from dlsched.runs.tracking.store import on_local_file_system, set_experiment_tag

WRITERS = 8


@pytest.fixture
def tiny_scenario(tmp_path: Path) -> Path:
    """A replay scenario of three steps: each process spends its time starting, not stepping."""
    scenario = dataclasses.replace(load_scenario("dqoes-resnet50-burst-target40"), horizon_s=30.0)
    path = tmp_path / "tiny.yaml"
    path.write_text(dump_scenario(scenario))
    return path


def _evaluate_concurrently(dlsched_process, folder: Path, scenario: Path, uri: str | None):
    tracking = ["--tracking-uri", uri] if uri else []
    args = ["evaluate", "--scenario", scenario, "--policy", "default", "--episodes", "1",
            "--no-progress", "--no-plots", *tracking]  # fmt: skip
    processes = [dlsched_process([*args, "--seed", seed], cwd=folder) for seed in range(WRITERS)]
    outcomes = [(process.wait(timeout=240), process.communicate()[1]) for process in processes]
    failed = [err for code, err in outcomes if code != 0]
    assert not failed, f"{len(failed)} of {WRITERS} failed; first:\n{failed[0]}"


def _check_all_finished(client: MlflowClient) -> None:
    (experiment,) = client.search_experiments(filter_string="name != 'Default'")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [run for run in runs if run.data.tags.get("dlsched.kind") == "evaluation"]
    children = [run for run in runs if run.data.tags.get("dlsched.kind") == "episode"]
    assert len(parents) == WRITERS and len(children) == WRITERS
    assert {run.info.status for run in runs} == {"FINISHED"}
    assert {run.data.params["seed"] for run in children} == {str(s) for s in range(WRITERS)}


def test_eight_first_writers_of_a_new_sqlite_store_all_succeed(
    tmp_path, tiny_scenario, dlsched_process
):
    folder = tmp_path / "work"
    folder.mkdir()
    _evaluate_concurrently(dlsched_process, folder, tiny_scenario, None)
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    _check_all_finished(client)
    client.create_experiment("usable-afterwards")  # the store takes writes after the rush
    if on_local_file_system(folder):  # a new store on a local disk logs to a write-ahead log
        with sqlite3.connect(folder / "mlflow.db") as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_only_a_store_on_a_local_file_system_gets_a_write_ahead_log(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "proc /proc proc rw 0 0\n"
        "/dev/vda / ext4 rw,relatime 0 0\n"
        "server:/export /mnt/shared nfs4 rw,vers=4.2 0 0\n"
        "//nas/team /mnt/shared/smb cifs rw 0 0\n"
        "tmpfs /mnt/my\\040disk tmpfs rw 0 0\n"
    )
    local = on_local_file_system
    assert local(Path("/home/me/mlflow.db"), mounts)
    assert not local(Path("/mnt/shared/team/mlflow.db"), mounts)
    assert not local(Path("/mnt/shared/smb/mlflow.db"), mounts)
    assert local(Path("/mnt/sharedness/mlflow.db"), mounts)  # another folder, on the root disk
    assert local(Path("/mnt/my disk/mlflow.db"), mounts)
    assert not local(Path("/home/me/mlflow.db"), tmp_path / "no-mount-table")


@pytest.mark.slow
def test_eight_first_writers_of_a_new_server_store_all_succeed(
    tmp_path, tiny_scenario, dlsched_process, mlflow_server_factory
):
    uri, _, _ = mlflow_server_factory()
    folder = tmp_path / "work"
    folder.mkdir()
    _evaluate_concurrently(dlsched_process, folder, tiny_scenario, uri)
    client = MlflowClient(uri)
    _check_all_finished(client)
    client.create_experiment("usable-afterwards")


class _LosesTheTagRace(MlflowClient):
    """A real client whose first ``losses`` tag writes fail as the loser of two first writers'
    race fails on a tracking server (the other writer's insert came first)."""

    def __init__(self, uri: str, losses: int, error: str) -> None:
        super().__init__(uri)
        self.losses, self.error, self.calls = losses, error, 0

    def set_experiment_tag(self, experiment_id, key, value) -> None:
        self.calls += 1
        if self.calls <= self.losses:
            super().set_experiment_tag(experiment_id, key, "the other writer's")
            raise MlflowException(self.error)
        super().set_experiment_tag(experiment_id, key, value)


RACE = "BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: experiment_tags.key"


def test_an_experiment_tag_lost_to_a_concurrent_first_writer_is_written_again(
    tmp_path, new_sqlite_store
):
    uri = f"sqlite:///{new_sqlite_store(tmp_path)}"
    client = _LosesTheTagRace(uri, losses=2, error=RACE)
    experiment = client.create_experiment("race")
    set_experiment_tag(client, experiment, "note", "mine")
    assert client.calls == 3
    assert client.get_experiment(experiment).tags["note"] == "mine"


def test_an_experiment_tag_failing_otherwise_or_losing_every_race_is_not_hidden(
    tmp_path, new_sqlite_store
):
    uri = f"sqlite:///{new_sqlite_store(tmp_path)}"
    other = _LosesTheTagRace(uri, losses=1, error="RESOURCE_DOES_NOT_EXIST: no experiment")
    experiment = other.create_experiment("race")
    with pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        set_experiment_tag(other, experiment, "note", "mine")
    assert other.calls == 1
    always = _LosesTheTagRace(uri, losses=100, error=RACE)
    with pytest.raises(MlflowException, match="UNIQUE constraint failed"):
        set_experiment_tag(always, experiment, "note", "mine")
    assert always.calls == 4


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("create table _alembic_tmp_runs (x integer)", "_alembic_tmp_runs"),
        ("update alembic_version set version_num = '0c779009ac13'", "revision 0c779009ac13"),
        ("delete from alembic_version", "no schema revision"),
    ],
    ids=["leftover-temporary-table", "older-revision", "no-revision"],
)
def test_a_half_migrated_store_is_named_with_the_repair_and_left_untouched(
    capsys, monkeypatch, tmp_path, tiny_scenario, new_sqlite_store, damage, named
):
    store = new_sqlite_store(tmp_path)
    uri = f"sqlite:///{store}"
    MlflowClient(uri).search_experiments()  # in use: its Default experiment made
    with sqlite3.connect(store) as db:
        db.execute(damage)
    before = _digest(store)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)

    code = main(["evaluate", "--scenario", str(tiny_scenario), "--policy", "default",
                 "--episodes", "1", "--no-progress", "--tracking-uri", uri])  # fmt: skip

    err = capsys.readouterr().err
    assert code == 2
    assert "is half-migrated" in err and named in err
    assert f"cp {store} {store}.backup-" in err and f"mlflow db upgrade {uri}" in err
    assert "Traceback" not in err
    assert _digest(store) == before  # nothing written, nothing migrated
    assert not list(tmp_path.glob("dlsched-runs/dqoes*"))  # no episode ran


def test_a_folder_where_the_store_should_be_is_said_at_once(
    capsys, monkeypatch, tmp_path, tiny_scenario
):
    (tmp_path / "store.db").mkdir()
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    code = main(["evaluate", "--scenario", str(tiny_scenario), "--policy", "default",
                 "--episodes", "1", "--no-progress",
                 "--tracking-uri", f"sqlite:///{tmp_path / 'store.db'}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "which is a folder, not a database file" in err
    assert time.monotonic() - started < 10  # MLflow alone retries for two minutes


def test_mlflow_log_noise_stays_in_the_log_file_the_message_names(
    capsys, monkeypatch, tmp_path, tiny_scenario, new_sqlite_store
):
    store = new_sqlite_store(tmp_path)
    MlflowClient(f"sqlite:///{store}").search_experiments()
    with sqlite3.connect(store) as db:
        db.execute("create table _alembic_tmp_params (x integer)")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # what MLflow said as this test made the store
    code = main(["evaluate", "--scenario", str(tiny_scenario), "--policy", "default",
                 "--episodes", "1", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[-1].startswith("dlsched evaluate: error: MLflow tracking store ")
    assert "Traceback" not in err and "INFO" not in err  # MLflow's and alembic's log lines
    # refused before MLflow logged anything: no log file is left behind (issue 34 item 11)
    assert "(details: " not in err and not (tmp_path / "dlsched-runs").exists()


def test_a_full_disk_under_out_is_one_message_and_a_failed_run(
    capsys, monkeypatch, tmp_path, tiny_scenario, new_sqlite_store
):
    import errno

    import dlsched.runs.tracking.trajectory as trajectory

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trajectory, "write_trajectory", full)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    new_sqlite_store(tmp_path)  # the default store, there already
    code = main(["evaluate", "--scenario", str(tiny_scenario), "--policy", "default",
                 "--episodes", "1", "--no-progress", "--no-plots"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "No space left on device" in err and "pass another --out" in err
    assert "Traceback" not in err
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [run.info.status for run in runs] == ["FAILED"]
