"""How precisely a calibration run knows its rate, measuring longer where it does not, and two
profile sets held against each other (``dlsched calibrate --compare``; issue #36 item 2).

Tests marked ``docker`` run a calibration container on the local engine: skipped without an
engine, failed with DLSCHED_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import json
import shutil

import pytest

from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.profile import profile_set_directory
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.runs import cli
from dlsched.runs.fidelity.calibration import CalibrationSettings, _measure_precisely
from dlsched.runs.fidelity.calibration_measurement import LimitRun
from dlsched.runs.fidelity.rate_precision import (
    LONGEST_FACTOR,
    compare_sets,
    longer_duration,
    rate_interval,
)


def run_of(completions: list[float]) -> LimitRun:
    return LimitRun(
        limit=0.5,
        quota_cores=1.0,
        cpu_cores=1.0,
        window_s=completions[-1] - completions[0],
        completions=tuple(completions),
        unit_durations_s=(1.0,),
        startup_s=1.0,
        losses=(),
        threads=1,
        other_containers=0,
        other_cores=0.0,
    )


def test_an_even_run_is_known_to_one_unit_per_window():
    run = run_of([0.1 * index for index in range(241)])  # 10 units/s for 24 s
    interval = rate_interval(run)
    assert interval is not None
    assert interval.windows == 12 and interval.window_s == pytest.approx(2.0)
    assert interval.spread == pytest.approx(0.0, abs=1e-9)
    # one unit in a window of 20 is 5%, over 12 windows 0.42% at each end
    assert interval.low == pytest.approx(1 - 0.05 / 12)
    assert interval.high == pytest.approx(1 + 0.05 / 12)
    assert longer_duration(interval, 0.05, 24.0) is None


def test_a_run_that_slows_halfway_is_measured_again_longer_but_not_without_end():
    fast = [0.05 * index for index in range(241)]  # 20 units/s for 12 s
    slow = [fast[-1] + 0.1 * index for index in range(1, 121)]  # then 10 units/s for 12 s
    interval = rate_interval(run_of(fast + slow))
    assert interval is not None
    # six windows at 4/3 of the mean rate and six at 2/3: +-33% spread
    assert interval.spread == pytest.approx(1 / 3 * (12 / 11) ** 0.5, rel=1e-6)
    longer = longer_duration(interval, 0.05, 24.0)
    assert longer == LONGEST_FACTOR * 24.0
    assert longer_duration(interval, 0.9, 24.0) is None


def test_a_run_of_few_units_has_no_interval():
    assert rate_interval(run_of([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])) is None


def test_a_moderately_noisy_run_asks_for_more_than_it_ran_and_less_than_the_cap():
    # alternate windows of 21 and 19 units per 1 s: a 5% spread, known to +-3.6% in 12 windows
    completions = [0.0]
    for window in range(12):
        units = 21 if window % 2 else 19
        completions += [window + (index + 1) / units for index in range(units)]
    interval = rate_interval(run_of(completions))
    assert interval is not None
    longer = longer_duration(interval, 0.05, 12.0)
    assert longer is not None and 12.0 * 1.5 <= longer < LONGEST_FACTOR * 12.0
    assert interval.needed_for(0.025) == pytest.approx(longer)


def test_a_set_agrees_with_itself_and_not_with_a_copy_ten_percent_faster(tmp_path, capsys):
    measured = profile_set_directory("measured")
    faster = tmp_path / "faster"
    shutil.copytree(measured, faster)
    profile = json.loads((faster / "cnn-digits.json").read_text())
    rates = profile["throughput"]["units_per_s"]
    profile["throughput"]["units_per_s"] = [rate * 1.1 for rate in rates]
    (faster / "cnn-digits.json").write_text(json.dumps(profile))

    (same,) = compare_sets("measured", "measured", ["cnn-digits"])
    assert same.ratios == pytest.approx([1.0] * len(rates)) and same.agrees(0.001)
    agreements = {
        agreement.workload: agreement for agreement in compare_sets("measured", str(faster))
    }
    assert set(agreements) == set(json_names(measured))
    assert agreements["cnn-digits"].worst == pytest.approx(0.1)
    assert not agreements["cnn-digits"].agrees(0.05) and agreements["cnn-digits"].agrees(0.11)
    assert all(agreements[name].agrees(1e-9) for name in agreements if name != "cnn-digits")

    assert cli.main(["calibrate", "--compare", f"measured,{faster}"]) == 1
    out = capsys.readouterr().out
    assert "cnn-digits: x1.100" in out and "OFF by 10.0%, beyond 5%" in out
    assert "1 of 7 workload(s) differ by more than 5%" in out
    argv = ["calibrate", "--compare", f"measured,{faster}", "--tolerance", "0.15"]
    assert cli.main(argv) == 0
    assert "all 7 workload(s) agree within 15%" in capsys.readouterr().out


def json_names(folder) -> list[str]:
    return [
        path.stem for path in folder.glob("*.json") if path.stem not in ("contention", "throttling")
    ]


def test_comparing_sets_without_a_shared_workload_is_refused_naming_both():
    with pytest.raises(ProfileError, match=r"'measured' \(cnn-digits.*'paper' \(birnn"):
        compare_sets("measured", "paper")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare", "measured"], "names 1 profile set"),
        (["--compare", "measured,paper", "--tolerance", "2"], "outside (0, 1)"),
        (["--compare", "measured,paper", "--tolerance", "x"], "'x' is not a number"),
    ],
)
def test_bad_compare_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        cli.main(["calibrate", *argv])
    assert message in capsys.readouterr().err


@pytest.mark.docker
def test_a_run_not_known_to_the_tolerance_is_measured_again_longer(
    docker_engine, workload_image, capsys
):
    settings = CalibrationSettings(
        duration_s=2.0, wait_quiet_s=0.0, retries=0, force=True, tolerance=0.0001
    )
    cores = docker_engine.info()["NCPU"]
    run = _measure_precisely(docker_engine, WORKLOADS["mlp-digits"], 0.5, cores, settings)
    err = capsys.readouterr().err
    assert "mlp-digits at limit 0.5: rate known to +-" in err
    assert f"measuring it again for {LONGEST_FACTOR * 2:.0f} s" in err
    assert "still +-" in err  # no run on a shared host pins a rate to 0.01%
    assert run.window_s >= LONGEST_FACTOR * 2.0 * 0.9
