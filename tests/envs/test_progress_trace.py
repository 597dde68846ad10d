"""Fine progress traces: a job's iterations or batches with their times."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlsched.baselines import make
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.file_format import load_scenario, scenario_text
from dlsched.runs.evaluation.runners import run_episodes
from dlsched.runs.tracking.trajectory import PROGRESS_FILE, EvaluationFolder, read_episode


def _trace(job_id: str, times: list[float], counts: list[int], truncated: bool = False):
    return ProgressTrace(
        job_id, "iteration", np.asarray(times), np.asarray(counts, dtype=np.int64), truncated
    )


def test_per_second_counts_the_units_done_in_each_second_up_to_the_horizon() -> None:
    trace = _trace("j00", [0.2, 0.9, 1.5, 3.0, 9.5], [1, 2, 3, 4, 5])
    assert trace.per_second(4.0).tolist() == [2.0, 1.0, 0.0, 1.0]
    # a job resumed at iteration 40 after a migration: its first event is one unit, not 41
    resumed = _trace("j01", [5.5, 6.5], [41, 42])
    assert resumed.per_second(7.0).tolist() == [0, 0, 0, 0, 0, 1.0, 1.0]
    assert _trace("j02", [], []).per_second(2.0).tolist() == [0.0, 0.0]


def test_times_and_counts_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match=r"do not match: \(2,\) != \(1,\)"):
        _trace("j00", [0.1, 0.2], [1])


def test_traces_are_written_with_the_episode_and_read_back(tmp_path) -> None:
    scenario = load_scenario("docker-smoke-training")
    (result,) = run_episodes(scenario, make("default"), [0])
    assert result.progress_traces == ()  # replay has no time finer than its step
    traces = (
        _trace("j00", [0.25, 1.0000000001, 2.5], [1, 2, 3]),
        _trace("j01", [3.0], [7], truncated=True),
    )
    folder = EvaluationFolder.of(tmp_path, "e")
    folder.create()
    written = folder.write_episode(
        dataclasses.replace(result, progress_traces=traces), scenario_text(scenario.name)
    )
    back = read_episode(written, containers=True).progress_traces
    assert [(t.job_id, t.unit, t.truncated) for t in back] == [
        ("j00", "iteration", False),
        ("j01", "iteration", True),
    ]
    for before, after in zip(traces, back, strict=True):
        assert after.times_s.tolist() == before.times_s.tolist()  # exact, through repr
        assert after.counts.tolist() == before.counts.tolist()
    assert read_episode(written).progress_traces == ()  # aggregates only
    (written / PROGRESS_FILE).unlink()
    assert read_episode(written, containers=True).progress_traces == ()
