"""dlsched.runs: what a user runs: evaluations, comparisons, training, calibration, benchmarks.

The entry points a Python user needs are importable from here::

    from dlsched.runs import EvaluationRequest, build_policies, evaluate_untracked
    from dlsched.envs import load_scenario

    request = EvaluationRequest(
        scenario=load_scenario("dqoes-varied-burst"),
        policies=tuple(build_policies(["default", "dqoes"], {})),
        seeds=(0, 1, 2),
        backend="replay",
    )
    print(evaluate_untracked(request).summaries)

They are imported on first use, so that ``dlsched --help`` does not load MLflow, torch or
Stable-Baselines3. :func:`resolve_policy` and :func:`build_policies` work on ``pip install
dlsched`` alone (a trained model needs the train extra); the others are the lab's, and say so
on first use without the lab extra (``pip install "dlsched[lab]"``).

Subpackages: :mod:`.tracking` (MLflow), :mod:`.training` (SB3), :mod:`.fidelity`
(calibration), :mod:`.reproduce` (the papers' claims), :mod:`.bench` (benchmarks) and
:mod:`.commands` (the command line).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlsched.runs.evaluation.records import EpisodeResult
    from dlsched.runs.evaluation.runners import evaluate, run_episode
    from dlsched.runs.evaluation.summaries import summarise
    from dlsched.runs.policy_specs import build_policies, resolve_policy
    from dlsched.runs.tracking.tracked_evaluation import (
        EvaluationRequest,
        evaluate_tracked,
        evaluate_untracked,
    )
    from dlsched.runs.training.config import TrainingConfig
    from dlsched.runs.training.harness import train

#: Each public name, the module that defines it, and the extra that module needs (``None``: the
#: core's packages only).
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "EpisodeResult": ("dlsched.runs.evaluation.records", None),
    "evaluate": ("dlsched.runs.evaluation.runners", "lab"),
    "run_episode": ("dlsched.runs.evaluation.runners", "lab"),
    "summarise": ("dlsched.runs.evaluation.summaries", "lab"),
    "build_policies": ("dlsched.runs.policy_specs", None),
    "resolve_policy": ("dlsched.runs.policy_specs", None),
    "EvaluationRequest": ("dlsched.runs.tracking.tracked_evaluation", "lab"),
    "evaluate_tracked": ("dlsched.runs.tracking.tracked_evaluation", "lab"),
    "evaluate_untracked": ("dlsched.runs.tracking.tracked_evaluation", "lab"),
    "TrainingConfig": ("dlsched.runs.training.config", "lab"),
    "train": ("dlsched.runs.training.harness", "lab"),
}

__all__ = [
    "EpisodeResult",
    "EvaluationRequest",
    "TrainingConfig",
    "build_policies",
    "evaluate",
    "evaluate_tracked",
    "evaluate_untracked",
    "resolve_policy",
    "run_episode",
    "summarise",
    "train",
]


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        module, extra = _EXPORTS[name]
        if extra is not None:
            from dlsched.envs.extras import require_extra

            require_extra(extra, f"dlsched.runs.{name}")
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
