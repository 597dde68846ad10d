"""What an episode costs (``runs/evaluation/cost.py``), on telemetry and steps made by hand: the
cores allocated and used, the outcome per allocated core-second, the decision times, and the
reward that charges the cores (``envs/rewards.py``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from telemetry_factories import inference_job, training_job

from dlsched.envs.inference_env import InferenceVectorEnv
from dlsched.envs.rewards import (
    CORE_CHARGE,
    allocated_cores,
    satisfied_fraction,
    satisfied_fraction_cores,
    telemetry_reward,
)
from dlsched.envs.scenarios.model import JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState, QoEClass, Telemetry, WorkerTelemetry
from dlsched.envs.telemetry_columns import TelemetryColumns
from dlsched.runs.evaluation import cost
from dlsched.runs.evaluation.metrics import METRIC_SPECS, EpisodeMetrics
from dlsched.runs.evaluation.records import ContainerSample, StepRecord
from dlsched.runs.evaluation.runners import episode_metrics, step_record

WORKERS = (WorkerTelemetry(0, 4.0, 0.0), WorkerTelemetry(1, 2.0, 0.0))


def _telemetry(*jobs, workers=WORKERS) -> Telemetry:
    return Telemetry(time_s=10.0, interval_s=10.0, workers=workers, jobs=tuple(jobs))


def _mixed() -> Telemetry:
    """Worker 0 (4 cores): a service at half the worker and an uncapped one, 6 cores asked of
    4; worker 1 (2 cores): a service at a quarter; a waiting service and a failed one hold none."""
    return _telemetry(
        inference_job("j0", limit=0.5, cpu_usage=1.5, target_s=1.0, latency_s=1.0),
        inference_job("j1", limit=1.0, cpu_usage=2.0, target_s=1.0, latency_s=3.0),
        inference_job("j2", worker=1, slot=0, limit=0.25, cpu_usage=0.5, target_s=1.0),
        inference_job("j3", state=JobState.WAITING, worker=None, slot=None, limit=1.0),
        inference_job("j4", state=JobState.FAILED, worker=1, slot=1, limit=0.5, cpu_usage=0.25),
    )


def test_cores_allocated_are_each_workers_limits_in_cores_at_most_its_cores():
    telemetry = _mixed()
    # worker 0: 0.5 x 4 + 1 x 4 = 6 > 4 cores, so 4; worker 1: 0.25 x 2 = 0.5
    assert cost.allocated_cores(telemetry) == pytest.approx(4.5)
    # every job's usage, the failed one's last interval included
    assert cost.used_cores(telemetry) == pytest.approx(1.5 + 2.0 + 0.5 + 0.25)
    record = step_record(1, telemetry, 0.0, 0.002)
    assert (record.cores_allocated, record.cores_used) == (pytest.approx(4.5), pytest.approx(4.25))
    # the limits summed as set (6.5 of 6 cluster cores) stay visible in total_limit
    assert record.total_limit == pytest.approx(6.5 / 6.0)


def test_an_uncapped_job_holds_its_whole_worker():
    assert cost.allocated_cores(_telemetry(inference_job("j0"))) == 4.0
    assert cost.allocated_cores(_telemetry(inference_job("j0", worker=1, slot=0))) == 2.0
    # a job capped at 1.0 is uncapped; capped just below, it holds a share of the worker
    assert cost.allocated_cores(_telemetry(inference_job("j0", limit=0.75))) == 3.0
    # migrating jobs still hold their slot; a worker without an active job holds nothing
    migrating = inference_job("j0", state=JobState.MIGRATING, limit=0.5)
    assert cost.allocated_cores(_telemetry(migrating)) == 2.0
    assert cost.allocated_cores(_telemetry()) == 0.0


def test_the_reward_counts_the_cores_as_the_evaluation_does():
    for telemetry in (_mixed(), _telemetry(inference_job("j0", limit=0.3, worker=1, slot=0))):
        columns = TelemetryColumns.of(telemetry)
        assert allocated_cores(columns)[0] == pytest.approx(cost.allocated_cores(telemetry))


def test_the_core_charged_reward_is_the_satisfied_fraction_less_the_share_of_cores_held():
    telemetry = _mixed()
    columns = TelemetryColumns.of(telemetry)
    # three active services, j0 in S (latency on target), j1 in B, j2 unmeasured: 1/3
    assert satisfied_fraction(columns)[0] == pytest.approx(1 / 3)
    expected = 1 / 3 - CORE_CHARGE * 4.5 / 6.0
    assert satisfied_fraction_cores(columns)[0] == pytest.approx(expected)
    assert telemetry_reward("satisfied_fraction_cores")(telemetry, telemetry) == pytest.approx(
        expected
    )
    # the same satisfaction on fewer cores is worth more
    frugal = _telemetry(
        inference_job("j0", limit=0.25, target_s=1.0, latency_s=1.0),
        inference_job("j1", limit=0.25, target_s=1.0, latency_s=3.0),
        inference_job("j2", worker=1, slot=0, limit=0.25, target_s=1.0),
    )
    assert satisfied_fraction_cores(TelemetryColumns.of(frugal))[0] == pytest.approx(
        1 / 3 - CORE_CHARGE * 2.5 / 6.0
    )


def test_the_batched_environment_charges_the_cores_the_evaluation_counts():
    """On a cluster (workers of 4 and 2 cores), every episode's reward is its satisfied
    fraction less the charge for the cores the evaluation counts as allocated from its
    telemetry."""
    scenario = Scenario(
        name="test-cost-cluster",
        kind=JobKind.INFERENCE,
        workers=(WorkerSpec(cores=4.0), WorkerSpec(cores=2.0)),
        groups=(JobGroup(workloads=("mobilenet-svc",), count=6, targets_s=(5.0,)),),
        interval_s=10.0,
        horizon_s=100.0,
        slots_per_worker=3,
        profile_set="measured",
    )
    env = InferenceVectorEnv(num_envs=2, scenario=scenario, reward="satisfied_fraction_cores")
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(3):
        actions = rng.uniform(0.0, 0.4, env.action_space.shape).astype(np.float32)
        _, rewards, *_ = env.step(actions)
        for index in range(2):
            telemetry = env.telemetry(index)
            active = telemetry.active_jobs
            fraction = sum(1 for job in active if job.qoe_class is QoEClass.S) / len(active)
            cluster = sum(worker.cores for worker in telemetry.workers)
            assert cost.allocated_cores(telemetry) < cluster  # the caps hold less than all
            expected = fraction - CORE_CHARGE * cost.allocated_cores(telemetry) / cluster
            assert rewards[index] == pytest.approx(expected)
    env.close()


def _step(index, time_s, satisfied, allocated, used, decision_s, containers=()):
    return StepRecord(
        index, time_s, None if index == 0 else 0.0, 2, satisfied, 0, 2 - satisfied, 0.0, 0.0,
        0.0, 0, tuple(containers), allocated, used, decision_s,
    )  # fmt: skip


def test_episode_cost_is_weighted_by_the_seconds_each_step_covered():
    steps = [
        _step(0, 5.0, 0, 8.0, 0.0, None),  # the reset covers no time: never counted
        _step(1, 15.0, 1, 2.0, 1.0, 0.001),  # 10 s
        _step(2, 35.0, 2, 5.0, 4.0, 0.003),  # 20 s (a Docker step can run long)
        _step(3, 45.0, 0, 0.0, 0.0, 0.002),  # 10 s, nothing held
    ]
    metrics = episode_metrics(JobKind.INFERENCE, steps, (), all_arrived=False)
    core_s = 2.0 * 10 + 5.0 * 20 + 0.0 * 10
    assert metrics.cores_allocated_mean == pytest.approx(core_s / 40)
    assert metrics.cores_used_mean == pytest.approx((1.0 * 10 + 4.0 * 20) / 40)
    # satisfied service-seconds: 1 x 10 + 2 x 20 + 0 x 10, per allocated core-second
    assert metrics.satisfied_per_core_s == pytest.approx(50 / core_s)
    assert metrics.iterations_per_core_s is None  # a training metric
    assert metrics.decision_ms_median == pytest.approx(2.0)
    # sorted 1, 2, 3 ms: the 99th percentile lies 0.98 of the way from 2 to 3
    assert metrics.decision_ms_p99 == pytest.approx(2.98)


def _sample(job_id: str, iterations: int) -> ContainerSample:
    return ContainerSample(
        job_id, "vae", JobState.RUNNING, 0, 0.5, 2.0, 1.0, None, None, 0.1, None, None, iterations
    )


def test_training_counts_completed_iterations_per_allocated_core_second():
    steps = [
        _step(0, 0.0, 0, 4.0, 0.0, None, [_sample("j0", 0), _sample("j1", 0)]),
        _step(1, 10.0, 0, 4.0, 3.0, 0.001, [_sample("j0", 30), _sample("j1", 10)]),
        _step(2, 20.0, 0, 2.0, 2.0, 0.001, [_sample("j0", 50), _sample("j1", 30)]),
    ]
    metrics = episode_metrics(JobKind.TRAINING, steps, (), all_arrived=False)
    assert metrics.cores_allocated_mean == pytest.approx(3.0)
    assert metrics.iterations_per_core_s == pytest.approx(80 / 60)
    assert metrics.satisfied_per_core_s is None


def test_an_episode_without_steps_or_cores_has_no_cost_figures():
    (reset,) = [_step(0, 0.0, 0, 4.0, 0.0, None)]
    assert cost.cost_metrics(JobKind.INFERENCE, [reset]) == {
        "cores_allocated_mean": None,
        "cores_used_mean": None,
        "satisfied_per_core_s": None,
        "decision_ms_median": None,
        "decision_ms_p99": None,
    }
    idle = cost.cost_metrics(JobKind.INFERENCE, [reset, _step(1, 10.0, 0, 0.0, 0.0, 0.001)])
    assert idle["cores_allocated_mean"] == 0.0
    assert idle["satisfied_per_core_s"] is None  # nothing allocated: no ratio


def test_decision_times_measure_the_machine_and_are_left_out_of_equality():
    step = _step(1, 10.0, 1, 2.0, 1.0, 0.001)
    assert dataclasses.replace(step, decision_s=0.5) == step
    assert dataclasses.replace(step, cores_allocated=2.5) != step
    metrics = EpisodeMetrics(1.0, decision_ms_median=0.1, decision_ms_p99=0.2)
    assert dataclasses.replace(metrics, decision_ms_median=9.0, decision_ms_p99=9.0) == metrics
    assert not METRIC_SPECS["decision_ms_median"].reproducible
    assert METRIC_SPECS["cores_allocated_mean"].reproducible


def test_training_jobs_count_as_services_do():
    telemetry = _telemetry(
        training_job("j0", limit=0.5, cpu_usage=2.0),
        training_job("j1", state=JobState.DONE, limit=0.5, cpu_usage=0.5, iterations=10),
    )
    assert cost.allocated_cores(telemetry) == 2.0  # the finished job holds nothing
    assert cost.used_cores(telemetry) == 2.5
