"""Whole episodes: every shipped scenario runs to its end (a training one with every job done),
and evenly shared limits give the latency the DQoES paper reads."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from episode_runs import env_id_for, run_episode

import dlsched.envs  # noqa: F401  (registers the ids)
from dlsched.envs.scenarios.file_format import scenario_names
from dlsched.envs.telemetry import JobState, QoEClass


@pytest.mark.parametrize("scenario", scenario_names())
def test_every_shipped_scenario_runs_a_whole_episode(scenario):
    env = gym.make(env_id_for(scenario), scenario=scenario)
    trace = run_episode(env, seed=0)
    last_telemetry = trace[-1][2]["telemetry"]
    assert last_telemetry.time_s > 0
    if env_id_for(scenario) == "dlsched/Training-v0":
        states = {job.state for job in last_telemetry.jobs}
        assert states <= {JobState.DONE}, f"{scenario}: unfinished jobs at the end: {states}"


def test_equal_limits_on_resnet50_target20_leave_all_unsatisfied_near_31_6_s():
    """DQoES journal, Section V-B-1: evenly shared, ten ResNet-50 answer in 31.61 s (std 0.35)."""
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
    env.reset(seed=0)
    action = np.full(env.action_space.shape, 0.1, dtype=np.float32)
    for _ in range(35):  # t = 350 s, the paper's reading
        _, reward, _, _, info = env.step(action)
    telemetry = info["telemetry"]
    latencies = [job.latency_s for job in telemetry.active_jobs]
    assert len(latencies) == 10
    assert all(job.qoe_class is QoEClass.B for job in telemetry.active_jobs)
    assert reward == 0.0 and info["satisfied"] == 0
    assert np.mean(latencies) == pytest.approx(31.61, abs=1.0)
