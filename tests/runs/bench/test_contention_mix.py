"""``dlsched bench mix``: one job of each of several training workloads, host and replay model."""

from __future__ import annotations

import pytest

from dlsched.envs.errors import BackendError, UnknownNameError
from dlsched.envs.replay.backend import ReplayBackend
from dlsched.runs.bench.contention_mix import (
    MIX_ALLOCATIONS,
    PARKED_LIMIT,
    measure_mix,
    measure_side,
    mix_scenario,
)
from dlsched.runs.cli import main as cli_main


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"workloads": ["cnn-digits", "gru-digit"]},
            UnknownNameError,
            r"Did you mean 'gru-digits'",
        ),
        ({"workloads": ["cnn-digits", "resnet-svc"]}, UnknownNameError, r"training workload"),
        ({"workloads": ["cnn-digits"]}, BackendError, r"a mix needs at least 2"),
        ({"threading": "eager"}, BackendError, r"'eager': expected one of \['tuned', 'stock'\]"),
        ({"window_s": 0.0}, BackendError, r"window_s=0.0"),
    ],
)
def test_bad_arguments_are_refused_before_any_container(arguments, error, message):
    with pytest.raises(error, match=message):
        measure_mix(**{"workloads": ["cnn-digits", "gru-digits"], **arguments})


def test_the_command_suggests_a_misspelt_workload_and_exits_2(capsys):
    code = cli_main(["bench", "mix", "--workloads", "cnn-digits,gru-digit"])
    assert code == 2
    err = capsys.readouterr().err
    assert "dlsched bench: error:" in err and "Did you mean 'gru-digits'" in err


def test_tuned_jobs_whose_threads_fit_the_cores_keep_their_solo_pace_on_replay():
    # Two tuned jobs at half the worker each keep one thread per core: no contention in the
    # model, so each makes its solo progress at the cores it gets (noise aside).
    scenario = mix_scenario(["mlp-digits", "cnn-digits"], 2.0, "tuned", None)
    side = measure_side(ReplayBackend(), scenario, window_s=60.0, settle_s=2.0)
    assert len(side.solo) == 2 and all(alone.rate > 0 for alone in side.solo)
    # alone, the other parked at the smallest limit: nearly the whole worker's demand
    assert all(alone.cores > 1.4 for alone in side.solo)
    equal = side.efficiencies[MIX_ALLOCATIONS.index("equal")]
    assert equal == pytest.approx((1.0, 1.0), rel=0.06)
    assert all(sample.cores == pytest.approx(1.0, rel=0.01) for sample in side.cells[1])


def test_stock_jobs_lose_progress_in_free_competition_on_replay():
    scenario = mix_scenario(["cnn-digits", "gru-digits", "vae-digits"], 2.0, "stock", None)
    side = measure_side(ReplayBackend(), scenario, window_s=60.0, settle_s=2.0)
    free = side.efficiencies[MIX_ALLOCATIONS.index("free")]
    assert all(0.05 < efficiency < 0.7 for efficiency in free), free
    assert PARKED_LIMIT < 0.05


@pytest.mark.docker
def test_a_mix_is_measured_on_the_engine_and_the_model(
    workload_image, containers_left_behind, capsys
):
    # Windows of 2 s hold dozens of iterations of each job in every cell (the parked jobs are
    # not measured): enough for efficiencies held only within (0, 2).
    result = measure_mix(["mlp-digits", "cnn-digits"], "stock", window_s=2.0, settle_s=1.0)
    assert result.workloads == ("mlp-digits", "cnn-digits") and result.cores > 0
    assert all(alone.rate > 0 for alone in result.host_solo)
    assert [cell.allocation for cell in result.cells] == list(MIX_ALLOCATIONS)
    for cell in result.cells:
        assert len(cell.host) == len(cell.replay) == 2
        assert all(sample.rate > 0 for sample in cell.host)
        assert all(0 < efficiency < 2 for efficiency in cell.host_efficiency)
        assert all(0 < efficiency < 2 for efficiency in cell.replay_efficiency)
    assert "mlp-digits" in result.report() and "equal" in result.report()
    assert not containers_left_behind()
