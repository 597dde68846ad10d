"""``dlsched bench replay`` counts the steps and the simulated time of the episodes it runs."""

from __future__ import annotations

import json
import tempfile

import pytest

from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.runs import cli
from dlsched.runs.bench.replay import time_batched, time_single


def test_replay_bench_reports_whole_episodes(capsys):
    assert (
        cli.main(
            [
                "bench",
                "replay",
                "--scenario",
                "dqoes-varied-burst",
                "--episodes",
                "2",
                "--num-envs",
                "1,4",
                "--containers",
                "10,40",
                "--seconds",
                "0.05",
                "--json",
            ]
        )
        == 0
    )
    figures = json.loads(capsys.readouterr().out)
    # dqoes-varied-burst: 600 s horizon at 10 s a step, so two episodes are 120 steps, 1200 s.
    assert figures["steps"] == 120
    assert figures["simulated_s"] == 1200.0
    assert figures["real_time_ratio"] == figures["simulated_s"] / figures["wall_s"]
    # CartPole-v1, the single env, the batched one at N = 1 and 4, then single and batched at
    # 10 and 40 containers, each as a ratio to CartPole-v1's steps per second in the same run.
    throughput = figures["throughput"]
    assert [(f["label"], f["num_envs"], f["containers"]) for f in throughput] == [
        ("CartPole-v1", 1, 1),
        ("single", 1, 10),
        ("batched", 1, 10),
        ("batched", 4, 10),
        ("single", 1, 10),
        ("batched", 16, 10),
        ("single", 1, 40),
        ("batched", 16, 40),
    ]
    assert throughput[0]["cartpole_ratio"] == 1.0
    for figure in throughput:
        assert figure["env_steps"] >= figure["num_envs"]
        ratio = figure["env_steps_per_s"] / throughput[0]["env_steps_per_s"]
        assert figure["cartpole_ratio"] == ratio


def test_timed_runs_end_with_an_episode():
    """An episode's start (arrivals, start-ups) costs more than its rest: the timed runs go on
    to the end of an episode, so that a figure does not move with the environment's speed."""
    scenario = load_scenario("dqoes-varied-burst")  # 600 s in steps of 10 s
    assert time_single(scenario, 0.0).env_steps == 60
    # the batch's first episodes take 60 calls; each later one a call more, which resets them
    assert time_batched(scenario, 3, 0.0).env_steps == 3 * 60
    training = load_scenario("flowcon-poc-3")  # episodes end with their jobs: any step ends
    assert time_single(training, 0.0).env_steps == 1


def test_replay_bench_refuses_a_bad_batch_size(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["bench", "replay", "--num-envs", "1,0"])
    assert stop.value.code == 2
    assert "expected one or more whole numbers of at least 1" in capsys.readouterr().err


def test_training_bench_times_ppo_on_cartpole_and_both_replay_paths(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where SB3's logger makes folders
    arguments = ["--timesteps", "256", "--n-envs", "2", "--n-steps", "64", "--json"]
    assert cli.main(["bench", "train", *arguments]) == 0
    assert not list(tmp_path.glob("SB3-*"))  # no logger folder left behind
    figures = json.loads(capsys.readouterr().out)
    for name in ("cartpole", "batched", "dummy"):
        assert figures[name]["timesteps"] == 256
        assert figures[f"{name}_steps_per_s"] == 256 / figures[name]["wall_s"]
