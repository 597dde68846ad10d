"""Models saved by earlier versions of dlsched still load and act as they did."""

from __future__ import annotations

import json

import numpy as np
from repo_paths import MODEL_V0_1_0

from dlsched.envs.scenarios import load_scenario
from dlsched.policies.learned import load_model
from dlsched.runs.evaluation import run_episode

BEFORE_LAYOUT = MODEL_V0_1_0


def test_a_model_saved_before_the_layout_predicts_the_actions_it_predicted_then() -> None:
    policy = load_model(BEFORE_LAYOUT)
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
        load_scenario(expected["scenario"]), load_model(BEFORE_LAYOUT), expected["seed"]
    )
    limits = [[container.limit for container in step.containers] for step in result.steps]
    assert len(limits) == len(expected["limits"])
    for step, (got, want) in enumerate(zip(limits, expected["limits"], strict=True)):
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"limits at step {step}")
    assert [step.satisfied for step in result.steps] == expected["satisfied"]
    assert result.metrics.satisfied_fraction_mean == expected["satisfied_fraction_mean"]
