"""A cluster of real Docker engines on one machine: episodes across engines, a foreign container
on one of them, one of them stopped mid-episode.

The first part needs no engine: how engines get CPUs, and the cgroup parents that hold them
there (on fake cgroup trees). The tests marked ``docker`` use the session's two extra engines
(``local_engines`` in ``conftest.py``), each standing for a host with CPUs of its own; they
only ever look at, and remove, containers of their own episodes (or, on those engines, which
no other session uses, containers they started themselves).
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import docker
import docker.errors
import numpy as np
import pytest
from docker_helpers import (
    assert_left_alone,
    bystander_and_leftover,
    interrupted_episode_script,
)

from dlsched.baselines import make
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Decision, Migration, Placement
from dlsched.envs.docker import local_engines as engines
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.confinement import assign_cpus, confine, release
from dlsched.envs.docker.containers import LABEL_EPISODE, LABEL_JOB, LABEL_WORKER
from dlsched.envs.errors import BackendError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState
from dlsched.envs.training_env import TrainingEnv
from dlsched.envs.workloads.events import IterationEvent, parse_event
from dlsched.runs.cli import main as cli_main
from dlsched.runs.evaluation import run_episode

# ---------------------------------------------------------------------- no engine needed


def test_each_engine_gets_cpus_of_its_own_and_shares_only_beyond_the_host():
    assert assign_cpus(2, [0, 1]) == ((0,), (1,))
    assert assign_cpus(1, [0, 1]) == ((0, 1),)
    assert assign_cpus(2, [0, 1, 2, 3]) == ((0, 1), (2, 3))
    assert assign_cpus(3, [0, 1]) == ((0,), (1,), (0,))  # more engines than CPUs: they share
    with pytest.raises(BackendError, match="engine count 0 must be at least 1"):
        assign_cpus(0, [0, 1])


def _fake_v1(root: Path) -> Path:
    (root / "cpuset").mkdir(parents=True)
    (root / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    (root / "cpu").mkdir()
    return root


def test_a_cpuset_parent_is_made_once_and_released_only_when_empty(tmp_path):
    root = _fake_v1(tmp_path / "cgroup")
    (made,) = confine("dlsched-engine-1", (1,), root)
    assert made == root / "cpuset" / "dlsched-engine-1"
    # the kernel fills these in on a real tree; a fake one needs the files written
    assert (made / "cpuset.cpus").read_text() == "1"
    assert (made / "cpuset.mems").read_text() == "0"
    with pytest.raises(BackendError, match=r"exists already.*engines down"):
        confine("dlsched-engine-1", (1,), root)
    # a real cgroup directory refuses rmdir while tasks or children are in it; here, files do
    (made / "busy").mkdir()
    (made / "busy" / "tasks").write_text("123\n")
    assert release([made]) == [made / "busy", made]
    (made / "busy" / "tasks").unlink()
    for name in ("cpuset.cpus", "cpuset.mems"):
        (made / name).unlink()
    assert release([made, root / "cpu" / "dlsched-engine-1"]) == []
    assert not made.exists()


def test_a_v2_tree_gets_the_cpuset_controller_enabled(tmp_path):
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu cpuset memory\n")
    (root / "cgroup.subtree_control").write_text("cpu\n")
    (made,) = confine("dlsched-engine-2", (0,), root)
    assert (root / "cgroup.subtree_control").read_text() == "+cpuset"
    assert (made / "cpuset.cpus").read_text() == "0"
    (root / "cgroup.controllers").write_text("cpu memory\n")
    with pytest.raises(BackendError, match="no cpuset controller"):
        confine("dlsched-engine-3", (0,), root)


def test_engines_are_numbered_from_1_and_their_endpoints_fixed():
    assert engines.endpoint(1) == "unix:///run/dlsched/engines/engine-1/docker.sock"
    assert engines.local_engine(2).cgroup_parent == "dlsched-engine-2"
    with pytest.raises(BackendError, match="numbered from 1"):
        engines.local_engine(0)


def test_engines_up_refuses_a_count_that_is_not_one(capsys):
    with pytest.raises(SystemExit, match="2"):
        cli_main(["docker", "engines", "up", "--count", "0"])
    assert "--count: 0 is not positive; expected 1 or more" in capsys.readouterr().err


def test_stopping_an_engine_up_never_started_touches_no_process(tmp_path):
    engine = engines.local_engine(1, tmp_path / "run", tmp_path / "data")
    engine.run_dir.mkdir(parents=True)
    # a record naming a process that is not that engine's dockerd (this very test)
    (engine.run_dir / "engine.json").write_text(f'{{"pid": {os.getpid()}}}')
    stopped = engines.stop(engine)
    assert stopped.pid is None and not engine.run_dir.exists()


@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("docker-cluster-specon-2", "specon"),
        ("docker-cluster-specon-3", "specon"),
        ("docker-cluster-flowcon-2", "flowcon"),
        ("docker-cluster-flowcon-3", "flowcon"),
    ],
)
def test_cluster_scenarios_name_one_local_engine_per_worker_and_run_on_their_replay_twin(
    name, policy
):
    """Each host-scale cluster scenario runs its paper's scheduler to the end on replay (the
    same file is the twin of the Docker episode), using every worker; SpeCon moves a job."""
    scenario = load_scenario(name)
    count = len(scenario.workers)
    assert [w.endpoint for w in scenario.workers] == list(engines.endpoints(count))
    assert all(worker.cores == 1 for worker in scenario.workers)
    result = run_episode(scenario, make(policy), seed=0)
    assert result.metrics.unfinished_jobs == 0
    assert result.metrics.makespan_s is not None and result.metrics.makespan_s < 240
    placed = {}
    for step in result.steps:
        for sample in step.containers:
            if sample.worker is not None:
                placed.setdefault(sample.job_id, []).append(sample.worker)
    assert {workers[0] for workers in placed.values()} == set(range(count))
    moved = [job for job, workers in placed.items() if len(set(workers)) > 1]
    if policy == "specon":
        assert moved, placed


# ---------------------------------------------------------------------- two real engines

requires_docker = pytest.mark.docker


def _cluster(local_engines, kind: JobKind, count: int, **fields) -> Scenario:
    """One worker per local engine, with the cores it reports."""
    workers = []
    for start in local_engines:
        client = docker.DockerClient(base_url=start.engine.endpoint, timeout=60)
        workers.append(WorkerSpec(float(client.info()["NCPU"]), start.engine.endpoint))
        client.close()
    if kind is JobKind.TRAINING:
        group = JobGroup(workloads=("mlp-digits",), count=count, iterations=fields.pop("n", 200))
    else:
        group = JobGroup(workloads=("mobilenet-svc",), count=count, targets_s=(5.0,))
    return Scenario(
        name="test-docker-cluster",
        kind=kind,
        workers=tuple(workers),
        groups=(group,),
        slots_per_worker=count,
        profile_set="measured",
        **fields,
    )


@pytest.fixture
def clients(local_engines):
    """A client of each local engine, in worker order."""
    opened = [docker.DockerClient(base_url=s.engine.endpoint, timeout=60) for s in local_engines]
    yield opened
    for client in opened:
        client.close()


def _of_episode(client, episode: str, job_id: str | None = None) -> list:
    labels = [f"{LABEL_EPISODE}={episode}"]
    if job_id is not None:
        labels.append(f"{LABEL_JOB}={job_id}")
    return client.containers.list(all=True, ignore_removed=True, filters={"label": labels})


def _losses(container) -> list[float]:
    lines = container.logs(stdout=True, stderr=False).decode().splitlines()
    return [e.loss for e in map(parse_event, lines) if isinstance(e, IterationEvent)]


@requires_docker
def test_the_engines_have_cpus_of_their_own(local_engines, clients):
    """Each engine reports the CPUs it was given, and its containers run on them."""
    for start, client in zip(local_engines, clients, strict=True):
        assert float(client.info()["NCPU"]) == len(start.cpus)
        out = client.containers.run(
            _image(client),
            ["python", "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            remove=True,
            network_mode="none",
        )
        assert out.decode().strip() == str(sorted(start.cpus))


def _image(client) -> str:
    from dlsched.envs.docker.image import IMAGE_TAG

    client.images.get(IMAGE_TAG)
    return IMAGE_TAG


@requires_docker
def test_a_two_engine_episode_places_limits_and_migrates_across_engines(local_engines, clients):
    """The spread placer puts one job on each engine; each engine holds the limit asked; a
    SpeCon-style migration moves a job to the other engine with its model and iteration count;
    closing leaves nothing on either engine."""
    scenario = _cluster(local_engines, JobKind.TRAINING, 2, n=150, interval_s=1.0)
    env = TrainingEnv(scenario=scenario, backend="docker")
    try:
        _, info = env.reset(seed=0)
        telemetry = info["telemetry"]
        assert sorted(job.worker for job in telemetry.jobs) == [0, 1]
        by_worker = {job.worker: job.job_id for job in telemetry.jobs}
        mover, stayer = by_worker[0], by_worker[1]
        asked = {mover: 0.8, stayer: 0.6}
        _, _, _, _, info = env.step_decision(Decision(limits=asked))
        telemetry = info["telemetry"]
        episode = env.unwrapped.backend.episode
        for worker, client in enumerate(clients):
            (container,) = _of_episode(client, episode, by_worker[worker])
            cores = float(client.info()["NCPU"])
            quota = container.attrs["HostConfig"]["CpuQuota"]
            assert quota == round(asked[by_worker[worker]] * cores * 100_000)
            assert telemetry.job(by_worker[worker]).limit == pytest.approx(
                asked[by_worker[worker]], abs=1e-4
            )
        while telemetry.job(mover).iterations < 10:
            _, _, _, _, info = env.step_decision(Decision())
            telemetry = info["telemetry"]
        assert telemetry.workers[0].cpu_usage > 0 and telemetry.workers[1].cpu_usage > 0
        _, _, _, _, info = env.step_decision(Decision(migrations=(Migration(mover, 1),)))
        job = info["telemetry"].job(mover)
        assert (job.worker, job.state) == (1, JobState.RUNNING)
        assert job.limit == pytest.approx(0.8, abs=1e-4)  # the limit moves with the job
        terminated = truncated = False
        while not (terminated or truncated):
            _, _, terminated, truncated, info = env.step_decision(Decision())
        telemetry = info["telemetry"]
        assert terminated, telemetry
        assert [job.state for job in telemetry.jobs] == [JobState.DONE] * 2
        assert telemetry.job(mover).iterations == 150
        (old,) = _of_episode(clients[0], episode, mover)
        (new,) = _of_episode(clients[1], episode, mover)
        assert new.labels[LABEL_WORKER] == "1"
        resumed_at = int(new.attrs["Args"][new.attrs["Args"].index("--start-iteration") + 1])
        assert 10 <= resumed_at < 150
        old_losses, new_losses = _losses(old), _losses(new)
        assert len(new_losses) == 150 - resumed_at  # iterations kept: none done twice
        assert new_losses[0] < (old_losses[0] + old_losses[-1]) / 2  # the model moved too
    finally:
        env.close()
    for client in clients:
        assert _of_episode(client, episode) == []


@requires_docker
def test_sigint_removes_the_containers_of_every_engine(local_engines, clients, episode_process):
    scenario = _cluster(local_engines, JobKind.INFERENCE, 2)
    workers = [(worker.cores, worker.endpoint) for worker in scenario.workers]
    process, episode = episode_process(
        interrupted_episode_script(
            "test-cluster-interrupted", workers, [("j00", 0, 0), ("j01", 1, 0)]
        )
    )
    try:
        assert [len(_of_episode(client, episode)) for client in clients] == [1, 1]
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "KeyboardInterrupt" in process.stderr.read()
    for client in clients:
        assert _of_episode(client, episode) == []


@requires_docker
def test_a_foreign_container_on_the_second_engine_keeps_its_limit_and_life(
    local_engines, clients, capsys
):
    """A container without dlsched's labels, on an engine an episode uses, lives through the
    episode and through ``dlsched docker cleanup --endpoint`` of both engines, which does remove
    an orphaned dlsched container next to it."""
    second = clients[1]
    containers = bystander_and_leftover(second, _image(second), f"orphan-{uuid.uuid4().hex[:8]}")
    with containers as (bystander, orphan):
        before = second.api.inspect_container(bystander.id)
        backend = DockerBackend()
        scenario = _cluster(local_engines, JobKind.INFERENCE, 2)
        episode = ControlledEpisode(backend, scenario)
        episode.reset(scenario.realise(np.random.default_rng(0)), np.random.default_rng(0))
        episode.place([Placement("j00", 0, 0), Placement("j01", 1, 0)])
        episode.set_limits({"j00": 0.2, "j01": 0.2})
        episode.advance(1.0)
        episode.set_limits({"j00": 0.4, "j01": 0.4})
        episode.advance(1.0)
        backend.close()

        both = ",".join(start.engine.endpoint for start in local_engines)
        assert cli_main(["docker", "cleanup", "--endpoint", both]) == 0
        out = capsys.readouterr().out
        assert f"removed {orphan.id[:12]}" in out
        assert bystander.id[:12] not in out
        with pytest.raises(docker.errors.NotFound):
            second.containers.get(orphan.id)
        assert_left_alone(second, bystander, before)


@requires_docker
def test_an_engine_stopped_mid_episode_fails_its_jobs_and_the_episode_goes_on(
    local_engines, clients, capsys, caplog
):
    scenario = _cluster(local_engines, JobKind.INFERENCE, 2)
    second = local_engines[1].engine
    backend = DockerBackend()
    controlled = ControlledEpisode(backend, scenario)
    try:
        controlled.reset(scenario.realise(np.random.default_rng(0)), np.random.default_rng(0))
        controlled.place([Placement("j00", 0, 0), Placement("j01", 1, 0)])
        controlled.advance(1.0)
        episode = backend.episode
        engines.stop(second, wait_s=30)  # its containers stop with it, as with a host
        telemetry = controlled.advance(1.0)
        assert telemetry.job("j00").state is JobState.RUNNING
        assert telemetry.job("j01").state is JobState.FAILED
        assert telemetry.job("j01").cpu_usage == 0.0
        (incident,) = controlled.incidents()
        assert f"the Docker engine at {second.endpoint} stopped answering" in incident
        assert "the jobs of worker 1 failed" in incident
        controlled.set_limits({"j00": 0.5, "j01": 0.5})  # a limit for the failed job is ignored
        later = controlled.advance(1.0)
        assert later.time_s > telemetry.time_s
        assert later.job("j00").state is JobState.RUNNING
        assert later.job("j00").limit == pytest.approx(0.5, abs=1e-4)
        assert later.job("j01").state is JobState.FAILED
    finally:
        backend.close()  # says it could not clean the lost engine
        (restarted,) = engines.up(2, report=print)[1:]  # the engine is back, with the image
    assert restarted.image == "present"
    assert _of_episode(clients[0], episode) == []
    capsys.readouterr()
    # its container stopped with the engine, and stays until removed; this process owns it
    cleanup = ["docker", "cleanup", "--endpoint", second.endpoint, "--episode", episode]
    assert cli_main([*cleanup, "--include-live"]) == 0
    assert "removed 1 dlsched container" in capsys.readouterr().out
    client = docker.DockerClient(base_url=second.endpoint, timeout=60)
    try:
        assert _of_episode(client, episode) == []
    finally:
        client.close()
