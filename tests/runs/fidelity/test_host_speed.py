"""The host speed probe and replay rescaled to it (``dlsched validate --host-speed``)."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from dlsched.baselines import make
from dlsched.envs.errors import BackendError, ProfileError
from dlsched.envs.replay.backend import ReplayBackend
from dlsched.envs.replay.profile import load_profile_set, load_set_contention
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.runs.cli import main as cli_main
from dlsched.runs.fidelity.host_speed import (
    HostSpeed,
    ProbedHost,
    ProbeWindows,
    SpeedBracket,
    WorkloadSpeed,
    between,
    drift_warning,
    measure_host_speed,
    probe_host,
    read_host_speed,
    resolve_host_speed,
    speed_bracket,
    speed_windows,
    write_host_speed,
)
from dlsched.runs.fidelity.rescaled_profiles import rescaled_model, write_rescaled_set
from dlsched.runs.fidelity.speed_interval import SpeedInterval, speed_interval
from dlsched.runs.fidelity.validation_sides import REPLAY, Side, run_validation

TRAININGS = ("cnn-digits", "gru-digits", "mlp-digits", "vae-digits")


def _speed(
    ratios: dict[str, float],
    profile_set: str = "measured",
    windows: tuple[tuple[float, ...], ...] = (),
) -> HostSpeed:
    """A probe whose workloads ran ``ratio`` times as fast as their profiles (at 1.5 cores),
    each with the sub-window ratios ``windows`` (none: a probe of format 1)."""
    profiles = load_profile_set(profile_set)
    speeds = []
    for name, ratio in ratios.items():
        rate = float(profiles[name].units_per_s(1.5))
        speeds.append(WorkloadSpeed(name, "iteration", 1.5, rate * ratio, rate, windows, 2.0))
    return HostSpeed(
        "test-host: AMD EPYC, 2 cores", "2026-11-26", profile_set, "tuned", tuple(speeds)
    )


def test_a_rescaled_set_scales_throughput_and_start_up_only(tmp_path):
    speed = _speed({"mlp-digits": 0.5, "cnn-digits": 2.0})
    directory = write_rescaled_set(speed, tmp_path / "rescaled")
    original, rescaled = load_profile_set("measured"), load_profile_set(str(directory))
    assert sorted(rescaled) == sorted(original)
    for name, ratio in (("mlp-digits", 0.5), ("cnn-digits", 2.0)):
        before, after = original[name], rescaled[name]
        assert after.units_per_s(1.0) == pytest.approx(before.units_per_s(1.0) * ratio, rel=1e-4)
        assert after.startup_s == pytest.approx(before.startup_s / ratio, rel=1e-4)
        assert after.demand_cores == before.demand_cores
        assert after.loss_at(100.0) == before.loss_at(100.0)
        assert "rescaled to test-host" in after.provenance.derivation
    assert rescaled["gru-digits"] == original["gru-digits"]
    assert load_set_contention(str(directory)) == load_set_contention("measured")


def test_a_rescaled_set_goes_into_a_new_folder(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("a user's file")
    with pytest.raises(ProfileError, match="is not empty"):
        write_rescaled_set(_speed({"mlp-digits": 0.5}), tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "a user's file"


def test_a_probe_round_trips_through_its_file(tmp_path):
    speed = _speed({name: 0.7 for name in TRAININGS})
    path = write_host_speed(speed, tmp_path / "host-speed.json")
    assert read_host_speed(path) == speed
    assert [round(w.ratio, 6) for w in read_host_speed(path).workloads] == [0.7] * 4


@pytest.mark.parametrize(
    "content",
    ["not json", "[]", '{"format": 1}', '{"format": 9, "workloads": []}'],
)
def test_a_file_that_is_not_a_probe_is_named(tmp_path, content):
    path = tmp_path / "host-speed.json"
    path.write_text(content)
    with pytest.raises(ProfileError, match=str(path)):
        read_host_speed(path)


def test_a_probe_warns_only_beyond_the_tolerance():
    assert _speed({"mlp-digits": 1.05}).warning() is None
    warning = _speed({"mlp-digits": 0.65, "cnn-digits": 0.95}).warning()
    assert warning is not None
    assert "mlp-digits x0.65" in warning and "dlsched calibrate" in warning
    assert "iterations/s at 1.50 cores" in warning
    assert "cnn-digits 1" not in warning  # within the tolerance: listed in the ratios only


def test_a_drift_between_two_probes_is_named_beyond_the_tolerance():
    before = _speed({"cnn-digits": 0.72, "mlp-digits": 0.62})
    assert drift_warning(before, _speed({"cnn-digits": 0.75, "mlp-digits": 0.60})) is None
    warning = drift_warning(before, _speed({"cnn-digits": 1.10, "mlp-digits": 0.64}))
    assert warning is not None
    assert "cnn-digits x0.72 before, x1.10 after (+53%)" in warning
    assert "mlp-digits" not in warning  # 3% apart: within the tolerance


def test_only_a_speed_measured_now_is_bracketed(tmp_path):
    scenario = load_scenario("docker-training-4")
    speed = _speed({n: 0.7 for n in TRAININGS})
    live, folder = Side("docker"), tmp_path / "profiles"
    assert isinstance(speed_bracket(None, scenario, live, speed, folder), SpeedBracket)
    assert isinstance(speed_bracket("measure", scenario, live, speed, folder), SpeedBracket)
    saved = str(tmp_path / "host-speed.json")
    assert speed_bracket(saved, scenario, live, speed, folder) is None
    recorded = Side("docker", recorded=tmp_path)
    assert speed_bracket(None, scenario, recorded, speed, folder) is None
    assert speed_bracket("none", scenario, live, None, folder) is None


def test_the_speed_between_two_probes_is_their_geometric_mean(tmp_path):
    before = _speed({"cnn-digits": 0.5, "mlp-digits": 1.0})
    after = _speed({"cnn-digits": 2.0, "mlp-digits": 1.0})
    speed = between(before, after)
    assert speed.ratios() == pytest.approx({"cnn-digits": 1.0, "mlp-digits": 1.0})
    assert speed.probes == 2 and before.probes == 1
    assert "geometric mean of the probes before and after" in speed.note()
    assert read_host_speed(write_host_speed(speed, tmp_path / "host-speed.json")) == speed
    with pytest.raises(ProfileError, match="cannot be combined"):
        between(before, _speed({"cnn-digits": 1.0}))


def test_a_bracketed_model_runs_after_the_reference_on_the_mean_speed(tmp_path):
    """The reference runs at 0.6x throughout; probes of 0.3x before and 1.2x after (a drift)
    bracket it, and replay rescaled to their geometric mean (0.6x) matches it exactly."""
    scenario = load_scenario("docker-training-4")
    slower = write_rescaled_set(_speed({n: 0.6 for n in TRAININGS}), tmp_path / "slower")
    reference = Side("replay", profile_set=str(slower))
    probes = []

    def measure() -> HostSpeed:
        probes.append("after")
        return _speed({n: 1.2 for n in TRAININGS})

    bracket = SpeedBracket(_speed({n: 0.3 for n in TRAININGS}), tmp_path / "model", measure)
    policies = [make("default"), make("equal")]
    report, _, _ = run_validation(
        scenario, policies, (0,), reference=reference, model=bracket, progress=False
    )
    assert probes == ["after"]
    assert report.all_jobs.median == 0.0 and report.all_jobs.max == 0.0
    assert bracket.speed is not None
    assert bracket.speed.ratios() == pytest.approx({n: 0.6 for n in TRAININGS})
    assert report.sides[0] == "replay[rescaled to this host's speed]"
    assert any("x0.30 before, x1.20 after (+300%)" in w for w in report.warnings)
    assert any("cnn-digits x0.60" in w and "geometric mean" in w for w in report.warnings)


def test_replay_rescaled_to_a_slower_reference_reports_no_error(tmp_path):
    """The reference runs every workload at 0.6x; replay rescaled by the same probe matches it."""
    scenario = load_scenario("docker-training-4")
    speed = _speed({name: 0.6 for name in TRAININGS})
    slower = Side("replay", profile_set=str(write_rescaled_set(speed, tmp_path / "slower")))
    policies = [make("default"), make("equal")]
    as_shipped, _, _ = run_validation(scenario, policies, (0,), reference=slower, progress=False)
    assert as_shipped.all_jobs.median > 0.2  # the profiles' host is faster
    model = rescaled_model(speed, tmp_path / "model")
    rescaled, _, _ = run_validation(
        scenario, policies, (0,), reference=slower, model=model, progress=False
    )
    assert rescaled.all_jobs.median == 0.0 and rescaled.all_jobs.max == 0.0
    assert rescaled.sides[0] == "replay[rescaled to this host's speed]"


def test_the_option_chooses_the_probe(tmp_path):
    scenario = load_scenario("docker-training-4")
    recorded = Side("docker", recorded=tmp_path)
    assert resolve_host_speed(None, scenario, recorded) is None
    assert resolve_host_speed("none", scenario, Side("docker")) is None
    with pytest.raises(BackendError, match="--host-speed measure probes a Docker engine"):
        resolve_host_speed("measure", scenario, REPLAY)
    with pytest.raises(ProfileError, match="no such file"):
        resolve_host_speed(str(tmp_path / "nothing.json"), scenario, recorded)
    partial = write_host_speed(_speed({"mlp-digits": 0.7}), tmp_path / "partial.json")
    with pytest.raises(ProfileError, match="measure again"):
        resolve_host_speed(str(partial), scenario, recorded)
    whole = write_host_speed(_speed({n: 0.7 for n in TRAININGS}), tmp_path / "whole.json")
    assert resolve_host_speed(str(whole), scenario, recorded) == read_host_speed(whole)
    with pytest.raises(BackendError, match="--probe-windows 8 applies to a probe measured now"):
        resolve_host_speed(str(whole), scenario, recorded, windows=8)
    # the probe after the host episodes runs as many sub-windows as the one before
    assert speed_windows(_speed({"mlp-digits": 0.7}, windows=((0.7,) * 6,))) == 6
    assert speed_windows(None) == 4


def test_validate_takes_a_saved_probe(tmp_path, capsys):
    speed = _speed({n: 0.6 for n in TRAININGS})
    slower = write_rescaled_set(speed, tmp_path / "slower")
    probe = write_host_speed(speed, tmp_path / "host-speed.json")
    arguments = ["validate", "--scenario", "docker-training-4", "--policy", "default"]
    options = ["--episodes", "1", "--against", f"replay:{slower}", "--no-tracking", "--json"]
    assert cli_main([*arguments, *options, "--host-speed", str(probe)]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["all_jobs"]["median"] == 0.0
    assert "mlp-digits x0.60" in captured.err and "dlsched calibrate" in captured.err


@pytest.mark.docker
def test_the_probe_measures_a_workload_on_the_engine(docker_engine, workload_image, tmp_path):
    scenario_file = tmp_path / "one.yaml"
    scenario_file.write_text(
        "name: one\nkind: training\ninterval_s: 2\nhorizon_s: 60\nslots_per_worker: 1\n"
        "profile_set: measured\nworkers: {count: 1, cores: 2}\n"
        "jobs:\n  - workload: mlp-digits\n    arrival: {kind: burst}\n    iterations: 100\n"
    )
    # Settling 1 s after the first iteration (3 s by default) is ample for a ratio only held
    # within a factor of 4.
    speed = measure_host_speed(
        load_scenario(str(scenario_file)), "tuned", window_s=4.0, settle_s=1.0
    )
    (mlp,) = speed.workloads
    assert mlp.workload == "mlp-digits" and 0.5 < mlp.cores <= 2.05
    # Any machine this runs on is within a factor of 4 of the profiles' host.
    assert 0.25 < mlp.ratio < 4.0, speed.describe()
    assert speed.profile_set == "measured"
    # Its four consecutive sub-windows of 1 s give the ratio an interval, saved with it.
    assert len(mlp.windows) == 1 and len(mlp.windows[0]) == 4 and mlp.window_s == 1.0
    assert mlp.ratio == pytest.approx(sum(mlp.windows[0]) / 4)
    interval = mlp.interval()
    assert interval is not None and interval.windows == 4
    assert interval.low <= mlp.ratio <= interval.high, interval
    saved = read_host_speed(write_host_speed(speed, tmp_path / "host-speed.json"))
    assert saved.workloads[0].interval() == interval


def test_a_tracked_bracket_saves_the_speed_and_both_probes(tmp_path, monkeypatch, mlflow_store):
    """Beside the report: the speed replay was rescaled to, and each probe alone, so that the
    recorded host episodes can be held against either later; in MLflow, the unscaled error and
    the probe's interval beside the rescaled one."""
    from dlsched.runs.fidelity.validation_run import ValidationRequest, validate_tracked
    from dlsched.runs.tracking.store import connect
    from dlsched.runs.tracking.target import resolve_tracking_uri

    folder, uri = mlflow_store
    monkeypatch.chdir(folder)
    scenario = load_scenario("docker-training-4")
    slower = write_rescaled_set(_speed({n: 0.6 for n in TRAININGS}), tmp_path / "slower")
    bracket = SpeedBracket(
        _speed({n: 0.3 for n in TRAININGS}, windows=((0.29, 0.31),)),
        tmp_path / "model",
        lambda: _speed({n: 1.2 for n in TRAININGS}, windows=((1.19, 1.21),)),
    )
    request = ValidationRequest(
        scenario=scenario,
        policies=(make("equal"),),
        seeds=(0,),
        reference=Side("replay", profile_set=str(slower)),
        model=bracket,
    )
    target = resolve_tracking_uri(uri)
    outcome = validate_tracked(
        request,
        connect(target),
        target,
        tmp_path / "records",
        experiment=f"bracket-{tmp_path.name}",
        plots=False,
        progress=False,
    )
    assert outcome.report.all_jobs.median == 0.0
    assert outcome.host_speed == bracket.speed
    assert outcome.run_id is not None
    metrics = connect(target).get_run(outcome.run_id).data.metrics
    assert metrics["validate/median_abs_error"] == 0.0
    assert metrics["validate/unscaled_median_abs_error"] > 0.2  # the profiles' host is faster
    assert metrics["validate/speed_noise/min_median_abs_error"] == 0.0
    assert metrics["validate/speed_noise/max_median_abs_error"] > 0.3
    assert metrics["validate/speed_noise/within"] == 1.0
    assert metrics["validate/cnn-digits/speed_ratio"] == pytest.approx(0.6)
    assert metrics["validate/cnn-digits/speed_ratio_low"] < 0.3
    assert metrics["validate/cnn-digits/speed_ratio_high"] > 1.2
    assert "validate/cnn-digits/probe_s_needed" not in metrics  # no length outruns the drift
    saved = {path.name: read_host_speed(path) for path in outcome.folder.glob("host-speed*.json")}
    assert saved["host-speed.json"].ratios() == pytest.approx({n: 0.6 for n in TRAININGS})
    assert saved["host-speed-before.json"] == bracket.before
    assert saved["host-speed-after.json"].ratios() == pytest.approx({n: 1.2 for n in TRAININGS})


# ------------------------------------------------------------------- the probe's interval


def _slower_host(tmp_path, ratio: float) -> str:
    """A profile set every training runs ``ratio`` times as fast on: replay on it stands in
    for a host of that speed."""
    return str(write_rescaled_set(_speed({n: ratio for n in TRAININGS}), tmp_path / "host"))


def test_a_probe_gives_each_workload_an_interval_around_its_ratio(tmp_path):
    """Replay on a set at 0.6x stands in for the host: each workload's four sub-windows give
    an interval that holds 0.6, saved in the probe's file."""
    host = ProbedHost("replay at 0.6x", 2, ReplayBackend, profile_set=_slower_host(tmp_path, 0.6))
    scenario = load_scenario("docker-training-4")
    speed = probe_host(scenario, "tuned", host, ProbeWindows(8.0, 3.0, 4), say=print)
    assert sorted(speed.ratios()) == sorted(TRAININGS)
    for workload in speed.workloads:
        interval = workload.interval()
        assert interval is not None and interval.windows == 4 and interval.window_s == 2.0
        assert interval.low <= 0.6 <= interval.high, (workload.workload, interval)
        assert interval.low <= workload.ratio <= interval.high
        assert interval.drift == 0.0
        assert interval.needed_s(workload.ratio) is not None
    saved = read_host_speed(write_host_speed(speed, tmp_path / "host-speed.json"))
    assert saved == speed
    assert json.loads((tmp_path / "host-speed.json").read_text())["format"] == 2
    with pytest.raises(BackendError, match="at least 2 sub-windows"):
        probe_host(scenario, "tuned", host, ProbeWindows(8.0, 3.0, 1))


def test_a_probe_of_format_1_is_read_without_an_interval(tmp_path):
    path = tmp_path / "host-speed.json"
    mlp = {"workload": "mlp-digits", "unit": "iteration", "cores": 1.5, "rate": 6.0}
    data = {
        "format": 1,
        "host": "test-host",
        "date": "2026-11-26",
        "profile_set": "measured",
        "threading": "tuned",
        "workloads": [mlp | {"profile_rate": 10.0}],
    }
    path.write_text(json.dumps(data))
    (speed,) = read_host_speed(path).workloads
    assert speed.ratio == pytest.approx(0.6)
    assert speed.windows == () and speed.interval() is None
    assert read_host_speed(path).at_end("low") is None


def test_the_interval_spans_both_probes_and_no_length_outruns_their_drift():
    """The issue's probes: cnn-digits x0.82 before, x1.05 after; replay is rescaled between
    them, the host ran anywhere between them, and longer probes cannot narrow that."""
    before = _speed({"cnn-digits": 0.82}, windows=((0.81, 0.83, 0.82, 0.82),))
    after = _speed({"cnn-digits": 1.05}, windows=((1.04, 1.06, 1.05, 1.05),))
    (cnn,) = between(before, after).workloads
    interval = cnn.interval()
    assert interval is not None
    assert interval.low < 0.82 and interval.high > 1.05
    assert interval.drift == pytest.approx(0.23)
    assert interval.needed_s(cnn.ratio) is None  # a rescale of 0.07 within a drift of 0.23


def test_the_probe_length_needed_grows_as_the_square_of_the_spread():
    """A sub-window's spread s gives a half-interval t * s / sqrt(n): half the spread needs a
    quarter of the windows for the same width."""
    assert speed_interval(((0.8, 0.8),), 0.8, 2.0) == SpeedInterval(0.8, 0.8, 0.0, 0.0, 2, 2.0)
    # a rate counted in whole units is known to a unit over the windows (here 0.02 per window)
    counted = speed_interval(((0.8, 0.8),), 0.8, 2.0, unit=0.02)
    assert counted is not None and (counted.low, counted.high) == pytest.approx((0.79, 0.81))
    noisy = SpeedInterval(0.85, 1.05, spread=0.1, drift=0.0, windows=4, window_s=2.0)
    steady = SpeedInterval(0.9, 1.0, spread=0.05, drift=0.0, windows=4, window_s=2.0)
    noisy_s, steady_s = noisy.needed_s(0.95), steady.needed_s(0.95)
    assert noisy_s is not None and steady_s is not None

    def width(n: int, spread: float) -> float:
        return 2 * stats.t.ppf(0.975, n - 1) * spread / math.sqrt(n)

    # each the fewest windows whose interval is narrower than the rescale (0.05)
    for needed_s, spread in ((noisy_s, 0.1), (steady_s, 0.05)):
        windows = round(needed_s / 2.0)
        assert width(windows, spread) < 0.05 <= width(windows - 1, spread)
    # four times as many but for Student's t, which asks the fewer windows for more
    assert 3.0 < noisy_s / steady_s <= 4.0
    assert noisy.needed_s(1.0) is None  # a ratio of 1 corrects nothing


def _validate_json(arguments: list[str], capsys) -> dict:
    assert cli_main([*arguments, "--no-tracking", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_validate_says_when_the_verdict_is_within_the_probe_noise(tmp_path, capsys):
    """The issue's case with replay at 0.93x standing in for the host: probes of x0.82 before
    and x1.05 after rescale replay to their mean, which matches the host; but the ends of
    their interval are far off, so the verdict is within the probe's noise."""
    drifted = between(
        _speed({n: 0.82 for n in TRAININGS}, windows=((0.81, 0.83, 0.82, 0.82),)),
        _speed({n: 1.05 for n in TRAININGS}, windows=((1.04, 1.06, 1.05, 1.05),)),
    )
    probe = write_host_speed(drifted, tmp_path / "drifted.json")
    arguments = ["validate", "--scenario", "docker-training-4", "--policy", "default"]
    arguments += ["--episodes", "1", "--against", f"replay:{_slower_host(tmp_path, 0.93)}"]
    noise = _validate_json([*arguments, "--host-speed", str(probe)], capsys)["speed_noise"]
    assert noise["rescaled"] < 0.02
    assert noise["unscaled"] > 0.04
    low, high = noise["error_range"]
    assert low == noise["rescaled"] and high > 0.1
    assert noise["within_noise"] is True
    assert all(w["interval"]["probe_s_needed"] is None for w in noise["workloads"])
    assert cli_main([*arguments, "--host-speed", str(probe), "--no-tracking"]) == 0
    text = capsys.readouterr().out
    assert "the verdict is within the probe's noise" in text
    assert "cnn-digits x0.93 (0.80-1.07)" in text and "unscaled" in text
    assert "cnn-digits: no probe length (the probes differ by 0.23" in text

    # A steady probe of 0.6 against the same host: the error (0.6 against 0.93) stands out
    # of the probe's noise, and a probe of some seconds makes the interval narrower still.
    steady = _speed({n: 0.6 for n in TRAININGS}, windows=((0.59, 0.6, 0.61, 0.6),))
    probe = write_host_speed(steady, tmp_path / "steady.json")
    noise = _validate_json([*arguments, "--host-speed", str(probe)], capsys)["speed_noise"]
    assert noise["rescaled"] > 0.3 and noise["within_noise"] is False
    low, high = noise["error_range"]
    assert high - low < noise["rescaled"]
    assert all(w["interval"]["probe_s_needed"] > 0 for w in noise["workloads"])


def test_a_validation_prints_the_unscaled_error_and_the_interval(tmp_path, capsys):
    """A validation of one episode per policy, replay standing in for the host, a saved probe."""
    command = [
        *("validate", "--scenario", "docker-training-4", "--policy", "default,flowcon"),
        *("--held-out", "flowcon", "--episodes", "1", "--no-tracking", "--no-progress"),
    ]
    speed = _speed({n: 0.7 for n in TRAININGS}, windows=((0.66, 0.7, 0.74, 0.7),))
    probe = write_host_speed(speed, tmp_path / "host-speed.json")
    host = _slower_host(tmp_path, 0.7)
    assert cli_main([*command, "--against", f"replay:{host}", "--host-speed", str(probe)]) == 0
    text = capsys.readouterr().out
    assert "median |error| 0.0% rescaled" in text
    assert "unscaled (the profiles as they are)" in text
    assert "cnn-digits x0.70 (0.64-0.76)" in text
    assert "over the probe's interval" in text and "probe length" in text
