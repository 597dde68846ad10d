"""A model file is data, not code (issue 44): a model whose files hold a pickle that would run
code as it is read is refused, or loaded with that pickle never read, by every way a model is
named (a folder, ``runs:/`` from an MLflow store, ``pretrained:``); nothing the pickle names
ever runs.

The malicious pickle here creates a marker file as it is unpickled (where a real one would start
a shell); every test asserts the marker is never created.
"""

from __future__ import annotations

import base64
import json
import pickle
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from mlflow import MlflowClient
from repo_paths import MODEL_V0_1_0, MODEL_V0_1_0_CONVERTED
from stable_baselines3.common import save_util

from dlsched.envs.errors import ModelError
from dlsched.envs.observation import FEATURES
from dlsched.policies import pretrained
from dlsched.policies.learned import CARD_FILE, MODEL_FILE, load_model
from dlsched.policies.mlflow_model import MODEL_CODE_FILE, save_mlflow_model
from dlsched.runs import resolve_policy
from dlsched.runs.cli import main

#: Where dlsched 0.1.0 kept a model's statistics, as a pickle.
PICKLED_STATISTICS = "vec_normalize.pkl"


class Payload:
    """Unpickled, it creates ``marker`` (``open(marker, "w")``): what a malicious model does in
    place of starting a shell."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def pickled_entry(marker: Path) -> dict[str, str]:
    """A ``data`` entry of an SB3 archive as SB3 writes a pickled one, holding the payload."""
    payload = base64.b64encode(pickle.dumps(Payload(marker))).decode()
    return {
        ":type:": "<class 'stable_baselines3.common.utils.FloatSchedule'>",
        ":serialized:": payload,
    }


def archive_data(folder: Path) -> dict[str, Any]:
    with zipfile.ZipFile(folder / MODEL_FILE) as archive:
        data: dict[str, Any] = json.loads(archive.read("data"))
    return data


#: The entries SB3 pickled into the converted fixture's model.zip (every one a PPO model has).
PICKLED_ENTRIES = [
    key
    for key, value in archive_data(MODEL_V0_1_0_CONVERTED).items()
    if isinstance(value, dict) and ":serialized:" in value
]


def tampered(
    tmp_path: Path,
    source: Path,
    entries: dict[str, Any] | None = None,
    members: dict[str, bytes] | None = None,
    files: dict[str, bytes] | None = None,
) -> Path:
    """A copy of the model folder ``source`` whose model.zip has ``entries`` in its ``data``
    and ``members`` in place of its own, and ``files`` beside it."""
    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    with zipfile.ZipFile(source / MODEL_FILE) as archive:
        kept = {name: archive.read(name) for name in archive.namelist()}
    kept["data"] = json.dumps({**archive_data(source), **(entries or {})}).encode()
    kept.update(members or {})
    with zipfile.ZipFile(folder / MODEL_FILE, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in kept.items():
            archive.writestr(name, data)
    for name, data in (files or {}).items():
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "the-payload-ran"


def forbid_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, fail the test if SB3 unpickles an archive's entry or anything calls
    ``pickle.load``."""

    def unpickled(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model's file was unpickled")

    monkeypatch.setattr(save_util.cloudpickle, "loads", unpickled)
    monkeypatch.setattr(pickle, "load", unpickled)


@pytest.fixture
def nothing_unpickled(monkeypatch: pytest.MonkeyPatch) -> None:
    forbid_unpickling(monkeypatch)


def refusal(load: Callable[[], object], marker: Path) -> str:
    """The message of the :class:`ModelError` that ``load()`` raises; the test fails first, and
    says so, if loading ran the payload."""
    try:
        load()
    except Exception as error:
        assert not marker.exists(), "loading the model ran its pickle"
        assert isinstance(error, ModelError), repr(error)
        return str(error)
    assert not marker.exists(), "loading the model ran its pickle"
    pytest.fail("the model was loaded, not refused")


def same_actions(policy: Any, reference: Any) -> None:
    observations = np.random.default_rng(3).random((8, 10, len(FEATURES)), dtype=np.float32)
    for each in (policy, reference):
        each.reset()
    np.testing.assert_array_equal(
        policy.predict(observations)[0], reference.predict(observations)[0]
    )


# --- a model saved by dlsched 0.1.0, as the probe found them ---------------------------------


def test_statistics_that_are_a_malicious_pickle_are_never_unpickled(tmp_path, marker):
    folder = tampered(
        tmp_path, MODEL_V0_1_0, files={PICKLED_STATISTICS: pickle.dumps(Payload(marker))}
    )
    message = refusal(lambda: load_model(folder), marker)
    assert "\n" not in message
    assert f"`dlsched models convert {folder} --trust-pickle`" in message
    assert "its statistics are a pickle, vec_normalize.pkl" in message


@pytest.mark.parametrize("key", PICKLED_ENTRIES)
def test_a_malicious_entry_of_an_earlier_model_is_never_unpickled(tmp_path, marker, key):
    """The probe's clip_range, and every other entry SB3 pickles into a model of 0.1.0."""
    folder = tampered(tmp_path, MODEL_V0_1_0, entries={key: pickled_entry(marker)})
    assert "dlsched models convert" in refusal(lambda: load_model(folder), marker)


def test_an_evaluation_refuses_a_malicious_clip_range_before_it_runs(tmp_path, marker, capsys):
    folder = tampered(tmp_path, MODEL_V0_1_0, entries={"clip_range": pickled_entry(marker)})
    argv = ["evaluate", "--scenario", "dqoes-varied-burst", "--policy", str(folder)]
    code = main([*argv, "--episodes", "1", "--no-tracking", "--no-progress"])
    err = capsys.readouterr().err
    assert not marker.exists(), "the evaluation ran the model's pickle"
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "dlsched models convert" in err and "--trust-pickle" in err


# --- a model folder of data --------------------------------------------------------------------


@pytest.mark.parametrize("key", PICKLED_ENTRIES)
def test_no_pickled_entry_of_an_archive_is_unpickled(tmp_path, marker, nothing_unpickled, key):
    """Whatever an archive pickles under any entry SB3 writes, the model loads from its card
    and acts as the untouched one."""
    folder = tampered(tmp_path, MODEL_V0_1_0_CONVERTED, entries={key: pickled_entry(marker)})
    same_actions(load_model(folder), load_model(MODEL_V0_1_0_CONVERTED))
    assert not marker.exists()


def test_the_card_s_values_stand_for_the_archive_s_pickles(tmp_path, marker, nothing_unpickled):
    folder = tampered(
        tmp_path, MODEL_V0_1_0_CONVERTED, entries={"clip_range": pickled_entry(marker)}
    )
    model = load_model(folder).model
    card = json.loads((folder / CARD_FILE).read_text())
    assert model.clip_range(1.0) == card["sb3_objects"]["clip_range"] == 0.2
    assert model.observation_space.shape == (10, 2 * len(card["features"]))
    assert not marker.exists()


@pytest.mark.parametrize("key", ["action_noise", "evil"])
def test_a_pickled_entry_that_nothing_rebuilds_is_refused(tmp_path, marker, key):
    folder = tampered(tmp_path, MODEL_V0_1_0_CONVERTED, entries={key: pickled_entry(marker)})
    message = refusal(lambda: load_model(folder), marker)
    assert f"holds pickled '{key}', which dlsched never unpickles" in message


def test_a_plain_environment_name_in_an_archive_is_not_made(tmp_path, nothing_unpickled):
    """SB3's load would ``gym.make`` an ``env`` it finds in the data (its save never writes
    one): a model says nothing about environments."""
    folder = tampered(tmp_path, MODEL_V0_1_0_CONVERTED, entries={"env": "dlsched/Inference-v0"})
    assert load_model(folder).model.env is None


def test_a_stale_pickle_beside_a_model_of_data_is_never_read(tmp_path, marker, nothing_unpickled):
    folder = tampered(
        tmp_path,
        MODEL_V0_1_0_CONVERTED,
        files={PICKLED_STATISTICS: pickle.dumps(Payload(marker))},
    )
    same_actions(load_model(folder), load_model(MODEL_V0_1_0_CONVERTED))
    assert not marker.exists()


def test_statistics_that_are_not_json_are_refused(tmp_path, marker, nothing_unpickled):
    folder = tampered(
        tmp_path,
        MODEL_V0_1_0_CONVERTED,
        files={"normalizer.json": pickle.dumps(Payload(marker))},
    )
    assert "normalizer.json" in refusal(lambda: load_model(folder), marker)


def test_weights_that_pickle_an_object_are_refused(tmp_path, marker):
    """``torch.load(weights_only=True)`` reads tensors and plain containers, nothing else."""
    weights = tmp_path / "weights.pth"
    torch.save({"payload": Payload(marker)}, weights)
    folder = tampered(
        tmp_path, MODEL_V0_1_0_CONVERTED, members={"pytorch_variables.pth": weights.read_bytes()}
    )
    assert "is not a dlsched model" in refusal(lambda: load_model(folder), marker)


def test_every_weight_file_is_read_with_weights_only(monkeypatch):
    calls: list[dict[str, Any]] = []
    load = torch.load

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recorded)
    load_model(MODEL_V0_1_0_CONVERTED)
    assert len(calls) == 3  # policy, its optimiser, the PyTorch variables
    assert all(call.get("weights_only") is True for call in calls)


# --- every way of naming a model goes through the same loader ---------------------------------


def logged(client: MlflowClient, experiment: str, folder: Path) -> str:
    """Log ``folder`` as the ``model`` artifact of a new run; its ``runs:/`` URI."""
    run = client.create_run(experiment)
    client.log_artifacts(run.info.run_id, str(folder), "model")
    return f"runs:/{run.info.run_id}/model"


def test_a_model_from_an_mlflow_store_goes_through_the_same_loader(
    tmp_path, marker, mlflow_store, monkeypatch
):
    _, uri = mlflow_store
    client = MlflowClient(uri)
    experiment = client.create_experiment(
        f"malicious-{tmp_path.name}", artifact_location=str(tmp_path / "artifacts")
    )
    earlier = tampered(
        tmp_path / "earlier",
        MODEL_V0_1_0,
        entries={"clip_range": pickled_entry(marker)},
        files={PICKLED_STATISTICS: pickle.dumps(Payload(marker))},
    )
    earlier_uri = logged(client, experiment, earlier)
    message = refusal(lambda: resolve_policy(earlier_uri, tracking_uri=uri), marker)
    assert f"`dlsched models convert {earlier_uri} --trust-pickle --output DIR`" in message
    # a model of data whose archive pickles a payload, beside MLflow's python_function code
    # changed to run one: dlsched reads the data and runs neither
    forbid_unpickling(monkeypatch)
    folder = tampered(
        tmp_path / "data", MODEL_V0_1_0_CONVERTED, {"clip_range": pickled_entry(marker)}
    )
    mlflow_model = save_mlflow_model(folder, tmp_path / "mlflow-model")
    assert not [path for path in mlflow_model.rglob("*") if path.suffix in (".pkl", ".pickle")]
    (mlflow_model / MODEL_CODE_FILE).write_text(f"open({str(marker)!r}, 'w')\n")
    policy = resolve_policy(logged(client, experiment, mlflow_model), tracking_uri=uri)
    same_actions(policy, load_model(MODEL_V0_1_0_CONVERTED))
    assert not marker.exists()


def test_a_shipped_model_goes_through_the_same_loader(tmp_path, marker, monkeypatch):
    folders = {
        "earlier": tampered(
            tmp_path / "earlier", MODEL_V0_1_0, entries={"clip_range": pickled_entry(marker)}
        ),
        "data": tampered(
            tmp_path / "data", MODEL_V0_1_0_CONVERTED, entries={"clip_range": pickled_entry(marker)}
        ),
    }
    monkeypatch.setattr(pretrained, "pretrained_folder", lambda name: folders[name])
    monkeypatch.setattr(pretrained, "pretrained_names", lambda: sorted(folders))
    assert "dlsched models convert" in refusal(lambda: resolve_policy("pretrained:earlier"), marker)
    forbid_unpickling(monkeypatch)
    same_actions(resolve_policy("pretrained:data"), load_model(MODEL_V0_1_0_CONVERTED))
    assert not marker.exists()
