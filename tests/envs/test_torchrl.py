"""TorchRL builds the environments by their ids: its ``GymEnv`` passes ``frameskip`` to
``gym.make`` and drops it on the ``TypeError`` Python raises for an unexpected keyword, which
dlsched raises as Python words it. Skipped where torchrl is not installed (it is in no extra:
``pip install torchrl`` beside dlsched's setup)."""

from __future__ import annotations

import pytest

torchrl_gym = pytest.importorskip("torchrl.envs.libs.gym")
torchrl_utils = pytest.importorskip("torchrl.envs.utils")

import dlsched.envs  # noqa: E402, F401  # registers the environments


@pytest.mark.parametrize(
    ("env_id", "scenario"),
    [
        ("dlsched/Inference-v0", "dqoes-resnet50-burst-target20"),
        ("dlsched/Training-v0", "docker-smoke-training"),
    ],
)
def test_torchrl_gym_env_builds_the_environments_and_their_specs_check(
    env_id: str, scenario: str
) -> None:
    env = torchrl_gym.GymEnv(env_id, scenario=scenario)
    try:
        assert env.wrapper_frame_skip == 1  # frameskip dropped, and TorchRL repeats no action
        env.set_seed(0)
        torchrl_utils.check_env_specs(env)
        rollout = env.rollout(3)
        assert rollout["next", "reward"].shape == (3, 1)
        assert rollout["observation"].shape == (3, *env.observation_spec["observation"].shape)
    finally:
        env.close()
