"""Where jobs run: the spread placement of a burst (SpreadQueue chooses as SpreadPlacer does,
in linear time), a cluster's arrivals spread as Docker Swarm spreads them, the least-work
placer, and a migration through the environment."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from dlsched.envs.decision import Decision, Migration
from dlsched.envs.placement import LeastWorkPlacer, SpreadPlacer, SpreadQueue
from dlsched.envs.scenarios import load_scenario
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry, WorkerTelemetry, waiting_job
from dlsched.envs.telemetry_columns import TelemetryColumns


def _running(spec: JobSpec, worker: int) -> JobTelemetry:
    return dataclasses.replace(
        waiting_job(spec, 0.0), state=JobState.RUNNING, worker=worker, slot=0
    )


@pytest.mark.parametrize("seed", range(5))
def test_the_queue_chooses_the_worker_spread_placer_chooses(seed: int) -> None:
    rng = np.random.default_rng(seed)
    workers, slots = 7, 3
    free = rng.integers(0, slots + 1, workers).tolist()
    counts = [slots - f + int(rng.integers(0, 2)) for f in free]  # not always slots in use
    jobs = []
    for worker, count in enumerate(counts):
        for k in range(count):
            spec = JobSpec(f"r{worker}-{k}", "resnet50", JobKind.INFERENCE, 0.0, target_s=10.0)
            jobs.append(_running(spec, worker))
    telemetry = Telemetry(
        0.0, 10.0, tuple(WorkerTelemetry(w, 4.0, 0.0) for w in range(workers)), tuple(jobs)
    )
    queue = SpreadQueue(counts, free)
    placer = SpreadPlacer()
    chosen = 0
    for index in range(sum(free) + 2):
        spec = JobSpec(f"n{index}", "resnet50", JobKind.INFERENCE, 0.0, target_s=10.0)
        pinned = int(rng.integers(0, workers)) if index % 4 == 3 else None
        candidates = [w for w in range(workers) if free[w] > 0]
        if pinned is not None:
            expected = pinned if free[pinned] > 0 else None
            got = pinned if queue.has_free_slot(pinned) else None
        else:
            expected = placer.place(spec, telemetry, candidates) if candidates else None
            got = queue.choose()
        assert got == expected
        if got is None:
            continue
        chosen += 1
        queue.took(got)
        free[got] -= 1
        telemetry = dataclasses.replace(telemetry, jobs=(*telemetry.jobs, _running(spec, got)))
    assert chosen > 0 and queue.choose() is None


class _AnotherSpread(SpreadPlacer):
    """SpreadPlacer's choices through the placer interface (the env's path for any placer)."""


def _crowded(scenario: Scenario) -> Scenario:
    """The scenario with fewer slots than jobs, so arrivals wait and take freed slots."""
    return dataclasses.replace(scenario, slots_per_worker=max(2, scenario.slots_per_worker // 2))


@pytest.mark.parametrize("name", ["flowcon-cluster-20", "dqoes-cluster-40"])
def test_the_spread_placer_places_as_the_placer_interface_does(name: str) -> None:
    scenario = _crowded(load_scenario(name))
    env_id = "dlsched/Training-v0" if scenario.kind is JobKind.TRAINING else "dlsched/Inference-v0"
    fast = gym.make(env_id, scenario=scenario)
    generic = gym.make(env_id, scenario=scenario, placer=_AnotherSpread())
    action = np.full(fast.action_space.shape, 0.4, np.float32)
    first, _ = fast.reset(seed=1)
    second, _ = generic.reset(seed=1)
    np.testing.assert_array_equal(first, second)
    for _ in range(25):
        first, reward, *_, info = fast.step(action)
        second, other, *_, other_info = generic.step(action)
        np.testing.assert_array_equal(first, second)
        assert reward == other
        assert info["telemetry"] == other_info["telemetry"]


def test_a_step_with_many_arrivals_measures_its_jobs_once(monkeypatch) -> None:
    """With the spread placer a step stops at each arrival only to learn where the jobs are,
    from the backend's arrays: it builds the typed telemetry once however many arrive (a
    measurement per arrival made the cost of a step grow with the square of its jobs)."""
    base = load_scenario("dqoes-cluster-40")
    group = base.groups[0]
    burst = dataclasses.replace(group, arrival=dataclasses.replace(group.arrival, window_s=20.0))
    env = gym.make("dlsched/Inference-v0", scenario=dataclasses.replace(base, groups=(burst,)))
    engine = env.unwrapped._loop.batch
    calls = {"advance": 0, "telemetry": 0}
    advance, telemetry = engine.advance, TelemetryColumns.telemetry

    def counted_advance(rows, seconds):
        calls["advance"] += 1
        return advance(rows, seconds)

    def counted_telemetry(columns, row):
        calls["telemetry"] += 1
        return telemetry(columns, row)

    monkeypatch.setattr(engine, "advance", counted_advance)
    monkeypatch.setattr(TelemetryColumns, "telemetry", counted_telemetry)
    env.reset(seed=0)
    action = np.full(env.action_space.shape, 0.5, np.float32)
    stops = 0
    for _ in range(3):
        for name in calls:
            calls[name] = 0
        *_, info = env.step(action)
        assert calls["telemetry"] == 1
        stops += calls["advance"]
    assert stops >= 30  # most of the 40 jobs arrived at a time of their own
    assert len(info["telemetry"].active_jobs) == 40


def _job_with_work(job_id: str, worker: int, done: int, total: int, cpu_s: float) -> JobTelemetry:
    spec = JobSpec(job_id, "vae", JobKind.TRAINING, 0.0, iterations=total)
    return dataclasses.replace(
        _running(spec, worker), iterations=done, total_iterations=total, cpu_seconds=cpu_s
    )


def _arrival(job_id: str) -> JobSpec:
    return JobSpec(job_id, "vae", JobKind.TRAINING, 0.0, iterations=100)


def test_least_work_places_on_the_worker_with_the_least_work_left_per_core() -> None:
    """Worker 0 (1 core) holds one job with 10 CPU-s left; worker 1 (2 cores) two jobs with 300
    CPU-s left each; the arrival counts as their mean. Spread picks worker 0 (fewer containers),
    and so does least work: (10 + 203.3) / 1 against (600 + 203.3) / 2. With 300 CPU-s left on
    worker 0 it picks worker 1: 600 / 1 against 900 / 2."""
    workers = (WorkerTelemetry(0, 1.0, 1.0), WorkerTelemetry(1, 2.0, 2.0))

    def place(left_on_0: float) -> int:
        jobs = (
            _job_with_work("a", 0, 100, 200, left_on_0),  # spent = left: 100 of 200 done
            _job_with_work("b", 1, 100, 200, 300.0),
            _job_with_work("c", 1, 100, 200, 300.0),
        )
        telemetry = Telemetry(time_s=50.0, interval_s=10.0, workers=workers, jobs=jobs)
        return LeastWorkPlacer().place(_arrival("d"), telemetry, [0, 1])

    assert place(10.0) == 0
    assert place(300.0) == 1


def test_least_work_without_measurements_places_by_jobs_per_core() -> None:
    """Nothing has finished an iteration: each job counts alike, so the 8-core worker takes
    jobs until it holds four times the 2-core worker's."""
    workers = (WorkerTelemetry(0, 2.0, 0.0), WorkerTelemetry(1, 8.0, 0.0))
    jobs: list[JobTelemetry] = []
    for index in range(10):
        telemetry = Telemetry(time_s=0.0, interval_s=10.0, workers=workers, jobs=tuple(jobs))
        worker = LeastWorkPlacer().place(_arrival(f"j{index}"), telemetry, [0, 1])
        jobs.append(_job_with_work(f"j{index}", worker, 0, 100, 0.0))
    assert [sum(job.worker == w for job in jobs) for w in (0, 1)] == [2, 8]


def test_cluster_arrivals_are_spread_like_docker_swarm():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-cluster-40")
    env.reset(seed=0)
    for _ in range(40):
        _, _, _, _, info = env.step(np.ones(env.action_space.shape, dtype=np.float32))
    per_worker = [len(info["telemetry"].on_worker(w)) for w in range(4)]
    assert sum(per_worker) == 40
    assert max(per_worker) - min(per_worker) <= 1


def test_migration_through_the_environment_moves_the_job_and_keeps_its_progress():
    env = gym.make("dlsched/Training-v0", scenario="flowcon-cluster-20").unwrapped
    env.reset(seed=0)
    for _ in range(10):
        env.step(np.ones(env.action_space.shape, dtype=np.float32))
    job = next(j for j in env.telemetry.active_jobs if j.iterations > 0)
    destination = (job.worker + 1) % len(env.scenario.workers)
    _, _, _, _, info = env.step_decision(Decision(migrations=(Migration(job.job_id, destination),)))
    moved = info["telemetry"].job(job.job_id)
    assert moved.worker == destination
    assert moved.iterations >= job.iterations
