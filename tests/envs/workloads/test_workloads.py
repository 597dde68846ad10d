"""The workload programs on the host Python.

Most tests call the run functions in-process with a fake cgroup (one core), which keeps them
quick; a few run ``python -m dlsched.envs.workloads`` as the image does, including a stop by
SIGTERM and a resume from the checkpoint it leaves. The profiles calibrated from the workloads
are tested with the calibration, in ``tests/runs/fidelity/test_calibration.py``.
"""

from __future__ import annotations

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
