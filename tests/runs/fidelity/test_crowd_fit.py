"""Fitting each stock training's crowding curve to the mixes of recorded episodes: from replay
episodes it recovers the curves that replay ran them by."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from stock_profile_sets import measured_stock_copy

from dlsched.baselines import make
from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    JobGroup,
    JobKind,
    Scenario,
    WorkerSpec,
)
from dlsched.runs.evaluation.runners import run_episodes
from dlsched.runs.fidelity.crowd_fit import (
    MIN_CROWDED_STEPS,
    CrowdedStep,
    crowded_steps,
    crowding_from_episodes,
    fit_crowding,
    write_crowding,
)

#: The curves replay runs the mix by: ``(exponent, floor)`` per workload, far from the shipped.
TRUE = {
    "mlp-digits": (3.0, 0.30),
    "cnn-digits": (0.8, 0.05),
    "gru-digits": (6.0, 0.12),
    "vae-digits": (2.0, 0.20),
}


def _mix(profile_set: str) -> Scenario:
    """Eight stock jobs of the four workloads arriving 10 s apart on one 2-core worker: crowds
    of two to eight jobs as they come and go."""
    jobs = [("mlp-digits", 1500), ("cnn-digits", 400), ("gru-digits", 800), ("vae-digits", 500)] * 2
    return Scenario(
        name="stock-mix-8",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(cores=2.0),),
        groups=tuple(
            JobGroup(
                workloads=(workload,),
                count=1,
                arrival=ArrivalPattern(ArrivalKind.EXPLICIT, times_s=(10.0 * index,)),
                iterations=iterations,
            )
            for index, (workload, iterations) in enumerate(jobs)
        ),
        slots_per_worker=8,
        interval_s=5.0,
        horizon_s=7200.0,
        profile_set=profile_set,
        workload_threading="stock",
    )


def test_the_fit_recovers_the_curves_replay_ran_a_mix_by(tmp_path) -> None:
    truth = measured_stock_copy(tmp_path / "truth", curves=TRUE)
    scenario = _mix(truth)
    episodes = run_episodes(scenario, make("default"), list(range(3)))
    # measured against the shipped curves' set: only the profiles' throughput is read
    fitted = crowding_from_episodes(episodes, "measured-stock")
    assert set(fitted) == set(TRUE)
    table = ProfileTable(scenario)
    seen = {
        (job.workload, job.oversubscription)
        for episode in episodes
        for step in crowded_steps(episode, table)
        for job in step
    }
    for workload, (exponent, floor) in TRUE.items():
        fit = fitted[workload]
        # the curve where the mix crowded the workload (each saw three crowds or more)
        ratios = np.array(sorted({ratio for name, ratio in seen if name == workload}))
        assert len(np.unique(np.round(ratios, 1))) >= 3
        modelled = fit.floor + (1 - fit.floor) * ratios**-fit.exponent
        true = floor + (1 - floor) * ratios**-exponent
        assert modelled == pytest.approx(true, abs=0.02), (workload, fit)
        assert fit.steps >= MIN_CROWDED_STEPS
        assert fit.residuals[0].startswith("R ")


def test_only_uncapped_steps_of_crowded_workers_count(tmp_path) -> None:
    truth = measured_stock_copy(tmp_path / "truth", curves=TRUE)
    scenario = _mix(truth)
    table = ProfileTable(scenario)
    (free,) = run_episodes(scenario, make("default"), [0])
    (capped,) = run_episodes(scenario, make("equal"), [0])
    counted = [step for step in crowded_steps(free, table) if step]
    assert counted and all(job.oversubscription > 1.0 for step in counted for job in step)
    assert len(list(crowded_steps(free, table))) == len(free.steps) - 1  # one list per step
    # under equal limits every job has a quota from its arrival's step on: no step counts
    assert not any(crowded_steps(capped, table))


def test_a_workload_seen_in_few_steps_keeps_its_curve() -> None:
    steps = [CrowdedStep("j0", "mlp-digits", 3.0, 5.0, 20.0)] * (MIN_CROWDED_STEPS - 1)
    assert fit_crowding(steps) == {}
    fits = fit_crowding([*steps, steps[0]])
    # every step at one crowd: any curve through its efficiency fits; this one does
    assert fits["mlp-digits"].floor + (1 - fits["mlp-digits"].floor) * 3.0 ** -fits[
        "mlp-digits"
    ].exponent == pytest.approx(0.25, abs=1e-3)


def test_the_curves_are_written_into_the_profiles_with_their_account(tmp_path) -> None:
    directory = Path(measured_stock_copy(tmp_path / "set"))
    steps = [
        CrowdedStep("j0", "vae-digits", ratio, 20.0 * (0.2 + 0.8 * ratio**-2.0), 20.0)
        for ratio in np.linspace(1.2, 5.0, 40)
    ]
    fits = fit_crowding(steps)
    (path,) = write_crowding(directory, fits, "40 steps made up for this test")
    profile = load_profile_set(str(directory))["vae-digits"]
    assert (profile.contention_exponent, profile.contention_floor) == (2.0, 0.2)
    assert profile.provenance is not None
    assert "fitted to 40 steps of this workload crowded in a mix" in profile.provenance.derivation
    assert "from 40 steps made up for this test" in profile.provenance.derivation
    # the copies' account it replaces is gone; the others are kept
    assert "copies under free, equal and favoured" not in profile.provenance.derivation
    assert "startup_s:" in profile.provenance.derivation
    (directory / "vae-digits.json").unlink()
    with pytest.raises(ProfileError, match=r"vae-digits.json does not exist: the crowding of"):
        write_crowding(directory, fits, "")
    assert path.name == "vae-digits.json"
