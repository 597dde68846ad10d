"""A command refused before it starts records nothing and opens no store it does not need.

Each command runs in a fresh interpreter (so that what it imported can be told) in an empty
folder: a model URI that is malformed, or names a run or model no store holds, is refused before
MLflow or torch is imported and before any store is opened or created; a tracked Docker
evaluation that finds no engine (a real docker-py client on a socket where none listens) leaves
no store, no run and no folder. The only file left is the command's log (``dlsched-runs/logs``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

HEAVY = ("mlflow", "torch", "stable_baselines3")

#: Runs the CLI in a fresh interpreter; prints its exit code, its stderr and the heavy packages
#: it imported.
PROBE = """
import contextlib, io, json, sys
from dlsched.runs.cli import main
err = io.StringIO()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
heavy = sorted(name for name in {heavy!r} if name in sys.modules)
print(json.dumps({{"code": code, "err": err.getvalue(), "heavy": heavy}}))
"""


def _run(folder: Path, *argv: str, env: dict[str, str] | None = None) -> dict:
    environment = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv],
        capture_output=True, text=True, timeout=180, cwd=folder, env={**environment, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _left(folder: Path) -> list[str]:
    """What is in ``folder`` besides the command logs."""
    return sorted(
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if not path.is_relative_to(folder / "dlsched-runs" / "logs")
        and path != folder / "dlsched-runs"
    )


def _evaluate(policy: str, *extra: str, scenario: str = "dqoes-varied-burst") -> list[str]:
    return ["evaluate", "--scenario", scenario, "--policy", policy, "--episodes", "1",
            "--no-progress", *extra]  # fmt: skip


@pytest.mark.parametrize(
    "uri",
    [
        "runs:/../../etc/model",
        "runs:/",
        "runs:/0123456789abcdef/../../model",
        "runs:/0123456789abcdef//model",
        "runs://host/0123456789abcdef/model",
        "runs:/0123456789abcdef/model?x=1",
        "models:/",
        "models:/name/1/extra",
        "models:/name@",
        "models:/@alias",
    ],
)
def test_a_malformed_model_uri_is_refused_before_any_store_or_mlflow(tmp_path, uri):
    said = _run(tmp_path, *_evaluate(f"default,{uri}"))
    assert said["code"] == 2 and "Traceback" not in said["err"]
    assert f"policy {uri!r} is not a model URI" in said["err"]
    assert said["heavy"] == []
    assert _left(tmp_path) == []


@pytest.mark.parametrize("tracking", [True, False], ids=["tracked", "untracked"])
@pytest.mark.parametrize("uri", ["runs:/0123456789abcdef0123456789abcdef/model", "models:/m/1"])
def test_a_model_of_a_store_that_does_not_exist_creates_none(tmp_path, tracking, uri):
    said = _run(tmp_path, *_evaluate(uri, *([] if tracking else ["--no-tracking"])))
    assert said["code"] == 2 and "Traceback" not in said["err"]
    assert f"there is no MLflow store at {tmp_path / 'mlflow.db'} (from default)" in said["err"]
    assert said["heavy"] == []
    assert _left(tmp_path) == []


@pytest.mark.parametrize(
    ("uri", "missing"),
    [
        ("runs:/0123456789abcdef0123456789abcdef/model", "it holds no run 0123456789abcdef"),
        ("models:/nosuch/1", "it holds no registered model 'nosuch'"),
        ("models:/registered/7", "registered model 'registered' has no version 7"),
        ("models:/registered@champion", None),  # no such alias: MLflow says, the store intact
    ],
)
def test_a_model_an_existing_store_lacks_is_refused_and_the_store_untouched(tmp_path, uri, missing):
    store = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{store}")
    client.create_registered_model("registered")
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    work = tmp_path / "work"
    work.mkdir()

    said = _run(work, *_evaluate(uri, "--no-tracking", "--tracking-uri", f"sqlite:///{store}"))
    assert said["code"] == 2 and "Traceback" not in said["err"]
    assert f"cannot fetch model {uri!r} from MLflow store sqlite:///{store}" in said["err"]
    if missing is not None:
        assert missing in said["err"]
        assert said["heavy"] == []  # answered from the store's file
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    assert _left(work) == []


def test_a_tracked_docker_evaluation_without_an_engine_records_nothing(tmp_path):
    nowhere = f"unix://{tmp_path / 'no-engine.sock'}"
    evaluate = _evaluate("default", "--backend", "docker", scenario="docker-inference-3")
    said = _run(tmp_path, *evaluate, env={"DOCKER_HOST": nowhere})
    assert said["code"] == 2 and "Traceback" not in said["err"]
    assert f"no Docker engine answers at {nowhere}" in said["err"]
    assert _left(tmp_path) == []  # no store, no run in it, no evaluation folder
