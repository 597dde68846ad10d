"""A training's size is bounded by stated limits: ``--timesteps`` and ``--n-envs`` above theirs
are refused at once, naming the value, the limit and the variable that raises it, before torch,
SB3 or MLflow is imported and before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import LIMITS_DOC

from dlsched.runs.training.config import MAX_ENVS, MAX_TIMESTEPS

#: Runs ``dlsched ARGS`` in a fresh interpreter; prints its exit code and the heavy packages it
#: imported.
PROBE = """
import json, sys
from dlsched.runs.cli import main
code = main(sys.argv[1:])
heavy = sorted(set(sys.modules) & {"torch", "stable_baselines3", "mlflow", "ray"})
print(json.dumps({"code": code, "heavy": heavy}))
"""


def train(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict, str]:
    """The outcome (exit code, heavy imports) and stderr of ``dlsched train ARGS``."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in (MAX_TIMESTEPS.variable, MAX_ENVS.variable, "MLFLOW_TRACKING_URI")
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "train", "--scenario", "dqoes-varied-burst",
         "--out", str(tmp_path / "out"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
         *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**environment, **(env or {})},
    )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


@pytest.mark.parametrize(
    ("args", "value", "limit"),
    [
        (["--timesteps", "1000000000000"], "timesteps=1,000,000,000,000", MAX_TIMESTEPS),
        (["--timesteps", "100", "--n-envs", "100000"], "n_envs=100,000", MAX_ENVS),
        (
            ["--engine", "rllib", "--timesteps", "100", "--n-envs", "100000"],
            "n_envs=100,000",
            MAX_ENVS,
        ),
    ],
)
def test_a_training_above_its_limits_is_refused_at_once(tmp_path, args, value, limit):
    outcome, err = train(tmp_path, *args)
    assert outcome == {"code": 2, "heavy": []}, err
    first = err.splitlines()[0]
    assert first.startswith("dlsched train: error: invalid")
    assert f"{value}: expected at most {limit.default:,}" in first
    assert f"dlsched's limit {limit.name}" in first and f"{limit.variable}=N" in first
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


def test_the_limits_are_their_variables_values(tmp_path):
    outcome, err = train(
        tmp_path, "--timesteps", "101", "--n-envs", "3",
        env={MAX_TIMESTEPS.variable: "100", MAX_ENVS.variable: "2"},
    )  # fmt: skip
    assert outcome == {"code": 2, "heavy": []}, err
    assert "timesteps=101: expected at most 100 timesteps" in err
    assert "n_envs=3: expected at most 2 environments" in err


def test_the_limits_doc_states_the_limits():
    readme = LIMITS_DOC.read_text()
    for limit in (MAX_TIMESTEPS, MAX_ENVS):
        assert f"{limit.default:,}" in readme and f"`{limit.variable}`" in readme
