"""One model trained across layouts (workers x slots per worker): each training environment is
observed in the layout enclosing them all, its absent rows NaN; they stay out of the slot
network's pooling, of its action distribution, of the normaliser's statistics and of the
environment, and the model acts on any layout afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv
from test_training import TINY, write_scenario

from dlsched.envs.observation import FEATURES, ObservationLayout
from dlsched.envs.scenarios.file_format import load_scenario, parse_scenario
from dlsched.policies.agent_actions import ActionMapping, ActionMode, AgentActions
from dlsched.policies.learned import load_model
from dlsched.policies.normalization import SlotPooledStatistics
from dlsched.policies.slot_network import SlotActorCriticPolicy
from dlsched.runs.cli import main
from dlsched.runs.evaluation import run_episode
from dlsched.runs.training.environments import make_training_env
from dlsched.runs.training.harness import VALIDATION_FILE
from dlsched.runs.training.padded_layout import PaddedLayout

#: The layouts trained on, as the scenario fields that give them.
ONE_BY_FOUR = {"name": "tiny-1x4", "slots_per_worker": 4, "workers": {"count": 1, "cores": 8}}
TWO_BY_THREE = {"name": "tiny-2x3", "slots_per_worker": 3, "workers": {"count": 2, "cores": 8}}
#: A layout trained on by neither.
THREE_BY_TWO = {"name": "tiny-3x2", "slots_per_worker": 2, "workers": {"count": 3, "cores": 8}}


@pytest.fixture(scope="module")
def scenario_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("layouts")
    return {
        str(fields["name"]): write_scenario(folder, TINY, **fields)
        for fields in (ONE_BY_FOUR, TWO_BY_THREE, THREE_BY_TWO)
    }


@pytest.fixture(scope="module")
def training_folder(
    scenario_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """`dlsched train` on the 1 x 4 and the 2 x 3 scenario, as the shipped recipe trains (its
    actions, two stacked frames), validating on both: the training's folder."""
    out = tmp_path_factory.mktemp("out")
    code = main([
        "train", "--scenario", f"{scenario_files['tiny-1x4']},{scenario_files['tiny-2x3']}",
        "--timesteps", "512", "--n-envs", "2", "--seed", "0", "--net-arch", "16",
        "--actions", "share-idle", "--max-step", "64", "--frame-stack", "2",
        "--hp", "n_steps=64", "--hp", "batch_size=64", "--hp", "n_epochs=2",
        "--eval-every", "256", "--eval-episodes", "2", "--patience", "0",
        "--out", str(out), "--no-tracking", "--no-progress",
    ])  # fmt: skip
    assert code == 0
    (folder,) = out.glob("train-*")
    return folder


def test_one_model_trains_on_two_layouts_and_acts_on_each_and_a_third(
    training_folder: Path,
    scenario_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy = load_model(training_folder / "model")
    assert policy.card.trained_on == (ObservationLayout(1, 4), ObservationLayout(2, 3))
    assert policy.card.input_layout == ObservationLayout(2, 4)
    card = json.loads((training_folder / "model" / "dlsched-model.json").read_text())
    assert card["trained_on"] == [
        {"workers": 1, "slots_per_worker": 4},
        {"workers": 2, "slots_per_worker": 3},
    ]
    (validation, *_) = json.loads((training_folder / VALIDATION_FILE).read_text())
    assert {"tiny-1x4/satisfied_fraction_mean", "tiny-2x3/satisfied_fraction_mean"} <= set(
        validation["metrics"]
    )
    for name, path in scenario_files.items():
        scenario = load_scenario(path)
        result = run_episode(scenario, policy, seed=5)
        assert result.metrics.satisfied_fraction_mean is not None, name
        limits = {c.limit for step in result.steps[1:] for c in step.containers}
        assert len(limits) > 1, name  # the model set the limits, not one default
    capsys.readouterr()
    code = main([
        "evaluate", "--scenario", str(scenario_files["tiny-3x2"]),
        "--policy", f"default,{training_folder / 'model'}", "--episodes", "2", "--seed", "100",
        "--no-tracking", "--no-progress", "--json",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    (evaluated,) = json.loads(out)["scenarios"]
    assert len(evaluated["policies"]) == 2


def padded(
    observations: np.ndarray, layout: ObservationLayout, enclosing: ObservationLayout
) -> np.ndarray:
    """``observations`` of ``layout`` as the training environments pad them to ``enclosing``."""
    batch = np.full((len(observations), enclosing.shape[0], observations.shape[2]), np.nan)
    batch[:, layout.rows_within(enclosing)] = observations
    return batch.astype(np.float32)


def test_the_absent_rows_change_nothing_of_the_present_slots() -> None:
    """A 2 x 3 observation padded with an absent third worker and an absent fourth slot per
    worker: every present slot's action, the value, the log-probability of the present slots'
    actions and the entropy are those of the observation unpadded, whatever the absent slots'
    actions. Absent rows in any pooling (as rows of zeros, say) would move them all."""
    scenario = parse_scenario(TINY, "test")  # 1 x 4
    venv = DummyVecEnv([lambda: make_training_env([scenario], ActionMapping())])
    model = PPO(SlotActorCriticPolicy, venv, seed=0, policy_kwargs={"slots_per_worker": 4})
    network = model.policy
    assert isinstance(network, SlotActorCriticPolicy)
    with torch.no_grad():  # actions that differ from slot to slot (the head starts near 0)
        network.action_net.linear.weight.mul_(100.0)
    layout, enclosing = ObservationLayout(2, 3), ObservationLayout(3, 4)
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(5, *layout.shape)).astype(np.float32)
    observations[:, -1] = 0.0  # an empty slot on a present worker is present
    actions = rng.normal(size=(5, layout.shape[0])).astype(np.float32)
    padded_actions = np.full((5, enclosing.shape[0]), 7.0, dtype=np.float32)
    padded_actions[:, layout.rows_within(enclosing)] = actions
    with torch.no_grad():
        network.fit_layout(layout.workers, layout.slots_per_worker, 1)
        values, log_prob, entropy = network.evaluate_actions(
            torch.as_tensor(observations), torch.as_tensor(actions)
        )
        means = network.get_distribution(torch.as_tensor(observations)).distribution.mean
        network.fit_layout(enclosing.workers, enclosing.slots_per_worker, 1)
        padded_observations = torch.as_tensor(padded(observations, layout, enclosing))
        padded_values, padded_log_prob, padded_entropy = network.evaluate_actions(
            padded_observations, torch.as_tensor(padded_actions)
        )
        padded_means = network.get_distribution(padded_observations).distribution.mean
    torch.testing.assert_close(padded_means[:, layout.rows_within(enclosing)], means)
    torch.testing.assert_close(padded_values, values)
    torch.testing.assert_close(padded_log_prob, log_prob)
    torch.testing.assert_close(padded_entropy, entropy)
    assert torch.isfinite(padded_means).all()  # absent slots too: no NaN reaches a gradient


def test_a_padded_environment_runs_its_own_episode(scenario_files: dict[str, Path]) -> None:
    """Its own rows in their places of the enclosing layout, the others NaN; the absent slots'
    actions dropped, whatever they are."""
    scenario = load_scenario(scenario_files["tiny-2x3"])
    layout, enclosing = ObservationLayout(2, 3), ObservationLayout(2, 4)
    rows = layout.rows_within(enclosing)
    mapping = ActionMapping(ActionMode.USAGE, 1.5)
    plain = AgentActions(gym.make("dlsched/Inference-v0", scenario=scenario), mapping, layout)
    wrapped = PaddedLayout(gym.make("dlsched/Inference-v0", scenario=scenario), layout, enclosing)
    padded_env = AgentActions(wrapped, mapping, enclosing)
    observation, _ = plain.reset(seed=3)
    padded_observation, _ = padded_env.reset(seed=3)
    rng = np.random.default_rng(1)
    for _ in range(4):
        np.testing.assert_array_equal(padded_observation[rows], observation)
        absent = np.setdiff1d(np.arange(enclosing.shape[0]), rows)
        assert np.isnan(padded_observation[absent]).all()
        action = rng.uniform(-1, 1, layout.shape[0]).astype(np.float32)
        padded_action = rng.uniform(-1, 1, enclosing.shape[0]).astype(np.float32)
        padded_action[rows] = action
        observation, reward, *_ = plain.step(action)
        padded_observation, padded_reward, *_ = padded_env.step(padded_action)
        assert padded_reward == reward
    both = make_training_env(
        [load_scenario(scenario_files["tiny-1x4"]), scenario], mapping
    ).observation_space
    assert both.shape == enclosing.shape


def test_the_normaliser_counts_the_present_rows_only() -> None:
    rng = np.random.default_rng(2)
    layout, enclosing = ObservationLayout(2, 3), ObservationLayout(3, 4)
    observations = rng.random((4, layout.shape[0], len(FEATURES)), dtype=np.float32)
    plain = SlotPooledStatistics(len(FEATURES))
    plain.update(observations)
    statistics = SlotPooledStatistics(len(FEATURES))
    statistics.update(padded(observations, layout, enclosing))
    np.testing.assert_array_equal(statistics.mean, plain.mean)
    np.testing.assert_array_equal(statistics.var, plain.var)
    assert statistics.count == plain.count


def test_scenarios_of_two_kinds_are_still_not_trained_together(
    scenario_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "train", "--scenario", f"{scenario_files['tiny-1x4']},train-training-mix",
        "--timesteps", "64", "--out", str(tmp_path), "--no-tracking", "--no-progress",
    ])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == (
        "dlsched train: error: training scenario 'train-training-mix' has training jobs but "
        "'tiny-1x4' has inference jobs: training != inference; one model schedules one kind "
        "of job"
    )
    assert not any(tmp_path.iterdir())
