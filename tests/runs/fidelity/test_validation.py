"""``dlsched validate``: replay held against a reference, job by job."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from repo_paths import LIMITS_DOC, MODEL_V0_1_0_CONVERTED

from dlsched.baselines import make
from dlsched.envs.errors import BackendError
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.replay.profile import PROFILES_DIR
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.cli import main as cli_main
from dlsched.runs.fidelity import validation_run
from dlsched.runs.fidelity.calibration_measurement import HostDescription
from dlsched.runs.fidelity.quiet_host import HostLoad
from dlsched.runs.fidelity.validation_plots import plot_distributions, plot_paces
from dlsched.runs.fidelity.validation_report import render_report
from dlsched.runs.fidelity.validation_sides import HOST, REPLAY, Side, run_validation
from dlsched.runs.fidelity.validation_statistics import (
    ErrorSummary,
    JobComparison,
    ranking_agreement,
    seed_agreement,
)
from dlsched.runs.tracking.trajectory import MAX_RECORD_BYTES, MAX_TRAJECTORY_BYTES


def _scaled_set(tmp_path: Path, source: str, factor: float) -> str:
    """A copy of a profile set whose workloads all run ``factor`` times faster."""
    directory = tmp_path / f"{source}-x{factor:g}"
    shutil.copytree(PROFILES_DIR / source, directory)
    for path in directory.glob("*.json"):
        if path.name in ("contention.json", "throttling.json"):
            continue
        profile = json.loads(path.read_text())
        profile["throughput"]["units_per_s"] = [
            rate * factor for rate in profile["throughput"]["units_per_s"]
        ]
        path.write_text(json.dumps(profile))
    return str(directory)


def test_replay_against_its_seeded_twin_reports_no_error():
    scenario = load_scenario("docker-training-4")
    policies = [make("default"), make("equal")]
    report, _, _ = run_validation(
        scenario, policies, seeds=(0, 1), reference=REPLAY, progress=False
    )
    assert report.all_jobs.jobs == 16 and report.all_jobs.missing == 0
    assert report.all_jobs.median == 0.0 and report.all_jobs.max == 0.0
    assert report.same_ranking is True
    assert all(timeline.mean_gap == 0.0 for timeline in report.timelines)
    assert "median |error| 0.0%" in render_report(report)
    assert [item.workload for item in report.attribution] == [
        "mlp-digits",
        "cnn-digits",
        "gru-digits",
        "vae-digits",
    ]
    assert all(item.jobs == 4 for item in report.attribution)
    assert all(item.cores_ratio == item.progress_ratio == 1.0 for item in report.attribution)
    # docker-training-4 draws nothing: every seed runs the same four jobs.
    agreement = report.seed_agreement
    assert agreement is not None and agreement.seeds == 2
    assert agreement.host_spread == agreement.replay_spread
    assert agreement.mean_jobs.jobs == 8 and agreement.mean_jobs.median == 0.0
    # Against itself, replay's distributions are the host's: no distance, full coverage.
    summary = report.distributions
    assert summary is not None and len(summary.jobs) == 8
    assert summary.median_w1 == 0.0 and summary.coverage == 1.0
    assert "as distributions over the reruns" in render_report(report)


def test_a_scenario_that_draws_its_jobs_has_no_seed_agreement():
    report, _, _ = run_validation(
        load_scenario("flowcon-10-random"), [make("default")], (0, 1), REPLAY, progress=False
    )
    assert report.seed_agreement is None and report.distributions is None
    assert "the same jobs on every seed" not in render_report(report)


def test_seed_agreement_is_each_jobs_spread_around_its_mean_and_the_error_of_the_means():
    def rerun(seed, replay, host):
        return JobComparison("p", seed, "j", "w", "completion_s", replay, host, None, 1, 1, False)

    agreement = seed_agreement([rerun(0, 100.0, 80.0), rerun(1, 100.0, 120.0)])
    assert agreement is not None
    # The host's reruns are 20% from their mean of 100; replay's means agree with it exactly.
    assert agreement.host_spread == pytest.approx(0.2) and agreement.replay_spread == 0.0
    assert agreement.mean_jobs.median == 0.0
    # Yet replay at the host's mean is 25% from one rerun: the reruns are 33% (80 against 120)
    # and 50% (120 against 80) from each other, and no one value is within 20% of both (96 is
    # 20% from each): the floor under replay's per-job error.
    pairs = agreement.host_against_host
    assert (pairs.jobs, pairs.median, pairs.max) == (2, pytest.approx(5 / 12), pytest.approx(0.5))
    floor = agreement.best_prediction
    assert (floor.jobs, floor.median, floor.max) == (1, pytest.approx(0.2), pytest.approx(0.2))
    assert seed_agreement([rerun(0, 100.0, 80.0)]) is None


def test_replay_against_a_mis_scaled_set_reports_the_scale(tmp_path):
    scenario = load_scenario("docker-inference-3")
    reference = Side("replay", profile_set=_scaled_set(tmp_path, "measured", 1.25))
    report, _, _ = run_validation(
        scenario,
        [make("default"), make("equal")],
        seeds=(0,),
        reference=reference,
        progress=False,
    )
    # The reference answers every batch 1.25 times faster: replay's latencies are 25% larger.
    assert report.all_jobs.median_ratio == pytest.approx(1.25, rel=0.03)
    assert report.all_jobs.median == pytest.approx(0.25, rel=0.12)
    assert report.sides == ("replay", f"replay[profile_set={reference.profile_set}]")
    # The CPU is shared alike; each core-second buys replay 1/1.25 of the reference's batches.
    assert {item.workload for item in report.attribution} == {job.workload for job in report.jobs}
    for item in report.attribution:
        assert item.cores_ratio == pytest.approx(1.0, abs=0.02)
        assert item.progress_ratio == pytest.approx(1 / 1.25, rel=0.03)
    assert "progress per core-second x0.8" in render_report(report)


def test_a_training_set_that_is_off_in_speed_is_found_in_progress_per_core_second(tmp_path):
    reference = Side("replay", profile_set=_scaled_set(tmp_path, "measured", 0.8))
    report, _, _ = run_validation(
        load_scenario("docker-training-4"), [make("equal")], (0,), reference, progress=False
    )
    # Each iteration costs the reference 1.25 times the CPU: replay's jobs finish sooner, and
    # the report puts it on the progress a core-second buys. (Their mean cores differ where a
    # job's lifetime spans other company on the two sides: mlp-digits, first, ends alone.)
    assert report.all_jobs.median_ratio is not None and report.all_jobs.median_ratio < 0.9
    assert len(report.attribution) == 4
    for item in report.attribution:
        assert item.progress_ratio == pytest.approx(1.25, rel=0.05)


def test_held_out_policies_are_summarised_apart():
    scenario = load_scenario("docker-training-4")
    report, _, _ = run_validation(
        scenario,
        [make("default"), make("flowcon")],
        seeds=(0,),
        reference=REPLAY,
        held_out=("flowcon",),
        progress=False,
    )
    assert report.held_out_jobs is not None and report.held_out_jobs.jobs == 4
    assert "held-out policies' jobs" in render_report(report)


def _job(replay, host):
    return JobComparison("p", 0, "j", "w", "completion_s", replay, host, None, 1.0, 1.0, False)


def test_error_summary_counts_jobs_finished_on_one_backend_apart():
    summary = ErrorSummary.of([_job(12.0, 10.0), _job(9.0, 10.0), _job(None, 10.0)])
    assert summary.jobs == 2 and summary.missing == 1
    assert summary.median == pytest.approx(0.15) and summary.max == pytest.approx(0.2)


def test_ranking_agreement_says_when_the_order_is_reversed():
    from dlsched.runs.fidelity.validation_statistics import PolicyComparison

    def policies(pairs):
        return [PolicyComparison(f"p{i}", "m", r, h, False) for i, (r, h) in enumerate(pairs)]

    tau, same = ranking_agreement(policies([(1, 1), (2, 2), (3, 3)]), higher_is_better=False)
    assert tau == pytest.approx(1.0) and same is True
    tau, same = ranking_agreement(policies([(1, 3), (2, 2), (3, 1)]), higher_is_better=False)
    assert tau == pytest.approx(-1.0) and same is False


def test_the_report_says_when_a_backend_ties_every_policy():
    from dlsched.runs.fidelity.validation_report import ValidationReport
    from dlsched.runs.fidelity.validation_statistics import PolicyComparison

    values = [("default", 0.889, 0.833), ("equal", 0.889, 0.819), ("dqoes", 0.889, 0.903)]
    policies = tuple(PolicyComparison(name, "m", r, h, False) for name, r, h in values)
    tau, same = ranking_agreement(policies, higher_is_better=True)
    assert tau is None and same is not None  # Kendall's tau is undefined on a tie
    summary = ErrorSummary.of([_job(1.0, 1.0)])
    report = ValidationReport("s", JobKind.INFERENCE, (0,), (), policies, summary, None, tau, same)
    assert (
        "ranking: undefined: replay ties every policy at 0.889; host dqoes > default > equal"
        in render_report(report)
    )


def test_a_side_refuses_a_profile_set_for_docker():
    with pytest.raises(BackendError, match="only replay runs on profiles"):
        Side("docker", profile_set="measured")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--held-out", "dqoes"], "--held-out dqoes is not among the policies validated"),
        (["--against", "kubernetes"], "--against 'kubernetes': expected docker, replay:SET"),
        (
            ["--against", "replay:measured", "--probe-windows", "8"],
            "--probe-windows 8 applies to a probe measured now",
        ),
        (
            ["--against", "replay:measured", "--workload-threading", "stock"],
            "--workload-threading stock applies to a docker reference",
        ),
    ],
)
def test_the_command_refuses_bad_options_with_exit_2(capsys, arguments, message):
    code = cli_main(
        ["validate", "--scenario", "docker-training-4", "--policy", "default", *arguments]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_a_probe_of_fewer_than_two_sub_windows_is_refused(capsys):
    arguments = ["validate", "--scenario", "docker-training-4", "--policy", "default"]
    with pytest.raises(SystemExit) as exited:
        cli_main([*arguments, "--probe-windows", "1"])
    assert exited.value.code == 2
    assert "1 sub-windows have no spread; expected 2 or more" in capsys.readouterr().err


def test_the_command_tracks_both_sides_under_one_validation_run(
    tmp_path, monkeypatch, capsys, mlflow_store
):
    folder, uri = mlflow_store
    monkeypatch.chdir(folder)
    experiment = f"validate-{tmp_path.name}"
    code = cli_main(
        [
            "validate",
            "--scenario",
            "docker-inference-3",
            "--policy",
            "default,equal",
            "--held-out",
            "equal",
            "--episodes",
            "1",
            "--against",
            f"replay:{_scaled_set(tmp_path, 'measured', 0.8)}",
            "--tracking-uri",
            uri,
            "--experiment",
            experiment,
            "--out",
            str(tmp_path / "records"),
            "--no-progress",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    assert data["all_jobs"]["median_ratio"] == pytest.approx(0.8, rel=0.03)
    client = MlflowClient(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name(experiment).experiment_id], max_results=50
    )
    (validation,) = [run for run in runs if run.data.tags.get("dlsched.kind") == "validation"]
    evaluations = [run for run in runs if run.data.tags.get("dlsched.kind") == "evaluation"]
    assert len(evaluations) == 2
    assert {run.data.tags[MLFLOW_PARENT_RUN_ID] for run in evaluations} == {validation.info.run_id}
    assert validation.info.status == "FINISHED"
    assert validation.data.metrics["validate/median_ratio"] == pytest.approx(0.8, rel=0.03)
    # the reference's batches cost 1.25x the CPU: a core-second buys replay 1.25x the batches
    for item in data["attribution"]:
        key = f"validate/{item['workload']}/progress_per_core_s_ratio"
        assert validation.data.metrics[key] == pytest.approx(1.25, rel=0.03)
    assert data["attribution"]
    assert validation.data.params["held_out"] == "equal"
    artifacts = {item.path for item in client.list_artifacts(validation.info.run_id)}
    assert {"validation.json", "validation.txt", "over-time.png"} <= artifacts
    assert {"twins-default-seed0.png", "twins-equal-seed0.png"} <= artifacts


def test_replay_against_its_own_recording_reports_no_error_and_refuses_what_it_lacks(
    tmp_path, monkeypatch, capsys, mlflow_store
):
    folder, uri = mlflow_store
    monkeypatch.chdir(folder)
    evaluate = ["evaluate", "--scenario", "docker-inference-3", "--policy", "default,equal"]
    options = ["--episodes", "1", "--tracking-uri", uri, "--out", str(tmp_path), "--no-progress"]
    assert cli_main([*evaluate, *options, "--experiment", f"recorded-{tmp_path.name}"]) == 0
    (recording,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    capsys.readouterr()

    def validate(*arguments: str) -> int:
        against = ["--against", f"recorded:{recording}", "--no-tracking", "--no-progress"]
        return cli_main(["validate", "--policy", "default,equal", *against, *arguments])

    assert validate("--scenario", "docker-inference-3", "--episodes", "1", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    # Every latency sample read back from the trajectory table as it was written.
    assert data["all_jobs"]["jobs"] == 6
    assert data["all_jobs"]["median"] == 0.0 and data["all_jobs"]["max"] == 0.0
    assert data["sides"] == ["replay", "replay, recorded"]
    assert validate("--scenario", "docker-inference-3", "--episodes", "1", "--seed", "3") == 2
    assert "no episode default-seed3 there (it holds default-seed0, equal-seed0)" in (
        capsys.readouterr().err
    )
    assert validate("--scenario", "docker-inference-6", "--episodes", "1") == 2
    assert "not 'docker-inference-6' as it is now" in capsys.readouterr().err
    assert validate("--scenario", "docker-inference-3", "--against", f"recorded:{tmp_path}") == 2
    assert "no recorded episode there" in capsys.readouterr().err


def test_a_recording_too_large_or_not_dlsched_s_is_refused_before_anything_runs(
    tmp_path, monkeypatch, capsys, mlflow_store
):
    folder, uri = mlflow_store
    monkeypatch.chdir(folder)
    monkeypatch.delenv(MAX_TRAJECTORY_BYTES.variable, raising=False)
    evaluate = ["evaluate", "--scenario", "docker-inference-3", "--policy", "default,equal"]
    options = ["--episodes", "1", "--tracking-uri", uri, "--out", str(tmp_path), "--no-progress"]
    assert cli_main([*evaluate, *options, "--experiment", f"too-large-{tmp_path.name}"]) == 0
    (recording,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    capsys.readouterr()

    def validate() -> tuple[int, str]:
        code = cli_main([
            "validate", "--scenario", "docker-inference-3", "--policy", "default,equal",
            "--episodes", "1", "--against", f"recorded:{recording}", "--no-tracking",
        ])  # fmt: skip
        return code, capsys.readouterr().err

    table = recording / "equal-seed0" / "trajectory.csv"
    with table.open("r+b") as stream:
        stream.truncate(MAX_TRAJECTORY_BYTES.default + 1)  # sparse: no disk taken
    code, err = validate()
    assert code == 2 and "Traceback" not in err
    first = err.splitlines()[0]
    assert f"{table} has {MAX_TRAJECTORY_BYTES.default + 1:,} bytes" in first
    assert f"expected at most {MAX_TRAJECTORY_BYTES.default:,} bytes" in first
    assert f"{MAX_TRAJECTORY_BYTES.variable}=N" in first
    readme = LIMITS_DOC.read_text()
    assert all(
        f"`{limit.variable}`" in readme for limit in (MAX_RECORD_BYTES, MAX_TRAJECTORY_BYTES)
    )
    assert "replay" not in err  # refused before the model's episodes ran

    shutil.rmtree(recording / "equal-seed0")
    episode = recording / "default-seed0" / "episode.json"
    episode.write_text(episode.read_text()[:100])
    code, err = validate()
    assert code == 2 and "Traceback" not in err
    assert f"episode folder {recording / 'default-seed0'} holds no dlsched episode" in err


def test_a_model_is_held_out_by_the_path_that_names_it(capsys):
    model = MODEL_V0_1_0_CONVERTED
    arguments = ["--scenario", "dqoes-varied-burst", "--policy", f"default,{model}"]
    options = ["--held-out", str(model), "--against", "replay:paper", "--episodes", "1"]
    code = cli_main(["validate", *arguments, *options, "--no-tracking", "--no-progress", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    assert data["held_out_jobs"]["jobs"] == 10 and data["all_jobs"]["jobs"] == 20


_TWO_MLPS = """\
name: validate-probe
description: two MLP trainings of about 10 s each at one core, together on one 2-core worker
kind: training
interval_s: 2
horizon_s: 120
slots_per_worker: 2
profile_set: measured
workers: {count: 1, cores: 2}
jobs:
  - workload: mlp-digits
    count: 2
    arrival: {kind: burst}
    iterations: 400
"""


@pytest.mark.docker
def test_replay_is_within_a_loose_bound_of_the_host(
    docker_engine, workload_image, tmp_path, capsys
):
    """Gross breakage only: the real figures go to benchmarks and notes, not timed tests.

    Jobs long enough (about 10 s) that start-up, which the replay model keeps short, does not
    dominate their completion times. The host's speed is probed over the fewest sub-windows a
    probe takes (2 of about 2 s, where a validation takes 4): the bound is loose.
    """
    scenario = tmp_path / "validate-probe.yaml"
    scenario.write_text(_TWO_MLPS)
    code = cli_main(
        [
            "validate",
            "--scenario",
            str(scenario),
            "--policy",
            "equal",
            "--episodes",
            "1",
            "--probe-windows",
            "2",
            "--no-tracking",
            "--no-progress",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    assert data["all_jobs"]["jobs"] == 2
    assert data["all_jobs"]["median"] < 0.4, captured.out
    # Both jobs used CPU on the host and made progress: a progress per core-second on each side.
    (mlp,) = data["attribution"]
    assert mlp["workload"] == "mlp-digits" and mlp["jobs"] == 2
    assert 0.5 < mlp["progress_ratio"] < 2.0, captured.out
    # The host's speed was probed before and again after its episode, and replay rescaled to
    # the mean of the two.
    assert captured.err.count("[host speed] mlp-digits alone") == 2
    assert any("geometric mean of the probes" in w for w in data["warnings"]), data["warnings"]
    assert any(
        "the host's speed after its episodes" in warning
        or "this host's speed changed while its episodes ran" in warning
        for warning in data["warnings"]
    ), data["warnings"]


def test_replay_runs_more_seeds_for_the_distributions_of_a_scenario_that_reruns_one_episode():
    scenario = load_scenario("docker-training-4-stock")
    report, model, reference = run_validation(
        scenario, [make("default")], (0, 1), reference=REPLAY, progress=False, replay_seeds=12
    )
    assert len(model) == len(reference) == 2  # the pairs are the shared seeds'
    summary = report.distributions
    assert summary is not None and len(summary.jobs) == 4
    assert all(
        (len(job.outcomes.replay), len(job.outcomes.host)) == (12, 2) for job in summary.jobs
    )
    drawn, _, _ = run_validation(
        load_scenario("flowcon-10-random"), [make("default")], (0, 1), REPLAY, progress=False,
        replay_seeds=12,
    )  # fmt: skip
    assert drawn.distributions is None  # its seeds draw other jobs: no reruns to compare


@pytest.mark.parametrize("count", ["-1", "10001"])
def test_a_replay_seed_count_out_of_range_is_refused(capsys, count):
    code = cli_main(
        ["validate", "--scenario", "docker-training-4", "--policy", "default", "--against",
         "replay:measured", "--replay-seeds", count, "--no-tracking"]
    )  # fmt: skip
    assert code == 2
    assert f"--replay-seeds {count}: expected 0 to 10000" in capsys.readouterr().err


def test_the_distributions_and_the_paces_are_drawn_where_there_is_something_to_draw(tmp_path):
    scenario = load_scenario("docker-training-4-stock")
    report, model, reference = run_validation(
        scenario, [make("default")], (0, 1), reference=REPLAY, progress=False, replay_seeds=8
    )
    drawn = plot_distributions(report, tmp_path / "distributions.png")
    assert drawn is not None and drawn.read_bytes().startswith(b"\x89PNG")
    single, _, _ = run_validation(scenario, [make("default")], (0,), REPLAY, progress=False)
    assert plot_distributions(single, tmp_path / "none.png") is None  # one host seed: no spread

    assert plot_paces(model[0], reference[0], tmp_path / "paces.png") is None  # no host events
    traces = tuple(
        ProgressTrace(job.job_id, "iteration", np.linspace(1.0, 20.0, 40), np.arange(1, 41))
        for job in reference[0].jobs
    )
    host = dataclasses.replace(reference[0], progress_traces=traces)
    paces = plot_paces(model[0], host, tmp_path / "paces.png")
    assert paces is not None and paces.read_bytes().startswith(b"\x89PNG")


def test_stock_trainings_on_another_host_are_warned_of_its_crowding(monkeypatch) -> None:
    class _Client:
        def close(self) -> None:
            pass

    monkeypatch.setattr(validation_run, "connect_engine", lambda endpoint: _Client())
    monkeypatch.setattr(validation_run, "sample_load", lambda client: HostLoad(0.0, 0))
    for model, crowding in [("Another CPU", True), ("AMD EPYC", False)]:
        host = HostDescription("h", model, 2, "20.10")
        monkeypatch.setattr(HostDescription, "of", classmethod(lambda cls, client, host=host: host))
        for name, stock in [("docker-training-4-stock", True), ("docker-training-4", False)]:
            warnings = validation_run.host_warnings(load_scenario(name), HOST)
            warned = [w for w in warnings if "calibrate this host's crowding" in w]
            assert len(warned) == (crowding and stock), (model, name, warnings)
