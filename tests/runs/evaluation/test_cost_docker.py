"""The cores an evaluation on Docker counts as allocated are those of the quotas the engine holds
(``docker inspect``), step by step: an uncapped container counts as the worker, and a worker
counts for no more than its cores."""

from __future__ import annotations

import itertools
import math

import pytest
from scenario_factories import mobilenet_services

from dlsched.envs.decision import Decision
from dlsched.envs.docker.containers import LABEL_EPISODE, LABEL_OWNER, MANAGED_FILTER
from dlsched.envs.owner import ProcessOwner
from dlsched.envs.telemetry import Telemetry
from dlsched.policies.policy import HandcraftedPolicy
from dlsched.runs.evaluation import StepRecord, run_episode

#: Limits by step, the first job's then the second's: quotas that hold half the worker, then
#: one quota and no quota at all, which hold the whole worker between them.
LIMITS = ((0.2, 0.3), (0.15, 1.0))


class _Alternating(HandcraftedPolicy):
    """Sets :data:`LIMITS` on the services in arrival order, alternating from step to step."""

    name = "alternating"

    def __init__(self) -> None:
        super().__init__()
        self._decisions = 0

    def reset(self) -> None:
        self._decisions = 0

    def act(self, telemetry: Telemetry) -> Decision:
        limits = LIMITS[self._decisions % len(LIMITS)]
        self._decisions += 1
        jobs = [job.job_id for job in telemetry.active_jobs]
        return Decision(limits=dict(zip(jobs, limits, strict=False)))


def _inspected_cores(client, cores: float) -> tuple[float, int]:
    """The cores the quotas of this process's running dlsched containers hold, as ``docker
    inspect`` reads them (one worker of ``cores``; no quota is the worker), and how many
    containers there are."""
    owner = ProcessOwner.current().as_labels(LABEL_OWNER)
    labels = [MANAGED_FILTER, *(f"{key}={value}" for key, value in owner.items())]
    running = client.containers.list(filters={"label": labels, "status": "running"})
    assert len({container.labels[LABEL_EPISODE] for container in running}) <= 1
    held = []
    for container in running:
        config = client.api.inspect_container(container.id)["HostConfig"]
        quota, period = config["CpuQuota"], config["CpuPeriod"]
        held.append(quota / period if quota > 0 and period > 0 else cores)
    return min(cores, math.fsum(held)), len(running)


@pytest.mark.docker
def test_cores_allocated_on_docker_are_the_quotas_docker_inspect_reads(
    docker_engine, workload_image, containers_left_behind
):
    cores = float(docker_engine.info()["NCPU"])
    scenario = mobilenet_services("test-docker-cost", cores, 2, interval_s=2.0, horizon_s=8.0)
    inspected: list[tuple[StepRecord, float, int]] = []

    def inspect(step: StepRecord) -> None:  # before the next decision changes a quota
        inspected.append((step, *_inspected_cores(docker_engine, cores)))

    result = run_episode(scenario, _Alternating(), seed=0, backend="docker", on_step=inspect)
    assert containers_left_behind() == []
    assert len(inspected) >= 2  # the horizon holds four intervals
    for step, held, containers in inspected:
        assert containers == step.active_jobs == 2, step
        assert step.cores_allocated == pytest.approx(held, abs=1e-3), step
    # both kinds of step were seen: quotas holding half the worker, and a worker held whole
    expected = [0.5 * cores, cores] * len(inspected)
    assert [step.cores_allocated for step, _, _ in inspected] == pytest.approx(
        expected[: len(inspected)], abs=1e-3
    )
    # the episode's mean weighs each step by the wall time it covered
    seconds = [b.time_s - a.time_s for a, b in itertools.pairwise(result.steps)]
    weighted = math.fsum(
        step.cores_allocated * s for step, s in zip(result.steps[1:], seconds, strict=True)
    )
    assert result.metrics.cores_allocated_mean == pytest.approx(weighted / sum(seconds))
