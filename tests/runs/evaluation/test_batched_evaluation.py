"""Evaluations with every seed at once: the same records as one episode at a time.

``evaluate`` runs a baseline's seeds at once on the batched environment wherever the backend
runs many episodes (replay). These tests hold that to the same
:class:`~dlsched.runs.evaluation.EpisodeResult` as one episode at a time for every shipped
baseline (the oracle and FlowCon's own placer included), over scenarios of both kinds, one worker
and several, SpeCon's migrations and arrivals that wait for a slot, and check which policies run
at once and which, with the reason, do not.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from repo_paths import MODEL_FIRST_RECIPE

from dlsched.baselines import make as make_baseline
from dlsched.baselines import names as baseline_names
from dlsched.envs.decision import Decision, Migration
from dlsched.envs.errors import ActionError, PolicyError
from dlsched.envs.inference_env import InferenceVectorEnv
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.telemetry import JobState
from dlsched.envs.training_env import TrainingVectorEnv
from dlsched.policies.feed import BatchedModelFeed, BatchedTelemetryFeed, batched_refusal
from dlsched.policies.policy import Policy
from dlsched.runs import resolve_policy
from dlsched.runs.cli import main
from dlsched.runs.evaluation import (
    METRIC_SPECS,
    EpisodeResult,
    at_once_refusal,
    evaluate,
    run_episode,
    run_episodes,
    runners,
)

SEEDS = (5, 8)  # seeds where SpeCon moves jobs on specon-20 (checked below)


def assert_same(batched: object, single: object, where: str) -> None:
    """Equal dataclass trees (floats to 1e-9), but for the fields left out of their class's
    equality (wall times, which measure the machine)."""
    if dataclasses.is_dataclass(single) and not isinstance(single, type):
        assert type(batched) is type(single), where
        for field in dataclasses.fields(single):
            if not field.compare:
                continue
            assert_same(
                getattr(batched, field.name), getattr(single, field.name), f"{where}.{field.name}"
            )
    elif isinstance(single, tuple | list):
        assert isinstance(batched, tuple | list), where
        assert len(batched) == len(single), where
        for index, (ours, theirs) in enumerate(zip(batched, single, strict=True)):
            assert_same(ours, theirs, f"{where}[{index}]")
    elif isinstance(single, float) and isinstance(batched, float):
        assert math.isclose(batched, single, rel_tol=1e-9, abs_tol=1e-9), (where, batched, single)
    else:
        assert batched == single, (where, batched, single)


def scheduling(scenario: Scenario) -> list[str]:
    """The shipped baselines that schedule ``scenario``'s kind of job."""
    kinds = []
    for name in baseline_names():
        try:
            make_baseline(name).check_scenario(scenario)
        except PolicyError:
            continue
        kinds.append(name)
    return kinds


def waiting_for_slots() -> Scenario:
    return dataclasses.replace(load_scenario("flowcon-10-random"), slots_per_worker=3)


SCENARIOS = {
    "dqoes-varied-burst": lambda: load_scenario("dqoes-varied-burst"),  # inference, one worker
    "dqoes-cluster-40": lambda: load_scenario("dqoes-cluster-40"),  # inference, four workers
    "flowcon-10-random": lambda: load_scenario("flowcon-10-random"),  # training, one worker
    "specon-20": lambda: load_scenario("specon-20"),  # training, four workers, migrations
    "waiting-for-slots": waiting_for_slots,  # ten jobs, three slots
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_episodes_at_once_are_the_episodes_one_at_a_time(name):
    scenario = SCENARIOS[name]()
    ran = []
    for baseline in scheduling(scenario):
        policy = make_baseline(baseline)
        assert at_once_refusal(policy, "replay") is None
        batched = run_episodes(scenario, policy, SEEDS)
        single = [run_episode(scenario, make_baseline(baseline), seed) for seed in SEEDS]
        assert [result.seed for result in batched] == list(SEEDS)
        assert_same(batched, single, f"{name} {baseline}")
        ran.append(baseline)
        states = {c.state for r in batched for step in r.steps for c in step.containers}
        if baseline == "specon" and len(scenario.workers) > 1:
            workers_of: dict[tuple[int, str], set[int]] = {}
            for result in batched:
                for step in result.steps:
                    for c in step.containers:
                        if c.worker is not None:
                            workers_of.setdefault((result.seed, c.job_id), set()).add(c.worker)
            assert any(len(workers) > 1 for workers in workers_of.values())  # SpeCon moved jobs
        if name == "waiting-for-slots":
            assert JobState.WAITING in states
    assert set(ran) == set(scheduling(scenario))


@pytest.mark.parametrize("name", ["dqoes-cluster-40", "specon-20", "flowcon-10-random"])
def test_evaluate_runs_seeds_at_once_where_it_gives_the_same_records(name, monkeypatch):
    scenario = SCENARIOS[name]()
    baselines = scheduling(scenario)
    single = evaluate(
        scenario, [make_baseline(b) for b in baselines], SEEDS, progress=False, batched=False
    )
    singles_run = []
    reference = runners.run_episode

    def counted(scenario, policy, seed, *args, **kwargs):
        singles_run.append(policy.name)
        return reference(scenario, policy, seed, *args, **kwargs)

    monkeypatch.setattr(runners, "run_episode", counted)
    handed: list[EpisodeResult] = []
    batched = evaluate(
        scenario, [make_baseline(b) for b in baselines], SEEDS, on_episode=handed.append
    )
    assert_same(batched, single, name)
    assert handed == batched
    assert singles_run == []  # every baseline ran its seeds at once


class Constant(Policy):
    """A policy that reads the observation only, as a learned model does."""

    name = "constant"

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        observation = np.asarray(observation)
        return np.full(observation.shape[-2], 0.5, dtype=np.float32), state


def test_what_cannot_run_at_once_runs_one_episode_at_a_time_and_says_why():
    one_worker = load_scenario("flowcon-10-random")
    assert "not a handcrafted policy" in str(batched_refusal(Constant()))
    assert "not a handcrafted policy" in str(at_once_refusal(Constant(), "replay"))
    assert batched_refusal(make_baseline("oracle")) is None
    assert "docker backend runs one episode at a time" in str(
        at_once_refusal(make_baseline("specon"), "docker")
    )
    env = TrainingVectorEnv(num_envs=2, scenario=one_worker)
    with pytest.raises(PolicyError, match=r"baseline 'dqoes' schedules inference"):
        BatchedTelemetryFeed(env, make_baseline("dqoes"))
    # and evaluate runs such a policy one episode at a time
    scenario = load_scenario("dqoes-varied-burst")
    results = evaluate(scenario, [Constant()], (0, 1), progress=False)
    assert_same(results, [run_episode(scenario, Constant(), seed) for seed in (0, 1)], "constant")


#: frame stacking, normalisation, usage-scaled actions
LEARNED = str(MODEL_FIRST_RECIPE)


def test_a_learned_model_runs_batched_only_where_its_caller_accepts_a_batched_predict():
    scenario = load_scenario("train-inference-mix")
    policy = resolve_policy(LEARNED)
    assert "not a handcrafted policy" in str(batched_refusal(policy))
    assert batched_refusal(policy, batched_predict=True) is None
    assert batched_refusal(Constant(), batched_predict=True) is not None
    with pytest.raises(PolicyError, match="does not predict over a batch"):
        BatchedModelFeed(InferenceVectorEnv(num_envs=2, scenario=scenario), Constant())
    with pytest.raises(PolicyError, match="schedules inference"):
        BatchedModelFeed(TrainingVectorEnv(num_envs=2, scenario="flowcon-10-random"), policy)
    # evaluate runs it one episode at a time
    assert at_once_refusal(policy, "replay") is not None


def test_a_batch_of_one_learned_episode_is_the_single_envs_episode():
    """One episode predicts over batches of one row, as a single environment does: the same
    records, step by step (frames, normalisation and actions included)."""
    scenario = load_scenario("train-inference-mix")
    policy = resolve_policy(LEARNED)
    (batched,) = run_episodes(scenario, policy, [11])
    assert_same(batched, run_episode(scenario, policy, 11), "seed 11")


def test_learned_episodes_in_one_batch_are_the_single_envs_up_to_rounding():
    """Several episodes in one predict: each its own frames, the single env's scores."""
    scenario = load_scenario("train-inference-mix")
    policy = resolve_policy(LEARNED)
    seeds = [11, 12, 13]
    batched = run_episodes(scenario, policy, seeds)
    for seed, episode in zip(seeds, batched, strict=True):
        single = run_episode(scenario, policy, seed)
        assert len(episode.steps) == len(single.steps)
        # A batched forward pass may round the limits in their last bits, no more.
        for ours, theirs in zip(episode.steps, single.steps, strict=True):
            assert [c.limit for c in ours.containers] == pytest.approx(
                [c.limit for c in theirs.containers], rel=1e-5
            ), (seed, ours.step)
        assert episode.metrics.satisfied_fraction_mean == pytest.approx(
            single.metrics.satisfied_fraction_mean, rel=1e-6
        ), seed


def test_each_episode_has_its_own_copy_of_the_policy():
    scenario = load_scenario("dqoes-varied-burst")
    policy = make_baseline("dqoes")
    feed = BatchedTelemetryFeed(InferenceVectorEnv(num_envs=3, scenario=scenario), policy)
    assert len({id(copy) for copy in feed.policies}) == 3
    assert policy not in feed.policies
    feed.reset([0, 1, 2])
    step = feed.step(np.array([True, False, True]))
    assert step.telemetry[1] is None
    assert step.telemetry[0] is not None and step.telemetry[2] is not None
    # each running episode's decision is timed on its own; the ended one made none
    assert np.isnan(step.decision_s[1]) and not np.isnan(step.decision_s[[0, 2]]).any()


def test_bad_decisions_are_refused_as_the_single_env_refuses_them():
    env = TrainingVectorEnv(num_envs=2, scenario="specon-20")
    env.reset(seed=0)
    with pytest.raises(ActionError, match="1 decisions for 2 environments"):
        env.step_decisions([Decision()])
    with pytest.raises(ActionError, match=r"job 'nobody', which has not arrived"):
        env.step_decisions([Decision(), Decision(limits={"nobody": 0.5})])
    job = env.telemetry(1).active_jobs[0].job_id
    with pytest.raises(ActionError, match=rf"limit of job {job!r} is nan"):
        env.step_decisions([Decision(), Decision(limits={job: math.nan})])
    with pytest.raises(ActionError, match=r"Migration\(job_id, worker\) items"):
        env.step_decisions([Decision(migrations=(Migration(job, 1.5),)), Decision()])  # type: ignore[arg-type]
    with pytest.raises(ActionError, match=r"to worker 9 \(environment 1\)"):
        env.step_decisions([Decision(), Decision(migrations=(Migration(job, 9),))])


def _reproducible(summary: str) -> list:
    """``evaluate --json``'s policies without the wall times, which measure the machine."""
    (scenario,) = json.loads(summary)["scenarios"]
    for entry in scenario["policies"]:
        for name in list(entry["metrics"]):
            if not METRIC_SPECS[name].reproducible:
                del entry["metrics"][name]
    return scenario["policies"]


def test_dlsched_evaluate_single_env_prints_the_same_figures(capsys):
    arguments = [
        "evaluate",
        "--scenario",
        "dqoes-varied-burst",
        "--policy",
        "default,dqoes,oracle",
        "--episodes",
        "2",
        "--no-tracking",
        "--no-progress",
        "--json",
    ]
    assert main(arguments) == 0
    batched = _reproducible(capsys.readouterr().out)
    assert main([*arguments, "--single-env"]) == 0
    assert _reproducible(capsys.readouterr().out) == batched
    assert [entry["policy"] for entry in batched] == ["default", "dqoes", "oracle"]
