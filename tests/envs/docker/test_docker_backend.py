"""The Docker backend: cgroup accounting, output reading, interruption, and real episodes.

The first part needs no engine. The tests marked ``docker`` run real containers of the workload
image on the local engine: they are skipped without one and fail when DLSCHED_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import uuid
import weakref
from pathlib import Path

import docker.errors
import numpy as np
import pytest
from docker_helpers import (
    assert_left_alone,
    bystander_and_leftover,
    interrupted_episode_script,
)

from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Decision, Placement
from dlsched.envs.docker import container_output, exit_cleanup
from dlsched.envs.docker import engine as docker_engine
from dlsched.envs.docker import episode as docker_episode
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.cgroup import (
    NO_CFS_LIMIT,
    CgroupVersion,
    CpuUsageFile,
    cfs_limit,
    detect_cgroup_version,
    find_cpu_limit_files,
    find_cpu_usage_file,
    find_process_stat,
    parse_cpu_stat_usage,
)
from dlsched.envs.docker.container_output import ContainerOutput, JsonLineReader, Progress
from dlsched.envs.docker.containers import LABEL_EPISODE, LABEL_JOB, LABEL_MANAGED, LABEL_WORKER
from dlsched.envs.errors import (
    BackendError,
    DockerUnavailableError,
    ImageMissingError,
    ScenarioError,
)
from dlsched.envs.inference_env import InferenceEnv
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState, Telemetry
from dlsched.envs.training_env import TrainingEnv
from dlsched.envs.workloads.events import (
    BatchEvent,
    DoneEvent,
    IterationEvent,
    StartEvent,
    encode_event,
    parse_event,
)
from dlsched.runs.cli import main as cli_main

CONTAINER_ID = "c0ffee" + "0" * 58

# ---------------------------------------------------------------------- cgroup files


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("layout", "version", "content", "seconds"),
    [
        ("cpuacct/docker/{id}/cpuacct.usage", CgroupVersion.V1, "2500000000\n", 2.5),
        ("cpu,cpuacct/docker/{id}/cpuacct.usage", CgroupVersion.V1, "1000000000\n", 1.0),
        (
            "cpu,cpuacct/system.slice/docker-{id}.scope/cpuacct.usage",
            CgroupVersion.V1,
            "750000000\n",
            0.75,
        ),
        ("docker/{id}/cpu.stat", CgroupVersion.V2, "usage_usec 1500000\nuser_usec 1\n", 1.5),
        (
            "system.slice/docker-{id}.scope/cpu.stat",
            CgroupVersion.V2,
            "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n",
            3.0,
        ),
    ],
)
def test_cgroup_file_found_for_each_driver_and_version(tmp_path, layout, version, content, seconds):
    if version is CgroupVersion.V2:
        _write(tmp_path / "cgroup.controllers", "cpu memory\n")
    else:
        (tmp_path / "memory").mkdir()
    expected = _write(tmp_path / layout.format(id=CONTAINER_ID), content)
    found = find_cpu_usage_file(CONTAINER_ID, root=tmp_path)
    assert found == CpuUsageFile(expected, version)
    assert detect_cgroup_version(tmp_path) is version
    assert found.read_seconds() == pytest.approx(seconds)


def test_cgroup_file_of_a_custom_parent_is_found_through_the_process(tmp_path):
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    usage = _write(root / "cpuacct" / "batch" / CONTAINER_ID / "cpuacct.usage", "42000000000")
    _write(
        proc / "4242" / "cgroup",
        f"4:memory:/batch/{CONTAINER_ID}\n2:cpuacct:/batch/{CONTAINER_ID}\n0::/\n",
    )
    assert find_cpu_usage_file(CONTAINER_ID, root=root, proc_root=proc) is None  # no pid
    found = find_cpu_usage_file(CONTAINER_ID, pid=4242, root=root, proc_root=proc)
    assert found == CpuUsageFile(usage, CgroupVersion.V1)
    assert found.read_seconds() == pytest.approx(42.0)


def test_cgroup_of_a_process_that_is_not_the_container_is_refused(tmp_path):
    # The engine's pid named some other process of this namespace: its cgroup is not the
    # container's, and reading it would report another process's CPU time.
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    _write(root / "cgroup.controllers", "cpu\n")
    _write(root / "user.slice" / "cpu.stat", "usage_usec 99\n")
    _write(proc / "77" / "cgroup", "0::/user.slice\n")
    assert find_cpu_usage_file(CONTAINER_ID, pid=77, root=root, proc_root=proc) is None


def test_cgroup_file_of_an_exited_container_reads_none(tmp_path):
    usage = _write(tmp_path / "cpuacct.usage", "5\n")
    file = CpuUsageFile(usage, CgroupVersion.V1)
    usage.unlink()
    assert file.read_seconds() is None


def test_cpu_stat_without_usage_is_an_error():
    with pytest.raises(ValueError, match="usage_usec"):
        parse_cpu_stat_usage("user_usec 5\nsystem_usec 1\n")


@pytest.mark.parametrize(
    ("files", "version", "limit"),
    [
        (
            {"cpu/docker/{id}/cpu.cfs_quota_us": "30000\n"},
            CgroupVersion.V1,
            cfs_limit(30000, 100000),
        ),
        ({"cpu,cpuacct/docker/{id}/cpu.cfs_quota_us": "-1\n"}, CgroupVersion.V1, NO_CFS_LIMIT),
        ({"docker/{id}/cpu.max": "55000 100000\n"}, CgroupVersion.V2, cfs_limit(55000, 100000)),
        (
            {"system.slice/docker-{id}.scope/cpu.max": "max 100000\n"},
            CgroupVersion.V2,
            NO_CFS_LIMIT,
        ),
    ],
)
def test_the_cpu_limit_in_force_is_read_from_the_cgroup_files(tmp_path, files, version, limit):
    if version is CgroupVersion.V2:
        _write(tmp_path / "cgroup.controllers", "cpu memory\n")
    for layout, content in files.items():
        quota = _write(tmp_path / layout.format(id=CONTAINER_ID), content)
        if version is CgroupVersion.V1:
            _write(quota.with_name("cpu.cfs_period_us"), "100000\n")
    found = find_cpu_limit_files(CONTAINER_ID, root=tmp_path)
    assert found is not None and found.version is version
    assert found.read() == limit
    for path in found.directory.iterdir():
        path.unlink()
    assert found.read() is None  # the container stopped: its cgroup is gone


def test_no_quota_is_one_limit_whatever_the_period():
    assert cfs_limit(-1, 100000) == cfs_limit(0, 50000) == NO_CFS_LIMIT
    assert NO_CFS_LIMIT.cores is None and NO_CFS_LIMIT.describe() == "no quota"
    assert cfs_limit(30000, 100000).describe() == "0.3 cores (30000 us every 100000 us)"


def test_a_process_stopped_by_a_signal_is_seen_in_proc(tmp_path):
    proc = tmp_path / "proc"
    _write(proc / "42" / "cgroup", f"0::/docker/{CONTAINER_ID}\n")
    stat = _write(proc / "42" / "stat", "42 (python (x)) S 1 42 42 0 -1\n")
    process = find_process_stat(CONTAINER_ID, 42, proc_root=proc)
    assert process is not None and not process.stopped()
    stat.write_text("42 (python (x)) T 1 42 42 0 -1\n")
    assert process.stopped()
    stat.unlink()
    assert not process.stopped()  # gone: the engine's listing says how it ended
    _write(proc / "7" / "cgroup", "0::/user.slice\n")  # another process of this namespace
    assert find_process_stat(CONTAINER_ID, 7, proc_root=proc) is None


# ---------------------------------------------------------------------- container output


def _stream_bytes() -> tuple[bytes, list[object]]:
    events = [
        StartEvent(time=100.0, workload="mlp-digits", kind="training", threads=2),
        IterationEvent(time=101.0, iteration=1, loss=2.3, accuracy=0.1, threads=2),
        IterationEvent(time=102.0, iteration=2, loss=1.9, accuracy=0.3, threads=2),
        DoneEvent(time=103.0, iterations=2),
    ]
    lines = [
        encode_event(events[0]),
        "UserWarning: something torch says",
        encode_event(events[1]),
        '{"event": "iteration", "iteration": "not all fields"}',
        "\x00\xff binary noise",
        encode_event(events[2]),
        "[1, 2, 3]",
        encode_event(events[3]),
    ]
    return ("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape"), events


def test_reader_finds_the_same_events_however_the_stream_is_chunked():
    data, events = _stream_bytes()
    whole = JsonLineReader().feed(data)
    assert whole == events
    for size in (1, 2, 3, 7, 64):
        reader = JsonLineReader()
        found = []
        for start in range(0, len(data), size):
            found += reader.feed(data[start : start + size])
        found += reader.finish()
        assert found == events, size


def test_reader_keeps_an_unfinished_line_until_the_stream_ends():
    reader = JsonLineReader()
    line = encode_event(BatchEvent(time=1.0, batch=1, latency_s=2.5, images=100, threads=1))
    assert reader.feed(line[:10].encode()) == []
    assert reader.feed(line[10:].encode()) == []  # no line break yet
    assert reader.finish() == [BatchEvent(1.0, 1, 2.5, 100, 1)]
    assert reader.finish() == []


def test_reader_drops_an_overlong_line_and_reads_on():
    reader = JsonLineReader(max_line_bytes=64)
    event = DoneEvent(time=5.0, iterations=3)
    assert reader.feed(b"x" * 50) == []
    assert reader.feed(b"y" * 50) == []  # over the limit: dropped, not kept
    found = reader.feed(b"z" * 30 + b"\n" + encode_event(event).encode() + b"\n")
    assert found == [event]


def test_progress_follows_events_and_a_resumed_run():
    progress = Progress()
    progress = progress.after(StartEvent(10.0, "cnn-digits", "training", 1, start_iteration=40))
    assert (progress.started_at, progress.iterations, progress.loss) == (10.0, 40, None)
    progress = progress.after(IterationEvent(11.0, 41, float("nan"), None, 1))
    assert (progress.iterations, progress.loss) == (41, None)  # a diverged loss is no measure
    progress = progress.after(IterationEvent(12.0, 42, 0.7, 0.8, 1))
    progress = progress.after(DoneEvent(13.0, 42))
    assert (progress.iterations, progress.loss, progress.done_at) == (42, 0.7, 13.0)
    service = Progress().after(BatchEvent(3.0, 7, 4.5, 100, 2))
    assert (service.batches, service.latency_s) == (7, 4.5)


def test_container_output_reads_in_the_background_until_the_stream_ends():
    data, _ = _stream_bytes()
    cancelled = []
    chunks = (data[start : start + 5] for start in range(0, len(data), 5))
    output = ContainerOutput(chunks, lambda: cancelled.append(True), "test")
    assert output.wait_ended(10.0)
    progress = output.progress()
    assert progress.ended
    assert (progress.iterations, progress.loss, progress.done_at) == (2, 1.9, 103.0)
    times, counts, dropped = output.events()  # every iteration, with the workload's time
    assert (list(times), list(counts), dropped) == ([101.0, 102.0], [1, 2], False)
    output.close()
    assert cancelled == []  # an ended stream needs no cancelling


def test_container_output_keeps_at_most_its_bound_of_events(monkeypatch):
    monkeypatch.setattr(container_output, "MAX_TRACE_EVENTS", 1)
    data, _ = _stream_bytes()
    output = ContainerOutput(iter([data]), lambda: None, "bounded")
    assert output.wait_ended(10.0)
    times, counts, dropped = output.events()
    assert (list(times), list(counts), dropped) == ([101.0], [1], True)
    assert output.progress().iterations == 2  # the progress itself is not bounded


def test_container_output_survives_a_broken_stream():
    def broken():
        yield (encode_event(IterationEvent(1.0, 1, 0.5, None, 1)) + "\n").encode()
        raise ConnectionResetError("engine went away")

    output = ContainerOutput(broken(), lambda: None, "broken")
    assert output.wait_ended(10.0)
    assert output.progress().iterations == 1


# ---------------------------------------------------------------------- errors without an engine


def _training_scenario(workloads=("mlp-digits",), endpoint=None, cores=None) -> Scenario:
    return Scenario(
        name="test-docker",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(cores=cores or float(os.cpu_count() or 1), endpoint=endpoint),),
        groups=(JobGroup(workloads=tuple(workloads), count=1, iterations=10),),
        interval_s=2.0,
        horizon_s=60.0,
        profile_set="measured",
    )


def test_unreachable_engine_names_the_url_and_the_fix(tmp_path):
    url = f"unix://{tmp_path}/no-engine.sock"
    scenario = _training_scenario(endpoint=url)
    backend = DockerBackend()
    with pytest.raises(DockerUnavailableError) as raised:
        ControlledEpisode(backend, scenario).reset(
            scenario.realise(np.random.default_rng(0)), np.random.default_rng()
        )
    assert url in str(raised.value)
    assert "start one" in str(raised.value)
    backend.close()


def test_permission_denied_on_the_socket_says_how_to_get_access(monkeypatch):
    def refuse(**kwargs):
        try:
            raise PermissionError(13, "Permission denied")
        except PermissionError as error:
            raise docker.errors.DockerException(
                "Error while fetching server API version: ('Connection aborted.', "
                "PermissionError(13, 'Permission denied'))"
            ) from error

    monkeypatch.setattr(docker_engine.docker, "from_env", refuse)
    with pytest.raises(DockerUnavailableError, match="usermod -aG docker") as raised:
        docker_engine.connect("unix:///var/run/docker.sock")
    assert "'docker' group" in str(raised.value)


def test_a_workload_the_image_does_not_have_is_refused_before_any_container():
    scenario = _training_scenario(workloads=("vae",))  # a paper profile, replay only
    backend = DockerBackend()
    with pytest.raises(ScenarioError, match=r"\['vae'\].*replay"):
        ControlledEpisode(backend, scenario).reset(
            scenario.realise(np.random.default_rng(0)), np.random.default_rng()
        )
    backend.close()


def test_a_cpu_period_the_kernel_refuses_is_refused():
    with pytest.raises(BackendError, match="cpu_period_us=500"):
        DockerBackend(cpu_period_us=500)


def test_an_unknown_workload_threading_is_refused_with_the_choices():
    with pytest.raises(BackendError, match=r"workload_threading='default'.*'tuned', 'stock'"):
        DockerBackend(workload_threading="default")


def test_the_docker_backend_refuses_a_threading_that_contradicts_the_scenario():
    stock = dataclasses.replace(
        _training_scenario(),
        name="contention-probe",
        profile_set="measured-stock",
        workload_threading="stock",
    )
    backend = DockerBackend(workload_threading="tuned")
    with pytest.raises(BackendError, match="contradicts scenario 'contention-probe'"):
        ControlledEpisode(backend, stock).reset(
            stock.realise(np.random.default_rng(0)), np.random.default_rng(0)
        )


# ---------------------------------------------------------------------- interruption


class _Owner:
    """Stands for a backend: what a finalizer is attached to."""


def test_interrupt_handler_cleans_up_then_chains_the_previous_handler():
    calls: list[str] = []

    def previous(signum, frame):
        calls.append("previous")

    owner = _Owner()
    cleanup = weakref.finalize(owner, calls.append, "cleanup")
    original = signal.signal(signal.SIGTERM, previous)
    try:
        exit_cleanup.track(cleanup)
        assert signal.getsignal(signal.SIGTERM) is exit_cleanup._on_interrupt
        os.kill(os.getpid(), signal.SIGTERM)
        assert calls == ["cleanup", "previous"]
        assert not cleanup.alive
        exit_cleanup.untrack(cleanup)
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, original)


def test_sigint_cleans_up_and_still_raises_keyboard_interrupt():
    calls: list[str] = []
    owner = _Owner()
    cleanup = weakref.finalize(owner, calls.append, "cleanup")
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        exit_cleanup.track(cleanup)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert calls == ["cleanup"]
        exit_cleanup.untrack(cleanup)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, original)


# ---------------------------------------------------------------------- real engine

requires_docker = pytest.mark.docker


def _on_this_engine(scenario: Scenario, client, **changes) -> Scenario:
    """``scenario`` with its workers' cores set to the local engine's (no mismatch warning)."""
    cores = float(client.info()["NCPU"])
    workers = tuple(dataclasses.replace(worker, cores=cores) for worker in scenario.workers)
    return dataclasses.replace(scenario, workers=workers, **changes)


def _episode_containers(client, episode: str, job_id: str | None = None) -> list:
    labels = [f"{LABEL_EPISODE}={episode}"]
    if job_id is not None:
        labels.append(f"{LABEL_JOB}={job_id}")
    return client.containers.list(all=True, ignore_removed=True, filters={"label": labels})


def _services(count: int, cores: float) -> Scenario:
    return Scenario(
        name="test-docker-services",
        kind=JobKind.INFERENCE,
        workers=(WorkerSpec(cores=cores),),
        groups=(JobGroup(workloads=("mobilenet-svc",), count=count, targets_s=(5.0,)),),
        interval_s=2.0,
        horizon_s=60.0,
        slots_per_worker=count,
        profile_set="measured",
    )


def _start(
    backend: DockerBackend, scenario: Scenario, limits=None
) -> tuple[ControlledEpisode, Telemetry]:
    """A controlled episode of ``scenario`` with its jobs placed and ``limits`` set, measured."""
    episode = ControlledEpisode(backend, scenario)
    jobs = scenario.realise(np.random.default_rng(0))
    episode.reset(jobs, np.random.default_rng(0))
    episode.place([Placement(job.job_id, 0, slot) for slot, job in enumerate(jobs)])
    episode.set_limits(limits or {})
    return episode, episode.advance(0.0)


@requires_docker
def test_limits_are_read_back_and_cpu_usage_follows_them(docker_engine, workload_image):
    """Three services; a fixed decision sequence lowers one limit and raises another.

    Limits are asked in cores (at most one per service, so a service's single busy thread
    demands its whole quota on a host of any size) and converted to fractions of the engine.

    Tolerances. Above: CFS hands a container its quota every 100 ms period, so over a 2 s
    interval it can exceed the quota by at most one period's worth (5 %), plus the few
    milliseconds between the interval's ends and the cgroup reads (under 0.01 cores at these
    quotas): ``1.05 x quota + 0.02`` cores holds whatever else runs. Below: the measured quotas
    sum to 0.85 of 2 cores, so each service gets its quota unless other work takes more than
    1.15 cores; CFS weighs the containers' group against each busy process outside it, so with
    up to three such processes (a shared machine) a service still gets over half its quota,
    which is what is required once it has warmed up (its first batch answered, one interval at
    the new limits). The quotas are chosen so that these bounds alone imply that the lowered
    service uses less and the raised one more than before.
    """
    engine_cores = float(docker_engine.info()["NCPU"])
    if engine_cores < 2:
        pytest.skip(f"needs an engine with 2 cores or more, this one has {engine_cores:g}")
    scenario = _on_this_engine(load_scenario("docker-inference-3"), docker_engine, interval_s=2.0)
    env = InferenceEnv(scenario=scenario, backend="docker")
    try:
        _, info = env.reset(seed=0)
        telemetry = info["telemetry"]
        assert [job.state for job in telemetry.jobs] == [JobState.RUNNING] * 3
        assert [job.limit for job in telemetry.jobs] == [1.0] * 3
        low, high, same = (job.job_id for job in telemetry.jobs)

        def step(cores_wanted: dict[str, float], steady: bool) -> Telemetry:
            asked = {job_id: cores / engine_cores for job_id, cores in cores_wanted.items()}
            _, _, terminated, truncated, info = env.step_decision(Decision(limits=asked))
            assert not (terminated or truncated)
            now = info["telemetry"]
            for job_id, limit in asked.items():
                job = now.job(job_id)
                assert job.state is JobState.RUNNING, job
                assert job.limit == pytest.approx(limit, abs=1e-4)
                quota = cores_wanted[job_id]
                assert job.cpu_usage <= 1.05 * quota + 0.02, job
                if steady:
                    assert job.cpu_usage >= 0.5 * quota, job
            return now

        equal = {low: 0.5, high: 0.5, same: 0.5}
        for _ in range(23):  # warm-up: every service answers its first batch
            telemetry = step(equal, steady=False)
            if all(job.batches >= 1 for job in telemetry.jobs):
                break
        else:
            pytest.fail(f"the services answered no batch within 46 s: {telemetry.jobs}")
        initial = {low: 0.3, high: 0.25, same: 0.3}
        step(initial, steady=False)
        before = step(initial, steady=True)
        changed = {low: 0.1, high: 0.6, same: 0.15}
        step(changed, steady=False)
        after = step(changed, steady=True)
        assert after.job(low).cpu_usage < before.job(low).cpu_usage
        assert after.job(high).cpu_usage > before.job(high).cpu_usage
        assert after.workers[0].cpu_usage == pytest.approx(sum(job.cpu_usage for job in after.jobs))
        assert after.time_s - before.time_s == pytest.approx(4.0, abs=0.5)
    finally:
        env.close()


@requires_docker
def test_training_jobs_finish_with_losses_and_completion_times(docker_engine, workload_image):
    scenario = _on_this_engine(load_scenario("docker-smoke-training"), docker_engine)
    env = TrainingEnv(scenario=scenario, backend="docker")
    try:
        _, info = env.reset(seed=1)
        assert len(info["telemetry"].active_jobs) == 2
        first = info["telemetry"].jobs[0].job_id
        terminated = truncated = False
        while not (terminated or truncated):
            # Cap the first job a little, to see a limit held through to the end.
            decision = Decision(limits={first: 0.4})
            _, _, terminated, truncated, info = env.step_decision(decision)
        assert terminated, info["telemetry"]
        telemetry = info["telemetry"]
        for job in telemetry.jobs:
            assert job.state is JobState.DONE
            assert job.iterations == job.total_iterations == 40
            assert job.loss is not None and 0 < job.loss < 10
            assert job.completed_s is not None
            assert 0 < job.completed_s <= telemetry.time_s
            assert job.cpu_seconds > 0
            assert job.cpu_usage == 0.0
        assert telemetry.job(first).limit == pytest.approx(0.4, abs=1e-4)
        assert telemetry.time_s < scenario.horizon_s
        # every iteration, with its time in the episode
        for trace in env.progress_traces():
            job = telemetry.job(trace.job_id)
            assert job.completed_s is not None
            assert trace.unit == "iteration" and not trace.truncated
            assert trace.counts.tolist() == list(range(1, 41))
            assert (np.diff(trace.times_s) >= 0).all()
            assert trace.times_s[0] > 0 and trace.times_s[-1] <= job.completed_s + 0.1
            assert trace.per_second(telemetry.time_s).sum() == 40
        assert len(env.progress_traces()) == 2
    finally:
        env.close()


@requires_docker
def test_migration_resumes_on_the_other_worker_from_the_iteration_reached(
    docker_engine, workload_image
):
    cores = float(docker_engine.info()["NCPU"])
    scenario = Scenario(
        name="test-docker-migration",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(cores=cores), WorkerSpec(cores=cores)),  # one engine, two workers
        groups=(JobGroup(workloads=("mlp-digits",), count=1, iterations=120),),
        slots_per_worker=1,
        profile_set="measured",
    )
    backend = DockerBackend()
    try:
        jobs = scenario.realise(np.random.default_rng(0))
        episode = ControlledEpisode(backend, scenario)
        episode.reset(jobs, np.random.default_rng(0))
        episode.place([Placement("j00", 0, 0)])
        episode.set_limits({"j00": 0.5})
        telemetry = episode.advance(0.0)
        while telemetry.job("j00").iterations < 5:
            telemetry = episode.advance(0.5)
        episode.migrate([Placement("j00", 1, 0)])
        telemetry = episode.advance(0.0)
        job = telemetry.job("j00")
        assert (job.worker, job.state) == (1, JobState.RUNNING)
        assert job.limit == pytest.approx(0.5, abs=1e-4)  # the limit moves with the job
        while telemetry.job("j00").state is JobState.RUNNING and telemetry.time_s < 60:
            telemetry = episode.advance(1.0)
        job = telemetry.job("j00")
        assert job.state is JobState.DONE
        assert job.iterations == 120
        containers = sorted(_episode_containers(docker_engine, backend.episode, "j00"), key=_name)
        (trace,) = episode.progress_traces()  # both containers' iterations, one after another
        assert trace.counts[-1] == 120 and (np.diff(trace.times_s) >= 0).all()
        assert [_name(c) for c in containers] == [
            f"dlsched-{backend.episode[:8]}-j00",
            f"dlsched-{backend.episode[:8]}-j00-m1",
        ]
        old_args, new_args = (c.attrs["Args"] for c in containers)
        assert "--start-iteration" not in old_args
        resumed_at = int(new_args[new_args.index("--start-iteration") + 1])
        assert 5 <= resumed_at < 120
        assert containers[1].labels[LABEL_WORKER] == "1"
        # The model moved with the job: the new container goes on from the old one's loss,
        # not from an untrained model's.
        old_losses, new_losses = (_losses(container) for container in containers)
        assert old_losses[-1] < 0.8 * old_losses[0]
        assert new_losses[0] < (old_losses[0] + old_losses[-1]) / 2
    finally:
        backend.close()


def _name(container) -> str:
    return container.name


def _losses(container) -> list[float]:
    """The losses a training container reported, in order."""
    lines = container.logs(stdout=True, stderr=False).decode().splitlines()
    events = [parse_event(line) for line in lines]
    return [event.loss for event in events if isinstance(event, IterationEvent)]


@requires_docker
def test_a_killed_container_is_a_failed_job_and_the_episode_goes_on(docker_engine, workload_image):
    backend = DockerBackend()
    try:
        scenario = _services(2, float(docker_engine.info()["NCPU"]))
        episode, _ = _start(backend, scenario)
        episode.advance(1.0)
        (victim,) = _episode_containers(docker_engine, backend.episode, "j00")
        victim.kill()
        telemetry = episode.advance(1.0)
        assert telemetry.job("j00").state is JobState.FAILED
        assert telemetry.job("j00").cpu_usage == 0.0
        assert telemetry.job("j01").state is JobState.RUNNING
        (incident,) = episode.incidents()
        assert incident.startswith("job j00 (") and "was killed" in incident
        episode.set_limits({"j00": 0.3, "j01": 0.3})  # a limit for the failed job is ignored
        later = episode.advance(1.0)
        assert later.time_s > telemetry.time_s
        assert later.job("j00").state is JobState.FAILED
        assert later.job("j01").state is JobState.RUNNING
        assert later.job("j01").limit == pytest.approx(0.3, abs=1e-4)
    finally:
        backend.close()
    assert _episode_containers(docker_engine, backend.episode or "", None) == []


@requires_docker
@pytest.mark.parametrize("use_cgroup_files", [None, False], ids=["cgroup-files", "inspect"])
def test_a_limit_changed_from_outside_is_reported_and_set_again(
    docker_engine, workload_image, use_cgroup_files
):
    """``docker update`` on a capped and on an uncapped service: telemetry shows the limit in
    force, each change is one incident, and the policy's next decision, the same as before,
    is applied (read back from the cgroup files, or, as for a remote engine, the inspect)."""
    backend = DockerBackend(use_cgroup_files=use_cgroup_files)
    try:
        cores = float(docker_engine.info()["NCPU"])
        episode, _ = _start(
            backend, _services(2, cores), limits={"j00": 0.5 / cores}
        )  # j01 uncapped
        episode.advance(1.0)
        capped, uncapped = (
            _episode_containers(docker_engine, backend.episode, job)[0] for job in ("j00", "j01")
        )
        docker_engine.api.update_container(capped.id, cpu_quota=30_000, cpu_period=100_000)
        docker_engine.api.update_container(uncapped.id, cpu_quota=20_000, cpu_period=100_000)
        telemetry = episode.advance(1.0)
        assert telemetry.job("j00").limit == pytest.approx(0.3 / cores, abs=1e-6)
        assert telemetry.job("j01").limit == pytest.approx(0.2 / cores, abs=1e-6)
        first, second = sorted(episode.incidents())
        assert first.startswith("job j00 (mobilenet-svc): the CPU limit of container")
        assert "changed from outside" in first
        assert "0.3 cores (30000 us every 100000 us) in force where dlsched set 0.5 cores" in first
        assert second.startswith("job j01 (mobilenet-svc)")
        assert "0.2 cores (20000 us every 100000 us) in force where dlsched set no quota" in second

        episode.set_limits({"j00": 0.5 / cores, "j01": 1.0})  # the decisions it had made already
        assert capped.client.api.inspect_container(capped.id)["HostConfig"]["CpuQuota"] == 50_000
        assert uncapped.client.api.inspect_container(uncapped.id)["HostConfig"]["CpuQuota"] <= 0
        telemetry = episode.advance(1.0)
        assert telemetry.job("j00").limit == pytest.approx(0.5 / cores, abs=1e-6)
        assert telemetry.job("j01").limit == 1.0
        assert len(episode.incidents()) == 2  # setting it back is no incident
    finally:
        backend.close()


@requires_docker
def test_a_container_paused_or_stopped_from_outside_is_an_incident(docker_engine, workload_image):
    backend = DockerBackend()
    try:
        cores = float(docker_engine.info()["NCPU"])
        episode, _ = _start(
            backend, _services(2, cores), limits={"j00": 0.25 / cores, "j01": 0.25 / cores}
        )
        episode.advance(1.0)
        paused, stopped = (
            _episode_containers(docker_engine, backend.episode, job)[0] for job in ("j00", "j01")
        )
        paused.pause()
        stopped.kill(signal="SIGSTOP")
        try:
            telemetry = episode.advance(1.0)
            episode.advance(1.0)  # still so: one incident per stop
        finally:
            paused.unpause()
            stopped.kill(signal="SIGCONT")
        assert [job.state for job in telemetry.jobs] == [JobState.RUNNING] * 2
        first, second = sorted(episode.incidents())
        assert first.startswith("job j00 (mobilenet-svc): container")
        assert "was paused (`docker pause`" in first
        assert second.startswith("job j01 (mobilenet-svc): container")
        assert "was stopped by a signal (its process in state T" in second
        episode.advance(1.0)
        assert len(episode.incidents()) == 2
    finally:
        backend.close()


_CAN_AND_CANNOT = """
import json, os
def writes(path):
    try:
        with open(path, "w") as f:
            f.write("x")
    except OSError as error:
        return error.strerror
    os.remove(path)
    return "written"
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "home": os.environ["HOME"],
    "capabilities": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "root_fs": writes("/opt/dlsched/x"), "tmp": writes("/tmp/x"),
    "state": writes("/var/lib/dlsched/x"),
}))
"""


@requires_docker
def test_a_workload_container_runs_with_least_privilege_and_reports_progress(
    docker_engine, workload_image
):
    cores = float(docker_engine.info()["NCPU"])
    scenario = dataclasses.replace(
        _training_scenario(cores=cores), container_memory_mb=1024, container_pids=128
    )
    backend = DockerBackend()
    try:
        episode, _ = _start(backend, scenario, limits={"j00": 0.5 / cores})
        (container,) = _episode_containers(docker_engine, backend.episode, "j00")
        inspected = docker_engine.api.inspect_container(container.id)
        assert inspected["Config"]["User"] == "10001:10001"
        host = inspected["HostConfig"]
        assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["ReadonlyRootfs"] is True and host["Privileged"] is False
        assert host["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,noexec,size=64m,mode=1777"}
        assert host["Memory"] == host["MemorySwap"] == 1024 * 2**20
        assert host["PidsLimit"] == 128
        assert host["NetworkMode"] == "none"
        (volume,) = inspected["Mounts"]  # the checkpoint's, removed with the container
        assert (volume["Type"], volume["Destination"], volume["RW"]) == (
            "volume",
            "/var/lib/dlsched",
            True,
        )
        # what a process of the container can and cannot do (an exec runs as the workload does)
        code, output = container.exec_run(["python", "-c", _CAN_AND_CANNOT])
        assert code == 0, output
        assert json.loads(output) == {
            "uid": 10001,
            "gid": 10001,
            "home": "/tmp",
            "capabilities": "0000000000000000",
            "no_new_privs": "1",
            "root_fs": "Read-only file system",
            "tmp": "written",
            "state": "written",
        }
        telemetry = episode.advance(0.0)
        while telemetry.job("j00").iterations < 3 and telemetry.time_s < 60:
            telemetry = episode.advance(1.0)
        job = telemetry.job("j00")
        assert job.iterations >= 3 and job.loss is not None, job
        assert job.state in (JobState.RUNNING, JobState.DONE)
        assert episode.incidents() == ()
    finally:
        backend.close()
    with pytest.raises(docker.errors.NotFound):
        docker_engine.volumes.get(volume["Name"])


@requires_docker
def test_a_job_over_its_memory_limit_fails_as_an_incident(docker_engine, workload_image):
    cores = float(docker_engine.info()["NCPU"])
    scenario = dataclasses.replace(_training_scenario(cores=cores), container_memory_mb=64)
    backend = DockerBackend()
    try:
        episode, telemetry = _start(backend, scenario, limits={"j00": 0.5 / cores})
        while telemetry.job("j00").state is JobState.RUNNING and telemetry.time_s < 60:
            telemetry = episode.advance(1.0)  # torch alone takes more than 64 MiB
        assert telemetry.job("j00").state is JobState.FAILED
        (incident,) = episode.incidents()
        assert incident.startswith("job j00 (mlp-digits): container")
        assert "killed by the out-of-memory killer" in incident
        assert "its memory limit is 64 MiB: raise the scenario's container_memory_mb" in incident
    finally:
        backend.close()


@requires_docker
def test_cpu_from_the_engine_statistics_when_cgroup_files_are_not_used(
    docker_engine, workload_image
):
    # What a remote engine gets: one-shot statistics, differenced between measurements.
    backend = DockerBackend(use_cgroup_files=False)
    try:
        scenario = _services(2, float(docker_engine.info()["NCPU"]))
        cores = scenario.workers[0].cores
        episode, _ = _start(backend, scenario, limits={"j00": 0.25 / cores, "j01": 0.5 / cores})
        first = episode.advance(2.0)
        now = episode.advance(2.0)
        for job_id, quota in (("j00", 0.25), ("j01", 0.5)):
            assert now.job(job_id).cpu_seconds > first.job(job_id).cpu_seconds > 0
            assert 0 < now.job(job_id).cpu_usage <= 1.05 * quota + 0.02
    finally:
        backend.close()


@requires_docker
def test_unlabelled_container_keeps_its_limit_and_life(docker_engine, workload_image, capsys):
    """A container dlsched did not start survives an episode and ``dlsched docker cleanup``.

    Cleanup is run unfiltered with ``--dry-run`` (it must not even list the container), and for
    real on a leftover episode only, so that this test cannot remove the containers of another
    test run sharing the engine; both go through the same labelled listing.
    """
    leftover_episode = f"leftover-{uuid.uuid4().hex[:8]}"
    containers = bystander_and_leftover(docker_engine, workload_image, leftover_episode)
    with containers as (bystander, leftover):
        before = docker_engine.api.inspect_container(bystander.id)
        backend = DockerBackend()
        scenario = _services(1, float(docker_engine.info()["NCPU"]))
        episode, _ = _start(backend, scenario, limits={"j00": 0.1})
        episode.set_limits({"j00": 0.2})
        episode.advance(1.0)
        episode.reset(scenario.realise(np.random.default_rng(0)), np.random.default_rng(0))
        episode.place([Placement("j00", 0, 0)])  # the first episode's containers are removed
        backend.close()

        assert cli_main(["docker", "cleanup", "--dry-run"]) == 0
        listed = capsys.readouterr().out
        assert leftover.id[:12] in listed
        assert bystander.id[:12] not in listed
        assert leftover.id in {
            c.id for c in docker_engine.containers.list(all=True, ignore_removed=True)
        }

        assert cli_main(["docker", "cleanup", "--episode", leftover_episode]) == 0
        removed = capsys.readouterr().out
        assert f"removed {leftover.id[:12]}" in removed
        with pytest.raises(docker.errors.NotFound):
            docker_engine.containers.get(leftover.id)

        assert_left_alone(docker_engine, bystander, before)


@requires_docker
def test_cleanup_leaves_a_running_container_without_owner_labels_running(
    docker_engine, workload_image, capsys
):
    """A running container labelled ``dlsched.managed=1`` without owner labels may be part of
    an episode this host cannot see (another program's, or an older dlsched's still running):
    cleanup names it and leaves it, and removes it only with ``--include-live``."""
    episode = f"unowned-{uuid.uuid4().hex[:8]}"
    running = docker_engine.containers.run(
        workload_image,
        ["python", "-c", "import time\nwhile True: time.sleep(0.2)"],
        detach=True,
        labels={LABEL_MANAGED: "1", LABEL_EPISODE: episode, LABEL_JOB: "j00"},  # no owner
        network_mode="none",
    )
    try:
        assert cli_main(["docker", "cleanup", "--episode", episode]) == 0
        out = capsys.readouterr().out
        assert "removed 0 dlsched containers" in out
        assert f"left running {running.id[:12]}" in out
        assert "running without owner labels" in out
        running.reload()
        assert running.status == "running"

        assert cli_main(["docker", "cleanup", "--episode", episode, "--include-live"]) == 0
        out = capsys.readouterr().out
        assert f"removing a LIVE container (--include-live): {running.id[:12]}" in out
        with pytest.raises(docker.errors.NotFound):
            docker_engine.containers.get(running.id)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            running.remove(force=True)


@requires_docker
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_episode_leaves_no_container(
    docker_engine, workload_image, episode_process, signum
):
    cores = float(docker_engine.info()["NCPU"])
    process, episode = episode_process(
        interrupted_episode_script(
            "test-interrupted", [(cores, None)], [("j00", 0, 0), ("j01", 0, 1)]
        )
    )
    try:
        assert len(_episode_containers(docker_engine, episode)) == 2
        process.send_signal(signum)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read()
    if signum == signal.SIGINT:
        assert "KeyboardInterrupt" in stderr  # the previous handler still ran
    else:
        assert process.returncode == -signal.SIGTERM  # it died of the signal, as by default
    assert _episode_containers(docker_engine, episode) == []


@requires_docker
def test_missing_image_names_the_build_command(docker_engine):
    scenario = _training_scenario(cores=float(docker_engine.info()["NCPU"]))
    backend = DockerBackend(image="dlsched-test-absent:0")
    with pytest.raises(ImageMissingError, match="dlsched image build --offline"):
        ControlledEpisode(backend, scenario).reset(
            scenario.realise(np.random.default_rng(0)), np.random.default_rng()
        )
    backend.close()


@pytest.mark.parametrize(
    ("status", "explanation"),
    [
        (409, "Container abc is not running"),
        # Docker 20.10 updating a container whose process has just ended: runc's refusal, a 500
        (
            500,
            "Cannot update container abc: runc did not terminate successfully: exit status 1: "
            "container not running\n: unknown",
        ),
    ],
)
def test_a_limit_update_refused_because_the_job_just_ended_is_not_an_error(status, explanation):
    """A training that ends between a measurement and the next decision's update is the next
    measurement's to report; the update's refusal is no error of the episode (a validation on
    main stopped with a BackendError at one)."""
    response = type("Response", (), {"status_code": status, "reason": "", "url": ""})()
    error = docker.errors.APIError("update", response=response, explanation=explanation)
    assert docker_episode._exited(error)
    refused = docker.errors.APIError(
        "update",
        response=type("R", (), {"status_code": 500, "reason": "", "url": ""})(),
        explanation="invalid quota",
    )
    assert not docker_episode._exited(refused)
