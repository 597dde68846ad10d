"""``dlsched models convert``: a model saved by dlsched 0.1.0 (statistics pickled, card format 3
or earlier) converted once, only with ``--trust-pickle``, into a folder that loads without
unpickling and acts exactly as the original."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from repo_paths import MODEL_V0_1_0, MODEL_V0_1_0_CONVERTED

from dlsched.envs.errors import ModelError, PolicyError
from dlsched.policies import conversion
from dlsched.policies.conversion import convert_model
from dlsched.policies.learned import CARD_FILE, MODEL_FILE, load_model
from dlsched.policies.model_files import NORMALIZER_FILE, PICKLED_NORMALIZER_FILE
from dlsched.policies.normalization import ObservationNormalizer
from dlsched.runs.cli import main


def earlier_model(tmp_path: Path) -> Path:
    folder = tmp_path / "earlier"
    shutil.copytree(MODEL_V0_1_0, folder)
    return folder


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_converting_without_trust_is_refused_and_changes_nothing(tmp_path, capsys):
    folder = earlier_model(tmp_path)
    before = contents(folder)
    with pytest.raises(PolicyError, match="runs any code they name; convert only a model whose"):
        convert_model(folder, None, trust_pickle=False)
    assert main(["models", "convert", str(folder), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--trust-pickle" in err, err
    assert contents(folder) == before and not (tmp_path / "out").exists()


def test_a_folder_is_converted_in_place_once(tmp_path, capsys):
    folder = earlier_model(tmp_path)
    archive = (folder / MODEL_FILE).read_bytes()
    assert main(["models", "convert", str(folder), "--trust-pickle"]) == 0
    out = capsys.readouterr().out
    assert "unpickled model.zip:policy_class, " in out and f", {PICKLED_NORMALIZER_FILE} of " in out
    assert "card format 1 -> 4, model.zip unchanged" in out and "bit for bit" in out
    assert sorted(contents(folder)) == sorted(
        [CARD_FILE, MODEL_FILE, NORMALIZER_FILE, "README.md", "expected-actions.npz",
         "expected-episode.json"]
    )  # fmt: skip
    assert (folder / MODEL_FILE).read_bytes() == archive
    assert (folder / CARD_FILE).read_bytes() == (MODEL_V0_1_0_CONVERTED / CARD_FILE).read_bytes()
    load_model(folder)
    assert main(["models", "convert", str(folder), "--trust-pickle"]) == 0
    assert "saved as data already (card format 4); nothing to convert" in capsys.readouterr().out


def test_an_output_folder_must_be_new(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(PolicyError, match="exists; give a folder that does not exist yet"):
        convert_model(MODEL_V0_1_0, tmp_path / "taken", trust_pickle=True)


def test_a_model_in_an_mlflow_store_is_converted_into_a_folder(tmp_path, mlflow_store, capsys):
    _, uri = mlflow_store
    client = MlflowClient(uri)
    experiment = client.create_experiment(
        f"convert-{tmp_path.name}", artifact_location=str(tmp_path / "artifacts")
    )
    run = client.create_run(experiment)
    client.log_artifacts(run.info.run_id, str(MODEL_V0_1_0), "model")
    spec = f"runs:/{run.info.run_id}/model"
    argv = ["models", "convert", spec, "--trust-pickle", "--tracking-uri", uri]
    assert main(argv) == 2
    assert "is in an MLflow store, which dlsched only reads: give --output DIR" in (
        capsys.readouterr().err
    )
    assert main([*argv, "--output", str(tmp_path / "converted")]) == 0
    converted = load_model(tmp_path / "converted")
    reference = load_model(MODEL_V0_1_0_CONVERTED)
    observations = np.random.default_rng(5).random((4, 10, 16), dtype=np.float32)
    np.testing.assert_array_equal(
        converted.predict(observations)[0], reference.predict(observations)[0]
    )


def test_a_conversion_that_would_act_otherwise_writes_nothing(tmp_path, monkeypatch):
    """The converted model is held against the unpickled one before anything is replaced."""
    folder = earlier_model(tmp_path)
    before = contents(folder)
    exact = ObservationNormalizer.of

    def shifted(normalizer):
        statistics = exact(normalizer)
        return ObservationNormalizer(
            statistics.mean + 1e-3,
            statistics.var,
            statistics.count,
            statistics.epsilon,
            statistics.clip,
        )

    monkeypatch.setattr(conversion.ObservationNormalizer, "of", shifted)
    with pytest.raises(ModelError, match="the converted model's limits differ from the original"):
        convert_model(folder, None, trust_pickle=True)
    assert contents(folder) == before
    assert [path.name for path in tmp_path.iterdir()] == ["earlier"]  # no staging left behind
