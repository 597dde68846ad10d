"""Calibration: runs measured under CPU limits turned into workload profiles, the shipped
measured profiles, and ``dlsched calibrate`` on the local engine.

The first part needs no engine. Tests marked ``docker`` run calibration containers of the
workload image on the local engine: skipped without an engine, failed with
DLSCHED_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlsched.envs.replay.profile import PROFILES_DIR, load_profile
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.runs import cli
from dlsched.runs.fidelity import calibration
from dlsched.runs.fidelity.calibration_fit import (
    demand_cores,
    loss_curve,
    monotone_rates,
    throughput_points,
)
from dlsched.runs.fidelity.calibration_measurement import (
    CALIBRATION_LABEL,
    HostDescription,
    LimitRun,
    measure_run,
)
from dlsched.runs.fidelity.calibration_profile import build_profile
from dlsched.runs.fidelity.quiet_host import host_busy_seconds, wait_until_quiet

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


def test_a_forced_measurement_that_may_not_wait_samples_no_load():
    class _NoEngine:
        def info(self):
            raise AssertionError("the load was sampled")

    # force with no patience: whatever a sample said, the measurement would go on at once
    assert wait_until_quiet(_NoEngine(), 0.0, force=True) is None


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


def test_a_profile_calibration_settles_its_contention_cells_as_asked(monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(
        calibration, "calibrate", lambda _, settings, __: asked.append(settings) or []
    )
    argv = ["calibrate", "--workload", "mlp-digits", "--settle", "2", "--output-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    (settings,) = asked
    assert settings.settle_s == 2.0 and "--settle 2" in settings.command(["mlp-digits"])


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


# --- calibration on the engine ---


@pytest.mark.docker
def test_a_capped_calibration_run_measures_rate_and_cpu(docker_engine, workload_image):
    cores = docker_engine.info()["NCPU"]

    def calibration_containers() -> set[str]:
        found = docker_engine.containers.list(
            all=True, ignore_removed=True, filters={"label": CALIBRATION_LABEL}
        )
        return {container.id for container in found}

    already_there = calibration_containers()  # another calibration may share the engine
    run = measure_run(docker_engine, WORKLOADS["mlp-digits"], 0.5, cores, duration_s=2.0)
    assert run.quota_cores == pytest.approx(0.5 * cores)
    assert len(run.completions) >= 3 and run.units_per_s > 0
    assert 0 < run.cpu_cores <= run.quota_cores * 1.1
    assert run.startup_s > 0 and run.threads == math.ceil(0.5 * cores)
    assert [iteration for iteration, _ in run.losses][:3] == [1, 2, 3]
    assert calibration_containers() <= already_there  # this run removed the one it started


@pytest.mark.docker
def test_calibrate_writes_a_profile_the_replay_backend_can_load(
    docker_engine, workload_image, tmp_path
):
    args = ["calibrate", "--workload", "vgg-svc", "--limits", "1", "--duration", "2"]
    # --force: this checks what is written, not how quiet the (shared) test host is.
    options = ["--wait-quiet", "0", "--retries", "0", "--force", "--output-dir", str(tmp_path)]
    # A service's contention cells are slow; the next test measures a training workload's.
    assert cli.main([*args, *options, "--only", "throughput,startup"]) == 0
    profile = load_profile(tmp_path / "vgg-svc.json")
    assert profile.kind.value == "inference" and profile.batch_size == 100
    assert profile.throughput.cores == (profile.demand_cores,)
    assert 0 < profile.demand_cores <= docker_engine.info()["NCPU"] * 1.05
    assert profile.units_per_s(profile.demand_cores) > 0
    assert "dlsched calibrate --workload vgg-svc" in profile.provenance.method
    assert profile.measured_on is not None and profile.threading == "tuned"
    assert 0 < profile.startup_cpu_s <= profile.startup_s * docker_engine.info()["NCPU"]


@pytest.mark.docker
def test_calibrate_fits_a_workload_contention_curve_into_its_profile(
    workload_image, containers_left_behind, tmp_path
):
    shipped = Path(load_profile.__code__.co_filename).parent / "profiles" / "measured"
    shutil.copy(shipped / "mlp-digits.json", tmp_path / "mlp-digits.json")
    args = ["calibrate", "--workload", "mlp-digits", "--only", "contention", "--duration", "2"]
    # 2 and 3 copies (a training's default adds 4 and 6), windows of 2 s (15 by default) and 1 s
    # to settle after each change of limits (5 by default) keep the test short: it checks the
    # fit's shape, not its precision.
    options = [
        "--job-counts", "2,3", "--settle", "1", "--wait-quiet", "0", "--retries", "0", "--force"
    ]  # fmt: skip
    assert cli.main([*args, *options, "--output-dir", str(tmp_path)]) == 0
    profile = load_profile(tmp_path / "mlp-digits.json")
    assert profile.contention_exponent is not None and 0 <= profile.contention_exponent <= 12
    assert profile.contention_floor is not None and 0 <= profile.contention_floor < 1
    assert "fitted to 6 cells of 2, 3 copies" in profile.provenance.derivation
    # The first copy ran alone, uncapped, while the second started beside it.
    assert profile.efficiency_beside_startup is not None
    assert 0 < profile.efficiency_beside_startup <= 1
    # Six cells, 2 and 3 copies under free, equal and favoured limits, each with its residual.
    cells = r"tuned [23] jobs (free|equal|favoured): R"
    residuals = re.findall(cells, profile.provenance.derivation)
    assert sorted(residuals) == sorted(["free", "equal", "favoured"] * 2)
    assert not containers_left_behind()
