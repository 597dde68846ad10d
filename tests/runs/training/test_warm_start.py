"""Starting a training from a trained model (``--init-from``) and holding its actor while the
critic learns (``--critic-warmup``): :mod:`dlsched.runs.training.warm_start`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from dlsched.baselines import make
from dlsched.envs.errors import PolicyError
from dlsched.envs.rewards import CHARGING_REWARD, CORE_CHARGE
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.policies.agent_actions import ActionMode
from dlsched.policies.learned import LearnedPolicy, load_model
from dlsched.policies.normalization import slot_normalizer
from dlsched.policies.pretrained import load_pretrained
from dlsched.runs.evaluation.runners import run_episodes
from dlsched.runs.training import harness
from dlsched.runs.training.callbacks import validation_score
from dlsched.runs.training.config import TrainingConfig, VecEnvKind
from dlsched.runs.training.warm_start import actor_parameters, check_start, load_start, warm_start

SHIPPED = "pretrained:ppo-inference"
SCENARIO = "docker-inference-3"


@pytest.fixture(scope="module")
def shipped() -> LearnedPolicy:
    return load_pretrained(SHIPPED)


def _config(shipped: LearnedPolicy, **changes: object) -> TrainingConfig:
    """A short fine-tuning of the shipped inference scheduler under the charging reward: two
    PPO updates of 64 timesteps each, in the shipped model's action mode and layout of inputs."""
    config = TrainingConfig(
        algo="ppo",
        scenarios=(SCENARIO,),
        timesteps=128,
        n_envs=4,
        eval_every=0,
        actions=shipped.card.actions.mode,
        max_step=shipped.card.actions.max_step,
        frame_stack=shipped.card.frame_stack,
        net_arch=(128, 128),
        features=shipped.card.features,
        reward=CHARGING_REWARD,
        hyperparams=(("n_steps", 16), ("batch_size", 32), ("n_epochs", 2)),
        vec_env=VecEnvKind.BATCHED,
        init_from=SHIPPED,
    )
    return dataclasses.replace(config, **changes)


def _weights(policy: LearnedPolicy) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in policy.model.policy.state_dict().items()}


def _actor_names(policy: LearnedPolicy) -> set[str]:
    held = {id(parameter) for parameter in actor_parameters(policy.model.policy)}
    return {
        name for name, parameter in policy.model.policy.named_parameters() if id(parameter) in held
    }


def _trained(config: TrainingConfig, tmp_path: Path) -> LearnedPolicy:
    result = harness.train(config, tmp_path, progress=False)
    return load_model(result.folder / harness.FINAL_MODEL_DIR)


def test_the_actor_is_what_the_value_does_not_read(shipped: LearnedPolicy) -> None:
    names = _actor_names(shipped)
    assert names == {
        name
        for name, _ in shipped.model.policy.named_parameters()
        if name.startswith(("mlp_extractor.actor_", "action_net.", "log_std"))
    }
    assert "log_std" in names and not any("critic" in name or "value" in name for name in names)


def test_a_warm_start_keeps_the_models_actions_until_the_critic_has_warmed_up(
    shipped: LearnedPolicy, tmp_path: Path
) -> None:
    before = _weights(shipped)
    actor = _actor_names(shipped)
    # both updates' rollouts end within the warm-up: the actor is held through them
    held = _trained(_config(shipped, critic_warmup=128), tmp_path / "held")
    after = _weights(held)
    assert all(torch.equal(after[name], before[name]) for name in actor)
    critic = [name for name in after if name.startswith(("mlp_extractor.critic_", "value_net."))]
    assert critic and all(not torch.equal(after[name], before[name]) for name in critic)
    # the statistics the actor reads its inputs by are the model's, unmoved by the training's
    assert held.normalizer is not None and shipped.normalizer is not None
    for name in ("mean", "var", "count"):
        assert getattr(held.normalizer, name) == pytest.approx(getattr(shipped.normalizer, name))

    # the second update's rollout ends past a warm-up of 64: the actor learns in it
    released = _weights(_trained(_config(shipped, critic_warmup=64), tmp_path / "released"))
    assert any(not torch.equal(released[name], before[name]) for name in actor)


def test_a_model_the_training_would_not_build_is_refused_with_the_fix(
    shipped: LearnedPolicy,
) -> None:
    config = _config(shipped, frame_stack=1, actions=ActionMode.RELATIVE, max_step=None)
    with pytest.raises(PolicyError) as refused:
        check_start(shipped, config, JobKind.INFERENCE)
    message = str(refused.value)
    assert "frame stack 2 != the training's 1 (use --frame-stack 2)" in message
    assert "share-idle (max step 64) != the training's relative (max step 2)" in message
    with pytest.raises(PolicyError, match="job kind inference != the training's training"):
        check_start(shipped, _config(shipped), JobKind.TRAINING)
    all_features = _config(shipped, features=(*shipped.card.features, "throttle_ratio"))
    with pytest.raises(PolicyError, match="the training's add throttle_ratio; use --features"):
        check_start(shipped, all_features, JobKind.INFERENCE)
    check_start(shipped, _config(shipped), JobKind.INFERENCE)  # the same: no refusal


def test_weights_of_other_widths_are_refused_naming_the_option(shipped: LearnedPolicy) -> None:
    config = _config(shipped, net_arch=(64, 64))
    scenarios = [load_scenario(SCENARIO)]
    venv = harness._training_env(config, scenarios)
    normalizer = slot_normalizer(venv, 0.99, normalize_reward=True)
    card = harness._model_card(config, scenarios, None)
    model = harness._build_model(config, normalizer, card.input_layout)
    with pytest.raises(PolicyError, match=r"\(128, \d+\) != \(64, \d+\).*--net-arch"):
        warm_start(model, normalizer, shipped)
    venv.close()


def test_a_baseline_is_no_model_to_start_from() -> None:
    with pytest.raises(PolicyError, match=r"'dqoes' names no trained model.*--imitate"):
        load_start("dqoes", None)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"critic_warmup": -1}, "critic_warmup=-1 must be >= 0"),
        (
            {"critic_warmup": 10, "algo": "sac", "network": "mlp", "hyperparams": ()},
            "holds the actor of an actor-critic",
        ),
    ],
)
def test_a_critic_warmup_is_refused_where_it_cannot_hold(
    shipped: LearnedPolicy, changes: dict[str, object], problem: str
) -> None:
    with pytest.raises(PolicyError, match=problem):
        _config(shipped, **changes).check()


def test_a_model_charged_for_its_cores_is_validated_net_of_the_charge() -> None:
    scenario = load_scenario(SCENARIO)
    episodes = run_episodes(scenario, make("dqoes"), [0, 1])
    cores = scenario.cluster_cores
    satisfied = [episode.metrics.satisfied_fraction_mean for episode in episodes]
    held = [episode.metrics.cores_allocated_mean for episode in episodes]
    assert all(value is not None for value in (*satisfied, *held))
    plain = validation_score(episodes, JobKind.INFERENCE)
    charged = validation_score(episodes, JobKind.INFERENCE, CHARGING_REWARD)
    assert plain == pytest.approx(sum(satisfied) / 2)
    expected = plain - CORE_CHARGE * sum(held) / 2 / cores
    assert charged == pytest.approx(expected)
    assert charged < plain


def test_a_log_std_given_replaces_the_models_exploration(
    shipped: LearnedPolicy, tmp_path: Path
) -> None:
    config = _config(shipped, critic_warmup=128, policy_kwargs=(("log_std_init", -4.0),))
    explored = _weights(_trained(config, tmp_path))
    assert torch.equal(explored["log_std"], torch.full((1,), -4.0))
    assert not torch.equal(shipped.model.policy.state_dict()["log_std"], explored["log_std"])
