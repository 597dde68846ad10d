"""The observation's worker-free features (:data:`dlsched.envs.observation.WORKER_FREE`): what
each says of hand-made telemetry, and that they mean the same on a 2-core and a 16-core worker."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlsched.envs import observation
from dlsched.envs.observation import (
    FEATURES,
    NEED_CAP,
    WORK_LEFT_CAP_INTERVALS,
    WORKER_FREE,
    ObservationLayout,
    encode,
)
from dlsched.envs.telemetry import Telemetry, WorkerTelemetry
from dlsched.envs.telemetry_columns import TelemetryColumns
from tests.telemetry_factories import inference_job, training_job


def _observe(cores: float, jobs, horizon_s: float = 600.0, slots: int = 4) -> np.ndarray:
    """The observation of one worker of ``cores`` running ``jobs`` (a row per slot)."""
    telemetry = Telemetry(
        time_s=100.0,
        interval_s=10.0,
        workers=(WorkerTelemetry(0, cores, sum(job.cpu_usage for job in jobs)),),
        jobs=tuple(jobs),
    )
    layout = ObservationLayout(1, slots)
    return encode(TelemetryColumns.of(telemetry), layout, horizon_s)[0]


def _column(name: str) -> int:
    return FEATURES.index(name)


def test_the_first_sixteen_features_are_those_the_first_models_read() -> None:
    assert FEATURES[:16] == (
        "active", "migrating", "limit", "cpu_usage", "measured", "latency_ratio", "target",
        "class_g", "class_s", "class_b", "progress", "progress_rate", "loss_ratio", "age",
        "worker_usage", "worker_jobs",
    )  # fmt: skip
    assert set(WORKER_FREE) == set(FEATURES[16:])


def test_a_service_needs_the_cores_it_used_times_its_latency_over_its_target() -> None:
    """Two services on 2 cores: 0.5 cores gave a latency twice the target (needs 1 core, half the
    worker); 0.2 cores gave half the target (needs 0.1 cores)."""
    slow = inference_job("j0", cpu_usage=0.5, limit=0.25, latency_s=20.0, target_s=10.0)
    fast = inference_job("j1", cpu_usage=0.2, limit=0.1, latency_s=5.0, target_s=10.0)
    observation = _observe(2.0, [slow, fast])
    need = observation[:2, _column("need")] * NEED_CAP
    assert need == pytest.approx([0.5, 0.05])
    # the services that need less than it, summed: none for the cheaper one
    cheaper = observation[:2, _column("cheaper_need")] * NEED_CAP
    assert cheaper == pytest.approx([0.05, 0.0])
    assert observation[:2, _column("fair_share")] == pytest.approx([0.5, 0.5])
    assert observation[:2, _column("quota_used")] == pytest.approx([1.0, 1.0])


def test_a_service_without_a_latency_needs_nothing_known() -> None:
    waiting = inference_job("j0", cpu_usage=0.5, target_s=10.0)
    measured = inference_job("j1", cpu_usage=0.5, latency_s=10.0, target_s=10.0)
    observation = _observe(2.0, [waiting, measured])
    assert observation[0, _column("need")] == 0.0
    assert observation[1, _column("cheaper_need")] == 0.0  # the unmeasured one counts nothing


@pytest.mark.parametrize("cores", [2.0, 16.0])
def test_the_same_share_of_a_worker_reads_the_same_on_any_worker(cores: float) -> None:
    """A service using a quarter of its worker at a latency 1.5 times its target needs 0.375 of
    it, whatever the worker's size; the worker's size is its own feature."""
    job = inference_job("j0", cpu_usage=cores / 4, limit=0.25, latency_s=15.0, target_s=10.0)
    observation = _observe(cores, [job])
    assert observation[0, _column("need")] * NEED_CAP == pytest.approx(0.375)
    assert observation[0, _column("quota_used")] == pytest.approx(1.0)
    assert observation[0, _column("worker_cores")] == pytest.approx(math.log2(cores) / 4)


def test_training_jobs_read_their_work_left_and_how_many_have_less() -> None:
    """On 4 cores: j0 spent 40 CPU-s on 100 of 1,000 iterations (360 CPU-s, 90 s of the worker
    left); j1 20 CPU-s on 100 of 200 (5 s left); j2 has not finished an iteration."""
    jobs = [
        training_job("j0", iterations=100, total_iterations=1000, cpu_seconds=40.0, loss=1.0),
        training_job("j1", iterations=100, total_iterations=200, cpu_seconds=20.0, loss=1.0),
        training_job("j2", iterations=0, total_iterations=500, cpu_seconds=3.0),
    ]
    observation = _observe(4.0, jobs)
    scale = math.log1p(WORK_LEFT_CAP_INTERVALS)
    work_left = observation[:3, _column("work_left")]
    assert work_left == pytest.approx(
        [math.log1p(90.0 / 10.0) / scale, math.log1p(5.0 / 10.0) / scale, 0.0], rel=1e-6
    )
    # of its two other jobs, j0 has one with less work left, j1 none
    assert observation[:3, _column("shorter_jobs")] == pytest.approx([0.5, 0.0, 0.0])


def test_an_empty_worker_encodes_to_zeros() -> None:
    observation = _observe(2.0, [])
    assert not observation.any()


def _sum_below_by_definition(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per entry, the known values of its group that are smaller, or equal and earlier."""
    result = np.zeros(len(value))
    for i in range(len(value)):
        if math.isnan(value[i]):
            continue
        result[i] = sum(
            value[j]
            for j in range(len(value))
            if group[j] == group[i]
            and not math.isnan(value[j])
            and (value[j] < value[i] or (value[j] == value[i] and j < i))
        )
    return result


def _share_below_by_definition(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per finite entry, the share of the other entries of its group with a smaller value."""
    result = np.zeros(len(value))
    for i in range(len(value)):
        others = [j for j in range(len(value)) if group[j] == group[i] and j != i]
        if np.isfinite(value[i]) and others:
            result[i] = sum(value[j] < value[i] for j in others) / len(others)
    return result


@pytest.mark.parametrize("seed", range(40))
def test_ranks_within_a_worker_follow_their_definitions(seed: int) -> None:
    """``cheaper_need`` and ``shorter_jobs`` rank each job within its worker in one vectorised
    pass; against the rankings written out pair by pair, ties, NaN and infinity included."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(0, 30))
    group = rng.integers(0, 5, count)
    value = rng.choice([0.1, 0.25, 0.5, math.nan, float(rng.random())], count)
    np.testing.assert_allclose(
        observation._sum_below(group, value), _sum_below_by_definition(group, value), atol=1e-12
    )
    left = np.where(np.isnan(value), math.inf, value)
    np.testing.assert_array_equal(
        observation._share_below(group, left), _share_below_by_definition(group, left)
    )
