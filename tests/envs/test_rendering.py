"""Rendering: ``human``, ``ansi`` and ``rgb_array`` on both environments, as Gymnasium checks
them."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import HumanRendering

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs import InferenceEnv
from dlsched.envs.errors import ArgumentError
from dlsched.envs.rendering import FRAME_SHAPE, RENDER_MODES

IDS = {
    "dlsched/Inference-v0": "dqoes-resnet50-burst-target20",
    "dlsched/Training-v0": "flowcon-10-random",
}


@pytest.mark.parametrize("env_id", sorted(IDS))
def test_gymnasium_checks_pass_with_the_render_checks(env_id: str) -> None:
    env = gym.make(env_id, scenario=IDS[env_id])
    assert env.metadata["render_modes"] == list(RENDER_MODES)
    assert env.metadata["render_fps"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a render warning is a failure here
        check_env(env.unwrapped)  # skip_render_check=False: makes the env in every mode


@pytest.mark.parametrize("env_id", sorted(IDS))
def test_an_rgb_array_frame_draws_the_episode_so_far(env_id: str) -> None:
    env = gym.make(env_id, scenario=IDS[env_id], render_mode="rgb_array")
    env.reset(seed=0)
    first = env.render()
    for _ in range(5):
        env.step(np.full(env.action_space.shape, 0.5, dtype=np.float32))
    frame = env.render()
    env.close()
    assert isinstance(frame, np.ndarray) and isinstance(first, np.ndarray)
    assert frame.shape == (*FRAME_SHAPE, 3) and frame.dtype == np.uint8
    assert not np.array_equal(frame, first)  # the lines grew


def test_an_ansi_frame_names_every_active_job_with_its_limit_and_latency() -> None:
    env = gym.make("dlsched/Inference-v0", scenario=IDS["dlsched/Inference-v0"], render_mode="ansi")
    env.reset(seed=0)
    for _ in range(8):
        _, _, _, _, info = env.step(np.full(env.action_space.shape, 0.3, dtype=np.float32))
    text = env.render()
    env.close()
    assert isinstance(text, str)
    telemetry = info["telemetry"]
    assert telemetry.active_jobs
    assert f"satisfied {info['satisfied']}/{info['active']}" in text
    lines = text.splitlines()
    for job in telemetry.active_jobs:
        (line,) = [line for line in lines if line.startswith(job.job_id + " ")]
        assert job.workload in line and f"{job.limit:.2f}" in line
        assert f"{job.target_s:<6.1f}".strip() in line
        if job.qoe_class is not None:
            assert line.rstrip().endswith(job.qoe_class.value)


def test_an_ansi_frame_of_training_shows_loss_and_progress() -> None:
    env = gym.make("dlsched/Training-v0", scenario=IDS["dlsched/Training-v0"], render_mode="ansi")
    env.reset(seed=0)
    for _ in range(3):
        _, _, _, _, info = env.step(np.ones(env.action_space.shape, dtype=np.float32))
    text = env.render()
    env.close()
    assert isinstance(text, str)
    for job in info["telemetry"].active_jobs:
        assert f"{job.iterations}/{job.total_iterations}" in text


def test_no_render_mode_renders_nothing_and_an_unknown_one_is_refused() -> None:
    env = gym.make("dlsched/Inference-v0", scenario=IDS["dlsched/Inference-v0"])
    env.reset(seed=0)
    assert env.render() is None
    with pytest.raises(ArgumentError, match="render_mode='window'"):
        InferenceEnv(render_mode="window")


@pytest.mark.parametrize("env_id", sorted(IDS))
def test_human_mode_prints_the_table_at_every_step_without_a_window(
    env_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # once: gym.make wrapped the env in HumanRendering, which needs pygame (rl_zoo3.enjoy failed)
    env = gym.make(env_id, scenario=IDS[env_id], render_mode="human")
    assert not any(isinstance(wrapper, HumanRendering) for wrapper in _wrappers(env))
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.full(env.action_space.shape, 0.5, dtype=np.float32))
    assert env.render() is None
    printed = capsys.readouterr().out
    env.close()
    # one table at reset, one per step and one for the render call
    assert printed.count("t=") == 5, printed


def _wrappers(env: gym.Env) -> list[gym.Env]:
    chain = [env]
    while isinstance(chain[-1], gym.Wrapper):
        chain.append(chain[-1].env)
    return chain
