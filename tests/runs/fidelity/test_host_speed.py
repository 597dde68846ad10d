"""The host speed probe and replay rescaled to it (``dlsched validate --host-speed``)."""

from __future__ import annotations

import json

import pytest

from dlsched.baselines import make
from dlsched.envs.errors import BackendError, ProfileError
from dlsched.envs.replay.profile import load_profile_set, load_set_contention
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.runs.cli import main as cli_main
from dlsched.runs.fidelity.host_speed import (
    HostSpeed,
    SpeedBracket,
    WorkloadSpeed,
    between,
    drift_warning,
    measure_host_speed,
    read_host_speed,
    rescaled_model,
    resolve_host_speed,
    speed_bracket,
    write_host_speed,
    write_rescaled_set,
)
from dlsched.runs.fidelity.validation_sides import REPLAY, Side, run_validation

TRAININGS = ("cnn-digits", "gru-digits", "mlp-digits", "vae-digits")


def _speed(ratios: dict[str, float], profile_set: str = "measured") -> HostSpeed:
    """A probe whose workloads ran ``ratio`` times as fast as their profiles (at 1.5 cores)."""
    profiles = load_profile_set(profile_set)
    speeds = []
    for name, ratio in ratios.items():
        rate = float(profiles[name].units_per_s(1.5))
        speeds.append(WorkloadSpeed(name, "iteration", 1.5, rate * ratio, rate))
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
    speed = measure_host_speed(load_scenario(str(scenario_file)), "tuned", window_s=4.0)
    (mlp,) = speed.workloads
    assert mlp.workload == "mlp-digits" and 0.5 < mlp.cores <= 2.05
    # Any machine this runs on is within a factor of 4 of the profiles' host.
    assert 0.25 < mlp.ratio < 4.0, speed.describe()
    assert speed.profile_set == "measured"


def test_a_tracked_bracket_saves_the_speed_and_both_probes(tmp_path, monkeypatch, mlflow_store):
    """Beside the report: the speed replay was rescaled to, and each probe alone, so that the
    recorded host episodes can be held against either later."""
    from dlsched.runs.fidelity.validation_run import ValidationRequest, validate_tracked
    from dlsched.runs.tracking.store import connect
    from dlsched.runs.tracking.target import resolve_tracking_uri

    folder, uri = mlflow_store
    monkeypatch.chdir(folder)
    scenario = load_scenario("docker-training-4")
    slower = write_rescaled_set(_speed({n: 0.6 for n in TRAININGS}), tmp_path / "slower")
    bracket = SpeedBracket(
        _speed({n: 0.3 for n in TRAININGS}),
        tmp_path / "model",
        lambda: _speed({n: 1.2 for n in TRAININGS}),
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
    saved = {path.name: read_host_speed(path) for path in outcome.folder.glob("host-speed*.json")}
    assert saved["host-speed.json"].ratios() == pytest.approx({n: 0.6 for n in TRAININGS})
    assert saved["host-speed-before.json"] == bracket.before
    assert saved["host-speed-after.json"].ratios() == pytest.approx({n: 1.2 for n in TRAININGS})
