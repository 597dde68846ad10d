"""Learned policies: the model folder, layout checks, action rescaling, slot network, loading."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from repo_paths import MODEL_V0_1_0_CONVERTED
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from dlsched.envs.errors import ModelError, PolicyError, UnknownNameError
from dlsched.envs.observation import FEATURES, ObservationLayout
from dlsched.envs.rewards import telemetry_reward
from dlsched.envs.scenarios.file_format import parse_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.scheduling_env import SchedulingEnv
from dlsched.policies.agent_actions import ActionMapping, ActionMode, AgentActions
from dlsched.policies.learned import (
    CARD_FILE,
    MODEL_FILE,
    NORMALIZER_FILE,
    LearnedPolicy,
    ModelCard,
    load_model,
    save_model,
)
from dlsched.policies.normalization import (
    ObservationNormalizer,
    SlotPooledStatistics,
    slot_normalizer,
)
from dlsched.policies.slot_network import (
    OwnSlotPolicy,
    SlotActionHead,
    SlotActorCriticPolicy,
    own_rows_first,
)
from dlsched.runs.evaluation import run_episode
from dlsched.runs.policy_specs import resolve_policy
from dlsched.runs.training.environments import make_training_env
from dlsched.runs.training.slot_agents import SlotAgentVecEnv

SLOTS = 4


def scenario_data(slots: int = SLOTS, workers: int = 1) -> dict[str, object]:
    return {
        "name": f"learned-{workers}x{slots}",
        "kind": "inference",
        "interval_s": 10,
        "horizon_s": 60,
        "slots_per_worker": slots,
        "workers": {"count": workers, "cores": 8},
        "jobs": [
            {
                "workload": "resnet50",
                "count": 3,
                "arrival": {"kind": "burst"},
                "targets_s": [30, 60, 90],
            }
        ],
    }


def untrained_model(slots: int = SLOTS) -> tuple[PPO, ModelCard]:
    """A PPO agent with the slot network on a small inference scenario (not trained)."""
    scenario = parse_scenario(scenario_data(slots), "test")
    mapping = ActionMapping(ActionMode.RELATIVE, max_step=2.0)
    venv = DummyVecEnv([lambda: make_training_env([scenario], mapping)])
    normalizer = slot_normalizer(venv, gamma=0.99, normalize_reward=False)
    model = PPO(
        SlotActorCriticPolicy,
        normalizer,
        n_steps=32,
        batch_size=32,
        seed=0,
        policy_kwargs={"slots_per_worker": slots},
    )
    card = ModelCard(
        algo="ppo",
        kind=JobKind.INFERENCE,
        trained_on=(ObservationLayout(1, slots),),
        actions=mapping,
        scenarios=(scenario.name,),
    )
    return model, card


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, card = untrained_model()
    folder = tmp_path_factory.mktemp("model")
    return save_model(model, model.get_vec_normalize_env(), card, folder)


# --- actions ------------------------------------------------------------------------------


def observation_with_limits(limits: list[float]) -> np.ndarray:
    observation = np.zeros((len(limits), len(FEATURES)), dtype=np.float32)
    observation[:, FEATURES.index("limit")] = limits
    return observation


def test_absolute_actions_map_affinely_onto_limits_and_are_clipped() -> None:
    mapping = ActionMapping(ActionMode.ABSOLUTE)
    layout = ObservationLayout(1, 6)
    observation = observation_with_limits([0.3] * 6)  # ignored: absolute
    limits = mapping.to_limits(np.array([-1.0, 0.0, 1.0, 0.5, -3.0, 7.0]), observation, layout)
    assert limits.tolist() == pytest.approx([0.0, 0.5, 1.0, 0.75, 0.0, 1.0])
    assert limits.dtype == np.float32


def test_relative_actions_scale_the_limit_in_force() -> None:
    mapping = ActionMapping(ActionMode.RELATIVE, max_step=4.0)
    layout = ObservationLayout(1, 5)
    observation = observation_with_limits([0.2, 0.2, 0.2, 0.5, 0.0])
    limits = mapping.to_limits(np.array([0.0, 1.0, -0.5, 9.0, 1.0]), observation, layout)
    # hold, x4, /2, x4 capped at 1, an empty slot stays empty
    assert limits.tolist() == pytest.approx([0.2, 0.8, 0.1, 1.0, 0.0])
    batch = mapping.to_limits(np.zeros((2, 5)), np.stack([observation, observation]), layout)
    assert batch.shape == (2, 5)


def test_action_mappings_refuse_impossible_settings() -> None:
    with pytest.raises(PolicyError, match=r"max_step=1\.0 of relative actions must be > 1"):
        ActionMapping(ActionMode.RELATIVE, max_step=1.0)
    with pytest.raises(PolicyError, match=r"low=0\.5 and high=0\.5"):
        ActionMapping(low=0.5, high=0.5)


def test_training_environments_act_like_the_learned_policy(saved_model: Path) -> None:
    """The wrapper the agent trains in and the policy it is evaluated as map actions alike."""
    policy = load_model(saved_model)
    scenario = parse_scenario(scenario_data(), "test")
    env = AgentActions(
        gym.make("dlsched/Inference-v0", scenario=scenario),
        policy.card.actions,
        policy.card.input_layout,
    )
    observation, _ = env.reset(seed=1)
    for _ in range(3):
        expected, _ = policy.predict(observation)
        agent_action, _ = policy.model.predict(
            policy.normalizer.normalize_obs(observation), deterministic=True
        )
        observation, *_, info = env.step(agent_action)
        in_force = {job.job_id: job.limit for job in info["telemetry"].active_jobs}
        for job in info["telemetry"].active_jobs:
            assert in_force[job.job_id] == pytest.approx(max(expected[job.slot], 0.02), abs=1e-6)


def test_predict_returns_limits_for_one_observation_or_a_batch(saved_model: Path) -> None:
    policy = load_model(saved_model)
    observation = np.random.default_rng(0).random((SLOTS, len(FEATURES)), dtype=np.float32)
    single, _ = policy.predict(observation)
    batch, _ = policy.predict(np.stack([observation, observation]))
    assert single.shape == (SLOTS,)
    assert batch.shape == (2, SLOTS)
    assert np.all((single >= 0) & (single <= 1))
    np.testing.assert_allclose(batch[0], single, rtol=1e-6)


# --- the observation layout contract --------------------------------------------------------


def test_a_model_of_another_network_refuses_an_environment_with_another_layout(
    tmp_path: Path,
) -> None:
    scenario = parse_scenario(scenario_data(), "test")
    mapping = ActionMapping(ActionMode.RELATIVE, max_step=2.0)
    venv = DummyVecEnv([lambda: make_training_env([scenario], mapping)])
    mlp = PPO("MlpPolicy", venv, n_steps=32, batch_size=32, seed=0)
    card = ModelCard("ppo", JobKind.INFERENCE, (ObservationLayout(1, SLOTS),), mapping)
    policy = load_model(save_model(mlp, None, card, tmp_path / "mlp"))
    assert not policy.any_layout
    other = parse_scenario(scenario_data(slots=SLOTS + 1), "test")
    with pytest.raises(PolicyError) as caught:
        run_episode(other, policy, seed=0)
    message = str(caught.value)
    assert f"1 worker(s) x {SLOTS} slots" in message
    assert f"1 worker(s) x {SLOTS + 1} slots" in message
    assert "was trained on observation layout" in message


def test_model_refuses_a_layout_with_other_features(saved_model: Path) -> None:
    policy = load_model(saved_model)
    renamed = ObservationLayout(1, SLOTS, (*FEATURES[:-1], "something_else"))
    with pytest.raises(PolicyError, match="something_else"):
        policy.use_layout(renamed)
    policy.use_layout(ObservationLayout(1, SLOTS))  # its own layout passes


def test_model_refuses_an_observation_of_another_shape(saved_model: Path) -> None:
    policy = load_model(saved_model)
    with pytest.raises(PolicyError, match=rf"observation of shape \(5, {len(FEATURES)}\)"):
        policy.predict(np.zeros((5, len(FEATURES)), dtype=np.float32))


def test_learned_policy_runs_an_episode_like_a_baseline(saved_model: Path) -> None:
    policy = load_model(saved_model)
    head = policy.model.policy.action_net
    assert isinstance(head, SlotActionHead)
    with torch.no_grad():  # untrained actions are near 0: make them lower the limits, by row
        head.linear.weight.mul_(100.0)
        head.linear.bias.fill_(-0.5)
    scenario = parse_scenario(scenario_data(), "test")
    result = run_episode(scenario, policy, seed=3)
    assert result.policy.name == "ppo"
    assert dict(result.policy.params)["algo"] == "ppo"
    assert len(result.steps) == 7  # the reset and 60 s / 10 s steps
    assert result.metrics.satisfied_fraction_mean is not None
    limits = {c.limit for step in result.steps[1:] for c in step.containers}
    assert len(limits) > 1  # the network sets limits, not the environment's uncapped start


def test_stacked_frames_match_what_the_agent_saw_in_training() -> None:
    """LearnedPolicy stacks observations exactly as the training VecFrameStack does, episode
    boundaries included (by reset() as TelemetryFeed calls it, or by episode_start)."""
    scenario = parse_scenario(scenario_data(), "test")
    mapping = ActionMapping(ActionMode.RELATIVE)
    venv = VecFrameStack(
        DummyVecEnv([lambda: make_training_env([scenario], mapping)]), 3, channels_order="last"
    )
    venv.seed(5)
    model = PPO(SlotActorCriticPolicy, venv, n_steps=32, batch_size=32, seed=0)
    card = ModelCard("ppo", JobKind.INFERENCE, (ObservationLayout(1, SLOTS),), mapping, 3)
    policy = LearnedPolicy(model, card)
    stacked: Any = venv.reset()
    features = len(FEATURES)
    for step in range(9):  # more than one 6-step episode
        current = stacked[0, :, -features:]
        seen = policy._stacked(current[None], np.array([step == 6]))
        np.testing.assert_array_equal(seen, stacked)
        stacked, _, dones, _ = venv.step(np.zeros((1, SLOTS), dtype=np.float32))
        assert dones[0] == (step == 5)
    policy.reset()
    np.testing.assert_array_equal(policy._stacked(current[None], None)[0, :, :-features], 0.0)


# --- the model folder --------------------------------------------------------------------


def test_saved_model_reloads_with_identical_actions_and_statistics(saved_model: Path) -> None:
    assert {p.name for p in saved_model.iterdir()} == {MODEL_FILE, NORMALIZER_FILE, CARD_FILE}
    by_folder = load_model(saved_model)
    by_zip = load_model(saved_model / MODEL_FILE)
    observation = np.random.default_rng(1).random((SLOTS, len(FEATURES)), dtype=np.float32)
    np.testing.assert_array_equal(by_folder.predict(observation)[0], by_zip.predict(observation)[0])
    assert isinstance(by_folder.normalizer, ObservationNormalizer)
    card = json.loads((saved_model / CARD_FILE).read_text())
    assert card["network"] == "slot" and card["sb3_objects"] == {"clip_range": 0.2}


def test_saved_statistics_normalise_as_the_training_normaliser_bit_for_bit(tmp_path: Path) -> None:
    model, card = untrained_model()
    training = model.get_vec_normalize_env()
    assert training is not None
    rng = np.random.default_rng(4)
    training.obs_rms.update(rng.normal(3.0, 2.0, (64, SLOTS, len(FEATURES))))
    folder = save_model(model, training, card, tmp_path / "model")
    loaded = load_model(folder).normalizer
    assert isinstance(loaded, ObservationNormalizer)
    np.testing.assert_array_equal(loaded.mean, training.obs_rms.mean)
    np.testing.assert_array_equal(loaded.var, training.obs_rms.var)
    assert (loaded.count, loaded.epsilon, loaded.clip) == (
        training.obs_rms.count,
        training.epsilon,
        training.clip_obs,
    )
    batch = rng.normal(3.0, 20.0, (5, SLOTS, len(FEATURES))).astype(np.float32)
    batch[0, -1] = np.nan  # a padded row stays NaN
    np.testing.assert_array_equal(loaded.normalize_obs(batch), training.normalize_obs(batch))


def test_a_model_that_cannot_be_saved_as_data_is_refused(tmp_path: Path) -> None:
    model, card = untrained_model()
    model.clip_range = lambda progress: 0.1 + 0.1 * progress  # a schedule, not a number
    with pytest.raises(ModelError, match="'clip_range' cannot be saved as data: the schedule"):
        save_model(model, None, card, tmp_path / "schedule")
    model, card = untrained_model()
    with pytest.raises(ModelError, match="no network dlsched builds for a ppo model of per-slot"):
        save_model(model, None, dataclasses.replace(card, slot_agents=True), tmp_path / "agents")


def test_model_without_its_card_is_refused(saved_model: Path, tmp_path: Path) -> None:
    (tmp_path / MODEL_FILE).write_bytes((saved_model / MODEL_FILE).read_bytes())
    with pytest.raises(PolicyError, match=f"has no {CARD_FILE} beside it"):
        load_model(tmp_path / MODEL_FILE)


def test_card_of_a_newer_format_is_refused(saved_model: Path, tmp_path: Path) -> None:
    for name in (MODEL_FILE, NORMALIZER_FILE):
        (tmp_path / name).write_bytes((saved_model / name).read_bytes())
    data = json.loads((saved_model / CARD_FILE).read_text())
    data["format"] = 99
    (tmp_path / CARD_FILE).write_text(json.dumps(data))
    with pytest.raises(PolicyError, match="format 99, newer than"):
        load_model(tmp_path)


def test_card_round_trips_through_json() -> None:
    card = ModelCard(
        algo="sac",
        kind=JobKind.TRAINING,
        trained_on=(ObservationLayout(4, 10), ObservationLayout(1, 16)),
        actions=ActionMapping(ActionMode.RELATIVE, max_step=3.0),
        reward="active_jobs",
        scenarios=("a", "b"),
        run_id="abc123",
        dlsched_version="0.1.0",
        network="mlp",
        sb3_objects={"train_freq": [1, "step"]},
    )
    assert ModelCard.from_json(card.to_json(), "test") == card


def test_card_whose_layout_does_not_fit_the_model_is_refused() -> None:
    model, card = untrained_model()
    wrong = dataclasses.replace(card, trained_on=(ObservationLayout(2, SLOTS),))
    with pytest.raises(PolicyError, match=r"acts on \(4,\).*needs actions of shape \(8,\)"):
        LearnedPolicy(model, wrong)


def test_a_card_that_no_model_has_is_refused(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(MODEL_V0_1_0_CONVERTED, folder)
    card = json.loads((folder / CARD_FILE).read_text())
    card["trained_on"][0]["workers"] = 0
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelError, match="layout of 0 worker"):
        load_model(folder)
    card["trained_on"][0]["workers"] = 2
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelError, match="the card does not belong to this model"):
        load_model(folder)


# --- resolving --policy ------------------------------------------------------------------


def test_resolve_policy_builds_baselines_and_loads_models(saved_model: Path) -> None:
    assert resolve_policy("dqoes", {"alpha": 0.2}).params()["alpha"] == 0.2
    learned = resolve_policy(str(saved_model / MODEL_FILE))
    assert isinstance(learned, LearnedPolicy)
    assert learned.params()["model"] == str(saved_model / MODEL_FILE)
    with pytest.raises(UnknownNameError, match="dqos"):
        resolve_policy("dqos")


def test_resolve_policy_refuses_missing_models_and_parameters_for_them(saved_model: Path) -> None:
    with pytest.raises(PolicyError, match="does not exist"):
        resolve_policy("nowhere/model.zip")
    with pytest.raises(PolicyError, match="takes no parameters"):
        resolve_policy(str(saved_model), {"alpha": 0.2})


# --- normalisation and the slot network --------------------------------------------------


def test_pooled_statistics_are_per_feature_over_every_slot() -> None:
    rng = np.random.default_rng(0)
    batch = rng.random((50, SLOTS, 3))
    batch[:, 0, :] += 5.0  # a slot that differs from the others
    stats = SlotPooledStatistics(features=3, epsilon=1e-12)
    stats.update(batch)
    flat = batch.reshape(-1, 3)
    np.testing.assert_allclose(stats.mean, flat.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats.var, flat.var(axis=0), rtol=1e-6)
    assert stats.mean.shape == (3,)


def test_slot_network_is_equivariant_to_permuting_the_slots() -> None:
    model, _ = untrained_model()
    policy = model.policy
    rng = np.random.default_rng(2)
    observation = torch.as_tensor(rng.random((1, SLOTS, len(FEATURES)), dtype=np.float32))
    # make the actions distinguishable: the head starts near zero (orthogonal gain 0.01)
    head = policy.action_net
    assert isinstance(head, SlotActionHead)
    with torch.no_grad():
        head.linear.weight.mul_(100.0)
    order = [2, 0, 3, 1]
    with torch.no_grad():
        means = policy.get_distribution(observation).mode()
        permuted = policy.get_distribution(observation[:, order, :]).mode()
        values = policy.predict_values(observation)
        permuted_values = policy.predict_values(observation[:, order, :])
    assert not torch.allclose(means[0, 0], means[0, 1])
    torch.testing.assert_close(permuted[0], means[0, order])
    torch.testing.assert_close(permuted_values, values)


def test_slot_network_refuses_observations_that_are_not_slot_rows() -> None:
    flat = gym.spaces.Box(0, 1, (12,), np.float32)
    actions = gym.spaces.Box(-1, 1, (3,), np.float32)
    with pytest.raises(PolicyError, match="shape \\(slots, features\\)"):
        SlotActorCriticPolicy(flat, actions, lambda _: 3e-4)
    rows = gym.spaces.Box(0, 1, (4, 16), np.float32)
    with pytest.raises(PolicyError, match=r"action shape \(3,\) != \(4,\)"):
        SlotActorCriticPolicy(rows, actions, lambda _: 3e-4)


# --- per-slot agents ---------------------------------------------------------------------


def test_each_slot_sees_its_own_row_first() -> None:
    observation = np.arange(3 * 2, dtype=np.float32).reshape(3, 2)
    views = own_rows_first(observation)
    assert views.shape == (3, 3, 2)
    for slot in range(3):
        np.testing.assert_array_equal(views[slot, 0], observation[slot])
        assert sorted(map(tuple, views[slot])) == sorted(map(tuple, observation))
    assert own_rows_first(np.stack([observation, observation])).shape == (2, 3, 3, 2)


def test_per_slot_agents_act_in_evaluation_as_in_training() -> None:
    """A per-slot model sets, through LearnedPolicy, the limits its training vector set."""
    scenario = parse_scenario(scenario_data(), "test")
    mapping = ActionMapping(ActionMode.USAGE, max_step=1.5)
    layout = ObservationLayout(1, SLOTS)
    inner = DummyVecEnv([lambda: make_training_env([scenario], None)])
    venv = SlotAgentVecEnv(
        inner, mapping, layout, telemetry_reward("satisfied_fraction"), own_weight=0.5
    )
    model = PPO(OwnSlotPolicy, venv, n_steps=8, batch_size=32, seed=0)
    head = model.policy.action_net
    assert isinstance(head, torch.nn.Linear)
    with torch.no_grad():
        # distinguishable actions (the output layer starts near zero) that raise the limits from
        # the floor every job starts at in usage mode (it used no CPU before its first step)
        head.weight.mul_(10.0)
        head.bias.fill_(0.8)
    card = ModelCard("ppo", JobKind.INFERENCE, (layout,), mapping, slot_agents=True)
    policy = LearnedPolicy(model, card)
    venv.seed(4)
    views = venv.reset()
    assert isinstance(views, np.ndarray)
    env = inner.envs[0].unwrapped
    assert isinstance(env, SchedulingEnv)
    for _ in range(4):
        raw = views[0]  # slot 0's view is the observation itself
        expected, _ = policy.predict(raw)
        agent_actions, _ = model.predict(views, deterministic=True)
        stepped, rewards, _, _ = venv.step(agent_actions)
        assert isinstance(stepped, np.ndarray)
        views = stepped
        assert rewards.shape == (SLOTS,)
        for job in env.telemetry.active_jobs:
            assert job.limit == pytest.approx(max(expected[job.slot], 0.02), abs=1e-6)
    assert len({round(job.limit, 4) for job in env.telemetry.active_jobs}) > 1


def test_per_slot_rewards_split_own_and_shared_parts() -> None:
    data = scenario_data()
    data["jobs"] = [{**data["jobs"][0], "targets_s": [11, 60, 90]}]  # type: ignore[index]
    scenario = parse_scenario(data, "test")  # the first target is met uncapped
    mapping = ActionMapping(ActionMode.ABSOLUTE)
    layout = ObservationLayout(1, SLOTS)
    inner = [DummyVecEnv([lambda: make_training_env([scenario], None, reward="satisfied")])]
    inner.append(DummyVecEnv([lambda: make_training_env([scenario], None, reward="satisfied")]))
    satisfied = telemetry_reward("satisfied")
    own = SlotAgentVecEnv(inner[0], mapping, layout, satisfied, own_weight=1.0)
    shared = SlotAgentVecEnv(inner[1], mapping, layout, satisfied, own_weight=0.0)
    for venv in (own, shared):
        venv.seed(0)
        venv.reset()
    hold = np.ones((SLOTS, 1), dtype=np.float32)  # no cap
    seen: set[int | None] = set()
    for _ in range(5):  # the same actions and seed: the same episode in both
        _, own_rewards, _, _ = own.step(hold)
        _, shared_rewards, _, infos = shared.step(hold)
        telemetry = infos[0]["telemetry"]
        satisfied_slots = {job.slot for job in telemetry.active_jobs if job.qoe_class == "S"}
        assert own_rewards.tolist() == [float(s in satisfied_slots) for s in range(SLOTS)]
        assert shared_rewards.tolist() == [float(len(satisfied_slots))] * SLOTS
        seen |= satisfied_slots
    assert seen  # some job was satisfied, so the own parts were tested


@pytest.mark.parametrize(
    ("policy_class", "action_shape", "who"),
    [(SlotActorCriticPolicy, (4,), "the slot network"), (OwnSlotPolicy, (1,), "per-slot agents")],
)
def test_both_slot_policies_refuse_the_same_bad_networks(policy_class, action_shape, who):
    actions = gym.spaces.Box(0.0, 1.0, action_shape)
    with pytest.raises(PolicyError, match=r"observations of shape \(slots, features\), got \(4,\)"):
        policy_class(gym.spaces.Box(0.0, 1.0, (4,)), actions, lambda _: 1e-3)
    with pytest.raises(PolicyError, match=rf"net_arch \[0\] of {who} must be a list of positive"):
        policy_class(gym.spaces.Box(0.0, 1.0, (4, 3)), actions, lambda _: 1e-3, net_arch=[0])
