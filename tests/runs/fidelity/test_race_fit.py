"""Fitting the race: from paces it recovers the chain that made them, and from recorded
episodes, measured against the replay model, the race that model drew."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlp_crowds import mlp_crowd
from stock_profile_sets import measured_stock_copy

from dlsched.baselines import make
from dlsched.envs.errors import ArgumentError, ProfileError
from dlsched.envs.replay.profile import PROFILES_DIR, load_profile_set, load_set_contention
from dlsched.envs.replay.race import RaceModel
from dlsched.envs.scenarios.file_format import dump_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.runs.cli import main
from dlsched.runs.evaluation.runners import run_episode
from dlsched.runs.fidelity.contention_fit import write_contention
from dlsched.runs.fidelity.contention_grid import recorded_measurement
from dlsched.runs.fidelity.host_speed import HostSpeed, WorkloadSpeed, write_host_speed
from dlsched.runs.fidelity.race_fit import (
    CrowdedSpell,
    crowded_efficiencies,
    fit_crowding_and_race,
    fit_fade,
    fit_race,
    level_multipliers,
    race_spread,
    recorded_episodes,
    write_race,
)
from dlsched.runs.tracking.trajectory import EvaluationFolder

TRUE = RaceModel(
    levels=(0.4, 1.0, 1.8),
    holding_s=(30.0, 20.0, 40.0),
    jumps=((0.0, 0.7, 0.3), (0.5, 0.0, 0.5), (0.2, 0.8, 0.0)),
)


def _paces(model: RaceModel, rng: np.random.Generator, seconds: int, rate: float) -> np.ndarray:
    """A job's iterations per second at ``rate`` times its level, counted as whole iterations
    (the level within a second is its time-weighted mean)."""
    starts, levels = model.sample_path(rng, seconds)
    edges = np.append(starts, seconds)
    level_at = np.zeros(seconds)
    for begin, end, level in zip(edges[:-1], edges[1:], levels, strict=True):
        for second in range(int(begin), int(min(np.ceil(end), seconds))):
            overlap = min(end, second + 1) - max(begin, second)
            level_at[second] += overlap * model.levels[level]
    counts = rng.poisson(rate * level_at)
    return counts / counts.mean()


def test_the_fit_recovers_the_levels_holding_times_and_jumps_of_its_own_model() -> None:
    rng = np.random.default_rng(7)
    series = [_paces(TRUE, rng, 600, rate=60.0) for _ in range(20)]
    fit = fit_race(series, levels=3)
    # the series are normalised to their means, so levels come out relative to the mean level
    scale = np.mean([s.mean() for s in series]) / np.dot(TRUE.stationary(), TRUE.levels)
    assert np.asarray(fit.model.levels) == pytest.approx(np.asarray(TRUE.levels) * scale, rel=0.1)
    assert fit.model.holding_s == pytest.approx(TRUE.holding_s, rel=0.2)
    assert np.asarray(fit.model.jumps) == pytest.approx(np.asarray(TRUE.jumps), abs=0.12)
    assert (fit.seconds, fit.series, len(fit.residuals)) == (12_000, 20, 3)


def test_too_little_crowding_is_refused_with_what_it_needs() -> None:
    with pytest.raises(ArgumentError, match=r"0 bins of 1 s of crowded pace: expected at least 30"):
        fit_race([np.ones(5)], levels=3)
    with pytest.raises(ArgumentError, match=r"levels=1: expected at least 2"):
        fit_race([np.ones(50)], levels=1)


def test_holding_times_are_in_seconds_whatever_the_bins() -> None:
    rng = np.random.default_rng(3)
    series = [_paces(TRUE, rng, 600, rate=60.0) for _ in range(20)]
    # the same paces summed over 2-s bins: the holding times come out in seconds still
    binned = [s[: len(s) // 2 * 2].reshape(-1, 2).mean(axis=1) for s in series]
    fine, coarse = fit_race(series), fit_race(binned, bin_s=2.0)
    assert coarse.model.holding_s == pytest.approx(fine.model.holding_s, rel=0.25)
    assert coarse.seconds == fine.seconds


#: A race slow enough to be seen in 5-s steps, applying whole from twice the cores' threads.
SLOW = RaceModel(
    levels=(0.4, 1.0, 1.6),
    holding_s=(60.0, 45.0, 60.0),
    jumps=((0.0, 0.6, 0.4), (0.5, 0.0, 0.5), (0.4, 0.6, 0.0)),
    full_at=2.0,
)


def test_the_model_held_against_its_own_episode_keeps_a_level_of_one(tmp_path) -> None:
    plain = measured_stock_copy(tmp_path / "plain")
    result = run_episode(mlp_crowd(plain, 4, 300, horizon_s=7200.0), make("default"), seed=0)
    spells = crowded_efficiencies(result, plain)
    assert len(spells) == 4  # one crowded spell per job
    steps = np.concatenate([spell.ratios for spell in spells])
    assert (np.concatenate([spell.oversubscription for spell in spells]) >= 2.0).all()
    # what a step's ratio misses of 1 is counting whole iterations (13 or 14 of 13.5 modelled)
    # and the units' noise, which the mean over the steps evens out
    assert np.mean(steps) == pytest.approx(1.0, abs=0.02)
    assert np.abs(steps - 1.0).max() < 0.15
    assert crowded_efficiencies(result, plain, full_at=8.0) == []  # never 8x crowded


def test_the_command_recovers_the_race_replay_drew_and_writes_it_with_its_provenance(
    tmp_path, capsys
) -> None:
    racing = measured_stock_copy(tmp_path / "racing", SLOW)
    scenario_file = tmp_path / "crowd.yaml"
    scenario_file.write_text(dump_scenario(mlp_crowd(racing, 4, 1500, horizon_s=7200.0)))
    records = tmp_path / "records"
    assert (
        main(
            [
                "evaluate",
                "--scenario",
                str(scenario_file),
                "--policy",
                "default",
                "--episodes",
                "8",
                "--tracking-uri",
                f"sqlite:///{tmp_path / 'mlflow.db'}",
                "--no-plots",
                "--out",
                str(records),
            ]
        )
        == 0
    )
    fitted_set = tmp_path / "fitted"
    measured_stock_copy(fitted_set)
    (folder,) = records.iterdir()
    capsys.readouterr()
    assert main(["calibrate", "--race-from", str(folder), "--output-dir", str(fitted_set)]) == 0
    out = capsys.readouterr().out
    assert "mlp-digits: crowded in a mix, keeps " in out
    assert f"wrote the crowding curves to {fitted_set / 'mlp-digits.json'}" in out
    assert f"wrote the stock race to {fitted_set / 'contention.json'}" in out
    profile = load_profile_set(str(fitted_set))["mlp-digits"]
    assert profile.provenance is not None
    assert "steps of this workload crowded in a mix" in profile.provenance.derivation
    race = load_set_contention(str(fitted_set)).races["stock"]
    assert race.levels == pytest.approx(SLOW.levels, rel=0.12)
    assert race.holding_s == pytest.approx(SLOW.holding_s, rel=0.5)
    assert race.fade < 0.3  # the race drawn did not fade
    assert race.fit is not None and race.fit.objective.startswith("per job and step")
    assert "8 episodes of mlp-crowd-4 (policies default)" in race.fit.source
    # the rest of the file is kept
    before = json.loads((PROFILES_DIR / "measured-stock" / "contention.json").read_text())
    after = json.loads((fitted_set / "contention.json").read_text())
    assert {k: v for k, v in after.items() if k != "races"} == {
        k: v for k, v in before.items() if k != "races"
    }


def _recorded(folder: Path, scenario: Scenario, seeds: range, backend: str = "replay") -> Path:
    """An evaluation folder of ``default``'s replay episodes of ``scenario`` on ``seeds``,
    recorded as run on ``backend`` (a validation's host side is the same episodes as ``docker``
    ones)."""
    evaluation = EvaluationFolder(folder)
    evaluation.create()
    for seed in seeds:
        result = run_episode(scenario, make("default"), seed)
        evaluation.write_episode(
            dataclasses.replace(result, backend=backend), dump_scenario(scenario)
        )
    return evaluation.path


def _slower_host(profile_set: str) -> HostSpeed:
    """A probe of a host on which mlp-digits ran at 0.8 times its pace in ``profile_set``."""
    return HostSpeed(
        "a slower host",
        "2026-12-06",
        profile_set,
        "stock",
        (WorkloadSpeed("mlp-digits", "iteration", 1.9, 40.0, 50.0),),
    )


def test_a_new_set_starts_as_the_episodes_set_rescaled_to_the_hosts_speed(tmp_path) -> None:
    racing = measured_stock_copy(tmp_path / "racing", SLOW)
    episodes = _recorded(
        tmp_path / "records" / "crowd", mlp_crowd(racing, 4, 600, horizon_s=7200.0), range(3)
    )
    plain = fit_crowding_and_race([episodes], tmp_path / "plain")
    rate = load_profile_set(racing)["mlp-digits"].units_per_s(1.0)
    assert load_profile_set(str(tmp_path / "plain"))["mlp-digits"].units_per_s(1.0) == rate
    assert plain.profiles == (tmp_path / "plain" / "mlp-digits.json",)
    speed = _slower_host(racing)
    fit_crowding_and_race([episodes], tmp_path / "slower", speed=speed)
    slower = load_profile_set(str(tmp_path / "slower"))["mlp-digits"]
    assert slower.units_per_s(1.0) == pytest.approx(0.8 * rate, rel=1e-3)
    assert (
        slower.provenance is not None
        and "rescaled to a slower host" in slower.provenance.derivation
    )
    mismatched = dataclasses.replace(speed, profile_set="measured")
    with pytest.raises(ArgumentError, match=r"probed against profile set 'measured', the episodes"):
        fit_crowding_and_race([episodes], tmp_path / "other", speed=mismatched)


def test_a_validations_out_folder_gives_its_host_episodes_and_speed(tmp_path, capsys) -> None:
    racing = measured_stock_copy(tmp_path / "racing", SLOW)
    scenario = mlp_crowd(racing, 4, 600, horizon_s=7200.0)
    out = tmp_path / "out"
    _recorded(out / "host", scenario, range(3), backend="docker")
    _recorded(out / "model", scenario, range(5))
    write_host_speed(_slower_host(racing), out / "validation" / "host-speed.json")
    assert [e.backend for e in recorded_episodes([out])] == ["docker"] * 3
    fitted = tmp_path / "fitted"
    assert main(["calibrate", "--race-from", str(out), "--output-dir", str(fitted)]) == 0
    assert f"started {fitted} as profile set {racing!r} rescaled to mlp-digits x0.80" in (
        capsys.readouterr().out
    )
    race = load_set_contention(str(fitted)).races["stock"]
    assert race.fit is not None and race.fit.source.startswith("3 episodes of mlp-crowd-4")
    with pytest.raises(ArgumentError, match=r"--race-from .*nowhere: no such folder"):
        recorded_episodes([tmp_path / "nowhere"])


def test_the_host_speed_goes_with_race_from(tmp_path, capsys) -> None:
    assert main(["calibrate", "--host-speed", "x.json", "--output-dir", str(tmp_path)]) == 2
    assert "--host-speed x.json is for --race-from" in capsys.readouterr().err


def test_a_race_needs_a_contention_term_and_episodes(tmp_path) -> None:
    with pytest.raises(ProfileError, match=r"contention.json does not exist: a race multiplies"):
        write_race(tmp_path, "stock", SLOW)
    assert main(["calibrate", "--race-from", str(tmp_path), "--output-dir", str(tmp_path)]) == 2


def test_measuring_the_contention_term_again_keeps_the_race(tmp_path) -> None:
    directory = Path(measured_stock_copy(tmp_path / "set", SLOW))
    measurement = recorded_measurement(directory)
    write_contention(directory, measurement)
    assert load_set_contention(str(directory)).races == {"stock": SLOW}


#: Host reruns recorded on a quiet 2-core host (stock threading, no limits): what the shipped
#: race of measured-stock was fitted from.
RERUNS = Path(__file__).parents[2] / "data" / "stock-reruns"


def test_the_shipped_crowding_and_race_are_what_their_recorded_reruns_fit(tmp_path) -> None:
    folders = [RERUNS / "docker-training-4-stock", RERUNS / "docker-training-6-stock"]
    refitted = tmp_path / "measured-stock"
    shutil.copytree(PROFILES_DIR / "measured-stock", refitted)
    fitted = fit_crowding_and_race(folders, refitted)
    assert set(fitted.crowding) == {"mlp-digits", "cnn-digits", "gru-digits", "vae-digits"}
    shipped = load_profile_set("measured-stock")
    for workload, curve in fitted.crowding.items():
        profile = shipped[workload]
        assert (profile.contention_exponent, profile.contention_floor) == (
            round(curve.exponent, 4),
            round(curve.floor, 4),
        )
    shipped_race = load_set_contention("measured-stock").races["stock"]
    assert fitted.race.model == shipped_race  # levels, holding times, jumps, full_at, fade
    assert fitted.race.model.fit is not None and shipped_race.fit is not None
    assert shipped_race.fit.residuals == fitted.race.model.fit.residuals
    # the curves carry the mean, the race the spread around it, less the more jobs crowd
    assert float(np.dot(shipped_race.stationary(), shipped_race.levels)) == pytest.approx(1.0)
    assert shipped_race.fade > 0.3


def test_the_paper_set_carries_the_shipped_races_spread_with_its_own_mean(tmp_path) -> None:
    measured = load_set_contention("measured-stock").races["stock"]
    paper = load_set_contention("paper").races["stock"]
    assert paper == race_spread("measured-stock")  # what --race-like writes, exactly
    assert float(np.dot(paper.stationary(), paper.levels)) == pytest.approx(1.0)
    mean = float(np.dot(measured.stationary(), measured.levels))
    assert paper.levels == pytest.approx(tuple(level / mean for level in measured.levels))
    assert (paper.holding_s, paper.jumps, paper.fade) == (
        measured.holding_s,
        measured.jumps,
        measured.fade,
    )
    with pytest.raises(ProfileError, match=r"profile set 'measured' has no tuned race"):
        race_spread("measured", "tuned")


def test_fitting_and_copying_a_race_at_once_is_refused(tmp_path, capsys) -> None:
    assert main(["calibrate", "--race-from", str(tmp_path), "--race-like", "measured-stock"]) == 2
    assert "--race-from and --race-like both given" in capsys.readouterr().err


def test_the_fade_is_the_slope_of_the_spread_against_the_crowd() -> None:
    rng = np.random.default_rng(5)
    spells = []
    for crowd in (2.0, 4.0, 8.0):
        # log spread 0.8 at full_at, halved each time the crowd doubles: a fade of 1
        logs = rng.normal(0.0, 0.8 * 2.0 / crowd, 400)
        spells.append(CrowdedSpell(np.exp(logs), np.full(400, crowd)))
    fade, lines = fit_fade(spells, full_at=2.0)
    assert fade == pytest.approx(1.0, abs=0.1)
    assert [line.split(":")[0] for line in lines] == ["R 2.0", "R 4.0", "R 8.0"]
    assert fit_fade(spells[:1], full_at=2.0)[0] == 0.0  # one crowd: no slope
    assert fit_fade([], full_at=2.0) == (0.0, ())
    # the multipliers behind a ratio: its distance from 1 over the race's reach at R
    multipliers = level_multipliers(
        CrowdedSpell(np.array([0.5, 0.5]), np.array([2.0, 4.0])), 2.0, 1.0
    )
    assert multipliers.tolist() == pytest.approx([0.5, 0.0])
