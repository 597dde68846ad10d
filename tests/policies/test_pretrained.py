"""The learned schedulers shipped with dlsched (``--policy pretrained:<name>``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from repo_paths import PRETRAINED_ACTIONS

from dlsched.baselines import make
from dlsched.envs.errors import ModelError, PolicyError, UnknownNameError
from dlsched.envs.observation import ObservationLayout
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.policies.learned import CARD_FILE, LearnedPolicy
from dlsched.policies.pretrained import (
    PRETRAINED_CARD_FILE,
    PretrainedCard,
    pretrained_card,
    pretrained_folder,
    pretrained_names,
)
from dlsched.runs import resolve_policy
from dlsched.runs.cli import main
from dlsched.runs.evaluation import run_episode

INFERENCE_MODEL = "ppo-inference-mix"
#: The first of the held-out seeds the README evaluates the recipe's model on (100-119: used
#: neither in training, seeds 0-7, nor in validation, 1,000,000+); fixed before the test was
#: first run, not picked from its results.
HELD_OUT_SEED = 100


def test_the_inference_model_is_shipped_with_a_card_of_its_training() -> None:
    assert INFERENCE_MODEL in pretrained_names()
    card = pretrained_card(INFERENCE_MODEL)
    assert card.name == INFERENCE_MODEL
    assert card.command.startswith("dlsched train --scenario train-inference-mix ")
    assert len(card.commit) == 40
    assert card.timesteps >= 1_000_000 and card.seed == 0
    assert 0 < card.validation_score <= 1
    # the card's run is the one the model's own card names
    model_card = json.loads((pretrained_folder(INFERENCE_MODEL) / CARD_FILE).read_text())
    assert model_card["run_id"] == card.training_run
    assert model_card["kind"] == "inference"


@pytest.mark.parametrize("name", pretrained_names())
def test_a_shipped_model_is_data_and_acts_as_it_did_when_its_files_were_pickles(name) -> None:
    """Converted by `dlsched models convert --trust-pickle` (issue 44), each shipped model's
    folder holds no pickle, and sets, bit for bit, the limits it set as it shipped before."""
    folder = pretrained_folder(name)
    assert sorted(path.name for path in folder.iterdir()) == [
        CARD_FILE,
        "model.zip",
        "normalizer.json",
        PRETRAINED_CARD_FILE,
    ]
    assert json.loads((folder / CARD_FILE).read_text())["format"] == 4
    recorded = np.load(PRETRAINED_ACTIONS, allow_pickle=False)
    scenario = load_scenario(str(recorded[f"{name}.scenario"]))
    policy = resolve_policy(f"pretrained:{name}")
    policy.use_layout(ObservationLayout(len(scenario.workers), scenario.slots_per_worker))
    policy.reset()
    actions = [policy.predict(observation)[0] for observation in recorded[f"{name}.observations"]]
    np.testing.assert_array_equal(np.stack(actions), recorded[f"{name}.actions"])


def test_resolve_policy_loads_it_under_its_name() -> None:
    policy = resolve_policy(f"pretrained:{INFERENCE_MODEL}")
    assert isinstance(policy, LearnedPolicy)
    assert policy.name == INFERENCE_MODEL
    assert policy.params()["model"] == f"pretrained:{INFERENCE_MODEL}"


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match=f"Did you mean '{INFERENCE_MODEL}'"):
        resolve_policy("pretrained:ppo-inference-mx")


def test_a_pretrained_model_takes_no_parameters() -> None:
    with pytest.raises(PolicyError, match="takes no parameters"):
        resolve_policy(f"pretrained:{INFERENCE_MODEL}", {"alpha": 0.1})


def test_a_malformed_card_names_its_file() -> None:
    with pytest.raises(ModelError, match=f"x/{PRETRAINED_CARD_FILE} is malformed"):
        PretrainedCard.from_json('{"format": 2, "name": "x"}', f"x/{PRETRAINED_CARD_FILE}")


def test_a_card_of_a_newer_format_is_refused() -> None:
    with pytest.raises(ModelError, match="has format 4, newer than this dlsched reads \\(3\\)"):
        PretrainedCard.from_json('{"format": 4, "name": "x"}', f"x/{PRETRAINED_CARD_FILE}")


def test_it_beats_dqoes_on_a_held_out_seed() -> None:
    scenario = load_scenario("dqoes-varied-fixed50")
    learned = run_episode(scenario, resolve_policy(f"pretrained:{INFERENCE_MODEL}"), HELD_OUT_SEED)
    dqoes = run_episode(scenario, make("dqoes"), HELD_OUT_SEED)
    learned_score = learned.metrics.satisfied_fraction_mean
    dqoes_score = dqoes.metrics.satisfied_fraction_mean
    assert learned_score is not None and dqoes_score is not None
    assert learned_score > dqoes_score, (learned_score, dqoes_score)


def test_dlsched_baselines_lists_it_with_its_card(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baselines"]) == 0
    out = capsys.readouterr().out
    assert f"pretrained:{INFERENCE_MODEL}: " in out
    assert "command: dlsched train --scenario train-inference-mix" in out
    assert (
        "held out: dqoes-varied-burst (seeds 100-109), satisfied_fraction_mean: 0.599 against "
        "dqoes 0.459"
    ) in out


#: Its satisfied_fraction_mean on its own layout (train-inference-mix, 1 worker x 10 slots) by
#: seed, as `dlsched evaluate` measured it before models acted on any layout (main at 6feee48).
OWN_LAYOUT_SCORES = {100: 0.6111111111111112, 101: 0.5580246913580247}


def test_its_score_on_its_own_layout_is_unchanged() -> None:
    scenario = load_scenario("train-inference-mix")
    policy = resolve_policy(f"pretrained:{INFERENCE_MODEL}")
    for seed, score in OWN_LAYOUT_SCORES.items():
        assert run_episode(scenario, policy, seed).metrics.satisfied_fraction_mean == score


def test_it_runs_on_a_cluster_of_another_layout_and_beats_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Trained on 1 worker x 10 slots, it schedules dqoes-cluster-40 (4 workers x 10 slots)."""
    spec = f"pretrained:{INFERENCE_MODEL}"
    argv = ["evaluate", "--scenario", "dqoes-cluster-40", "--policy", f"{spec},default"]
    argv += ["--episodes", "2", "--seed", "100", "--no-tracking", "--no-progress", "--json"]
    assert main(argv) == 0
    (summary,) = json.loads(capsys.readouterr().out)["scenarios"]
    scores = {
        row["label"]: row["metrics"]["satisfied_fraction_mean"]["mean"]
        for row in summary["policies"]
    }
    assert scores[INFERENCE_MODEL] > scores["default"], scores


#: The model trained across the dqoes-* layouts (1 x 10 and 4 x 10 in one model, #33).
LAYOUTS_MODEL = "ppo-inference-layouts"


@pytest.mark.parametrize(
    "held_out", pretrained_card(LAYOUTS_MODEL).held_out, ids=lambda result: result.scenario
)
def test_the_layouts_model_reproduces_its_recorded_results_and_matches_dqoes(held_out) -> None:
    scenario = load_scenario(held_out.scenario)
    policy = resolve_policy(f"pretrained:{LAYOUTS_MODEL}")
    assert held_out.metric == "satisfied_fraction_mean"
    scores = [
        run_episode(scenario, policy, seed).metrics.satisfied_fraction_mean
        for seed in held_out.seed_range
    ]
    dqoes = [
        run_episode(scenario, make("dqoes"), seed).metrics.satisfied_fraction_mean
        for seed in held_out.seed_range
    ]
    assert sum(scores) / len(scores) == pytest.approx(held_out.model, abs=5e-4)
    assert sum(dqoes) / len(dqoes) == pytest.approx(held_out.baselines["dqoes"], abs=5e-4)
    assert held_out.model >= held_out.baselines["dqoes"]


#: The training-job scheduler (#33): trained on train-training-mix (one 8-core worker, up to 10
#: slots) only.
TRAINING_MODEL = "ppo-training-mix"
#: The papers' training scenarios its targets are set on (#33): at most 0.9x default's mean
#: completion time, and below FlowCon's and TRADL's, on each.
PAPERS_TRAINING_SCENARIOS = (
    "flowcon-10-random",
    "flowcon-15-random",
    "flowcon-cluster-20",
    "specon-20",
    "tradl-two-tier-8",
)


def test_the_training_model_is_shipped_with_its_held_out_results() -> None:
    card = pretrained_card(TRAINING_MODEL)
    assert card.command.startswith("dlsched train --scenario train-training-mix ")
    assert len(card.commit) == 40 and card.seed == 0 and card.wall_time_s <= 30 * 60
    model_card = json.loads((pretrained_folder(TRAINING_MODEL) / CARD_FILE).read_text())
    assert model_card["kind"] == "training"
    assert model_card["trained_on"] == [{"workers": 1, "slots_per_worker": 10}]
    held_out = {result.scenario: result for result in card.held_out}
    assert set(PAPERS_TRAINING_SCENARIOS) | {"flowcon-cluster-60-heterogeneous"} == set(held_out)
    for result in held_out.values():
        assert result.metric == "mean_completion_s"
        assert {"default", "flowcon", "tradl"} <= set(result.baselines)
        assert set(result.half_widths) >= {"model", *result.baselines}


@pytest.mark.parametrize(
    "held_out", pretrained_card(TRAINING_MODEL).held_out, ids=lambda result: result.scenario
)
def test_the_training_model_reproduces_its_recorded_results(held_out) -> None:
    """Re-evaluated on its held-out seeds, the model and the learned-against baselines give the
    card's means; on the papers' five scenarios they meet #33's targets."""
    scenario = load_scenario(held_out.scenario)

    def mean_completion(policy) -> float:
        values = [
            run_episode(scenario, policy, seed).metrics.mean_completion_s
            for seed in held_out.seed_range
        ]
        assert all(value is not None for value in values)
        return sum(values) / len(values)

    model = mean_completion(resolve_policy(f"pretrained:{TRAINING_MODEL}"))
    assert model == pytest.approx(held_out.model, abs=0.05)
    for name in ("default", "tradl"):
        assert mean_completion(make(name)) == pytest.approx(held_out.baselines[name], abs=0.05)
    if held_out.scenario in PAPERS_TRAINING_SCENARIOS:
        assert held_out.model <= 0.9 * held_out.baselines["default"]
        assert held_out.model < min(held_out.baselines["flowcon"], held_out.baselines["tradl"])
    else:  # 8 workers of 2-16 cores, 60 jobs: a layout it never saw
        assert held_out.model < held_out.baselines["default"]
