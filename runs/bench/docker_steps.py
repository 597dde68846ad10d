"""``dlsched bench docker``: what the Docker backend spends per step on telemetry and actuation.

For a host of running containers (by default 10 inference services) it times setting every
container's limit and reading it back (``set_limits`` of a controlled episode), then measuring
CPU usage, state and progress (``advance(0)``, which does not sleep). For comparison it times
docker-py's ``container.stats(stream=False)`` for the same containers, which is what a scheduler
that asked the engine for CPU usage would pay per step.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.containers import LABEL_EPISODE, MANAGED_FILTER
from dlsched.envs.docker.engine import connect, engine_cores
from dlsched.envs.errors import DlschedError
from dlsched.envs.scenarios.model import ArrivalPattern, JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState

#: What one step of telemetry and actuation may cost for 10 containers.
DOCKER_STEP_TARGET_S = 0.050


@dataclass(frozen=True)
class StepTimes:
    """Mean times of one kind of step (seconds).

    Attributes:
        actuation_s: ``set_limits`` with a limit for every container: the engine updates (in
            parallel) and the read-backs of those that change.
        telemetry_s: ``advance(0)``: CPU usage, state and progress of every container.
        step_s: their sum.
        step_max_s: the slowest step.
    """

    actuation_s: float
    telemetry_s: float
    step_s: float
    step_max_s: float

    @classmethod
    def of(cls, actuation: list[float], telemetry: list[float]) -> StepTimes:
        steps = [a + t for a, t in zip(actuation, telemetry, strict=True)]
        return cls(
            actuation_s=statistics.fmean(actuation),
            telemetry_s=statistics.fmean(telemetry),
            step_s=statistics.fmean(steps),
            step_max_s=max(steps),
        )


@dataclass(frozen=True)
class DockerBenchResult:
    """The figures of ``dlsched bench docker`` (seconds).

    Attributes:
        containers: containers running during the measurement.
        steps: steps timed of each kind.
        changed: steps that give every container a new limit (the worst case).
        unchanged: steps that repeat every container's limit (the backend skips those updates;
            what a converged scheduler costs).
        stats_s: docker-py's ``container.stats(stream=False)`` for every container, one after
            another: what one step of usage readings through the engine costs.
        stats_per_container_s: ``stats_s`` per container.
        ratio: ``stats_s`` over the mean step that changes every limit.
        target_s: the target per step.
    """

    containers: int
    steps: int
    changed: StepTimes
    unchanged: StepTimes
    stats_s: float
    stats_per_container_s: float
    ratio: float
    target_s: float

    def report(self) -> str:
        lines = [f"dlsched Docker backend, {self.containers} containers, {self.steps} steps each:"]
        for title, times in (
            ("every limit changes", self.changed),
            ("no limit changes", self.unchanged),
        ):
            met = "met" if times.step_s <= self.target_s else "NOT met"
            lines += [
                f"  {title}:",
                f"    actuation (set + read back limits)     {times.actuation_s * 1000:8.1f} ms",
                f"    telemetry (usage, state, progress)     {times.telemetry_s * 1000:8.1f} ms",
                f"    per step, mean                         {times.step_s * 1000:8.1f} ms "
                f"(max {times.step_max_s * 1000:.1f} ms; target "
                f"{self.target_s * 1000:.0f} ms: {met})",
            ]
        lines += [
            f"docker-py container.stats(stream=False), same {self.containers} containers:",
            f"    all containers                         {self.stats_s * 1000:8.1f} ms "
            f"({self.stats_per_container_s * 1000:.1f} ms per container)",
            f"ratio stats / dlsched step (every limit changes) {self.ratio:6.1f} x",
        ]
        return "\n".join(lines)


def bench_docker(
    containers: int,
    steps: int,
    workload: str = "resnet-svc",
    endpoint: str | None = None,
    image: str | None = None,
) -> DockerBenchResult:
    """Time the Docker backend's per-step telemetry and actuation against docker-py's stats.

    Args:
        containers: inference containers to run.
        steps: steps to time of each kind (every limit changes; no limit changes).
        workload: the service they run.
        endpoint: the engine (``None``: the environment's).
        image: the workload image (``None``: dlsched's own).
    """
    if containers < 1 or steps < 1:
        raise DlschedError(f"containers={containers}, steps={steps}; both must be at least 1")
    cores = engine_cores(endpoint)
    scenario = Scenario(
        name="bench-docker",
        kind=JobKind.INFERENCE,
        workers=(WorkerSpec(cores=cores, endpoint=endpoint),),
        groups=(
            JobGroup(
                workloads=(workload,),
                count=containers,
                arrival=ArrivalPattern(),
                targets_s=(10.0,),
            ),
        ),
        slots_per_worker=containers,
        profile_set="measured",
    )
    jobs = scenario.realise(np.random.default_rng(0))
    backend = DockerBackend(image=image)
    episode = ControlledEpisode(backend, scenario)
    try:
        episode.reset(jobs, np.random.default_rng(0))
        episode.place([Placement(job.job_id, 0, slot) for slot, job in enumerate(jobs)])
        # Two alternating sets of limits, so that every step changes every container's quota;
        # their sum stays under the host so that the engine is not starved by its containers.
        share = 0.5 / containers
        limit_sets = [
            {job.job_id: share * (1 + (slot % 3) / 3) for slot, job in enumerate(jobs)},
            {job.job_id: share * (1.5 + (slot % 3) / 3) for slot, job in enumerate(jobs)},
        ]
        episode.advance(1.0)
        changed = _time_steps(episode, [limit_sets[step % 2] for step in range(steps)])
        unchanged = _time_steps(episode, [limit_sets[(steps - 1) % 2]] * steps)
        now = episode.advance(0.0)
        running = [job for job in now.jobs if job.state is JobState.RUNNING]
        if len(running) != containers:
            raise DlschedError(
                f"only {len(running)} of {containers} benchmark containers are running "
                f"({[(job.job_id, job.state.value) for job in now.jobs]}); see the log above"
            )
        stats_s = _time_engine_stats(endpoint, backend.episode)
    finally:
        episode.close()
        backend.close()
    return DockerBenchResult(
        containers=containers,
        steps=steps,
        changed=changed,
        unchanged=unchanged,
        stats_s=stats_s,
        stats_per_container_s=stats_s / containers,
        ratio=stats_s / changed.step_s,
        target_s=DOCKER_STEP_TARGET_S,
    )


def _time_steps(episode: ControlledEpisode, limits: list[dict[str, float]]) -> StepTimes:
    """Time ``set_limits(limits[i])`` then ``advance(0)`` for each ``i``."""
    actuation, telemetry = [], []
    for step_limits in limits:
        start = time.perf_counter()
        episode.set_limits(step_limits)
        applied = time.perf_counter()
        episode.advance(0.0)
        actuation.append(applied - start)
        telemetry.append(time.perf_counter() - applied)
    return StepTimes.of(actuation, telemetry)


def _time_engine_stats(endpoint: str | None, episode: str | None) -> float:
    """Seconds docker-py's ``stats(stream=False)`` takes for every container of ``episode``."""
    client = connect(endpoint)
    try:
        found = client.containers.list(
            filters={"label": [MANAGED_FILTER, f"{LABEL_EPISODE}={episode}"]},
            ignore_removed=True,
        )
        start = time.perf_counter()
        for container in found:
            container.stats(stream=False)
        return time.perf_counter() - start
    finally:
        client.close()
