"""Throttling on the Docker backend: the CFS counters of a container's ``cpu.stat`` (cgroup v1 and
v2, or the engine's statistics), the ratio over a measurement window, and real containers under
a quota below and above their demand.

The first part needs no engine. The tests marked ``docker`` run real containers on the local
engine: they are skipped without one and fail when DLSCHED_REQUIRE_DOCKER=1. The replay model's
side is in ``tests/envs/replay/test_throttling.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

import docker.errors
import numpy as np
import pytest

from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.cgroup import (
    NO_CFS_LIMIT,
    NO_THROTTLING,
    CfsThrottling,
    CgroupVersion,
    CpuLimitFiles,
    cfs_limit,
    find_cpu_limit_files,
    parse_cpu_stat_throttling,
    stats_throttling,
)
from dlsched.envs.docker.container_output import ContainerOutput
from dlsched.envs.docker.containers import LABEL_JOB, LABEL_OWNER
from dlsched.envs.docker.records import Job, Run
from dlsched.envs.scenarios.model import JobGroup, JobKind, JobSpec, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState

CONTAINER_ID = "c0ffee" + "0" * 58

V1_CPU_STAT = "nr_periods 250\nnr_throttled 200\nthrottled_time 12500000000\n"
V2_CPU_STAT = (
    "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n"
    "nr_periods 40\nnr_throttled 10\nthrottled_usec 750000\nnr_bursts 0\nburst_usec 0\n"
)


# ---------------------------------------------------------------------- cpu.stat


def test_v1_cpu_stat_counts_periods_throttled_ones_and_nanoseconds_waited():
    assert parse_cpu_stat_throttling(V1_CPU_STAT, CgroupVersion.V1) == CfsThrottling(250, 200, 12.5)


def test_v2_cpu_stat_counts_periods_throttled_ones_and_microseconds_waited():
    assert parse_cpu_stat_throttling(V2_CPU_STAT, CgroupVersion.V2) == CfsThrottling(40, 10, 0.75)


def test_a_cpu_stat_without_the_counters_is_an_error():
    # a v2 file read as v1 lacks throttled_time: the counters of another format are not guessed
    with pytest.raises(ValueError, match="throttled_time"):
        parse_cpu_stat_throttling(V2_CPU_STAT, CgroupVersion.V1)
    with pytest.raises(ValueError, match="nr_periods"):
        parse_cpu_stat_throttling("usage_usec 5\n", CgroupVersion.V2)


def test_the_engine_statistics_give_the_same_counters():
    stats = {
        "cpu_stats": {
            "cpu_usage": {"total_usage": 10},
            "throttling_data": {
                "periods": 30,
                "throttled_periods": 27,
                "throttled_time": 2_000_000_000,
            },
        }
    }
    assert stats_throttling(stats) == CfsThrottling(30, 27, 2.0)
    assert stats_throttling({"cpu_stats": {"cpu_usage": {}}}) is None


def test_the_ratio_is_throttled_periods_over_periods_since_a_reading():
    before, after = CfsThrottling(100, 10, 1.0), CfsThrottling(150, 55, 3.0)
    assert after.ratio_since(before) == pytest.approx(0.9)
    assert after.ratio_since(after) is None  # no period elapsed: not measured
    assert after.ratio_since(NO_THROTTLING) == pytest.approx(55 / 150)


@pytest.mark.parametrize(
    ("layout", "version", "content", "counters"),
    [
        ("cpu,cpuacct/docker/{id}", CgroupVersion.V1, V1_CPU_STAT, CfsThrottling(250, 200, 12.5)),
        (
            "cpu/system.slice/docker-{id}.scope",
            CgroupVersion.V1,
            V1_CPU_STAT,
            CfsThrottling(250, 200, 12.5),
        ),
        ("docker/{id}", CgroupVersion.V2, V2_CPU_STAT, CfsThrottling(40, 10, 0.75)),
        (
            "system.slice/docker-{id}.scope",
            CgroupVersion.V2,
            V2_CPU_STAT,
            CfsThrottling(40, 10, 0.75),
        ),
    ],
)
def test_the_counters_are_read_beside_the_limit_for_each_driver_and_version(
    tmp_path, layout, version, content, counters
):
    directory = tmp_path / layout.format(id=CONTAINER_ID)
    directory.mkdir(parents=True)
    if version is CgroupVersion.V2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
        (directory / "cpu.max").write_text("50000 100000\n")
    else:
        (directory / "cpu.cfs_quota_us").write_text("50000\n")
        (directory / "cpu.cfs_period_us").write_text("100000\n")
    (directory / "cpu.stat").write_text(content)
    files = find_cpu_limit_files(CONTAINER_ID, root=tmp_path)
    assert files == CpuLimitFiles(directory, version)
    assert files.read_throttling() == counters
    (directory / "cpu.stat").unlink()  # the container stopped: its cgroup is gone
    assert files.read_throttling() is None


# ---------------------------------------------------------------------- the measurement window


def _run() -> Run:
    output = ContainerOutput(iter(()), lambda: None, "test")
    return Run(CONTAINER_ID, "test", 0, 0.0, output, None, None, None, window_start_at=0.0)


def test_the_ratio_is_taken_over_the_same_window_as_the_usage():
    run = _run()
    run.record(0.5, 1.0, 1.0, CfsThrottling(10, 9, 0.4))
    assert run.throttle_ratio == pytest.approx(0.9)  # from the cgroup's creation
    run.record(0.6, 1.5, 1.0, CfsThrottling(15, 14, 0.5))  # too short a window: kept
    assert run.throttle_ratio == pytest.approx(0.9)
    run.record(0.8, 2.0, 1.0, CfsThrottling(20, 9 + 1, 0.6))
    assert run.throttle_ratio == pytest.approx(1 / 10)
    run.record(0.9, 3.0, 1.0, CfsThrottling(20, 10, 0.6))  # no period: no quota, not measured
    assert run.throttle_ratio is None


def test_a_job_reports_no_ratio_without_a_quota_or_once_it_stopped():
    run = _run()
    run.record(1.0, 1.0, 1.0, CfsThrottling(10, 5, 0.1))
    spec = JobSpec("j00", "mobilenet-svc", JobKind.INFERENCE, 0.0, 5.0)
    capped = Job(spec, 0, 0, 0.25, cfs_limit(50_000, 100_000), cfs_limit(50_000, 100_000), [run])
    assert capped.throttle_ratio == pytest.approx(0.5)
    uncapped = dataclasses.replace(capped, in_force=NO_CFS_LIMIT, limit=1.0)
    assert uncapped.throttle_ratio is None
    done = dataclasses.replace(capped, state=JobState.FAILED)
    assert done.throttle_ratio is None


# ---------------------------------------------------------------------- real containers

requires_docker = pytest.mark.docker
#: A quota far below a busy thread's core: 5 ms every 100 ms period.
QUOTA_BELOW = 0.05


def _service(cores: float) -> Scenario:
    return Scenario(
        name="test-docker-throttling",
        kind=JobKind.INFERENCE,
        workers=(WorkerSpec(cores=cores),),
        groups=(JobGroup(workloads=("mobilenet-svc",), count=1, targets_s=(5.0,)),),
        interval_s=2.0,
        horizon_s=60.0,
        slots_per_worker=1,
        profile_set="measured",
    )


def _counters(files: CpuLimitFiles) -> CfsThrottling:
    """The container's ``cpu.stat``, read here without dlsched's reader."""
    values = dict(line.split() for line in (files.directory / "cpu.stat").read_text().splitlines())
    waited = "throttled_time" if files.version is CgroupVersion.V1 else "throttled_usec"
    assert waited in values
    return CfsThrottling(int(values["nr_periods"]), int(values["nr_throttled"]), 0.0)


@requires_docker
@pytest.mark.parametrize("use_cgroup_files", [True, False], ids=["cgroup-files", "statistics"])
def test_a_service_under_a_quota_far_below_its_demand_is_throttled_nearly_every_period(
    docker_engine, workload_image, containers_left_behind, use_cgroup_files
):
    """mobilenet-svc keeps 1.7 cores busy uncapped and one thread under a quota of 0.05 cores:
    that thread uses the quota within the first twentieth of each period, even on an engine
    busy with other work (a fair share of a tenth of a core is still twice the quota). The
    backend's ratio (from the cgroup files, or from the engine's statistics as for a remote
    engine) is the one of the container's own ``cpu.stat`` over the same window, read right
    after each measurement; uncapped, it reports none."""
    cores = float(docker_engine.info()["NCPU"])
    scenario = _service(cores)
    episode = ControlledEpisode(DockerBackend(use_cgroup_files=use_cgroup_files), scenario)
    try:
        jobs = scenario.realise(np.random.default_rng(0))
        episode.reset(jobs, np.random.default_rng(0))
        job_id = jobs[0].job_id
        episode.place([Placement(job_id, 0, 0)])
        uncapped = episode.advance(2.0)
        assert uncapped.jobs[0].throttle_ratio is None
        (container,) = docker_engine.containers.list(
            filters={"label": [f"{LABEL_JOB}={job_id}", f"{LABEL_OWNER}.pid={os.getpid()}"]}
        )
        files = find_cpu_limit_files(container.id, container.attrs["State"]["Pid"])
        if files is None:
            pytest.skip("the engine's cgroup files are not visible from this host")
        episode.set_limits({job_id: QUOTA_BELOW / cores})
        episode.advance(2.0)  # the new quota in force over a whole window from here
        before = _counters(files)
        measured = episode.advance(3.0).jobs[0]
        after = _counters(files)
        direct = after.ratio_since(before)
        assert measured.state is JobState.RUNNING
        assert measured.throttle_ratio is not None and direct is not None
        assert measured.throttle_ratio > 0.9, measured
        # the engine samples its statistics up to a second from the request: a window as long
        # as the interval, shifted by as much
        periods = after.periods - before.periods
        slack = 2 / periods if use_cgroup_files else 0.1
        assert measured.throttle_ratio == pytest.approx(direct, abs=slack)
    finally:
        episode.close()
    assert containers_left_behind() == []


@contextlib.contextmanager
def _busy_thread(client, image: str, quota_cores: float):
    """A container of one busy thread (one core's demand, exactly) under ``quota_cores``."""
    container = client.containers.run(
        image,
        ["python", "-c", "while True: pass"],
        detach=True,
        cpu_period=100_000,
        cpu_quota=round(quota_cores * 100_000),
        labels={"dlsched.test": "throttling"},  # no dlsched.managed: no backend touches it
        network_mode="none",
    )
    try:
        yield container
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


@requires_docker
@pytest.mark.parametrize(
    ("quota_cores", "near"), [(QUOTA_BELOW, 1.0), (1.5, 0.0)], ids=["below", "above"]
)
def test_a_busy_thread_under_a_quota_below_and_above_its_demand(
    docker_engine, workload_image, quota_cores, near
):
    """One busy thread demands exactly one core: under 0.05 cores it is throttled every period,
    under 1.5 it never can be (a thread runs at most a period per period). dlsched's reader of
    the cgroup files, the engine's statistics and the file read directly agree."""
    if float(docker_engine.info()["NCPU"]) < 2 and quota_cores > 1:
        pytest.skip("a quota above one core needs an engine with 2 cores or more")
    with _busy_thread(docker_engine, workload_image, quota_cores) as container:
        container.reload()
        files = find_cpu_limit_files(container.id, container.attrs["State"]["Pid"])
        if files is None:
            pytest.skip("the engine's cgroup files are not visible from this host")
        time.sleep(1.0)
        before, before_direct = files.read_throttling(), _counters(files)
        stats_before = stats_throttling(docker_engine.api.stats(container.id, stream=False))
        time.sleep(3.0)
        after, after_direct = files.read_throttling(), _counters(files)
        stats_after = stats_throttling(docker_engine.api.stats(container.id, stream=False))
    assert before is not None and after is not None
    assert stats_before is not None and stats_after is not None
    ratio = after.ratio_since(before)
    assert ratio is not None and after.periods - before.periods >= 20
    assert abs(ratio - near) < 0.1, ratio
    assert ratio == pytest.approx(after_direct.ratio_since(before_direct), abs=0.05)
    from_stats = stats_after.ratio_since(stats_before)
    assert from_stats is not None and abs(from_stats - near) < 0.1, from_stats
