"""What ``dlsched train`` prints of a finished training (:mod:`dlsched.runs.training.summary`):
how it ended, its best validation, where its files, run and model are, how to evaluate it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dlsched.runs.training.callbacks import ValidationRecord
from dlsched.runs.training.harness import TrainingResult
from dlsched.runs.training.summary import training_summary

RESULT = TrainingResult(
    training_id="train-ppo-x",
    folder=Path("/trainings/train-ppo-x"),
    model_folder=Path("/trainings/train-ppo-x/model"),
    timesteps=128,
    stopped_early=False,
    validations=(
        ValidationRecord(64, 0.25, {"x/satisfied": 1.0}, improved=True),
        ValidationRecord(128, 0.5, {"x/satisfied": 2.0, "x/gap": 0.125}, improved=True),
    ),
)


def test_an_untracked_training_says_its_best_validation_and_where_its_model_is():
    lines = training_summary(RESULT, "dqoes-varied-burst", None)
    assert lines == [
        "training train-ppo-x: 128 timesteps, done",
        "best validation score 0.5000 at 128 timesteps",
        "  x/gap = 0.1250",
        "  x/satisfied = 2.0000",
        "local files: /trainings/train-ppo-x",
        "model: /trainings/train-ppo-x/model",
        "latest weights: /trainings/train-ppo-x/final-model",
        "evaluate it: dlsched evaluate --scenario dqoes-varied-burst --policy "
        "default,/trainings/train-ppo-x/model --seed 100 --episodes 10",
    ]


def test_a_tracked_training_names_its_run_and_registered_model():
    tracked = dataclasses.replace(
        RESULT, run_id="abc", experiment="x-training", registered_uri="models:/m/1"
    )
    lines = training_summary(tracked, "x", "sqlite:///mlflow.db")
    assert "MLflow: experiment 'x-training', run abc in sqlite:///mlflow.db" in lines
    assert "model: runs:/abc/model" in lines and "registered: models:/m/1" in lines


def test_how_a_training_ended_is_said_first():
    stopped = dataclasses.replace(RESULT, stopped_early=True)
    assert training_summary(stopped, "x", None)[0].endswith("stopped early (no improvement)")
    stopped = dataclasses.replace(RESULT, interruption=KeyboardInterrupt("SIGTERM"))
    assert training_summary(stopped, "x", None)[0].endswith(
        "interrupted (SIGTERM); its work is saved"
    )


def test_an_rllib_training_keeps_no_latest_weights_apart():
    lines = training_summary(dataclasses.replace(RESULT, validations=()), "x", None, "rllib")
    assert lines[0] == "training train-ppo-x: 128 timesteps on RLlib, done"
    assert not any(line.startswith(("latest weights", "best validation")) for line in lines)
