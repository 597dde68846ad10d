"""Evaluations of many episodes: refused beyond a stated limit before anything runs, and run in
memory that does not grow with their number below it (batches of seeds, scores kept, records
handed over and dropped).
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from pathlib import Path

import pytest

from dlsched.baselines import make as make_baseline
from dlsched.envs.errors import ArgumentError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.runs.cli import main
from dlsched.runs.evaluation import EpisodeResult, evaluate, run_episode, run_episodes, runners
from dlsched.runs.tracking.plots import DRAWN_SEEDS, PolicyTimeline
from dlsched.runs.tracking.tracked_evaluation import EvaluationRequest, evaluate_untracked

SHORT = dataclasses.replace(load_scenario("dqoes-varied-burst"), horizon_s=60.0)
"""Seven steps an episode: many episodes in a second or two."""


@pytest.mark.parametrize("episodes", [100_001, 10**6, 10**9])
@pytest.mark.parametrize("tracking", [["--no-tracking"], []])
def test_an_evaluation_beyond_the_limit_is_refused_before_anything_runs_or_is_recorded(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    episodes: int,
    tracking: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    # once: MemoryError after 3-8 GB, the batch's arrays allocated for every seed up front
    argv = ["evaluate", "--scenario", "dqoes-varied-burst", "--policy", "default"]
    code = main([*argv, "--episodes", str(episodes), "--no-progress", *tracking])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"1 policy x {episodes:,} episodes = {episodes:,} episodes: expected at most " in err
    assert "MAX_EPISODES" in err and "DLSCHED_MAX_EPISODES=N" in err
    assert "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists()  # the tracked one opened no store


def test_the_limit_counts_every_policy_and_is_raised_by_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policies = (make_baseline("default"), make_baseline("dqoes"))
    monkeypatch.setenv(runners.MAX_EPISODES.variable, "5")
    with pytest.raises(ArgumentError, match="2 policies x 3 episodes = 6 episodes"):
        evaluate(SHORT, policies, [0, 1, 2], progress=False)
    monkeypatch.setenv(runners.MAX_EPISODES.variable, "6")
    assert len(evaluate(SHORT, policies, [0, 1, 2], progress=False)) == 6


def test_seeds_run_in_batches_and_give_the_records_of_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = make_baseline("dqoes")
    seeds = list(range(7))
    whole = run_episodes(SHORT, policy, seeds)
    batches: list[int] = []

    def counted(*args, **kwargs) -> list[EpisodeResult]:
        batches.append(len(args[2]))
        return run_episodes(*args, **kwargs)

    # a batch's records take about BYTES_AT_ONCE: three of these episodes'
    samples = SHORT.max_jobs * (round(SHORT.horizon_s / SHORT.interval_s) + 1)
    monkeypatch.setattr(runners, "BYTES_AT_ONCE", 3 * samples * runners.SAMPLE_BYTES + 1)
    monkeypatch.setattr(runners, "run_episodes", counted)
    results = evaluate(SHORT, [policy], seeds, progress=False)
    assert batches == [3, 3, 1]
    assert [r.seed for r in results] == seeds
    assert [r.steps for r in results] == [r.steps for r in whole]
    assert [r.metrics for r in results] == [r.metrics for r in whole]


def test_the_memory_of_an_evaluation_does_not_grow_with_its_episodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runners, "EPISODES_AT_ONCE", 8)
    policies = (make_baseline("default"),)

    def peak_bytes(episodes: int) -> int:
        request = EvaluationRequest(SHORT, policies, tuple(range(episodes)), "replay")
        tracemalloc.start()
        try:
            evaluate_untracked(request, progress=False)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak_bytes(16)  # what the first evaluation imports and caches is not the evaluation's
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        record = run_episode(SHORT, policies[0], 0)
        one_record = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert record.steps  # held until measured
    few, many = peak_bytes(16), peak_bytes(176)
    # keeping the 160 more episodes' records would take 160 records more; their scores are kept
    assert many - few < 160 * one_record / 4, (few, many, one_record)


def test_a_timeline_keeps_the_first_seeds_and_the_mean_of_all() -> None:
    scenario = dataclasses.replace(load_scenario("specon-7"), horizon_s=300.0)
    seeds = list(range(DRAWN_SEEDS + 5))
    results = evaluate(scenario, [make_baseline("default")], seeds, progress=False)
    timeline = PolicyTimeline()
    for result in results:
        timeline.add(result)
    assert timeline.episodes == DRAWN_SEEDS + 5 and len(timeline.drawn) == DRAWN_SEEDS
    steps = min(len(result.steps) for result in results)
    assert timeline.times == [step.time_s for step in results[0].steps[:steps]]
    expected = [
        sum(result.steps[i].finished_jobs for result in results) / len(results)
        for i in range(steps)
    ]
    assert timeline.mean() == pytest.approx(expected)
