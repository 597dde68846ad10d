"""The learned schedulers shipped with dlsched (``--policy pretrained:<name>``), judged where users
run them: each card holds one row per shipped scenario of its kind, which re-evaluating
reproduces, and no shipped model is worse than Docker's ``default`` on any of them (#43) but the
rows of :data:`KNOWN_MISSES`, which must still miss."""

from __future__ import annotations

import functools
import json
import statistics

import numpy as np
import pytest

from dlsched.baselines import make
from dlsched.envs.errors import ModelError, PolicyError, UnknownNameError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.policies.learned import CARD_FILE, LearnedPolicy
from dlsched.policies.policy import Policy
from dlsched.policies.pretrained import (
    PRETRAINED_CARD_FILE,
    HeldOutResult,
    PretrainedCard,
    pretrained_card,
    pretrained_folder,
    pretrained_names,
)
from dlsched.runs import resolve_policy
from dlsched.runs.cli import main
from dlsched.runs.evaluation import run_episodes
from dlsched.runs.evaluation.judgement import TOLERANCE, shipped_scenarios, verdict

INFERENCE_MODEL = "ppo-inference"
TRAINING_MODEL = "ppo-training"
MODELS = {INFERENCE_MODEL: JobKind.INFERENCE, TRAINING_MODEL: JobKind.TRAINING}
#: The rows where a shipped model misses #43's target against ``default``, measured and explained
#: in docs/training.md. A row listed here must still miss it (drop it the day the model meets it).
KNOWN_MISSES: dict[str, tuple[str, ...]] = {
    # three stock services that an equal share of the 2 cores satisfies: default, DQoES and the
    # oracle share equally (0.883); the model holds part back from one at times (0.825)
    INFERENCE_MODEL: ("docker-inference-3-stock",),
    # two 4-second jobs, decisions every 2 s: a job that finishes leaves its share idle until the
    # next decision, where default gives it to the other job at once (3.91 s against 3.83 s)
    TRAINING_MODEL: ("docker-smoke-training",),
}


def test_the_shipped_models_are_one_of_each_kind() -> None:
    assert set(pretrained_names()) == set(MODELS)
    for name, kind in MODELS.items():
        assert json.loads((pretrained_folder(name) / CARD_FILE).read_text())["kind"] == kind.value


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_shipped_model_has_a_card_of_its_training(name: str) -> None:
    card = pretrained_card(name)
    assert card.name == name
    assert card.command.startswith("dlsched train --scenario ")
    assert "--imitate oracle" in card.command
    assert len(card.commit) == 40 and card.seed == 0
    assert card.wall_time_s <= 30 * 60  # #43: each trains in at most 30 minutes on 2 cores
    model_card = json.loads((pretrained_folder(name) / CARD_FILE).read_text())
    # trained untracked (--no-tracking) where no run id exists: the card says so with ""
    assert (model_card["run_id"] or "") == card.training_run
    assert sorted(path.name for path in pretrained_folder(name).iterdir()) == [
        CARD_FILE,
        "model.zip",
        "normalizer.json",
        PRETRAINED_CARD_FILE,
    ]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_card_holds_a_row_for_every_shipped_scenario_of_its_kind(name: str) -> None:
    card = pretrained_card(name)
    rows = {row.scenario for row in card.held_out}
    assert rows == {scenario.name for scenario in shipped_scenarios(MODELS[name])}
    for row in card.held_out:
        assert {"default", "oracle"} <= set(row.baselines)
        # seeds neither trained on (0 on) nor validated on (1,000,000 on)
        assert row.seed_range.start >= 9_000 and row.seed_range.stop < 1_000_000


@functools.cache
def _shipped(name: str) -> Policy:
    """The shipped model of ``name``, loaded once for all its rows: a policy is bound anew to
    each scenario it runs, as ``dlsched judge`` runs one over every scenario of its kind."""
    return resolve_policy(f"pretrained:{name}")


def _rows() -> list[tuple[str, HeldOutResult]]:
    return [(name, row) for name in sorted(MODELS) for row in pretrained_card(name).held_out]


@pytest.mark.parametrize(
    ("name", "row"), _rows(), ids=[f"{name}-{row.scenario}" for name, row in _rows()]
)
def test_a_card_row_is_reproduced_and_the_model_is_never_worse_than_default(
    name: str, row: HeldOutResult
) -> None:
    """Re-evaluated on the row's seeds, the model and ``default`` score the card's means
    (within the model's 95% interval: episodes run at once, as a validation runs them, may
    differ from one at a time by the rounding of a batched forward pass); and the model is not
    worse than ``default`` by more than #43's tolerance on any shipped scenario of its kind."""
    kind = MODELS[name]
    scenario = load_scenario(row.scenario)
    seeds = list(row.seed_range)

    def mean(policy) -> float:
        values = [
            getattr(episode.metrics, row.metric)
            for episode in run_episodes(scenario, policy, seeds)
        ]
        return statistics.fmean(value for value in values if value is not None)

    model = mean(_shipped(name))
    slack = max(row.half_widths.get("model", 0.0), 1e-6)
    assert model == pytest.approx(row.model, abs=slack)
    assert mean(make("default")) == pytest.approx(row.baselines["default"], rel=1e-9)
    if kind is JobKind.INFERENCE:
        worse = row.model < row.baselines["default"] - TOLERANCE[kind]
    else:
        worse = row.model > row.baselines["default"] * (1 + TOLERANCE[kind])
    known = row.scenario in KNOWN_MISSES.get(name, ())
    assert worse == known, (
        f"{name} on {row.scenario}: {row.model} against default {row.baselines['default']}; "
        + ("it meets the target now: drop the row from KNOWN_MISSES" if known else "worse")
    )


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dlsched_baselines_lists_it_with_its_card_and_verdict(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["baselines"]) == 0
    out = capsys.readouterr().out
    card = pretrained_card(name)
    assert f"pretrained:{name}: " in out
    assert f"command: {card.command}" in out
    result = verdict(card.held_out, MODELS[name])
    assert result.below_default == KNOWN_MISSES.get(name, ())
    misses = ", ".join(result.below_default)
    listed = f"{len(misses.split(', '))} ({misses})" if misses else "0"
    assert f"on {len(card.held_out)} scenarios: worse than default on {listed}" in out


def test_resolve_policy_loads_it_under_its_name() -> None:
    policy = resolve_policy(f"pretrained:{INFERENCE_MODEL}")
    assert isinstance(policy, LearnedPolicy)
    assert policy.name == INFERENCE_MODEL
    assert policy.params()["model"] == f"pretrained:{INFERENCE_MODEL}"


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match=f"Did you mean '{INFERENCE_MODEL}'"):
        resolve_policy("pretrained:ppo-inferense")


def test_a_pretrained_model_takes_no_parameters() -> None:
    with pytest.raises(PolicyError, match="takes no parameters"):
        resolve_policy(f"pretrained:{INFERENCE_MODEL}", {"alpha": 0.1})


def test_a_malformed_card_names_its_file() -> None:
    with pytest.raises(ModelError, match=f"x/{PRETRAINED_CARD_FILE} is malformed"):
        PretrainedCard.from_json('{"format": 2, "name": "x"}', f"x/{PRETRAINED_CARD_FILE}")


def test_a_card_of_a_newer_format_is_refused() -> None:
    with pytest.raises(ModelError, match="has format 4, newer than this dlsched reads \\(3\\)"):
        PretrainedCard.from_json('{"format": 4, "name": "x"}', f"x/{PRETRAINED_CARD_FILE}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_shipped_model_acts_on_a_host_and_a_cluster_with_the_same_weights(name: str) -> None:
    """One model for any layout: the same weights set the limits on a 2-core host and on a
    cluster of 8-core (inference) or 2- to 16-core (training) workers."""
    policy = resolve_policy(f"pretrained:{name}")
    assert isinstance(policy, LearnedPolicy) and policy.any_layout
    hosts = {
        JobKind.INFERENCE: ("docker-inference-6", "dqoes-cluster-40"),
        JobKind.TRAINING: ("docker-training-6-stock", "flowcon-cluster-60-heterogeneous"),
    }[MODELS[name]]
    for scenario_name in hosts:
        (episode,) = run_episodes(load_scenario(scenario_name), policy, [9_999])
        limits = [container.limit for step in episode.steps[1:] for container in step.containers]
        assert len(set(np.round(limits, 4))) > 1, scenario_name
