"""Docker evaluations stopped, killed, cleaned up from elsewhere, and cut off from their engine.

Real ``dlsched`` processes on the real engine. A test only ever looks at, and removes, the
containers its own processes started (by their owner pid or episode label): other sessions'
containers run on the same engine.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from dlsched.envs.docker.containers import LABEL_EPISODE, LABEL_OWNER
from dlsched.envs.docker.engine import endpoint_url
from dlsched.envs.scenarios.file_format import dump_scenario
from dlsched.envs.scenarios.model import JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.runs.cli import main

pytestmark = pytest.mark.docker


def _scenario_file(folder: Path, client, services: int = 2, horizon_s: float = 40.0) -> Path:
    scenario = Scenario(
        name="test-docker-reliability",
        kind=JobKind.INFERENCE,
        workers=(WorkerSpec(cores=float(client.info()["NCPU"])),),
        groups=(JobGroup(workloads=("mobilenet-svc",), count=services, targets_s=(5.0,)),),
        interval_s=2.0,
        horizon_s=horizon_s,
        slots_per_worker=services,
        profile_set="measured",
    )
    path = folder / "docker.yaml"
    path.write_text(dump_scenario(scenario))
    return path


def _owned_by(client, pid: int) -> list:
    return client.containers.list(
        all=True, ignore_removed=True, filters={"label": [f"{LABEL_OWNER}.pid={pid}"]}
    )


def _of_episode(client, episode: str) -> list:
    return client.containers.list(
        all=True, ignore_removed=True, filters={"label": [f"{LABEL_EPISODE}={episode}"]}
    )


def _started(client, pid: int, count: int) -> list:
    """The ``count`` containers ``pid`` owns once each has said it started (its first event on
    stdout), so that the backend is past starting them: a removal while it starts one is a
    failure to start, not the vanished container the episode reports."""
    containers = _owned_by(client, pid)
    if len(containers) == count and all(c.logs(stdout=True, stderr=False) for c in containers):
        return containers
    return []


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (found := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(0.05)
    return found


def _statuses(folder: Path) -> list[str]:
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [run.info.status for run in client.search_runs(experiments)]


def _evaluate(dlsched_process, folder: Path, scenario: Path, episodes: int = 2, env=None):
    return dlsched_process(
        ["evaluate", "--backend", "docker", "--scenario", scenario, "--policy", "default",
         "--episodes", episodes, "--no-progress", "--no-plots"],
        cwd=folder,
        env=env,
    )  # fmt: skip


def _remove_leftovers(client, pid: int) -> None:
    for container in _owned_by(client, pid):
        container.remove(force=True)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_docker_evaluation_leaves_no_container_and_no_running_run(
    capsys, monkeypatch, tmp_path, docker_engine, workload_image, dlsched_process, signum
):
    process = _evaluate(dlsched_process, tmp_path, _scenario_file(tmp_path, docker_engine))
    try:
        containers = _wait_for(lambda: _owned_by(docker_engine, process.pid), 120, "containers")
        episode = containers[0].labels[LABEL_EPISODE]
        time.sleep(1.0)  # mid-episode
        process.send_signal(signum)
        code = process.wait(timeout=90)
        err = process.communicate()[1]
        if signum == signal.SIGTERM:
            assert code == 143, err
            assert "dlsched evaluate: interrupted (SIGTERM)" in err
            assert _owned_by(docker_engine, process.pid) == []
        else:
            assert _owned_by(docker_engine, process.pid)  # nobody could remove them
            assert main(["docker", "cleanup", "--episode", episode]) == 0
            assert "owner pid" in capsys.readouterr().out
            assert _owned_by(docker_engine, process.pid) == []
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # absolute: MLflow caches stores by URI
        assert main(["runs", "repair", "--tracking-uri", store]) == 0  # one more command
        if signum == signal.SIGKILL:
            assert "marked 1 run KILLED" in capsys.readouterr().out
        assert "RUNNING" not in _statuses(tmp_path)
    finally:
        _remove_leftovers(docker_engine, process.pid)


def test_five_signals_5_ms_apart_leave_no_container(
    tmp_path, docker_engine, workload_image, dlsched_process
):
    process = _evaluate(dlsched_process, tmp_path, _scenario_file(tmp_path, docker_engine, 3))
    try:
        _wait_for(lambda: len(_owned_by(docker_engine, process.pid)) == 3, 120, "3 containers")
        for _ in range(5):
            process.send_signal(signal.SIGINT)
            time.sleep(0.005)
        code = process.wait(timeout=90)
        err = process.communicate()[1]
        assert code == 130, err
        assert _owned_by(docker_engine, process.pid) == []
        assert "RUNNING" not in _statuses(tmp_path)
    finally:
        _remove_leftovers(docker_engine, process.pid)


_EPISODE = """
import numpy as np
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.scenarios.file_format import load_scenario

scenario = load_scenario({scenario!r})
backend = DockerBackend()
episode = ControlledEpisode(backend, scenario)
jobs = scenario.realise(np.random.default_rng(0))
episode.reset(jobs, np.random.default_rng(0))
episode.place([Placement(job.job_id, 0, slot) for slot, job in enumerate(jobs)])
episode.advance(0.0)
print(backend.episode, flush=True)
{ending}
"""


_BUSY = """
limit = 0.2
while True:  # engine calls in parallel, one after another: the main thread is in the pool
    limit = 0.5 - limit
    episode.set_limits({job.job_id: limit for job in jobs})
"""


def test_a_signal_during_parallel_engine_calls_cleans_up_and_exits(
    tmp_path, docker_engine, workload_image, episode_process
):
    """A signal while the main thread drives the engine through the backend's thread pool.

    The handler used to remove the containers with a thread pool of its own, which deadlocks
    when the signal lands while the main thread is inside another pool's ``submit`` (it holds a
    lock every pool shares); it now removes them one after another, with no thread."""
    script = _EPISODE.format(scenario=str(_scenario_file(tmp_path, docker_engine, 3)), ending=_BUSY)
    process, episode = episode_process(script)
    try:
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        assert "KeyboardInterrupt" in process.stderr.read()
        assert _of_episode(docker_engine, episode) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        _remove_leftovers(docker_engine, process.pid)


def test_a_backend_left_without_close_removes_its_3_containers_at_exit(
    tmp_path, docker_engine, workload_image
):
    script = _EPISODE.format(scenario=str(_scenario_file(tmp_path, docker_engine, 3)), ending="")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    episode = done.stdout.strip()
    assert done.returncode == 0 and episode, done.stderr
    assert "could not remove" not in done.stderr
    leftover = _of_episode(docker_engine, episode)
    for container in leftover:
        container.remove(force=True)
    assert leftover == []


def test_cleanup_from_another_process_spares_a_live_episode(
    capsys, tmp_path, docker_engine, workload_image, dlsched_process, episode_process
):
    scenario = _scenario_file(tmp_path, docker_engine, 2, horizon_s=16.0)
    process = _evaluate(dlsched_process, tmp_path, scenario, episodes=1)
    try:
        containers = _wait_for(
            lambda: _started(docker_engine, process.pid, 2), 120, "both containers started"
        )
        episode = containers[0].labels[LABEL_EPISODE]
        assert main(["docker", "cleanup", "--episode", episode]) == 0
        out = capsys.readouterr().out
        assert "removed 0 dlsched containers; left 2 of live episodes running" in out
        assert f"live: owned by pid {process.pid}" in out
        assert {c.id for c in _owned_by(docker_engine, process.pid)} >= {c.id for c in containers}

        # asked by name, it removes them, says so first, and the episode is marked
        assert main(["docker", "cleanup", "--episode", episode, "--include-live"]) == 0
        assert "removing a LIVE container" in capsys.readouterr().out

        # while that episode runs out its horizon: a killed owner's containers are orphans,
        # and cleanup takes them
        _orphans_of_a_killed_owner_are_removed(scenario, docker_engine, episode_process, capsys)

        code = process.wait(timeout=120)
        err = process.communicate()[1]
        assert code == 0, err
        # `docker rm -f` kills before it removes: the episode saw one or the other
        said = re.search(r"vanished|was killed", err)
        assert said and "its run is tagged dlsched.incidents" in err, err
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        experiments = [e.experiment_id for e in client.search_experiments()]
        (child,) = client.search_runs(experiments, "tags.`dlsched.kind` = 'episode'")
        assert said.group() in child.data.tags["dlsched.incidents"]
    finally:
        _remove_leftovers(docker_engine, process.pid)


def _orphans_of_a_killed_owner_are_removed(scenario, client, episode_process, capsys) -> None:
    script = _EPISODE.format(scenario=str(scenario), ending="import time; time.sleep(300)")
    owner, episode = episode_process(script)
    try:
        owner.kill()
        owner.wait()
        assert main(["docker", "cleanup", "--episode", episode]) == 0
        assert "removed 2 dlsched containers" in capsys.readouterr().out
    finally:
        if owner.poll() is None:
            owner.kill()
        _remove_leftovers(client, owner.pid)
    assert _owned_by(client, owner.pid) == []


_PROXY = """
import asyncio, os, sys

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()

async def handle(reader, writer):
    upstream_reader, upstream_writer = await asyncio.open_unix_connection(sys.argv[2])
    await asyncio.gather(
        pipe(reader, upstream_writer), pipe(upstream_reader, writer), return_exceptions=True
    )

async def main():
    if os.path.exists(sys.argv[1]):
        os.unlink(sys.argv[1])
    server = await asyncio.start_unix_server(handle, sys.argv[1])
    print("ready", flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


def _engine_at(socket: Path, upstream: str) -> subprocess.Popen:
    """The engine, reachable at ``socket`` for as long as this process lives."""
    process = subprocess.Popen(
        [sys.executable, "-c", _PROXY, str(socket), upstream], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def test_an_engine_that_disappears_mid_episode_is_one_message_and_a_failed_run(
    capsys, tmp_path, docker_engine, workload_image, dlsched_process
):
    """The engine disappears as its clients see it: its socket stops answering (the engine
    this machine shares is never stopped; a socket in front of it is)."""
    upstream = endpoint_url(None)
    if not upstream.startswith("unix://"):
        pytest.skip(f"the engine is at {upstream}; this test fronts a local socket")
    socket = tmp_path / "engine.sock"
    front = _engine_at(socket, upstream.removeprefix("unix://"))
    endpoint = f"unix://{socket}"
    process = _evaluate(
        dlsched_process,
        tmp_path,
        _scenario_file(tmp_path, docker_engine),
        env={"DOCKER_HOST": endpoint},
    )
    try:
        containers = _wait_for(lambda: _owned_by(docker_engine, process.pid), 120, "containers")
        episode = containers[0].labels[LABEL_EPISODE]
        front.kill()
        front.wait()
        code = process.wait(timeout=120)
        err = process.communicate()[1]
        assert code == 2, err
        assert "Traceback" not in err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1, err
        assert f"the Docker engine at {endpoint} stopped answering mid-episode" in errors[0]
        assert "dlsched docker cleanup" in errors[0]
        assert "FAILED" in _statuses(tmp_path) and "RUNNING" not in _statuses(tmp_path)

        front = _engine_at(socket, upstream.removeprefix("unix://"))  # the engine is back
        assert main(["docker", "cleanup", "--endpoint", endpoint, "--episode", episode]) == 0
        assert "removed 2 dlsched containers" in capsys.readouterr().out
        assert _owned_by(docker_engine, process.pid) == []
    finally:
        front.kill()
        front.wait()
        _remove_leftovers(docker_engine, process.pid)
