"""Autothrottle and the Kubernetes-style autoscaler on real containers (the Docker backend).

Their rules are checked on hand-made telemetry in their own test modules; here they run on a
Docker engine, reading real cgroup telemetry and setting real quotas, as on replay.
"""

from __future__ import annotations

import dataclasses

import pytest

from dlsched.baselines import make
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.telemetry import JobState
from dlsched.runs.evaluation import run_episode
from dlsched.runs.evaluation.records import EpisodeResult


def _services_on_this_engine(client) -> Scenario:
    """``docker-inference-3`` with the engine's cores, cut to four steps of 2.5 s: enough for a
    window of several recommendations and for a Captain's first round (both policies decide
    once per step, whatever its length, and what is asserted is read off the steps' own
    usage)."""
    scenario = load_scenario("docker-inference-3")
    cores = float(client.info()["NCPU"])
    workers = tuple(dataclasses.replace(worker, cores=cores) for worker in scenario.workers)
    return dataclasses.replace(scenario, workers=workers, interval_s=2.5, horizon_s=10.0)


def _limits_cores(result: EpisodeResult, job_id: str) -> list[tuple[float, float, float]]:
    """Each step's (time, limit in cores, usage in cores) of ``job_id`` while it ran."""
    return [
        (step.time_s, sample.limit_cores, sample.cpu_usage)
        for step in result.steps
        for sample in step.containers
        if sample.job_id == job_id and sample.state is JobState.RUNNING
    ]


@pytest.mark.docker
def test_the_autoscaler_sets_usage_over_utilisation_on_real_containers(
    docker_engine, workload_image
):
    scenario = _services_on_this_engine(docker_engine)
    cores = scenario.workers[0].cores
    # a sync at every step (a Docker step lasts its interval or a little more)
    policy = make("k8s-autoscaler", sync_period_s=scenario.interval_s - 0.5)
    result = run_episode(scenario, policy, seed=0, backend="docker")
    assert result.steps[-1].time_s == pytest.approx(scenario.horizon_s, abs=scenario.interval_s)
    for job in result.jobs:
        rows = _limits_cores(result, job.job_id)
        # rows[0] is the reset (uncapped), where the first sync reads the counter; from then on
        # the limit in force is the largest recommendation so far (the 200-s window holds them
        # all): twice the usage of every interval since the reset, within the worker
        recommendations = []
        for (_, limit, _), (_, _, usage) in zip(rows[2:], rows[1:-1], strict=True):
            recommendations.append(usage / 0.5)
            expected = min(max(max(recommendations), 0.01), cores)
            assert limit == pytest.approx(expected, rel=0.1, abs=0.02), (job.job_id, rows)


@pytest.mark.docker
def test_autothrottle_caps_real_containers_from_their_usage(docker_engine, workload_image):
    scenario = _services_on_this_engine(docker_engine)
    cores = scenario.workers[0].cores
    result = run_episode(scenario, make("autothrottle"), seed=0, backend="docker")
    assert result.steps[-1].time_s == pytest.approx(scenario.horizon_s, abs=scenario.interval_s)
    # Three services share the worker, so one used at most a third of it over the first
    # interval; uncapped (no throttling) with a usage window of zeros before it, its Captain
    # wants its usage plus 3 deviations of (0, 0, 0, 0, u), 2.34 u <= 0.78 of the worker, below
    # 0.9 of its limit: it scales down at its first round.
    capped = [
        job.job_id
        for job in result.jobs
        if any(limit < cores for _, limit, _ in _limits_cores(result, job.job_id))
    ]
    assert capped, [_limits_cores(result, job.job_id) for job in result.jobs]
