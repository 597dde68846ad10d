"""``dlsched bench contention`` measures real jobs under the allocations it names."""

from __future__ import annotations

import pytest

from dlsched.envs.errors import BackendError
from dlsched.runs.bench.colocated_progress import ALLOCATIONS, measure_contention
from dlsched.runs.cli import main as cli_main
from dlsched.runs.fidelity.contention_grid import allocation_limits

requires_docker = pytest.mark.docker


@pytest.mark.parametrize(
    ("allocation", "limits"),
    [
        ("free", (1.0, 1.0, 1.0, 1.0)),
        ("equal", (0.25, 0.25, 0.25, 0.25)),
        ("favoured", (1.0, 0.125, 0.125, 0.125)),
    ],
)
def test_allocations_give_each_job_its_limit(allocation, limits):
    assert allocation_limits(allocation, 4) == limits


def test_an_unknown_allocation_is_refused_with_the_known_ones():
    with pytest.raises(BackendError, match=r"'fair'.*\['free', 'equal', 'favoured', 'halves'\]"):
        allocation_limits("fair", 3)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"workload": "resnet-svc"}, r"'resnet-svc' is not a training workload.*mlp-digits"),
        ({"jobs": 1}, r"jobs=1: contention needs at least 2"),
        ({"window_s": 0.0}, r"window_s=0.0"),
        ({"threadings": ("stock", "eager")}, r"\['stock', 'eager'\].*\['tuned', 'stock'\]"),
    ],
)
def test_bad_arguments_are_refused_before_any_container(arguments, message):
    with pytest.raises(BackendError, match=message):
        measure_contention(**arguments)


@requires_docker
def test_stock_jobs_are_measured_under_every_allocation(
    workload_image, containers_left_behind, capsys
):
    # Windows of 2 s hold dozens of iterations even at a quarter of the host: enough for the
    # rates' order, which is all that is asserted.
    result = measure_contention(jobs=2, window_s=2.0, settle_s=1.0, threadings=("stock",))
    (stock,) = result.threadings
    assert stock.threading == "stock" and stock.alone_rate > 0
    assert [rates.allocation for rates in stock.allocations] == list(ALLOCATIONS)
    for rates in stock.allocations:
        assert rates.limits == allocation_limits(rates.allocation, 2)
        assert len(rates.rates) == 2 and all(rate > 0 for rate in rates.rates)
        assert rates.alone_jobs == pytest.approx(sum(rates.rates) / stock.alone_rate)
    # The uncapped job against one held to a quarter of the host.
    favoured = stock.of("favoured").rates
    assert favoured[0] > 1.5 * favoured[1]
    assert "favoured" in result.report()
    assert not containers_left_behind()


def test_the_command_refuses_an_unknown_workload(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["bench", "contention", "--workload", "resnet50"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'resnet50'" in capsys.readouterr().err
