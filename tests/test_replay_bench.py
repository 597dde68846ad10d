"""``dlsched bench replay`` counts the steps and the simulated time of the episodes it runs."""

from __future__ import annotations

import json

from dlsched.runs import cli


def test_replay_bench_reports_whole_episodes(capsys):
    assert (
        cli.main(
            ["bench", "replay", "--scenario", "dqoes-varied-burst", "--episodes", "2", "--json"]
        )
        == 0
    )
    figures = json.loads(capsys.readouterr().out)
    # dqoes-varied-burst: 600 s horizon at 10 s a step, so two episodes are 120 steps, 1200 s.
    assert figures["steps"] == 120
    assert figures["simulated_s"] == 1200.0
    assert figures["real_time_ratio"] == figures["simulated_s"] / figures["wall_s"]
