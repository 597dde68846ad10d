"""Learning the oracle's decisions (:mod:`dlsched.runs.training.imitation`): a student fitted by
behaviour cloning and DAgger agrees with the oracle on states it never saw far better than an
untrained network does, and PPO started from it scores above PPO started from scratch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.policies.agent_actions import ActionMode
from dlsched.policies.normalization import slot_normalizer
from dlsched.runs.training import harness
from dlsched.runs.training.config import ImitationConfig, TrainingConfig, VecEnvKind
from dlsched.runs.training.imitation import Teachers, batched_under, imitate, teacher_policy

#: The host's inference distribution: 3-6 services on 2 cores, 36 steps an episode.
SCENARIO = "train-host-inference"
IMITATION = ImitationConfig(teacher="oracle", rounds=4, steps=24, epochs=6)


def _config(**changes: object) -> TrainingConfig:
    settings: dict[str, object] = {
        "algo": "ppo",
        "scenarios": (SCENARIO,),
        "timesteps": 1024,
        "n_envs": 16,
        "seed": 0,
        "eval_every": 0,
        "patience": 0,
        "actions": ActionMode.SHARE_IDLE,
        "max_step": 64.0,
        "frame_stack": 2,
        "reward": "satisfied_closeness",
        "hyperparams": (("n_steps", 32), ("batch_size", 256), ("n_epochs", 3), ("gamma", 0.95)),
        "policy_kwargs": (("log_std_init", -4.0),),
        "vec_env": VecEnvKind.BATCHED,
        "imitation": IMITATION,
    }
    settings.update(changes)
    return TrainingConfig(**settings)


def _student(config: TrainingConfig):
    """The model, its normaliser and the training environments of ``config``, untrained."""
    scenarios = [load_scenario(SCENARIO)]
    venv = harness._training_env(config, scenarios)
    normalizer = slot_normalizer(venv, 0.95, normalize_reward=True)
    card = harness._model_card(config, scenarios, None)
    model = harness._build_model(config, normalizer, card.input_layout)
    return model, normalizer, venv


def _held_out_limit_error(model, normalizer, config: TrainingConfig, seed: int) -> float:
    """The mean absolute difference between the model's limits and the oracle's, as fractions
    of the worker, over the services of 24 steps of environments the oracle drives from
    ``seed`` on (states of seeds the student never trained on)."""
    _, _, venv = _student(config)
    batched = batched_under(venv)
    teachers = Teachers(batched, teacher_policy(IMITATION), config.action_mapping)
    venv.seed(seed)
    observations = venv.reset()
    errors = []
    for _ in range(24):
        wanted, teacher_limits, held = teachers.labels()
        student, _ = model.predict(normalizer.normalize_obs(observations), deterministic=True)
        gap = np.abs(teachers.student_limits(np.asarray(student)) - teacher_limits)[held]
        errors.append(gap.mean())
        observations, _, done, _ = venv.step(wanted)
        teachers.reset(done)
    return float(np.mean(errors))


def test_the_student_agrees_with_the_oracle_on_held_out_states_better_than_untrained() -> None:
    config = _config()
    model, normalizer, venv = _student(config)
    untrained = _held_out_limit_error(model, normalizer, config, seed=50_000)
    rounds = imitate(model, normalizer, batched_under(venv), IMITATION, config.action_mapping)
    student = _held_out_limit_error(model, normalizer, config, seed=50_000)
    # the rounds' own measure (before each fit, on the states it gathered) falls too
    assert rounds[-1].limit_error < rounds[0].limit_error
    assert student < 0.7 * untrained, (student, untrained)
    assert float(model.policy.log_std.detach().exp()) == pytest.approx(np.exp(IMITATION.log_std))


def test_ppo_from_imitation_scores_above_ppo_from_scratch(tmp_path: Path) -> None:
    """The same PPO steps, seeds and validation seeds, one started from the imitated student:
    its validation score (mean satisfied fraction on held-out seeds) is higher."""
    validation = {"eval_every": 1024, "eval_episodes": 6}
    imitated = harness.train(_config(**validation), tmp_path / "imitated", progress=False)
    scratch = harness.train(
        _config(**validation, imitation=None), tmp_path / "scratch", progress=False
    )
    imitated_score = imitated.validations[-1].score
    scratch_score = scratch.validations[-1].score
    assert imitated_score > scratch_score + 0.05, (imitated_score, scratch_score)
    # the imitated student was validated before PPO too, and the record says so
    assert imitated.validations[0].timesteps == 0
    assert (imitated.folder / harness.IMITATION_FILE).is_file()
