"""``dlsched bench docker`` times real steps of the Docker backend and leaves no container."""

from __future__ import annotations

import pytest

from dlsched.envs.errors import DlschedError
from dlsched.runs.bench.docker_steps import DOCKER_STEP_TARGET_S, bench_docker


def test_a_benchmark_of_no_steps_is_refused():
    with pytest.raises(DlschedError, match="containers=2, steps=0"):
        bench_docker(containers=2, steps=0)


@pytest.mark.docker
def test_steps_are_timed_for_every_kind_and_the_containers_removed(
    workload_image, containers_left_behind
):
    result = bench_docker(containers=2, steps=3)
    assert (result.containers, result.steps, result.target_s) == (2, 3, DOCKER_STEP_TARGET_S)
    for times in (result.changed, result.unchanged):
        assert times.actuation_s > 0 and times.telemetry_s > 0
        assert times.step_s == pytest.approx(times.actuation_s + times.telemetry_s)
        assert times.step_max_s >= times.step_s
    assert result.stats_per_container_s == pytest.approx(result.stats_s / 2)
    assert "every limit changes" in result.report()
    assert not containers_left_behind()
