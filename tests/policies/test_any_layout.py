"""Layout-free learned schedulers: one model of the slot network acts on any layout of its
features (workers x slots per worker), and refuses one of other features."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pytest
import torch
from repo_paths import MODEL_FIRST_RECIPE, MODEL_V0_1_0
from test_learned_policy import untrained_model

from dlsched.envs.errors import ModelError
from dlsched.envs.observation import FEATURES, ORIGINAL_FEATURES, ObservationLayout
from dlsched.envs.scenarios.file_format import parse_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.policies.learned import (
    CARD_FILE,
    LearnedPolicy,
    load_model,
    read_card,
    save_model,
)
from dlsched.policies.mlflow_model import SLOTS_PER_WORKER, save_mlflow_model
from dlsched.policies.pretrained import pretrained_folder, pretrained_names
from dlsched.policies.slot_network import SlotActionHead
from dlsched.runs.evaluation import run_episode

#: workers x slots per worker the test model is trained on, and the layouts it acts on.
TRAINED = (1, 4)
LAYOUTS = [(1, 10), (4, 10), (8, 16)]


def scenario(workers: int, slots_per_worker: int) -> Scenario:
    return parse_scenario(
        {
            "name": f"layout-{workers}x{slots_per_worker}",
            "kind": "inference",
            "interval_s": 10,
            "horizon_s": 60,
            "slots_per_worker": slots_per_worker,
            "workers": {"count": workers, "cores": 8},
            "jobs": [
                {
                    "workload": "resnet50",
                    "count": 3 * workers,
                    "arrival": {"kind": "burst"},
                    "targets_s": [30, 60, 90],
                }
            ],
        },
        "test",
    )


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of the slot network as `dlsched train` builds it, on a 1 x 4 layout (untrained:
    its actions are made large, so that they differ from slot to slot)."""
    model, card = untrained_model(TRAINED[1])
    head = model.policy.action_net
    assert isinstance(head, SlotActionHead)
    with torch.no_grad():
        head.linear.weight.mul_(100.0)
    return save_model(
        model, model.get_vec_normalize_env(), card, tmp_path_factory.mktemp("any-layout")
    )


def observations(layout: ObservationLayout, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((3, *layout.shape), dtype=np.float32)


def test_the_same_weights_give_one_action_per_slot_on_every_layout(model_folder: Path) -> None:
    policy = load_model(model_folder)
    weights = {name: value.clone() for name, value in policy.model.policy.state_dict().items()}
    assert policy.model.policy.log_std.shape == (1,)  # one log std shared by all slots
    for workers, slots_per_worker in LAYOUTS:
        layout = ObservationLayout(workers, slots_per_worker)
        policy.use_layout(layout)
        limits, _ = policy.predict(observations(layout))
        assert limits.shape == (3, workers * slots_per_worker)
        assert len(np.unique(limits.round(4))) > workers  # a limit of each slot's own
    for name, value in policy.model.policy.state_dict().items():
        torch.testing.assert_close(value, weights[name])


def test_permuting_the_jobs_over_the_slots_permutes_the_actions(model_folder: Path) -> None:
    """Within each worker, and the workers among themselves: a job's worker is its context."""
    policy = load_model(model_folder)
    layout = ObservationLayout(4, 10)
    policy.use_layout(layout)
    batch = observations(layout, seed=1)
    rng = np.random.default_rng(2)
    workers = rng.permutation(4)
    order = np.concatenate([10 * worker + rng.permutation(10) for worker in workers])
    limits, _ = policy.predict(batch)
    permuted, _ = policy.predict(batch[:, order])
    np.testing.assert_allclose(permuted, limits[:, order], rtol=1e-5)
    assert len(np.unique(limits.round(4))) > 10


def test_the_context_of_a_job_is_its_worker_and_the_cluster(model_folder: Path) -> None:
    """Moving a job to another worker moves its context: its action changes, unlike under a
    permutation within its worker."""
    policy = load_model(model_folder)
    layout = ObservationLayout(2, 4)
    policy.use_layout(layout)
    batch = observations(layout, seed=3)[:1]
    batch[0, 4:] *= 0.1  # the second worker's jobs differ from the first's
    swapped = batch.copy()
    swapped[0, [0, 4]] = batch[0, [4, 0]]
    limits, _ = policy.predict(batch)
    moved, _ = policy.predict(swapped)
    assert not np.isclose(moved[0, 4], limits[0, 0], rtol=1e-4)


def test_a_model_saved_on_one_layout_runs_episodes_on_others(model_folder: Path) -> None:
    policy = load_model(model_folder)
    for workers, slots_per_worker in [(2, 3), (3, 5)]:
        result = run_episode(scenario(workers, slots_per_worker), policy, seed=0)
        assert len(result.steps) == 7
        assert result.metrics.satisfied_fraction_mean is not None
        workers_used = {c.worker for step in result.steps[1:] for c in step.containers}
        assert workers_used == set(range(workers))


def test_a_model_whose_features_differ_is_refused(model_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "renamed"
    shutil.copytree(model_folder, folder)
    card = json.loads((folder / CARD_FILE).read_text())
    card["features"][-1] = "something_else"
    (folder / CARD_FILE).write_text(json.dumps(card))
    policy = load_model(folder)
    with pytest.raises(ModelError) as caught:
        run_episode(scenario(2, 3), policy, seed=0)
    message = str(caught.value)
    assert "was trained on observation layout [1 worker(s) x 4 slots" in message
    assert "something_else" in message and "2 worker(s) x 3 slots" in message


def test_the_card_records_the_features_and_reads_the_older_layouts(
    model_folder: Path, tmp_path: Path
) -> None:
    card = json.loads((model_folder / CARD_FILE).read_text())
    assert card["format"] == 4
    assert card["features"] == list(FEATURES)
    assert card["trained_on"] == [{"workers": 1, "slots_per_worker": 4}]
    assert card["network"] == "slot"
    assert "layout" not in card
    # older cards are read (to convert their models), though their models are not loaded
    old = read_card(MODEL_V0_1_0 / CARD_FILE)  # format 1: the features inside "layout"
    assert old.features == ORIGINAL_FEATURES
    assert old.trained_on == (ObservationLayout(1, 10, ORIGINAL_FEATURES),)
    assert old.network == "" and old.sb3_objects == {}
    folder = tmp_path / "format-2"  # format 2: the features beside its one layout
    folder.mkdir()
    (folder / CARD_FILE).write_text(
        json.dumps({**card, "format": 2, "trained_on": card["trained_on"][0]})
    )
    assert read_card(folder / CARD_FILE).trained_on == (ObservationLayout(1, 4),)


def pyfunc_predictions(folder: Path, destination: Path, layouts: list[ObservationLayout]):
    """The pyfunc model of ``folder``'s predictions on each layout, and its policy's."""
    loaded = mlflow.pyfunc.load_model(str(save_mlflow_model(folder, destination)))
    features = len(load_model(folder).card.features)  # the model's own, as its signature says
    assert loaded.metadata.get_input_schema().inputs[0].shape == (-1, -1, features)
    assert loaded.metadata.get_output_schema().inputs[0].shape == (-1, -1)
    policy = load_model(folder)
    for shape in layouts:
        # the MLflow Model takes the model's own features (its signature's)
        layout = ObservationLayout(shape.workers, shape.slots_per_worker, policy.card.features)
        batch = observations(layout)
        limits = loaded.predict(batch, params={SLOTS_PER_WORKER: layout.slots_per_worker})
        policy.use_layout(layout)
        policy.reset()
        expected, _ = policy.predict(batch)
        yield layout, limits, expected


def test_an_mlflow_model_predicts_on_two_layouts(model_folder: Path, tmp_path: Path) -> None:
    layouts = [ObservationLayout(*TRAINED), ObservationLayout(3, 5)]
    for layout, limits, expected in pyfunc_predictions(model_folder, tmp_path / "m", layouts):
        assert limits.shape == (3, layout.shape[0]) and limits.dtype == np.float32
        np.testing.assert_allclose(limits, expected, rtol=1e-6)


@pytest.mark.parametrize("name", pretrained_names())
def test_every_shipped_model_loads_through_mlflow_pyfunc_on_its_layout_and_clusters(
    name: str, tmp_path: Path
) -> None:
    folder = pretrained_folder(name)
    layouts = [ObservationLayout(1, 10), ObservationLayout(4, 10), ObservationLayout(8, 16)]
    for layout, limits, expected in pyfunc_predictions(folder, tmp_path / "m", layouts):
        assert limits.shape == (3, layout.shape[0])
        np.testing.assert_allclose(limits, expected, rtol=1e-6)


def test_a_model_of_per_slot_log_stds_shares_their_mean_on_another_layout() -> None:
    policy = load_model(MODEL_FIRST_RECIPE)
    network = policy.model.policy
    per_slot = network.log_std.detach().clone()
    assert per_slot.shape == (10,)  # saved before the shared log std

    def stddev(layout: ObservationLayout) -> torch.Tensor:
        policy.use_layout(layout)
        frames = np.zeros((1, layout.shape[0], 2 * len(policy.card.features)), dtype=np.float32)
        distribution = network.get_distribution(torch.as_tensor(frames)).distribution
        return distribution.stddev[0]

    torch.testing.assert_close(stddev(ObservationLayout(1, 10)), per_slot.exp())
    torch.testing.assert_close(
        stddev(ObservationLayout(4, 10)), per_slot.mean().exp().expand(40), rtol=1e-6, atol=0
    )
    assert isinstance(policy, LearnedPolicy)
