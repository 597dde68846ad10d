"""A new sqlite store appears whole or not at all, whatever stops the command creating it.

A real ``dlsched evaluate`` process creates a new store in an empty folder and is stopped by a
real signal at a point of the store's creation read from the files it writes (the store, or the
file it is created in: MLflow's tables made, the migration part-way); then the next command
(``dlsched runs repair``, run in this process) must succeed and leave the store whole.
"""

from __future__ import annotations

import dataclasses
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.store.db.utils import _get_latest_schema_revision

from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.cli import main
from dlsched.runs.tracking.store import creation_file

#: Seconds a command may take to reach a point of the store's creation, or to end.
DEADLINE_S = 120.0

SIDE_FILES = ("-journal", "-wal", "-shm", ".lock")


def _schema(path: Path) -> tuple[set[str], list[str]] | None:
    """The tables and schema revisions of a database being written, ``None`` while it is
    locked or unreadable."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.05) as db:
            tables = {row[0] for row in db.execute("select name from sqlite_master")}
            revisions = (
                [row[0] for row in db.execute("select version_num from alembic_version")]
                if "alembic_version" in tables
                else []
            )
    except sqlite3.Error:
        return None
    return tables, revisions


def _reached(stage: str, schema: tuple[set[str], list[str]] | None) -> bool:
    """Whether a database in creation has reached ``stage``."""
    if stage == "file":
        return True
    if schema is None:
        return False
    tables, revisions = schema
    if stage == "tables":  # MLflow's first tables, no revision yet
        return bool(tables - {"alembic_version"}) and not revisions
    return bool(revisions) and revisions != [_get_latest_schema_revision()]  # part-way


def _stop_at(process, folder: Path, stage: str, signum: int) -> str | None:
    """Send ``signum`` to ``process`` once a database file in ``folder`` reaches ``stage``; the
    file's name, or ``None`` if the command got past the stage unseen."""
    deadline = time.monotonic() + DEADLINE_S
    while process.poll() is None and time.monotonic() < deadline:
        for path in folder.glob("mlflow.db*"):
            if not path.name.endswith(SIDE_FILES) and _reached(stage, _schema(path)):
                process.send_signal(signum)
                return path.name
        time.sleep(0.005)
    return None


def _whole(store: Path) -> None:
    tables, revisions = _schema(store) or (set(), [])
    assert revisions == [_get_latest_schema_revision()]
    assert not [table for table in tables if table.startswith("_alembic_tmp_")]


@pytest.fixture
def evaluate_args(tmp_path):
    """``dlsched evaluate`` of one episode of a three-step scenario."""
    scenario = dataclasses.replace(load_scenario("dqoes-resnet50-burst-target40"), horizon_s=30.0)
    path = tmp_path / "tiny.yaml"
    path.write_text(dump_scenario(scenario))
    return ["evaluate", "--scenario", path, "--policy", "default", "--episodes", "1",
            "--no-progress", "--no-plots"]  # fmt: skip


@pytest.mark.parametrize(
    ("signum", "stage"),
    [
        (signal.SIGKILL, "tables"),
        (signal.SIGKILL, "revision"),
        (signal.SIGINT, "revision"),
        (signal.SIGTERM, "tables"),
    ],
    ids=["SIGKILL-tables", "SIGKILL-revision", "SIGINT-revision", "SIGTERM-tables"],
)
def test_a_command_stopped_while_it_creates_the_store_leaves_none_or_a_whole_one(
    capsys, monkeypatch, tmp_path, dlsched_process, evaluate_args, stage, signum
):
    folder = tmp_path / "work"
    folder.mkdir()
    store = folder / "mlflow.db"
    for _ in range(3):  # a migration that outruns the polling is tried again, on a new store
        stopped = dlsched_process(evaluate_args, cwd=folder)
        seen = _stop_at(stopped, folder, stage, signum)
        stopped.wait(timeout=DEADLINE_S)
        err = stopped.communicate()[1]
        if seen is not None:
            break
        for path in folder.glob("mlflow.db*"):
            path.unlink()
    else:
        pytest.fail(f"the store's creation never showed stage {stage!r} in 3 tries")
    if signum != signal.SIGKILL:
        assert "Traceback" not in err
    # what the stopped command left: no store, or a whole one
    if store.exists():
        _whole(store)

    # the next command, in this process: what it finds is the stopped one's doing alone
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(folder)
    assert main(["runs", "repair"]) == 0, capsys.readouterr().err
    _whole(store)
    assert not creation_file(store).exists()
    MlflowClient(f"sqlite:///{store}").create_experiment("usable")


def test_a_store_left_half_made_and_empty_is_named_with_a_repair_that_works(
    capsys, monkeypatch, tmp_path
):
    """A store an older dlsched left half-migrated holds nothing: the message says to make it
    anew (MLflow's own upgrade fails on it), and doing so works."""
    store = tmp_path / "mlflow.db"
    with sqlite3.connect(store) as db:  # MLflow's first tables, its first revision, no record
        db.execute("create table experiments (experiment_id integer primary key, name text)")
        db.execute("create table runs (run_uuid text primary key)")
        db.execute("create table alembic_version (version_num text)")
        db.execute("insert into alembic_version values ('451aebb31d03')")
    before = store.read_bytes()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)

    assert main(["runs", "repair"]) == 2
    err = capsys.readouterr().err
    assert "is half-made" in err and "holds no experiment and no run" in err
    assert f"mv {store} {store}.broken" in err and "mlflow db upgrade" not in err
    assert store.read_bytes() == before  # never touched

    store.rename(tmp_path / "mlflow.db.broken")
    assert main(["runs", "repair"]) == 0
    _whole(store)
