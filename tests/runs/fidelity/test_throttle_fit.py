"""Fitting the throttling curves to recorded episodes (``dlsched calibrate --throttling-from``)
and holding the replay model's throttling against a host's in ``dlsched validate``: from replay
episodes the fit recovers the curves replay ran them by, and replay against itself errs by
nothing."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dlsched.baselines import make
from dlsched.envs.errors import ArgumentError
from dlsched.envs.replay.profile import PROFILES_DIR
from dlsched.envs.replay.throttling import THROTTLING_FILE, load_throttling, throttle_ratio
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.cli import main
from dlsched.runs.evaluation.runners import run_episodes
from dlsched.runs.fidelity.throttle_fit import (
    MIN_THROTTLED_STEPS,
    ThrottledSteps,
    fit_curve,
    fit_throttling,
    throttled_steps,
    write_throttling,
)
from dlsched.runs.fidelity.throttle_validation import compare_throttling
from dlsched.runs.fidelity.validation_report import build_report, render_report, report_data

#: The curves replay runs the services by, far from the shipped default.
TRUE = {"mobilenet-svc": (1.3, 0.25), "resnet-svc": (0.8, 0.05), "vgg-svc": (1.0, 0.5)}


def test_the_fit_recovers_a_curve_from_its_points() -> None:
    pressures = np.geomspace(0.3, 3.0, 40)
    ratios = throttle_ratio(pressures, 1.2, 0.15)
    curve, rms = fit_curve(pressures, ratios)
    assert curve.half_pressure == pytest.approx(1.2, rel=0.02)
    assert curve.burstiness == pytest.approx(0.15, rel=0.05)
    assert rms < 0.01


def test_too_few_throttled_steps_are_refused_naming_the_fix() -> None:
    steps = [ThrottledSteps("mobilenet-svc", np.ones(3), np.ones(3))]
    with pytest.raises(ArgumentError, match=rf"expected at least {MIN_THROTTLED_STEPS}.*caps"):
        fit_throttling(steps, "test", "test host")


def _set_with_curves(directory: Path) -> str:
    shutil.copytree(PROFILES_DIR / "measured", directory)
    data = json.loads((directory / THROTTLING_FILE).read_text())
    data["workloads"] = {
        name: {"half_pressure": half, "burstiness": burstiness}
        for name, (half, burstiness) in TRUE.items()
    }
    (directory / THROTTLING_FILE).write_text(json.dumps(data))
    return str(directory)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    """DQoES (which caps its services) on docker-inference-6 on a set with :data:`TRUE`."""
    profile_set = _set_with_curves(tmp_path_factory.mktemp("throttling") / "set")
    scenario = dataclasses.replace(load_scenario("docker-inference-6"), profile_set=profile_set)
    return scenario, run_episodes(scenario, make("dqoes"), [0, 1])


def test_the_fit_to_replay_episodes_recovers_the_curves_replay_ran_them_by(episodes, tmp_path):
    scenario, results = episodes
    steps = throttled_steps(results, scenario.profile_set)
    assert {s.workload for s in steps} <= set(TRUE)
    model = fit_throttling(steps, "replay episodes", "replay")
    for workload in steps:
        if len(workload.ratio) < MIN_THROTTLED_STEPS:
            continue
        half, burstiness = TRUE[workload.workload]
        fitted = model.curve(workload.workload).ratio(workload.pressure)
        assert fitted == pytest.approx(
            throttle_ratio(workload.pressure, half, burstiness), abs=0.02
        )
    assert any(len(s.ratio) >= MIN_THROTTLED_STEPS for s in steps)
    path = write_throttling(tmp_path, model)
    assert path == tmp_path / THROTTLING_FILE
    assert load_throttling(tmp_path) == model


def test_replay_against_itself_errs_by_nothing_and_the_report_says_so(episodes):
    scenario, results = episodes
    summary = compare_throttling(results, results)
    assert summary is not None and summary.jobs > 0
    assert summary.median_error == 0.0 and summary.max_error == 0.0
    assert all(c.replay is not None and 0 <= c.replay <= 1 for c in summary.comparisons)
    report = build_report(scenario, results, results)
    assert "throttle ratio: median |error| of the mean per job 0.000" in render_report(report)
    assert report_data(report)["throttling"]["median_error"] == 0.0


def test_a_host_that_measured_no_throttling_is_no_comparison(episodes):
    _, results = episodes
    unmeasured = [
        dataclasses.replace(
            result,
            steps=[
                dataclasses.replace(
                    step,
                    containers=tuple(
                        dataclasses.replace(sample, throttle_ratio=None)
                        for sample in step.containers
                    ),
                )
                for step in result.steps
            ],
        )
        for result in results
    ]
    assert compare_throttling(unmeasured, unmeasured) is None
    summary = compare_throttling(results, unmeasured)
    assert summary is not None and summary.jobs == 0 and summary.missing > 0
    assert summary.median_error is None


def test_the_command_fits_recorded_episodes_into_a_new_set(tmp_path, capsys) -> None:
    """Episodes recorded by ``dlsched evaluate --out`` (their trajectory tables carry the
    ratios), fitted by ``dlsched calibrate --throttling-from`` into a folder started as their
    set."""
    profile_set = _set_with_curves(tmp_path / "set")
    scenario = dataclasses.replace(load_scenario("docker-inference-6"), profile_set=profile_set)
    scenario_file = tmp_path / "services.yaml"
    scenario_file.write_text(dump_scenario(scenario))
    records = tmp_path / "records"
    arguments = ["evaluate", "--scenario", str(scenario_file), "--policy", "dqoes"]
    arguments += ["--episodes", "2", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    assert main([*arguments, "--no-plots", "--out", str(records)]) == 0
    (folder,) = records.iterdir()
    fitted = tmp_path / "fitted"
    capsys.readouterr()
    assert main(["calibrate", "--throttling-from", str(folder), "--output-dir", str(fitted)]) == 0
    out = capsys.readouterr().out
    assert f"started {fitted} as profile set {profile_set!r}" in out
    assert f"wrote the throttling curves to {fitted / THROTTLING_FILE}" in out
    model = load_throttling(fitted)
    assert model is not None and model.fit is not None
    assert "by dlsched calibrate --throttling-from" in model.fit.source
    assert set(model.workloads) <= set(TRUE) and model.workloads
