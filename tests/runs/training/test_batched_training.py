"""Training on the batched replay environment: the old path's episodes, PPO, saved models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecFrameStack

from dlsched.envs.errors import ScenarioError
from dlsched.envs.observation import ObservationLayout
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.policies.agent_actions import ActionMapping, ActionMode
from dlsched.policies.learned import ModelCard, load_model, save_model
from dlsched.policies.normalization import slot_normalizer
from dlsched.policies.slot_network import SlotActorCriticPolicy
from dlsched.runs.evaluation import run_episode
from dlsched.runs.training.batched_vec_env import BatchedVecEnv
from dlsched.runs.training.environments import VecEnvKind, make_vec_env, resolve_vec_env_kind

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


def test_auto_picks_batched_on_replay_where_it_can_and_refuses_it_elsewhere():
    assert resolve_vec_env_kind(VecEnvKind.AUTO, 8, "replay") is VecEnvKind.BATCHED
    assert resolve_vec_env_kind(VecEnvKind.AUTO, 8, "replay", scenarios=2) is VecEnvKind.DUMMY
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
