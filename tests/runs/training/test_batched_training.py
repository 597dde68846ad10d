"""Training on the batched replay environment: the old path's episodes, PPO, saved models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecFrameStack
from test_training import TINY

from dlsched.envs.errors import ScenarioError
from dlsched.envs.observation import FEATURES, ObservationLayout
from dlsched.envs.scenarios.file_format import load_scenario, parse_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.policies.agent_actions import ActionMapping, ActionMode
from dlsched.policies.learned import ModelCard, load_model, save_model
from dlsched.policies.normalization import slot_normalizer
from dlsched.policies.slot_network import SlotActorCriticPolicy
from dlsched.runs.evaluation import run_episode
from dlsched.runs.training.batched_vec_env import BatchedVecEnv
from dlsched.runs.training.environments import (
    VecEnvKind,
    environment_shares,
    make_vec_env,
    resolve_vec_env_kind,
)

MAPPING = ActionMapping(ActionMode.USAGE, max_step=1.5)


def test_batched_path_steps_the_dummy_paths_episodes():
    """Same seed, same actions: the same observations, rewards, dones and episode statistics."""
    scenario = load_scenario("train-inference-mix")
    paths = [
        make_vec_env([scenario], 3, MAPPING, kind, reward="satisfied_closeness")
        for kind in (VecEnvKind.BATCHED, VecEnvKind.DUMMY)
    ]
    assert isinstance(paths[0].unwrapped, BatchedVecEnv)
    for venv in paths:
        venv.seed(11)
    batched, dummy = (venv.reset() for venv in paths)
    np.testing.assert_array_equal(batched, dummy)
    rng = np.random.default_rng(0)
    episodes = 0
    for _ in range(185):  # train-inference-mix: 90 steps an episode
        actions = rng.uniform(-1, 1, (3, paths[0].action_space.shape[0])).astype(np.float32)
        (obs_b, rew_b, done_b, info_b), (obs_d, rew_d, done_d, info_d) = (
            venv.step(actions) for venv in paths
        )
        np.testing.assert_allclose(obs_b, obs_d, atol=1e-6)
        np.testing.assert_allclose(rew_b, rew_d, atol=1e-6)
        assert done_b.tolist() == done_d.tolist()
        for ours, theirs in zip(info_b, info_d, strict=True):
            for key in ("satisfied", "active", "time_s"):  # Python numbers, as the single env's
                assert (ours[key], type(ours[key])) == (theirs[key], type(theirs[key]))
            if "episode" in theirs:
                episodes += 1
                assert ours["episode"]["l"] == theirs["episode"]["l"]
                assert ours["episode"]["r"] == pytest.approx(theirs["episode"]["r"], abs=1e-5)
                assert ours["TimeLimit.truncated"] == theirs["TimeLimit.truncated"]
                np.testing.assert_allclose(
                    ours["terminal_observation"], theirs["terminal_observation"], atol=1e-6
                )
    assert episodes == 6  # every environment went through its autoreset
    for venv in paths:
        venv.close()


def test_scenarios_of_several_layouts_step_their_own_batched_episodes_padded():
    """Two scenarios (1 x 4 and 2 x 3 slots) with 3 environments: the first two are the 1 x 4
    scenario's, the third the 2 x 3 one's; each steps the episodes its own batched environment
    steps with the same seeds and its rows of the actions, observed in the 2 x 4 layout."""
    small = parse_scenario({**TINY, "name": "tiny-1x4"}, "tiny-1x4")
    wide = parse_scenario(
        {**TINY, "name": "tiny-2x3", "slots_per_worker": 3, "workers": {"count": 2, "cores": 8}},
        "tiny-2x3",
    )
    assert environment_shares(3, 2) == [2, 1]
    mixed = make_vec_env([small, wide], 3, MAPPING, VecEnvKind.BATCHED)
    assert isinstance(mixed.unwrapped, BatchedVecEnv)
    assert mixed.observation_space.shape == (8, len(FEATURES))
    own = [make_vec_env([small], 2, MAPPING), make_vec_env([wide], 1, MAPPING)]
    mixed.seed(11)
    own[0].seed(11)
    own[1].seed(13)  # environment 2 of the mix starts from seed 11 + 2
    small_rows = ObservationLayout(1, 4).rows_within(ObservationLayout(2, 4))
    wide_rows = ObservationLayout(2, 3).rows_within(ObservationLayout(2, 4))
    absent = np.setdiff1d(np.arange(8), wide_rows)

    def check(padded: np.ndarray, small_obs: np.ndarray, wide_obs: np.ndarray) -> None:
        np.testing.assert_array_equal(padded[:2, small_rows], small_obs)
        assert np.isnan(padded[:2, 4:]).all()
        np.testing.assert_array_equal(padded[2, wide_rows], wide_obs[0])
        assert np.isnan(padded[2, absent]).all()

    check(mixed.reset(), own[0].reset(), own[1].reset())
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(14):  # tiny-mix: 6 steps an episode
        actions = rng.uniform(-1, 1, (3, 8)).astype(np.float32)
        obs, rewards, dones, infos = mixed.step(actions)
        obs_s, rew_s, done_s, info_s = own[0].step(actions[:2, small_rows])
        obs_w, rew_w, done_w, info_w = own[1].step(actions[2:, wide_rows])
        check(obs, obs_s, obs_w)
        np.testing.assert_array_equal(rewards, np.concatenate([rew_s, rew_w]))
        assert dones.tolist() == [*done_s.tolist(), *done_w.tolist()]
        for index in np.flatnonzero(dones).tolist():
            ended += 1
            if index == 2:
                terminal = infos[2]["terminal_observation"]
                np.testing.assert_array_equal(
                    terminal[wide_rows], info_w[0]["terminal_observation"]
                )
                assert np.isnan(terminal[absent]).all()
            else:
                np.testing.assert_array_equal(
                    infos[index]["terminal_observation"][small_rows],
                    info_s[index]["terminal_observation"],
                )
            theirs = (info_s + info_w)[index]["episode"]
            assert infos[index]["episode"]["l"] == theirs["l"]
            assert infos[index]["episode"]["r"] == pytest.approx(theirs["r"], abs=1e-5)
    assert ended == 6  # each environment went through two autoresets
    for venv in (mixed, *own):
        venv.close()


def test_auto_picks_batched_on_replay_where_it_can_and_refuses_it_elsewhere():
    assert resolve_vec_env_kind(VecEnvKind.AUTO, 8, "replay") is VecEnvKind.BATCHED
    assert resolve_vec_env_kind(VecEnvKind.AUTO, 8, "replay", scenarios=2) is VecEnvKind.BATCHED
    assert resolve_vec_env_kind(VecEnvKind.AUTO, 1, "replay", scenarios=2) is VecEnvKind.DUMMY
    with pytest.raises(ScenarioError, match=r"1 environments for 2 scenarios.*--n-envs"):
        resolve_vec_env_kind(VecEnvKind.BATCHED, 1, "replay", scenarios=2)
    assert resolve_vec_env_kind(VecEnvKind.AUTO, 8, "replay", slot_agents=True) is (
        VecEnvKind.DUMMY
    )
    assert resolve_vec_env_kind(VecEnvKind.AUTO, 8, "docker") is VecEnvKind.SUBPROC
    with pytest.raises(ScenarioError, match=r"backend 'docker'.*use --vec-env dummy"):
        resolve_vec_env_kind(VecEnvKind.BATCHED, 8, "docker")


@pytest.fixture
def one_torch_thread():
    """As ``dlsched train`` runs (``--torch-threads 1``): tiny networks on a busy 2-core machine
    spend seconds a call in thread hand-offs otherwise."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_ppo_learns_on_the_batched_env_and_its_saved_model_runs_a_single_env(tmp_path: Path):
    scenario = load_scenario("train-inference-mix")
    venv = VecFrameStack(
        make_vec_env([scenario], 4, MAPPING, VecEnvKind.BATCHED, reward="satisfied_closeness"),
        2,
        channels_order="last",
    )
    normalizer = slot_normalizer(venv, gamma=0.95, normalize_reward=True)
    model = PPO(SlotActorCriticPolicy, normalizer, n_steps=256, batch_size=256, n_epochs=2, seed=0)
    model.set_logger(Logger(None, []))  # not SB3's own, which makes a folder in /tmp
    model.learn(total_timesteps=3072)
    assert model.num_timesteps >= 3072
    card = ModelCard(
        algo="ppo",
        kind=JobKind.INFERENCE,
        trained_on=(ObservationLayout(len(scenario.workers), scenario.slots_per_worker),),
        actions=MAPPING,
        frame_stack=2,
        scenarios=(scenario.name,),
    )
    save_model(model, normalizer, card, tmp_path / "model")
    venv.close()
    policy = load_model(tmp_path / "model")
    result = run_episode(scenario, policy, seed=3)
    assert len(result.steps) == round(scenario.horizon_s / scenario.interval_s) + 1
