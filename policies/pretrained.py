"""Pretrained schedulers shipped with dlsched: ``--policy pretrained:<name>``.

A newcomer sees a learned scheduler at work without training one: each pretrained model is a
model folder of :mod:`dlsched.policies.learned` (``model.zip``, ``normalizer.json``,
``dlsched-model.json``) shipped as package data under ``pretrained_models/<name>/``, beside a
:class:`PretrainedCard` (``pretrained.json``) that says how it was trained: the exact command,
the commit, the timesteps and seed, the validation score it was kept for, when, and how it did
on held-out seeds against baselines.

This module reads cards only (JSON), so listing the pretrained models (``dlsched baselines``)
imports neither torch nor Stable-Baselines3; :func:`load_pretrained` imports them to load one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlsched.envs.errors import ModelError, UnknownNameError
from dlsched.envs.extras import require_extra
from dlsched.policies.cards import card_data

if TYPE_CHECKING:
    from dlsched.policies.learned import LearnedPolicy

#: The prefix of a pretrained model's spec: ``--policy pretrained:ppo-inference-mix``.
PRETRAINED_SCHEME = "pretrained:"
#: The card beside each pretrained model folder's files.
PRETRAINED_CARD_FILE = "pretrained.json"
#: Version of the card's format; a reader refuses a newer one. Format 1 compared each held-out
#: result with DQoES only (``dqoes``); format 2 names the metric and any baselines; format 3 adds
#: the bound and the baselines that left jobs unfinished (``incomplete``).
PRETRAINED_CARD_FORMAT = 3
_FOLDER = "pretrained_models"


@dataclass(frozen=True)
class HeldOutResult:
    """How a pretrained model and baselines did on seeds used neither in training nor in
    validation: one metric of ``dlsched evaluate`` averaged over the seeds.

    Attributes:
        scenario: the scenario evaluated.
        seeds: the seeds, as a range (``100-109``).
        metric: the metric (``satisfied_fraction_mean`` for inference models,
            ``mean_completion_s`` for training ones).
        model: the pretrained model's mean.
        baselines: each baseline's mean on the same seeds, by name.
        half_widths: the 95% confidence half-width across seeds of the model's (``model``) and
            of baselines' means, where recorded.
        bound: the mean over the seeds of what no policy can beat on them, where recorded.
        incomplete: the policies (``model`` for the model) whose metric some seed lacks (a
            training job left unfinished at the horizon): their means cover the other seeds.
    """

    scenario: str
    seeds: str
    metric: str
    model: float
    baselines: Mapping[str, float]
    half_widths: Mapping[str, float] = field(default_factory=dict)
    bound: float | None = None
    incomplete: tuple[str, ...] = ()

    @property
    def seed_range(self) -> range:
        """The seeds as a range (``100-109``: 100 to 109 included)."""
        first, last = (int(seed) for seed in self.seeds.split("-"))
        return range(first, last + 1)

    @classmethod
    def from_data(cls, row: Mapping[str, Any]) -> HeldOutResult:
        """A result from a card's ``held_out`` row (``KeyError``, ``TypeError``, ``ValueError``
        where it is malformed)."""
        return cls(
            scenario=str(row["scenario"]),
            seeds=str(row["seeds"]),
            metric=str(row["metric"]),
            model=float(row["model"]),
            baselines={str(name): float(value) for name, value in row["baselines"].items()},
            half_widths={
                str(name): float(value) for name, value in row.get("half_widths", {}).items()
            },
            bound=None if row.get("bound") is None else float(row["bound"]),
            incomplete=tuple(str(name) for name in row.get("incomplete", ())),
        )

    def to_data(self) -> dict[str, Any]:
        """The row as a card holds it (JSON data)."""
        return {
            "scenario": self.scenario,
            "seeds": self.seeds,
            "metric": self.metric,
            "model": self.model,
            "baselines": dict(self.baselines),
            "half_widths": dict(self.half_widths),
            "bound": self.bound,
            "incomplete": list(self.incomplete),
        }

    def describe(self) -> str:
        """The result in one line: the model's mean, then each baseline's."""
        others = ", ".join(f"{name} {_figure(value)}" for name, value in self.baselines.items())
        bound = "" if self.bound is None else f" (bound {_figure(self.bound)})"
        return (
            f"held out: {self.scenario} (seeds {self.seeds}), {self.metric}: "
            f"{_figure(self.model)} against {others}{bound}"
        )


def _figure(value: float) -> str:
    """A metric's value as the cards show it: three decimals for a fraction, one for seconds."""
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


@dataclass(frozen=True)
class PretrainedCard:
    """How a shipped model was trained, and what it achieved.

    Attributes:
        name: what follows ``pretrained:``.
        summary: one line: what it schedules and how it was trained.
        command: the ``dlsched train`` command that trained it, exactly as run.
        commit: the dlsched commit that trained it.
        date: the day it was trained (ISO 8601).
        timesteps: environment steps trained (the command's, rounded up to whole rollouts).
        seed: the training seed.
        validation_metric: what the best model was kept for, on which held-out draws.
        validation_score: the best model's score on that metric.
        wall_time_s: the training's wall time on the machine named in ``host``.
        host: the machine it was trained on.
        training_run: the MLflow run id of the training (in the trainer's store).
        held_out: results on held-out seeds, measured after training, against baselines.
    """

    name: str
    summary: str
    command: str
    commit: str
    date: str
    timesteps: int
    seed: int
    validation_metric: str
    validation_score: float
    wall_time_s: float
    host: str
    training_run: str
    held_out: tuple[HeldOutResult, ...] = ()

    @classmethod
    def from_json(cls, text: str, origin: str) -> PretrainedCard:
        """Parse a card; ``origin`` (its path) is named in errors.

        Raises:
            ModelError: not a card of a known format.
        """
        try:
            data = card_data(text, "pretrained card", origin, PRETRAINED_CARD_FORMAT)
            return cls(
                name=str(data["name"]),
                summary=str(data["summary"]),
                command=str(data["command"]),
                commit=str(data["commit"]),
                date=str(data["date"]),
                timesteps=int(data["timesteps"]),
                seed=int(data["seed"]),
                validation_metric=str(data["validation_metric"]),
                validation_score=float(data["validation_score"]),
                wall_time_s=float(data["wall_time_s"]),
                host=str(data["host"]),
                training_run=str(data["training_run"]),
                held_out=tuple(HeldOutResult.from_data(row) for row in data.get("held_out", ())),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ModelError(
                f"pretrained card {origin} is malformed ({type(error).__name__}: {error}); "
                "reinstall dlsched"
            ) from error

    def describe(self) -> str:
        """The card as the lines ``dlsched baselines`` prints."""
        lines = [
            f"pretrained:{self.name}: {self.summary}",
            f"    trained {self.date} at commit {self.commit[:12]}: {self.timesteps} timesteps, "
            f"seed {self.seed}, {self.wall_time_s / 60:.1f} min on {self.host}",
            f"    command: {self.command}",
            f"    validation: {self.validation_metric} = {self.validation_score:.3f}",
        ]
        lines += [f"    {row.describe()}" for row in self.held_out]
        return "\n".join(lines)


def is_pretrained_spec(spec: str) -> bool:
    """Whether ``spec`` names a shipped model (``pretrained:<name>``)."""
    return spec.startswith(PRETRAINED_SCHEME)


def pretrained_names() -> list[str]:
    """The names of the shipped models, sorted."""
    root = resources.files("dlsched.policies") / _FOLDER
    if not root.is_dir():
        return []
    return sorted(
        entry.name
        for entry in root.iterdir()
        if entry.is_dir() and (entry / PRETRAINED_CARD_FILE).is_file()
    )


def pretrained_folder(name: str) -> Path:
    """The folder of a shipped model.

    Raises:
        UnknownNameError: no shipped model has that name.
    """
    if name not in pretrained_names():
        raise UnknownNameError("pretrained model", name, pretrained_names())
    # package data of an installed (or editable) distribution is a real folder
    return Path(str(resources.files("dlsched.policies") / _FOLDER / name))


def pretrained_card(name: str) -> PretrainedCard:
    """The card of a shipped model.

    Raises:
        UnknownNameError: no shipped model has that name.
        ModelError: its card is malformed.
    """
    path = pretrained_folder(name) / PRETRAINED_CARD_FILE
    return PretrainedCard.from_json(path.read_text(encoding="utf-8"), str(path))


def pretrained_cards() -> list[PretrainedCard]:
    """Every shipped model's card, by name."""
    return [pretrained_card(name) for name in pretrained_names()]


def load_pretrained(spec: str) -> LearnedPolicy:
    """Load a shipped model as a policy named after it.

    Args:
        spec: ``pretrained:<name>``, or the bare name.

    Raises:
        UnknownNameError: no shipped model has that name.
        MissingExtraError: the train extra (SB3, torch) is not installed.
    """
    name = spec.removeprefix(PRETRAINED_SCHEME)
    folder = pretrained_folder(name)
    require_extra("train", f"the shipped model {PRETRAINED_SCHEME + name}")
    # imported here: it loads SB3 and torch, which listing the cards does not need
    from dlsched.policies.learned import load_model

    return load_model(folder, source=PRETRAINED_SCHEME + name, name=name)
