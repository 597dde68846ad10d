"""A finished training in words, as ``dlsched train`` prints it: how it ended, its best
validation, where its local files, MLflow run and model are, and how to evaluate the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlsched.runs.training.harness import TrainingResult


def training_summary(
    result: TrainingResult, scenario: str, tracking_uri: str | None, engine: str = "sb3"
) -> list[str]:
    """The lines that say what ``result`` is.

    Args:
        result: the training's result.
        scenario: the scenario the line that evaluates the model names (its first).
        tracking_uri: the store its run was logged to (``None``: untracked).
        engine: ``sb3``, or ``rllib`` (whose training keeps no latest weights apart).
    """
    if result.interruption is not None:
        ending = f"interrupted ({result.interruption or 'SIGINT'}); its work is saved"
    elif result.stopped_early:
        ending = "stopped early (no improvement)"
    else:
        ending = "done"
    on = " on RLlib" if engine == "rllib" else ""
    lines = [f"training {result.training_id}: {result.timesteps} timesteps{on}, {ending}"]
    best = result.best
    if best is not None:
        lines.append(f"best validation score {best.score:.4f} at {best.timesteps} timesteps")
        lines += [f"  {key} = {value:.4f}" for key, value in sorted(best.metrics.items())]
    lines.append(f"local files: {result.folder.resolve()}")
    if result.run_id is not None and tracking_uri is not None:
        lines.append(
            f"MLflow: experiment {result.experiment!r}, run {result.run_id} in {tracking_uri}"
        )
    lines.append(f"model: {result.model_uri}")
    if engine != "rllib":
        lines.append(f"latest weights: {result.final_model_uri}")
    if result.registered_uri is not None:
        lines.append(f"registered: {result.registered_uri}")
    lines.append(
        f"evaluate it: dlsched evaluate --scenario {scenario} "
        f"--policy default,{result.model_uri} --seed 100 --episodes 10"
    )
    return lines
