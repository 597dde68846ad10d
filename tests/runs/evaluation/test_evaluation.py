"""The evaluation harness: episodes on the real environment and baselines, metrics, summaries."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from dlsched.baselines import make
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.telemetry import JobState, QoEClass
from dlsched.runs.evaluation import (
    EpisodeMetrics,
    EpisodeResult,
    EpisodeScore,
    PolicyIdentity,
    estimate,
    evaluate,
    run_episode,
    summarise,
)
from dlsched.runs.tracking.compare import ScenarioComparison, render_table

INFERENCE = "dqoes-resnet50-burst-target40"
TRAINING = "flowcon-poc-3"
#: Two-sided 95% Student-t quantiles from printed tables (3 and 1 degrees of freedom).
T_975_DF3 = 3.182
T_975_DF1 = 12.706


def shortened(name: str, horizon_s: float) -> Scenario:
    return dataclasses.replace(load_scenario(name), horizon_s=horizon_s)


def test_an_inference_episode_records_every_step_and_container_and_scores_from_them():
    scenario = shortened(INFERENCE, 200)
    result = run_episode(scenario, make("dqoes"), seed=3)

    assert [step.step for step in result.steps] == list(range(21))
    assert [step.time_s for step in result.steps] == pytest.approx([10.0 * i for i in range(21)])
    assert result.steps[0].reward is None and all(s.reward is not None for s in result.steps[1:])
    fractions = []
    for step in result.steps:
        assert len(step.containers) == 10  # the burst: all ten from the start
        active = [c for c in step.containers if c.state is JobState.RUNNING]
        in_s = [c for c in active if c.qoe_class is QoEClass.S]
        assert step.active_jobs == len(active)
        assert step.satisfied == len(in_s)
        assert step.g == sum(1 for c in active if c.qoe_class is QoEClass.G)
        assert step.b == sum(1 for c in active if c.qoe_class is QoEClass.B)
        assert step.q_g == pytest.approx(
            sum(c.target_s - c.latency_s for c in active if c.qoe_class is QoEClass.G)
        )
        assert step.total_limit == pytest.approx(sum(c.limit for c in active))  # one worker
        if step.step > 0:
            fractions.append(len(in_s) / len(active))
    metrics = result.metrics
    assert metrics.satisfied_fraction_mean == pytest.approx(statistics.fmean(fractions))
    assert metrics.satisfied_fraction_final == fractions[-1]
    assert metrics.episode_return == pytest.approx(sum(s.satisfied for s in result.steps[1:]))
    assert metrics.mean_completion_s is None and metrics.makespan_s is None
    assert (metrics.satisfied_final, metrics.g_final, metrics.b_final) == (
        result.steps[-1].satisfied,
        result.steps[-1].g,
        result.steps[-1].b,
    )


def test_a_training_episode_gives_completion_times_and_makespan_from_its_jobs():
    result = run_episode(load_scenario(TRAINING), make("default"), seed=0)

    assert all(job.completed_s is not None for job in result.jobs)
    completions = [job.completed_s - job.arrival_s for job in result.jobs]
    assert [job.arrival_s for job in result.jobs] == [0.0, 40.0, 80.0]
    assert result.metrics.mean_completion_s == pytest.approx(statistics.fmean(completions))
    assert result.metrics.makespan_s == pytest.approx(max(job.completed_s for job in result.jobs))
    assert result.metrics.unfinished_jobs == 0
    assert result.metrics.satisfied_fraction_mean is None
    assert result.steps[-1].finished_jobs == 3


def test_an_episode_cut_before_its_jobs_finish_has_no_completion_time():
    cut = shortened(TRAINING, 60)
    # the third job would arrive at 80 s, after the horizon: a scenario may not hold it
    cut = dataclasses.replace(cut, groups=cut.groups[:2])
    result = run_episode(cut, make("default"), seed=0)

    assert result.metrics.unfinished_jobs == 2  # VAE still trains, MNIST-PyTorch too
    assert result.metrics.mean_completion_s is None
    assert result.metrics.makespan_s is None
    assert [job.completed_s for job in result.jobs] == [None, None]


def _dqoes_and_default_on_seeds_4_and_5() -> tuple[list[tuple[str, int]], list[EpisodeResult]]:
    """The episodes in the order they ended, and evaluate's records."""
    seen: list[tuple[str, int]] = []
    results = evaluate(
        shortened(INFERENCE, 50),
        [make("dqoes"), make("default")],
        seeds=[4, 5],
        on_episode=lambda r: seen.append((r.policy.name, r.seed)),
        progress=False,
    )
    return seen, results


def test_evaluate_runs_default_first_on_the_same_seeds_for_every_policy():
    seen, results = _dqoes_and_default_on_seeds_4_and_5()
    assert seen == [("default", 4), ("default", 5), ("dqoes", 4), ("dqoes", 5)]
    assert [(r.policy.name, r.seed) for r in results] == seen
    again = run_episode(shortened(INFERENCE, 50), make("dqoes"), seed=5)
    assert again.metrics == results[-1].metrics  # replay is deterministic for a seed
    assert dict(results[-1].policy.params) == make("dqoes").params()


def test_a_backend_of_one_episode_at_a_time_runs_them_in_rounds_of_a_seed(monkeypatch):
    # a host drifts over an evaluation: run policy after policy, its drift would read as the
    # last policy's difference; in rounds every policy meets every stretch of it
    from dlsched.envs.replay.backend import ReplayBackend
    from dlsched.runs.evaluation import runners

    class OneAtATime(ReplayBackend):
        capabilities = dataclasses.replace(ReplayBackend.capabilities, batchable=False)

    _, by_policy = _dqoes_and_default_on_seeds_4_and_5()
    monkeypatch.setattr(runners, "backend_class", lambda name: OneAtATime)
    seen, in_rounds = _dqoes_and_default_on_seeds_4_and_5()
    assert seen == [("default", 4), ("dqoes", 4), ("default", 5), ("dqoes", 5)]
    records = {(r.policy.name, r.seed): r.metrics for r in in_rounds}
    assert records == {(r.policy.name, r.seed): r.metrics for r in by_policy}


def test_estimate_is_the_mean_with_a_student_t_interval_and_none_for_one_value():
    values = [1.0, 2.0, 4.0, 5.0]
    got = estimate(values)
    half = T_975_DF3 * statistics.stdev(values) / 2
    assert got.mean == 3.0 and got.n == 4
    assert got.ci_low == pytest.approx(3.0 - half, abs=1e-3)
    assert got.ci_high == pytest.approx(3.0 + half, abs=1e-3)
    two = estimate([1.0, 3.0])
    assert two.half_width == pytest.approx(T_975_DF1 * 1.0, abs=1e-3)
    single = estimate([7.0])
    assert (single.mean, single.ci_low, single.ci_high, single.n) == (7.0, None, None, 1)
    assert estimate([]).mean is None


def _score(name: str, seed: int, **metrics: float) -> EpisodeScore:
    return EpisodeScore(PolicyIdentity(name), seed, EpisodeMetrics(**metrics))


def test_summaries_give_ratios_to_default_and_oracle_and_none_where_undefined():
    scores = [
        _score("default", 0, episode_return=0.0, satisfied_fraction_mean=0.2, b_final=0.0),
        _score("default", 1, episode_return=0.0, satisfied_fraction_mean=0.4, b_final=0.0),
        _score("dqoes", 0, episode_return=1.0, satisfied_fraction_mean=0.6, b_final=2.0),
        _score("dqoes", 1, episode_return=1.0, satisfied_fraction_mean=0.9, b_final=4.0),
        _score("oracle", 0, episode_return=1.0, satisfied_fraction_mean=1.0, b_final=1.0),
        _score("oracle", 1, episode_return=1.0, satisfied_fraction_mean=1.0, b_final=1.0),
    ]
    default, dqoes, oracle = summarise(scores, JobKind.INFERENCE)

    sat = dqoes.metric("satisfied_fraction_mean")
    assert sat.estimate.mean == pytest.approx(0.75)
    assert sat.ratio_to_default == pytest.approx(0.75 / 0.3)
    assert sat.ratio_to_oracle == pytest.approx(0.75)
    assert dqoes.metric("b_final").ratio_to_default is None  # default's mean is 0
    assert dqoes.metric("b_final").ratio_to_oracle == pytest.approx(3.0)
    assert default.metric("satisfied_fraction_mean").ratio_to_default == pytest.approx(1.0)
    assert dqoes.metric("satisfied_final").estimate.mean is None  # no episode had it
    assert oracle.seeds == (0, 1)


def test_one_seed_prints_an_undefined_interval_never_a_made_up_one():
    scores = [_score("default", 0, episode_return=3.0, satisfied_fraction_mean=0.5)]
    summaries = summarise(scores, JobKind.INFERENCE)
    assert summaries[0].metric("satisfied_fraction_mean").estimate.half_width is None
    table = render_table([ScenarioComparison("s", "h", JobKind.INFERENCE, "replay", summaries)])
    assert "0.500 ± n/a" in table
    assert "one seed, the interval is undefined" in " ".join(table.split())


def test_intervals_are_clipped_to_the_range_a_metric_can_take():
    fractions = [0.0, 0.0, 0.0, 0.1, 0.07]  # mean 0.034, a Student-t half-width of 0.05
    free = estimate(fractions)
    assert free.ci_low is not None and free.ci_low < 0 and not free.clipped
    got = estimate(fractions, 0.0, 1.0)
    assert got.mean == free.mean and got.clipped
    assert (got.ci_low, got.ci_high) == (0.0, free.ci_high)
    near_one = estimate([1.0, 1.0, 0.8], 0.0, 1.0)
    assert near_one.ci_high == 1.0 and near_one.ci_low is not None and near_one.ci_low > 0
    inside = estimate([0.4, 0.5, 0.6], 0.0, 1.0)
    assert not inside.clipped and inside == estimate([0.4, 0.5, 0.6])
    counts = [_score("dqoes", seed, episode_return=0.0, satisfied_final=value)
              for seed, value in enumerate([0.0, 0.0, 21.0])]  # fmt: skip
    (summary,) = summarise(counts, JobKind.INFERENCE)
    satisfied = summary.metric("satisfied_final").estimate
    assert satisfied.ci_low == 0.0 and satisfied.clipped  # |S| 7.0 ± 26 would reach -19
    table = render_table([ScenarioComparison("s", "h", JobKind.INFERENCE, "replay", (summary,))])
    assert f"7.0 [0.0, {satisfied.ci_high:.1f}]" in table
    assert "clipped to the range the metric can take" in " ".join(table.split())
