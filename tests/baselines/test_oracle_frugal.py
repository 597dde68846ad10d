"""The frugal oracle (``oracle`` with ``frugal=True``): the teacher of schedulers that save CPU.

It admits the services the default oracle admits and holds back what no admitted service needs,
so on a saturated worker it allocates fewer cores without satisfying fewer services.
"""

from __future__ import annotations

import statistics

import pytest

from dlsched.baselines import make
from dlsched.baselines.oracle import ServiceNeed, satisfy_most
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.runs.evaluation.runners import run_episodes

NEEDS = [ServiceNeed("cheap", 0.5), ServiceNeed("dear", 1.2), ServiceNeed("never", None)]


def test_the_services_left_out_share_what_is_left_unless_frugal() -> None:
    shared = satisfy_most(NEEDS, capacity=1.0)
    frugal = satisfy_most(NEEDS, capacity=1.0, share_the_rest=False)
    assert shared == {"cheap": 0.5, "dear": 0.25, "never": 0.25}
    assert frugal == {"cheap": 0.5, "dear": 0.0, "never": 0.0}


@pytest.mark.parametrize("scenario_name", ["docker-inference-6", "dqoes-varied-burst"])
def test_the_frugal_oracle_satisfies_as_many_with_fewer_cores(scenario_name: str) -> None:
    scenario = load_scenario(scenario_name)
    seeds = [0, 1, 2]

    def means(**params: object) -> tuple[float, float]:
        results = run_episodes(scenario, make("oracle", **params), seeds)
        satisfied = [result.metrics.satisfied_fraction_mean or 0.0 for result in results]
        cores = [result.metrics.cores_allocated_mean for result in results]
        assert all(value is not None and value > 0 for value in cores), cores
        return statistics.fmean(satisfied), statistics.fmean(value or 0.0 for value in cores)

    shared_satisfied, shared_cores = means()
    frugal_satisfied, frugal_cores = means(frugal=True)
    assert frugal_satisfied >= shared_satisfied - 0.01, (frugal_satisfied, shared_satisfied)
    assert frugal_cores < 0.95 * shared_cores, (frugal_cores, shared_cores)


def test_a_worker_is_shared_equally_when_frugal_only_where_the_needs_do_not_fit() -> None:
    """Three services an equal share of 2 cores keeps within their bands (tolerance 0.1): where
    their needs fit, the frugal oracle gives each its need; where they do not, the equal share,
    which satisfies one service more than the needs that fit."""
    tolerances = [0.1, 0.1, 0.1]
    fitting = [ServiceNeed("a", 0.62), ServiceNeed("b", 0.64), ServiceNeed("c", 0.66)]
    crowded = [ServiceNeed("a", 0.65), ServiceNeed("b", 0.68), ServiceNeed("c", 0.70)]
    shared, frugal = make("oracle"), make("oracle", frugal=True)
    equal = pytest.approx({"a": 2 / 3, "b": 2 / 3, "c": 2 / 3})
    assert shared.services_cores(fitting, tolerances, 2.0) == equal
    assert frugal.services_cores(fitting, tolerances, 2.0) == {"a": 0.62, "b": 0.64, "c": 0.66}
    assert shared.services_cores(crowded, tolerances, 2.0) == equal
    assert frugal.services_cores(crowded, tolerances, 2.0) == equal
    assert make("oracle", frugal=True, equal_when_all_fit=False).services_cores(
        crowded, tolerances, 2.0
    ) == {"a": 0.65, "b": 0.68, "c": 0.0}


def test_the_frugal_oracle_satisfies_as_many_where_only_an_equal_share_satisfies_all() -> None:
    """On docker-inference-3-stock the three needs at aim 1 add up to more than the worker and
    an equal share satisfies all three: the frugal oracle shares the worker as the default one."""
    scenario = load_scenario("docker-inference-3-stock")
    shared = run_episodes(scenario, make("oracle"), [0])[0].metrics
    frugal = run_episodes(scenario, make("oracle", frugal=True), [0])[0].metrics
    assert frugal.satisfied_fraction_mean == shared.satisfied_fraction_mean
    assert frugal.cores_allocated_mean == pytest.approx(2.0, abs=0.01)
