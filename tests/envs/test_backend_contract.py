"""The backend contract (:class:`dlsched.envs.backend.Backend` gives an
:class:`~dlsched.envs.episode_batch.EpisodeBatch`), checked for every backend.

Each test runs against the replay backend and, where an engine answers, the Docker backend, on
the small shipped scenario ``docker-smoke-training`` (two short training jobs, measured
profiles), through the checked path a measurement takes
(:class:`~dlsched.envs.controlled_episode.ControlledEpisode`) or through an environment. Times
and CPU usage are exact for replay and approximate for Docker, which runs in wall-clock time: the
tolerances below say by how much and why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import docker
import numpy as np
import pytest

from dlsched.envs.backend import Backend
from dlsched.envs.backend_registry import make_backend
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.containers import LABEL_EPISODE
from dlsched.envs.episode_batch import EpisodeBatch
from dlsched.envs.errors import ActionError, BackendError, ResetNeededError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.telemetry import JobState, Telemetry
from dlsched.envs.training_env import TrainingEnv

with_docker = pytest.mark.docker


@dataclass
class Case:
    """One backend under test, with what the contract allows it.

    Attributes:
        backend: the backend.
        scenario: the contract scenario, its cores those of the host for Docker.
        episode: a controlled episode of the scenario on the backend.
        time_tolerance_s: how far ``advance(s)`` may move time from ``s`` (Docker: the sleep
            overshoots by a millisecond or so and a measurement takes a few; 0.25 s is ample).
        usage_slack: CPU usage allowed above ``limit * cores``, as a fraction of it plus cores
            (Docker: CFS may hand out one 100 ms period's quota more over a 2 s window, 5 %, and
            the cgroup reads are a few milliseconds off the window's ends).
        engine: the Docker engine the backend runs containers on; ``None`` for replay.
    """

    backend: Backend
    scenario: Scenario
    time_tolerance_s: float
    usage_slack: tuple[float, float]
    engine: docker.DockerClient | None = None
    episode: ControlledEpisode = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.episode = ControlledEpisode(self.backend, self.scenario)

    def containers(self) -> list[str]:
        """Names of the containers of the backend's current (or last) episode."""
        assert self.engine is not None and isinstance(self.backend, DockerBackend)
        found = self.engine.containers.list(
            all=True,
            ignore_removed=True,
            filters={"label": [f"{LABEL_EPISODE}={self.backend.episode}"]},
        )
        return [container.name for container in found]


@pytest.fixture(params=["replay", pytest.param("docker", marks=with_docker)])
def case(request):
    scenario = load_scenario("docker-smoke-training")
    if request.param == "docker":
        engine = request.getfixturevalue("docker_engine")
        request.getfixturevalue("workload_image")
        cores = float(engine.info()["NCPU"])
        workers = tuple(dataclasses.replace(w, cores=cores) for w in scenario.workers)
        scenario = dataclasses.replace(scenario, workers=workers)
        tested = Case(make_backend("docker"), scenario, 0.25, (0.05, 0.03), engine)
    else:
        tested = Case(make_backend("replay"), scenario, 1e-9, (0.0, 1e-9))
    yield tested
    tested.episode.close()  # whatever the test did (closing twice is allowed)
    tested.backend.close()


def _start(case: Case, limits: dict[str, float]) -> tuple[Telemetry, Telemetry]:
    jobs = case.scenario.realise(np.random.default_rng(0))
    empty = case.episode.reset(jobs, np.random.default_rng(1))
    case.episode.place([Placement(job.job_id, 0, slot) for slot, job in enumerate(jobs)])
    case.episode.set_limits(limits)
    return empty, case.episode.advance(0.0)


def _check_usage(case: Case, telemetry: Telemetry) -> None:
    cores = telemetry.workers[0].cores
    for job in telemetry.jobs:
        limit_cores = job.limit * cores
        fraction, extra_cores = case.usage_slack
        assert 0.0 <= job.cpu_usage <= limit_cores * (1 + fraction) + extra_cores, job


def test_reset_gives_an_empty_episode_at_time_zero(case):
    jobs = case.scenario.realise(np.random.default_rng(0))
    telemetry = case.episode.reset(jobs, np.random.default_rng(1))
    assert telemetry.time_s == 0.0
    assert telemetry.jobs == ()
    assert [worker.index for worker in telemetry.workers] == [0]
    assert telemetry.workers[0].cores == case.scenario.workers[0].cores


def test_an_episode_keeps_the_contract(case):
    empty, placed = _start(case, {"j00": 0.5})
    assert empty.jobs == ()
    # Placement starts the jobs where they were placed, uncapped unless limits named them.
    assert [(job.job_id, job.state, job.worker, job.slot) for job in placed.jobs] == [
        ("j00", JobState.RUNNING, 0, 0),
        ("j01", JobState.RUNNING, 0, 1),
    ]
    assert placed.job("j00").limit == pytest.approx(0.5, abs=1e-4)
    assert placed.job("j01").limit == 1.0

    # Limits are read back; time moves by the asked seconds; usage stays under the limit.
    case.episode.set_limits({"j00": 0.3, "j01": 0.6})
    before = placed
    now = case.episode.advance(2.0)
    assert now.time_s - before.time_s == pytest.approx(2.0, abs=case.time_tolerance_s)
    assert now.job("j00").limit == pytest.approx(0.3, abs=1e-4)
    assert now.job("j01").limit == pytest.approx(0.6, abs=1e-4)
    _check_usage(case, now)

    # Run to the end: cumulative CPU never decreases, and finished jobs say when they finished.
    while not all(job.state is JobState.DONE for job in now.jobs):
        assert now.time_s < case.scenario.horizon_s, now
        assert all(job.state is not JobState.FAILED for job in now.jobs), now
        before, now = now, case.episode.advance(2.0)
        assert now.time_s - before.time_s == pytest.approx(2.0, abs=case.time_tolerance_s)
        for job in now.jobs:
            assert job.cpu_seconds >= before.job(job.job_id).cpu_seconds - 1e-9
        _check_usage(case, now)
    for job in now.jobs:
        assert job.completed_s is not None
        assert job.arrival_s <= job.completed_s <= now.time_s
        assert job.iterations == job.total_iterations
        assert job.loss is not None
        assert job.cpu_seconds > 0

    if case.engine is not None:
        assert len(case.containers()) == 2
    case.backend.close()  # closes every batch it gave
    if case.engine is not None:
        assert case.containers() == []


def test_reset_ends_the_previous_episode(case):
    _start(case, {})
    first = case.episode.advance(0.5)
    assert len(first.active_jobs) == 2
    previous = case.containers() if case.engine is not None else []
    jobs = case.scenario.realise(np.random.default_rng(0))
    again = case.episode.reset(jobs, np.random.default_rng(1))
    assert again.time_s == 0.0
    assert again.jobs == ()
    assert case.episode.advance(0.0).jobs == ()
    if case.engine is not None:
        assert len(previous) == 2
        names = {c.name for c in case.engine.containers.list(all=True, ignore_removed=True)}
        assert names.isdisjoint(previous)


def test_an_environment_runs_an_episode_on_the_backend(case):
    """What an environment drives (the backend's episode batch) runs a whole episode, on a
    backend of one episode at a time through the adapter, on a batchable one natively."""
    env = TrainingEnv(scenario=case.scenario, backend=case.backend)
    batch = case.backend.episode_batch(case.scenario, 1)
    assert isinstance(batch, EpisodeBatch) and batch.episodes == 1
    if not case.backend.capabilities.batchable:
        with pytest.raises(BackendError, match=r'one episode at a time.*vectorization_mode="sync"'):
            case.backend.episode_batch(case.scenario, 2)
    _, info = env.reset(seed=0)
    assert [job.state for job in info["telemetry"].jobs] == [JobState.RUNNING] * 2
    action = np.full(env.action_space.shape, 0.5, np.float32)
    for _ in range(200):
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert terminated
    assert all(job.state is JobState.DONE for job in info["telemetry"].jobs)
    env.close()


def test_a_controlled_episode_checks_every_call(case):
    """What the loop refuses, a controlled episode refuses too, before the backend sees it."""
    with pytest.raises(ResetNeededError, match=r"not reset.*call reset\(\) before"):
        case.episode.advance(1.0)
    jobs = case.scenario.realise(np.random.default_rng(0))
    case.episode.reset(jobs, np.random.default_rng(1))
    with pytest.raises(ActionError, match=r"limit for job 'j00', which is not placed"):
        case.episode.set_limits({"j00": 0.5})
    with pytest.raises(ActionError, match=r"placement of unknown job 'j99'"):
        case.episode.place([Placement("j99", 0, 0)])
    with pytest.raises(ActionError, match=r"to worker 3; workers are 0\.\.0"):
        case.episode.place([Placement("j00", 3, 0)])
    with pytest.raises(ActionError, match=r"slot 0, which another job holds"):
        case.episode.place([Placement("j00", 0, 0), Placement("j01", 0, 0)])
    case.episode.place([Placement("j00", 0, 0)])
    with pytest.raises(ActionError, match=r"'j00' is already placed"):
        case.episode.place([Placement("j00", 0, 1)])
    for bad in (0.0, 1.5, float("nan"), -0.2):
        with pytest.raises(ActionError, match=r"limit of job 'j00'"):
            case.episode.set_limits({"j00": bad})
    with pytest.raises(ActionError, match=r"advance\(seconds=-1\.0\)"):
        case.episode.advance(-1.0)
    with pytest.raises(ActionError, match=r"cannot migrate job 'j01': it is not running"):
        case.episode.migrate([Placement("j01", 0, 1)])
    # Nothing refused reached the backend: one job runs uncapped.
    telemetry = case.episode.advance(0.0)
    assert [(job.job_id, job.limit) for job in telemetry.jobs] == [("j00", 1.0)]
