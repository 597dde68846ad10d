"""The workload programs on the host Python, and the profiles calibrated from them.

Most tests call the run functions in-process with a fake cgroup (one core), which keeps them
quick; a few run ``python -m dlsched.envs.workloads`` as the image does, including a stop by
SIGTERM and a resume from the checkpoint it leaves. The last part turns synthetic measurements
into profiles and checks the shipped measured profiles with the profile loader.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dlsched.envs.replay.profile import PROFILES_DIR, load_profile
from dlsched.envs.workloads import cpu_quota
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import (
    CGROUP_ROOT_ENV,
    CpuQuota,
    ThreadFollower,
    read_cpu_quota,
    thread_keeper,
    threads_for,
)
from dlsched.envs.workloads.digits import load_digits
from dlsched.envs.workloads.events import (
    BatchEvent,
    DoneEvent,
    IterationEvent,
    StartEvent,
    encode_event,
    parse_event,
)
from dlsched.envs.workloads.inference import run_inference
from dlsched.envs.workloads.models import MODEL_BUILDERS
from dlsched.envs.workloads.stopping import StopRequest
from dlsched.envs.workloads.training import MinibatchSampler, run_training
from dlsched.runs import cli
from dlsched.runs.fidelity.calibration_fit import (
    demand_cores,
    loss_curve,
    monotone_rates,
    throughput_points,
)
from dlsched.runs.fidelity.calibration_measurement import HostDescription, LimitRun
from dlsched.runs.fidelity.calibration_profile import build_profile
from dlsched.runs.fidelity.quiet_host import host_busy_seconds

TRAINING = sorted(name for name, spec in WORKLOADS.items() if spec.kind == "training")
INFERENCE = sorted(name for name, spec in WORKLOADS.items() if spec.kind == "inference")


def write_v1_quota(root: Path, quota_us: int, period_us: int = 100_000, folder: str = "cpu"):
    directory = root / folder
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (directory / "cpu.cfs_period_us").write_text(f"{period_us}\n")


@pytest.fixture
def one_core_cgroup(tmp_path, monkeypatch):
    """A fake cgroup v1 tree with a quota of one core; torch's thread count restored after."""
    write_v1_quota(tmp_path, 100_000)
    monkeypatch.setenv(CGROUP_ROOT_ENV, str(tmp_path))
    threads = torch.get_num_threads()
    yield tmp_path
    torch.set_num_threads(threads)


def events_of(text: str):
    events = [parse_event(line) for line in text.splitlines()]
    assert all(event is not None for event in events), text
    return events


class StopAfter(io.StringIO):
    """An output stream that delivers SIGTERM's effect once unit ``unit`` has been printed."""

    def __init__(self, stop: StopRequest, unit: int) -> None:
        super().__init__()
        self._stop = stop
        self._unit = unit

    def write(self, text: str) -> int:
        event = parse_event(text)
        done = event.iteration if isinstance(event, IterationEvent) else None
        done = event.batch if isinstance(event, BatchEvent) else done
        if done == self._unit:
            self._stop._on_signal(signal.SIGTERM, None)
        return super().write(text)


# --- events ---


@pytest.mark.parametrize(
    "event",
    [
        StartEvent(1.5, "mlp-digits", "training", 2, 7),
        IterationEvent(2.0, 8, 0.25, 0.75, 1),
        IterationEvent(2.0, 8, 30.5, None, 1),
        DoneEvent(3.0, 10),
        BatchEvent(4.0, 3, 2.5, 100, 2),
    ],
)
def test_events_survive_a_line_round_trip(event):
    line = encode_event(event)
    assert "\n" not in line
    assert json.loads(line)["event"] == event.event
    assert parse_event(line) == event
    assert parse_event((line + "\n").encode()) == event


def test_a_non_finite_loss_is_written_as_null_and_read_as_nan():
    line = encode_event(IterationEvent(1.0, 1, math.inf, 0.5, 1))
    assert json.loads(line)["loss"] is None
    parsed = parse_event(line)
    assert isinstance(parsed, IterationEvent) and math.isnan(parsed.loss)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "UserWarning: something torch says",
        "{not json",
        "[1, 2]",
        '{"event": "unknown", "time": 1}',
        '{"event": "batch", "time": 1}',
        '"just a string"',
    ],
)
def test_lines_that_are_not_events_read_as_none(line):
    assert parse_event(line) is None


def test_fields_a_newer_workload_adds_are_ignored():
    line = '{"event":"done","time":3.0,"iterations":10,"checkpoint":"/x"}'
    assert parse_event(line) == DoneEvent(3.0, 10)


# --- threads from the cgroup quota ---


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct", "cpuacct,cpu"])
def test_v1_quota_is_read_from_any_cpu_controller_folder(tmp_path, folder):
    write_v1_quota(tmp_path, 150_000, folder=folder)
    assert read_cpu_quota(tmp_path) == CpuQuota(150_000, 100_000)


@pytest.mark.parametrize(
    ("content", "expected"),
    [("150000 100000\n", CpuQuota(150_000, 100_000)), ("max 100000\n", None)],
)
def test_v2_cpu_max_is_read(tmp_path, content, expected):
    (tmp_path / "cpu.max").write_text(content)
    assert read_cpu_quota(tmp_path) == expected


@pytest.mark.parametrize(
    "files",
    [
        {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"},
        {"cpu/cpu.cfs_quota_us": "garbage", "cpu/cpu.cfs_period_us": "100000"},
        {"cpu/cpu.cfs_quota_us": "50000"},  # no period file
        {"cpu.max": "50000"},  # no period
        {},
    ],
)
def test_no_usable_quota_reads_as_none(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert read_cpu_quota(tmp_path) is None


@pytest.mark.parametrize(
    ("quota", "cores", "threads"),
    [
        (None, 4, 4),
        (CpuQuota(50_000, 100_000), 4, 1),
        (CpuQuota(100_000, 100_000), 4, 1),
        (CpuQuota(100_001, 100_000), 4, 2),
        (CpuQuota(250_000, 100_000), 4, 3),
        (CpuQuota(900_000, 100_000), 4, 4),
        (CpuQuota(1_000, 100_000), 4, 1),
    ],
)
def test_threads_are_the_quota_rounded_up_within_the_cores(quota, cores, threads):
    assert threads_for(quota, cores) == threads


def test_thread_follower_resizes_torch_when_the_quota_file_changes(one_core_cgroup, monkeypatch):
    monkeypatch.setattr(cpu_quota, "usable_cores", lambda: 8)
    follower = ThreadFollower()
    assert follower.update() == 1 and torch.get_num_threads() == 1
    write_v1_quota(one_core_cgroup, 300_000)
    assert follower.update() == 3 and torch.get_num_threads() == 3
    write_v1_quota(one_core_cgroup, -1)
    assert follower.update() == 8 and torch.get_num_threads() == 8
    (one_core_cgroup / "cpu" / "cpu.cfs_quota_us").unlink()
    assert follower.threads == 8 and follower.update() == 8


def test_stock_threads_keep_one_thread_per_core_whatever_the_quota(one_core_cgroup, monkeypatch):
    monkeypatch.setattr(cpu_quota, "usable_cores", lambda: 4)
    keeper = thread_keeper("stock")
    assert keeper.update() == 4 and torch.get_num_threads() == 4
    write_v1_quota(one_core_cgroup, 300_000)
    assert keeper.update() == 4 and torch.get_num_threads() == 4
    assert isinstance(thread_keeper("tuned"), ThreadFollower)


# --- data and catalog ---


def test_the_packaged_digits_are_the_uci_digits():
    digits = load_digits()
    assert digits.images.shape == (1797, 8, 8) and digits.images.dtype == np.uint8
    assert digits.images.max() == 16 and set(np.unique(digits.labels)) == set(range(10))
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    reference = sklearn_datasets.load_digits()
    assert np.array_equal(digits.images, reference.images)
    assert np.array_equal(digits.labels, reference.target)


def test_every_workload_has_a_network_and_a_consistent_spec():
    assert set(MODEL_BUILDERS) == set(WORKLOADS)
    for spec in WORKLOADS.values():
        assert (spec.iterations is not None) == (spec.kind == "training"), spec
        assert spec.batch_size > 0


def test_minibatches_are_epoch_permutations_that_a_restart_reproduces():
    sampler = MinibatchSampler(size=100, batch_size=32, seed=3)
    first_epoch = np.concatenate([sampler.indices(i) for i in range(3)])
    assert len(set(first_epoch.tolist())) == 96  # three full batches, no repeats
    sequential = [sampler.indices(i).tolist() for i in range(3, 9)]
    restarted = MinibatchSampler(size=100, batch_size=32, seed=3)
    assert [restarted.indices(i).tolist() for i in range(3, 9)] == sequential
    other_seed = MinibatchSampler(size=100, batch_size=32, seed=4)
    assert other_seed.indices(0).tolist() != MinibatchSampler(100, 32, 3).indices(0).tolist()


# --- the programs, in-process ---


@pytest.mark.parametrize("name", TRAINING)
def test_training_prints_start_iterations_and_done(name, one_core_cgroup):
    out = io.StringIO()
    status = run_training(WORKLOADS[name], 3, 0, 16, 0, None, StopRequest(), out)
    events = events_of(out.getvalue())
    assert status == 0
    assert isinstance(events[0], StartEvent)
    assert (events[0].workload, events[0].kind, events[0].threads) == (name, "training", 1)
    iterations = events[1:-1]
    assert [event.iteration for event in iterations] == [1, 2, 3]
    assert all(math.isfinite(event.loss) for event in iterations)
    assert all(event.threads == 1 for event in iterations)
    assert [event.time for event in events] == sorted(event.time for event in events)
    assert events[-1] == DoneEvent(events[-1].time, 3)
    classifies = name != "vae-digits"
    assert all((event.accuracy is not None) == classifies for event in iterations)


@pytest.mark.parametrize("name", INFERENCE)
def test_inference_answers_batches_with_a_latency(name, one_core_cgroup):
    out = io.StringIO()
    status = run_inference(WORKLOADS[name], 2, 0, 4, 0, StopRequest(), out)
    events = events_of(out.getvalue())
    assert status == 0
    assert isinstance(events[0], StartEvent) and events[0].kind == "inference"
    batches = events[1:]
    assert [event.batch for event in batches] == [1, 2]
    assert all(event.latency_s > 0 and event.images == 4 for event in batches)
    assert all(isinstance(event, BatchEvent) and event.threads == 1 for event in batches)


def test_a_service_serves_until_stopped_and_continues_a_count(one_core_cgroup):
    stop = StopRequest()
    out = StopAfter(stop, unit=7)
    assert run_inference(WORKLOADS["vgg-svc"], None, 5, 2, 0, stop, out) == 0
    events = events_of(out.getvalue())
    assert events[0].start_iteration == 5
    assert [event.batch for event in events[1:]] == [6, 7]


def test_training_lowers_the_loss_within_a_few_dozen_iterations(one_core_cgroup):
    out = io.StringIO()
    run_training(WORKLOADS["mlp-digits"], 40, 0, 64, 0, None, StopRequest(), out)
    events = events_of(out.getvalue())
    losses = [event.loss for event in events if isinstance(event, IterationEvent)]
    assert len(losses) == 40
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


def test_a_stopped_job_resumes_from_its_checkpoint_as_if_never_stopped(one_core_cgroup, tmp_path):
    spec = WORKLOADS["cnn-digits"]
    straight = io.StringIO()
    run_training(spec, 6, 0, 32, 1, None, StopRequest(), straight)
    stop = StopRequest()
    checkpoint = tmp_path / "job.pt"
    first_part = StopAfter(stop, unit=3)
    assert run_training(spec, 6, 0, 32, 1, checkpoint, stop, first_part) == 143
    assert checkpoint.is_file()
    second_part = io.StringIO()
    # The checkpoint's iteration wins over a stale --start-iteration.
    assert run_training(spec, 6, 1, 32, 1, checkpoint, StopRequest(), second_part) == 0

    def losses(text):
        return [(e.iteration, e.loss) for e in events_of(text) if isinstance(e, IterationEvent)]

    resumed = events_of(second_part.getvalue())
    assert resumed[0].start_iteration == 3
    stitched = losses(first_part.getvalue()) + losses(second_part.getvalue())
    expected = losses(straight.getvalue())
    assert [iteration for iteration, _ in stitched] == [iteration for iteration, _ in expected]
    assert np.allclose([loss for _, loss in stitched], [loss for _, loss in expected], rtol=1e-5)


def test_without_a_checkpoint_a_restart_only_continues_the_count(one_core_cgroup):
    out = io.StringIO()
    assert run_training(WORKLOADS["mlp-digits"], 5, 3, 16, 0, None, StopRequest(), out) == 0
    events = events_of(out.getvalue())
    assert events[0].start_iteration == 3
    assert [e.iteration for e in events if isinstance(e, IterationEvent)] == [4, 5]
    assert events[-1].iterations == 5


# --- the command line, as the image runs it ---


def run_module(args, cgroup_root, **kwargs):
    env = kwargs.pop("env", {**os.environ, CGROUP_ROOT_ENV: str(cgroup_root)})
    return subprocess.Popen(
        [sys.executable, "-m", "dlsched.envs.workloads", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def test_command_line_training_prints_only_json_lines_on_stdout(tmp_path):
    write_v1_quota(tmp_path, 50_000)
    process = run_module(
        ["mlp-digits", "--iterations", "4", "--start-iteration", "1", "--batch-size", "8"],
        tmp_path,
    )
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    events = events_of(stdout)
    assert events[0].threads == 1 and events[0].start_iteration == 1
    assert [e.iteration for e in events if isinstance(e, IterationEvent)] == [2, 3, 4]
    assert isinstance(events[-1], DoneEvent)


def test_command_line_stock_threading_ignores_the_quota_and_the_image_default(tmp_path):
    write_v1_quota(tmp_path, 50_000)
    # OMP_NUM_THREADS=1 is what the image sets for the tuned workloads.
    process = run_module(
        ["mlp-digits", "--iterations", "2", "--batch-size", "8", "--threading", "stock"],
        tmp_path,
        env={**os.environ, CGROUP_ROOT_ENV: str(tmp_path), "OMP_NUM_THREADS": "1"},
    )
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    events = events_of(stdout)
    cores = len(os.sched_getaffinity(0))
    assert {event.threads for event in events if hasattr(event, "threads")} == {cores}


def test_command_line_stops_on_sigterm_and_resumes_from_the_checkpoint(tmp_path):
    write_v1_quota(tmp_path, 100_000)
    checkpoint = tmp_path / "gru.pt"
    args = ["gru-digits", "--iterations", "100000", "--checkpoint", str(checkpoint)]
    process = run_module(args, tmp_path)
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        event = parse_event(line)
        if isinstance(event, IterationEvent):
            seen.append(event.iteration)
            if len(seen) == 2:
                process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=300) == 143
    assert checkpoint.is_file()
    resumed = run_module([*args[:2], str(seen[-1] + 2), *args[3:]], tmp_path)
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    events = events_of(stdout)
    assert events[0].start_iteration == seen[-1]
    assert [e.iteration for e in events if isinstance(e, IterationEvent)] == [
        seen[-1] + 1,
        seen[-1] + 2,
    ]


def test_command_line_refuses_an_unknown_workload(tmp_path):
    process = run_module(["resnet-50"], tmp_path)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and "invalid choice" in stderr


# --- calibration: from measured runs to profiles ---


def limit_run(limit, quota_cores, rate, cpu_cores, losses=(), durations=(1.0, 1.1, 0.9)):
    return LimitRun(
        limit=limit,
        quota_cores=quota_cores,
        cpu_cores=cpu_cores,
        window_s=30.0,
        completions=tuple(100.0 + i / rate for i in range(int(30 * rate) + 1)),
        unit_durations_s=durations,
        startup_s=1.5,
        losses=tuple(losses),
        threads=1,
        other_containers=0,
        other_cores=0.01,
    )


def test_throughput_points_follow_the_cpu_each_run_got_and_never_fall():
    runs = [
        limit_run(1.0, None, 2.0, 1.6),
        limit_run(0.25, 0.5, 0.7, 0.5),
        limit_run(0.9, 1.8, 2.2, 1.6),  # a quota above the demand runs as if uncapped
        limit_run(0.5, 1.0, 1.3, 1.0),
        limit_run(0.6, 1.2, 1.1, 1.2),  # noise: slower than at 1.0 core
    ]
    assert demand_cores(runs) == 1.6
    points = throughput_points(runs)
    assert [cores for cores, _ in points] == [0.5, 1.0, 1.2, 1.6]
    rates = [rate for _, rate in points]
    assert rates == sorted(rates)
    assert rates[1] == pytest.approx(1.2) and rates[2] == pytest.approx(1.2)
    assert rates[3] == pytest.approx(2.1)  # the two runs at the demand, averaged


def test_a_contended_uncapped_run_does_not_hide_what_a_capped_run_used():
    runs = [
        limit_run(0.25, 0.5, 10.0, 0.5),
        limit_run(0.5, 1.0, 19.0, 0.9),
        limit_run(1.0, None, 9.5, 0.55),  # other processes held it to 0.55 cores
    ]
    assert demand_cores(runs) == 0.9
    assert throughput_points(runs) == [
        (0.5, pytest.approx(9.75)),
        (0.55, pytest.approx(9.75)),
        (0.9, pytest.approx(19.0)),
    ]


def test_a_run_at_almost_the_demand_merges_into_the_demand_point():
    runs = [limit_run(1.0, None, 2.0, 1.0), limit_run(0.5, 1.0, 1.8, 0.995)]
    assert throughput_points(runs) == [(1.0, pytest.approx(1.9))]


def test_monotone_rates_pool_only_the_violations():
    assert monotone_rates([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert monotone_rates([3.0, 2.0, 1.0]) == [2.0, 2.0, 2.0]
    assert monotone_rates([1.0, 2.0]) == [1.0, 2.0]


def test_the_loss_curve_starts_at_the_initial_loss_and_averages_growing_bins():
    losses = [(i, 2.0 / i + 0.1) for i in range(1, 1001)]
    curve = loss_curve(losses, points=20)
    iterations = [iteration for iteration, _ in curve]
    values = [loss for _, loss in curve]
    assert curve[0] == (0, 2.1)
    assert iterations == sorted(set(iterations)) and len(curve) <= 21
    assert iterations[-1] > 700 and values == sorted(values, reverse=True)
    assert values[-1] == pytest.approx(0.1, abs=0.01)
    gaps = np.diff(iterations)
    assert gaps[-1] > 10 * gaps[0]  # fine at the start, coarse in the tail


def test_a_built_profile_reads_back_through_the_profile_loader(tmp_path):
    spec = WORKLOADS["gru-digits"]
    losses = [(i, 2.3 * 0.99**i) for i in range(1, spec.iterations + 1)]
    runs = [
        limit_run(0.25, 0.5, 10.0, 0.5),
        limit_run(0.5, 1.0, 20.0, 1.0),
        limit_run(1.0, None, 33.0, 1.9, losses),
    ]
    host = HostDescription("box", "Some CPU", 2, "20.10")
    profile = build_profile(spec, runs, host, "dlsched calibrate --workload gru-digits", 30)
    path = tmp_path / "gru-digits.json"
    path.write_text(json.dumps(profile))
    loaded = load_profile(path)
    assert loaded.iterations == spec.iterations and loaded.batch_size == spec.batch_size
    assert loaded.demand_cores == pytest.approx(1.9)
    assert loaded.throughput.cores == (0.5, 1.0, 1.9)
    assert loaded.units_per_s(1.0) == pytest.approx(20.0)
    assert loaded.noise_cv == pytest.approx(np.std([1.0, 1.1, 0.9], ddof=1), rel=1e-2)
    assert loaded.loss_at(0) == pytest.approx(2.3 * 0.99)
    assert "2 cores" in loaded.provenance.host and "dlsched calibrate" in loaded.provenance.method


@pytest.mark.parametrize(
    ("profile_set", "threading"), [("measured", "tuned"), ("measured-stock", "stock")]
)
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_measured_profile_of_each_workload_is_shipped_and_valid(name, profile_set, threading):
    profile = load_profile(PROFILES_DIR / profile_set / f"{name}.json")
    spec = WORKLOADS[name]
    assert profile.threading == threading
    assert profile.measured_on is not None and profile.measured_on.cores >= 1
    # Five limits from 0.1 of the host to uncapped (points at the same cores are merged).
    assert len(profile.throughput.cores) >= 4
    assert profile.throughput.cores[0] <= 0.1 * profile.measured_on.cores * 1.05
    assert (profile.kind.value, profile.unit.value) == (spec.kind, spec.unit)
    assert profile.batch_size == spec.batch_size
    assert profile.throughput.cores[-1] == pytest.approx(profile.demand_cores)
    assert profile.units_per_s(profile.demand_cores) > 0
    assert profile.provenance.source.startswith("measured")
    if spec.kind == "training":
        assert profile.iterations == spec.iterations
        assert profile.loss_curve is not None
        assert profile.loss_at(spec.iterations) < profile.loss_at(0)


def test_host_busy_time_counts_every_state_but_idle_and_iowait(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 7 50 1000 20 5 5 3 11 0\ncpu0 50 3 25 500 10 2 2 1 5 0\n")
    assert host_busy_seconds(stat) == pytest.approx(170 / os.sysconf("SC_CLK_TCK"))


def test_interference_counts_other_processes_and_containers():
    alone = limit_run(1.0, None, 2.0, 1.9)
    assert alone.interference == pytest.approx(0.01)
    assert dataclasses.replace(alone, other_cores=0.6).interference == pytest.approx(0.6)
    assert dataclasses.replace(alone, other_containers=2).interference == pytest.approx(2.01)
    assert dataclasses.replace(alone, other_cores=None).interference == 0


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--workload", "resnet50-svc"], "unknown workload 'resnet50-svc'"),
        (["--workload", "vgg-svc", "--limits", "0.5,2"], "limit 2.0 is outside (0, 1]"),
        (["--workload", "vgg-svc", "--limits", "half"], "not comma-separated numbers"),
        (["--workload", "vgg-svc", "--duration", "0"], "0 s is not positive"),
    ],
)
def test_calibrate_refuses_bad_arguments_before_touching_the_engine(option, message, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["calibrate", *option])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_calibrate_all_means_every_workload():
    args = cli.build_parser().parse_args(["calibrate", "--workload", "all"])
    assert args.workload == tuple(sorted(WORKLOADS))
    # Five limits from 0.1 of the host to uncapped; the duration's default depends on the mode.
    assert args.limits == (0.1, 0.25, 0.5, 0.75, 1.0) and args.duration is None


@pytest.fixture
def busy_host():
    """Two processes spinning on the CPU while the test runs (this host's other work)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


@pytest.mark.docker
@pytest.mark.parametrize("mode", [["--workload", "mlp-digits"], ["--contention"]])
def test_calibration_on_a_busy_host_is_refused_naming_the_load(
    docker_engine, workload_image, busy_host, tmp_path, capsys, mode
):
    code = cli.main(
        ["calibrate", *mode, "--wait-quiet", "3", "--output-dir", str(tmp_path / "set")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "the host is busy" in err and "cores busy" in err and "--force" in err
    assert not (tmp_path / "set").exists() or not any((tmp_path / "set").iterdir())
