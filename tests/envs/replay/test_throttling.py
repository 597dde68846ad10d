"""The replay model's throttling: its curve, its file, and the ratio it gives replayed jobs.

The host's side (the engine's ``cpu.stat``) is tested in
``tests/envs/docker/test_docker_throttling.py``; the fit to host episodes in
``tests/runs/fidelity/test_throttle_fit.py``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from scenario_factories import mobilenet_services

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.decision import Decision
from dlsched.envs.errors import ProfileError
from dlsched.envs.inference_env import InferenceEnv
from dlsched.envs.observation import FEATURES
from dlsched.envs.replay.profile import PROFILES_DIR, load_set_throttling
from dlsched.envs.replay.throttling import (
    THROTTLING_FILE,
    ThrottleCurve,
    load_throttling,
    pressure,
    throttle_ratio,
)
from dlsched.envs.scenarios.model import Scenario

# --------------------------------------------------------------------------- the curve


def test_half_the_periods_are_throttled_at_the_half_pressure() -> None:
    curve = ThrottleCurve(half_pressure=1.2, burstiness=0.1)
    assert curve.ratio(np.array([1.2]))[0] == pytest.approx(0.5)
    assert curve.ratio(np.array([0.0]))[0] == 0.0
    assert curve.ratio(np.array([0.5]))[0] < 1e-3  # half its quota: hardly ever throttled
    assert curve.ratio(np.array([3.0]))[0] > 1 - 1e-3  # three times it: nearly always


def test_the_ratio_rises_with_the_pressure_and_a_burstier_job_is_throttled_sooner() -> None:
    pressures = np.linspace(0.1, 3.0, 50)
    steady = throttle_ratio(pressures, 1.0, 0.05)
    bursty = throttle_ratio(pressures, 1.0, 0.5)
    assert np.all(np.diff(steady) >= 0) and np.all(np.diff(bursty) >= 0)
    below = pressures < 1.0
    assert np.all(bursty[below] > steady[below])  # its bursts hit the quota below it
    assert np.all(bursty[~below & (pressures > 1.0)] < steady[~below & (pressures > 1.0)])


def test_the_pressure_is_the_busy_threads_where_the_quota_binds_else_the_share() -> None:
    busy = np.array([1.7, 1.7, 1.0])
    share = np.array([0.5, 0.3, 1.0])
    quota = np.array([0.5, 1.0, 2.0])
    # binds: 1.7 busy cores on 0.5; held below by others: 0.3 of 1; at its demand: 1 of 2
    assert pressure(busy, share, quota) == pytest.approx([3.4, 0.3, 0.5])


# --------------------------------------------------------------------------- the file


def _write(directory: Path, data: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / THROTTLING_FILE).write_text(json.dumps(data))
    return directory


_FIT = {"source": "test", "host": "none", "date": "2026-12-07", "objective": "none"}


def test_a_set_without_the_file_has_no_throttling_model(tmp_path) -> None:
    assert load_throttling(tmp_path) is None


def test_the_file_gives_each_workload_its_curve_and_the_others_the_default(tmp_path) -> None:
    directory = _write(
        tmp_path,
        {
            "format": 1,
            "default": {"half_pressure": 1.0, "burstiness": 0.1},
            "workloads": {"mobilenet-svc": {"half_pressure": 0.9, "burstiness": 0.3}},
            "fit": _FIT,
        },
    )
    model = load_throttling(directory)
    assert model is not None
    assert model.curve("mobilenet-svc") == ThrottleCurve(0.9, 0.3)
    assert model.curve("vgg-svc") == ThrottleCurve(1.0, 0.1)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"format": 2}, r"format: got 2, expected 1"),
        (
            {"format": 1, "default": {"half_pressure": 0, "burstiness": 0.1}, "fit": _FIT},
            r"default.half_pressure: got 0, expected a finite number > 0",
        ),
        (
            {"format": 1, "default": {"half_pressure": 1, "burstiness": 0.1}},
            r"fit: got None, expected an object",
        ),
        (
            {
                "format": 1,
                "default": {"half_pressure": 1, "burstiness": 0.1},
                "fit": _FIT,
                "curves": {},
            },
            r"curves: unknown field",
        ),
    ],
)
def test_a_malformed_file_is_refused_naming_the_field(tmp_path, data, message) -> None:
    with pytest.raises(ProfileError, match=message):
        load_throttling(_write(tmp_path, data))


@pytest.mark.parametrize("name", ["measured", "measured-stock", "paper"])
def test_every_shipped_set_has_a_throttling_model_with_its_provenance(name) -> None:
    model = load_set_throttling(name)
    assert model is not None and model.fit is not None
    assert model.fit.source and model.fit.objective


# --------------------------------------------------------------------------- in the replay model


def _services(cores: float, profile_set: str = "measured") -> Scenario:
    return mobilenet_services(
        "test-throttled-services", cores, interval_s=10.0, horizon_s=200.0, profile_set=profile_set
    )


def _ratios(scenario: Scenario, cores_asked: float | None, steps: int = 3) -> list[float | None]:
    """The service's throttle ratio after each step at ``cores_asked`` (``None``: uncapped)."""
    env = InferenceEnv(scenario=scenario)
    try:
        _, info = env.reset(seed=0)
        (job,) = info["telemetry"].jobs
        limit = 1.0 if cores_asked is None else cores_asked / scenario.workers[0].cores
        ratios = []
        for _ in range(steps):
            _, _, _, _, info = env.step_decision(Decision(limits={job.job_id: limit}))
            ratios.append(info["telemetry"].jobs[0].throttle_ratio)
        return ratios
    finally:
        env.close()


def test_a_quota_well_below_the_demand_throttles_nearly_every_period_and_one_above_hardly_any():
    """The engine test's two cases (``test_docker_throttling.py``), replayed: mobilenet-svc
    (1.72 cores busy uncapped) under 0.2 cores, and under 3.6 cores of a 4-core worker, where
    its threads keep at most its demand busy; uncapped, no quota: not measured."""
    below = _ratios(_services(4.0), 0.2)
    above = _ratios(_services(4.0), 3.6)
    assert all(ratio is not None and ratio > 0.9 for ratio in below[1:]), below
    assert all(ratio is not None and ratio < 0.1 for ratio in above[1:]), above
    assert _ratios(_services(4.0), None) == [None, None, None]


def test_the_ratio_of_a_stock_job_falls_as_its_quota_rises() -> None:
    """Stock threading keeps as many threads at every quota; a tuned job's threads follow its
    quota (one at 1 core, two at 1.5), so its pressure, and its ratio, jump back up there."""
    scenario = _services(4.0, "measured-stock")
    ratios = [_ratios(scenario, cores)[-1] for cores in (0.5, 1.0, 1.5, 1.8, 2.5, 3.6)]
    assert all(ratio is not None for ratio in ratios)
    assert ratios == sorted(ratios, reverse=True), ratios
    assert ratios[0] > 0.9 > 0.1 > ratios[-1]
    one_thread, two_threads = (_ratios(_services(4.0), cores)[-1] for cores in (1.0, 1.5))
    assert one_thread is not None and two_threads is not None
    assert two_threads > one_thread


def test_a_set_without_a_throttling_model_measures_no_ratio(tmp_path) -> None:
    folder = tmp_path / "no-throttling"
    shutil.copytree(PROFILES_DIR / "measured", folder)
    (folder / THROTTLING_FILE).unlink()
    assert _ratios(_services(4.0, str(folder)), 0.2) == [None, None, None]


def test_the_observation_shows_the_ratio_and_the_same_seed_the_same_ratios() -> None:
    scenario = dataclasses.replace(_services(2.0), name="test-throttle-observed")
    first, second = (_ratios(scenario, 0.3, steps=4) for _ in range(2))
    assert first == second
    env = gym.make("dlsched/Inference-v0", scenario=scenario)
    try:
        env.reset(seed=0)
        observation, *_ = env.step(np.full(env.action_space.shape, 0.15, dtype=np.float32))
        observation, *_, info = env.step(np.full(env.action_space.shape, 0.15, dtype=np.float32))
        ratio = info["telemetry"].jobs[0].throttle_ratio
        assert ratio is not None
        assert observation[0, FEATURES.index("throttle_ratio")] == pytest.approx(ratio, abs=1e-6)
    finally:
        env.close()
