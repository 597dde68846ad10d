"""Models saved by earlier versions of dlsched, once converted (``dlsched models convert``), still
load and act as they did."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from repo_paths import (
    MODEL_FIRST_RECIPE,
    MODEL_V0_1_0,
    MODEL_V0_1_0_CONVERTED,
    PRETRAINED_ACTIONS,
)

from dlsched.envs.observation import FEATURES, ORIGINAL_FEATURES, ObservationLayout
from dlsched.envs.scenarios import load_scenario
from dlsched.policies.conversion import convert_model
from dlsched.policies.learned import load_model
from dlsched.runs.evaluation import run_episode

#: What the 0.1.0 model predicted and how its episode went, recorded when it was saved.
BEFORE_LAYOUT = MODEL_V0_1_0


def test_a_model_saved_before_the_layout_predicts_the_actions_it_predicted_then() -> None:
    policy = load_model(MODEL_V0_1_0_CONVERTED)
    recorded = np.load(BEFORE_LAYOUT / "expected-actions.npz")
    policy.reset()
    actions = [
        policy.predict(observation, deterministic=True)[0]
        for observation in recorded["observations"]
    ]
    np.testing.assert_allclose(np.array(actions), recorded["actions"], rtol=0, atol=1e-6)


def test_a_model_saved_before_the_layout_evaluates_to_the_same_episode() -> None:
    expected = json.loads((BEFORE_LAYOUT / "expected-episode.json").read_text())
    result = run_episode(
        load_scenario(expected["scenario"]), load_model(MODEL_V0_1_0_CONVERTED), expected["seed"]
    )
    limits = [[container.limit for container in step.containers] for step in result.steps]
    assert len(limits) == len(expected["limits"])
    for step, (got, want) in enumerate(zip(limits, expected["limits"], strict=True)):
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"limits at step {step}")
    assert [step.satisfied for step in result.steps] == expected["satisfied"]
    assert result.metrics.satisfied_fraction_mean == expected["satisfied_fraction_mean"]


def test_the_converted_fixture_is_what_the_conversion_makes(tmp_path: Path) -> None:
    converted = convert_model(MODEL_V0_1_0, tmp_path / "converted", trust_pickle=True)
    assert converted.destination == tmp_path / "converted"
    for name in ("model.zip", "normalizer.json", "dlsched-model.json"):
        made = (tmp_path / "converted" / name).read_bytes()
        assert made == (MODEL_V0_1_0_CONVERTED / name).read_bytes(), name
    assert sorted(path.name for path in MODEL_V0_1_0_CONVERTED.iterdir()) == [
        "dlsched-model.json",
        "model.zip",
        "normalizer.json",
    ]


def test_the_first_recipe_s_model_acts_as_it_did_when_its_files_were_pickles() -> None:
    """The model of the README's first recipe, shipped as ``pretrained:ppo-inference-mix`` until
    #43 and converted by `dlsched models convert --trust-pickle` (#44), holds no pickle and sets,
    to float32's rounding, the limits it set as it shipped (bit for bit on the CPU that recorded
    them; another CPU's vector kernels may round a last bit differently, 1e-7 relative on an AMD
    EPYC against the Intel Xeon); it reads the sixteen original features of observations that
    now hold more, or of observations recorded with those sixteen only."""
    assert sorted(path.name for path in MODEL_FIRST_RECIPE.iterdir()) == [
        "dlsched-model.json",
        "model.zip",
        "normalizer.json",
    ]
    recorded = np.load(PRETRAINED_ACTIONS, allow_pickle=False)
    scenario = load_scenario(str(recorded["ppo-inference-mix.scenario"]))
    observations = recorded["ppo-inference-mix.observations"]
    assert observations.shape[-1] == len(ORIGINAL_FEATURES)
    policy = load_model(MODEL_FIRST_RECIPE)
    assert policy.card.features == ORIGINAL_FEATURES
    policy.use_layout(ObservationLayout(len(scenario.workers), scenario.slots_per_worker))
    for given in (observations, _widened(observations)):
        policy.reset()
        actions = [policy.predict(observation)[0] for observation in given]
        np.testing.assert_allclose(
            np.stack(actions), recorded["ppo-inference-mix.actions"], rtol=1e-6, atol=1e-9
        )


def _widened(observations: np.ndarray) -> np.ndarray:
    """``observations`` of the original features as today's environments give them, the other
    features filled with noise the model must not read."""
    wide = np.random.default_rng(0).random((*observations.shape[:-1], len(FEATURES)))
    wide[..., : len(ORIGINAL_FEATURES)] = observations
    return wide.astype(np.float32)
