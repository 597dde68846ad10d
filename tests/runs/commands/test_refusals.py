"""Bad input on the command line, as a new user gives it: each case measured on an earlier dlsched
is refused with one message naming the value, what was expected and the fix, and exit code 2,
before anything runs or is recorded; never a traceback.
"""

from __future__ import annotations

import shutil
import uuid
import zipfile
from pathlib import Path

import pytest
from repo_paths import MODEL_V0_1_0_CONVERTED

from dlsched.envs.errors import ModelError
from dlsched.runs.cli import main
from dlsched.runs.tracking.target import ENV_VAR

MODEL = MODEL_V0_1_0_CONVERTED  # an inference model


@pytest.fixture
def store(mlflow_store, monkeypatch, tmp_path):
    """The session's sqlite store as the environment's tracking URI, run from ``tmp_path``."""
    _, uri = mlflow_store
    monkeypatch.setenv(ENV_VAR, uri)
    monkeypatch.chdir(tmp_path)
    return uri


def cli(capsys, *args: str) -> tuple[int, str]:
    """Exit code and stderr of ``dlsched ARGS`` in this process (argparse's exits included)."""
    try:
        code = main(list(args))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


def damaged_model(tmp_path: Path, how: str) -> Path:
    """A copy of the fixture model whose model.zip is truncated or another program's zip."""
    folder = tmp_path / f"model-{how}"
    shutil.copytree(MODEL, folder)
    model = folder / "model.zip"
    if how == "truncated":
        model.write_bytes(model.read_bytes()[:2000])
    else:
        model.unlink()
        with zipfile.ZipFile(model, "w") as archive:
            archive.writestr("readme.txt", "not a model")
    return model


@pytest.mark.parametrize("how", ["truncated", "foreign"])
def test_a_damaged_model_file_is_not_a_dlsched_model(capsys, tmp_path, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    model = damaged_model(tmp_path, how)
    code, err = cli(
        capsys, "evaluate", "--scenario", "dqoes-varied-burst", "--policy", str(model),
        "--no-tracking", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert f"{str(model)!r} is not a dlsched model" in err


def test_an_inference_model_is_refused_on_a_training_scenario(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = cli(
        capsys, "evaluate", "--scenario", "flowcon-10-random", "--policy", str(MODEL),
        "--no-tracking", "--no-progress",
    )  # fmt: skip
    assert code == 2
    assert "schedules inference jobs" in err and "'flowcon-10-random' has training jobs" in err


def test_a_model_is_refused_before_any_episode_runs(tmp_path):
    from dlsched.envs.scenarios import load_scenario
    from dlsched.runs.policy_specs import build_policies

    with pytest.raises(ModelError, match="schedules inference jobs"):
        build_policies([str(MODEL)], {}, scenarios=[load_scenario("flowcon-10-random")])


def test_a_negative_seed_is_refused_before_anything_is_recorded(capsys, store, tmp_path):
    code, err = cli(
        capsys, "evaluate", "--scenario", "dqoes-varied-burst", "--policy", "default",
        "--seed", "-5", "--out", "records",
    )  # fmt: skip
    assert code == 2 and "argument --seed: -5 is negative" in err
    assert not (tmp_path / "records").exists()


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("learning_rate=abc", "learning_rate='abc' (str) for PPO: expected a number"),
        ("n_steps=0", "n_steps=0 for PPO: expected a number >= 1"),
        ("batch_size=-1", "batch_size=-1 for PPO: expected a number > 1"),
        ("lerning_rate=0.1", "did you mean 'learning_rate'?"),
    ],
)
def test_a_bad_hyperparameter_is_refused_before_training_starts(
    capsys, store, tmp_path, setting, named
):
    code, err = cli(
        capsys, "train", "--scenario", "dqoes-varied-burst", "--timesteps", "64",
        "--hp", setting, "--out", "trainings", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert named in err
    assert not (tmp_path / "trainings").exists()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--imitate", "oracle", "--teacher-set", "frugl=true"], "has no parameter 'frugl'"),
        (["--imitate", "oracel"], "unknown baseline 'oracel'. Did you mean 'oracle'?"),
        (["--teacher-set", "frugal=true"], "--teacher-set need --imitate TEACHER"),
    ],
)
def test_a_bad_teacher_is_refused_before_training_starts(capsys, store, tmp_path, options, named):
    code, err = cli(
        capsys, "train", "--scenario", "train-host-inference", "--timesteps", "64",
        "--actions", "share-idle", *options, "--out", "trainings", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert named in err
    assert not (tmp_path / "trainings").exists()


def test_sb3s_own_assertions_are_refused_as_a_configuration(capsys, store, tmp_path):
    # PPO asserts n_steps * n_envs > 1 as it builds the model: the range check cannot see it
    code, err = cli(
        capsys, "train", "--scenario", "dqoes-varied-burst", "--timesteps", "64",
        "--hp", "n_steps=1", "--no-tracking", "--eval-every", "0", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "ppo refused the hyperparameters" in err


def test_compare_refuses_a_plot_it_cannot_write(capsys, store):
    code, err = cli(capsys, "compare", "--plot", "/dev/null/x.png")
    assert code == 2 and "argument --plot" in err and "'/dev/null' is a file" in err
    code, err = cli(capsys, "compare", "--plot", "comparison.txt")
    assert code == 2 and "does not end in an image format" in err


def test_compare_names_an_unknown_scenario(capsys, store, tmp_path):
    code, err = cli(
        capsys, "evaluate", "--scenario", "dqoes-resnet50-burst-target20", "--policy",
        "default", "--episodes", "1", "--no-progress", "--no-plots",
        "--experiment", f"bad-input-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    assert code == 0, err
    code, err = cli(capsys, "compare", "--scenario", "dqoes-resnet50-burst-target2", "--no-plot")
    assert code == 2
    assert "unknown scenario 'dqoes-resnet50-burst-target2'" in err
    assert "Did you mean 'dqoes-resnet50-burst-target20'?" in err


@pytest.mark.parametrize("command", ["evaluate", "compare", "train", "validate"])
def test_an_empty_tracking_uri_is_refused(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    required = {
        "evaluate": ["--scenario", "dqoes-varied-burst", "--policy", "default"],
        "compare": [],
        "train": ["--scenario", "dqoes-varied-burst", "--timesteps", "1"],
        "validate": ["--scenario", "dqoes-varied-burst", "--policy", "default"],
    }[command]
    code, err = cli(capsys, command, *required, "--tracking-uri", "")
    assert code == 2 and "argument --tracking-uri: '' is empty" in err


def test_a_misspelt_scenario_is_suggested_before_the_names_known(capsys, tmp_path, monkeypatch):
    """Issue 34 item 6: the suggestion came at the end of a ~900-character line."""
    monkeypatch.chdir(tmp_path)
    code, err = cli(
        capsys, "evaluate", "--scenario", "dqoes-varied-brust", "--policy", "default",
        "--episodes", "1", "--no-tracking",
    )  # fmt: skip
    assert code == 2
    assert err.startswith(
        "dlsched evaluate: error: unknown scenario 'dqoes-varied-brust'. "
        "Did you mean 'dqoes-varied-burst'? Known: "
    )
    assert "flowcon-poc-3" in err.splitlines()[0]
