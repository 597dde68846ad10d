"""The one check of what a policy hands an environment (:mod:`dlsched.envs.decision_checks`),
called directly: action arrays and typed decisions become limits per slot in ``[floor, 1]``;
what is not finite, of another shape, not numbers, negative in a decision, or for a job that has
not arrived is refused, the message naming the value and what to give instead."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from telemetry_factories import inference_job

from dlsched.envs.decision import Decision, Migration
from dlsched.envs.decision_checks import (
    ClipNotice,
    action_limits,
    check_decision,
    decision_limits,
)
from dlsched.envs.errors import ActionClippedWarning, ActionError
from dlsched.envs.observation import ObservationLayout
from dlsched.envs.telemetry import JobState, Telemetry, WorkerTelemetry
from dlsched.envs.telemetry_columns import TelemetryColumns

#: Two workers of three slots: an action has six entries, worker 0's slots first.
LAYOUT = ObservationLayout(2, 3)
FLOOR = 0.05


def columns() -> TelemetryColumns:
    """j0 on worker 0 slot 0 at limit 0.3, j1 on worker 1 slot 2 at 0.6, j2 waiting."""
    jobs = (
        inference_job("j0", worker=0, slot=0, limit=0.3),
        inference_job("j1", worker=1, slot=2, limit=0.6),
        inference_job("j2", state=JobState.WAITING, worker=None, slot=None),
    )
    workers = (WorkerTelemetry(0, 4.0, 0.0), WorkerTelemetry(1, 4.0, 0.0))
    return TelemetryColumns.of(Telemetry(0.0, 10.0, workers, jobs))


# ------------------------------------------------------------------ action arrays


def test_an_action_becomes_one_row_of_limits_clamped_to_the_floor_and_one():
    action = np.array([-1.0, 0.0, 0.01, 0.06, 0.7, 3.0], dtype=np.float32)
    limits = action_limits(action, None, LAYOUT, FLOOR)
    assert limits.shape == (1, 6) and limits.dtype == np.float64
    # the float32 values within [floor, 1] are kept as they are
    np.testing.assert_array_equal(limits[0], [FLOOR, FLOOR, FLOOR, action[3], action[4], 1.0])


def test_a_batched_action_keeps_a_row_per_environment():
    actions = np.array([[0.2] * 6, [0.9] * 6])
    limits = action_limits(actions, 2, LAYOUT, FLOOR)
    np.testing.assert_array_equal(limits, actions)


@pytest.mark.parametrize(
    ("action", "episodes", "refusal"),
    [
        (
            np.zeros(5),
            None,
            r"action shape \(5,\) does not match the action space \(6,\) "
            r"\(workers x slots_per_worker = 2 x 3\)",
        ),
        (np.zeros((1, 6)), None, r"action shape \(1, 6\) does not match"),
        (
            np.zeros(6),
            2,
            r"actions of shape \(6,\); expected \(num_envs, workers x "
            r"slots_per_worker\) = \(2, 6\)",
        ),
        (np.zeros((3, 6)), 2, r"actions of shape \(3, 6\)"),
    ],
)
def test_an_action_of_another_shape_is_refused_naming_both_shapes(action, episodes, refusal):
    with pytest.raises(ActionError, match=refusal):
        action_limits(action, episodes, LAYOUT, FLOOR)


def test_a_non_finite_entry_is_refused_naming_every_index_and_value():
    action = np.array([0.5, np.nan, 0.5, np.inf, -np.inf, 0.5])
    with pytest.raises(ActionError) as refused:
        action_limits(action, None, LAYOUT, FLOOR)
    assert "non-finite values at indices [1, 3, 4]: [nan, inf, -inf]" in str(refused.value)
    assert "every entry must be a limit in [0, 1]" in str(refused.value)


def test_a_non_finite_entry_of_a_batch_is_refused_naming_its_environment_and_slot():
    actions = np.full((3, 6), 0.5)
    actions[1, 4] = np.inf
    actions[2, 0] = np.nan
    with pytest.raises(ActionError) as refused:
        action_limits(actions, 3, LAYOUT, FLOOR)
    assert "environment 1 have a non-finite value at slot 4: inf (2 non-finite in all)" in str(
        refused.value
    )


@pytest.mark.parametrize(
    ("action", "named"),
    [
        (["0.5"] * 6, "holds <U3 values; expected numbers"),
        ([True] * 6, "holds bool values"),
        ([0.5j] * 6, "holds complex128 values"),
        ([0.5, None] * 3, "holds object values"),
        ([[0.5], [0.5, 0.5]], "is not an array of numbers"),
        ([10**400] * 6, "holds a number beyond a float's range"),
    ],
)
def test_an_action_that_is_not_numbers_is_refused_naming_what_it_holds(action, named):
    with pytest.raises(ActionError, match=r"^action ") as refused:
        action_limits(action, None, LAYOUT, FLOOR)
    assert named in str(refused.value)


def test_numbers_of_any_type_are_an_action():
    for action in ([1] * 6, (0.5,) * 6, np.full(6, 1, dtype=np.uint8), [2**70] * 6):
        limits = action_limits(action, None, LAYOUT, FLOOR)
        np.testing.assert_array_equal(limits, np.ones((1, 6)) * min(float(action[0]), 1.0))


# ------------------------------------------------------------------ the notice of clipping


def test_an_action_outside_the_box_is_said_once_naming_the_first_entry():
    notice = ClipNotice()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ActionClippedWarning)
        action_limits(np.array([0.0, 1.0, 0.5, 0.5, 0.5, 0.5]), None, LAYOUT, FLOOR, notice)
    assert not notice.said  # the box's own edges are inside it
    with pytest.warns(ActionClippedWarning) as said:
        action_limits(np.array([0.5, 1.5, -2.0, 0.5, 0.5, 0.5]), None, LAYOUT, FLOOR, notice)
    assert "(2 of 6; the first, at index 1: 1.5)" in str(said[0].message)
    assert notice.said
    with warnings.catch_warnings():
        warnings.simplefilter("error", ActionClippedWarning)
        action_limits(np.full(6, 9.0), None, LAYOUT, FLOOR, notice)  # not said again


def test_a_batch_outside_the_box_is_said_naming_its_environment_and_slot():
    actions = np.full((2, 6), 0.5)
    actions[1, 3] = -0.5
    with pytest.warns(ActionClippedWarning, match=r"the first, at env 1, slot 3: -0\.5"):
        action_limits(actions, 2, LAYOUT, FLOOR, ClipNotice())


# ------------------------------------------------------------------ decisions


def test_a_decision_sets_the_slots_of_the_jobs_it_names_and_keeps_the_rest():
    limits = decision_limits([Decision(limits={"j1": 0.4})], columns(), 3, FLOOR)
    # j0 keeps 0.3 (worker 0 slot 0), j1 gets 0.4 (worker 1 slot 2), empty slots 1
    np.testing.assert_array_equal(limits, [[0.3, 1.0, 1.0, 1.0, 1.0, 0.4]])


def test_a_decision_is_clamped_to_the_floor_and_one():
    limits = decision_limits([Decision(limits={"j0": 0.0, "j1": 7.0})], columns(), 3, FLOOR)
    assert (limits[0, 0], limits[0, 5]) == (FLOOR, 1.0)


def test_a_limit_for_a_job_waiting_for_a_slot_is_taken_and_sets_no_slot():
    limits = decision_limits([Decision(limits={"j2": 0.5})], columns(), 3, FLOOR)
    np.testing.assert_array_equal(limits, [[0.3, 1.0, 1.0, 1.0, 1.0, 0.6]])


@pytest.mark.parametrize(
    ("limit", "refusal"),
    [
        (-0.5, r"limit of job 'j0' is -0\.5; limits are fractions of a worker in \[0, 1\]"),
        (float("nan"), r"limit of job 'j0' is nan \(float\); expected a finite number"),
        (float("inf"), r"limit of job 'j0' is inf \(float\)"),
        ("0.5", r"limit of job 'j0' is '0\.5' \(str\)"),
        (True, r"limit of job 'j0' is True \(bool\)"),
        (None, r"limit of job 'j0' is None \(NoneType\)"),
        (10**400, r"limit of job 'j0' is 1000.* \(int\); expected a finite number"),
    ],
)
def test_a_limit_that_is_not_a_finite_fraction_is_refused_naming_it(limit, refusal):
    with pytest.raises(ActionError, match=refusal):
        decision_limits([Decision(limits={"j0": limit})], columns(), 3, FLOOR)


def test_a_limit_for_a_job_that_has_not_arrived_is_refused_naming_the_jobs_present():
    with pytest.raises(
        ActionError,
        match=r"limit for job 'j9', which has not arrived; jobs present: \['j0', 'j1', 'j2'\]",
    ):
        decision_limits([Decision(limits={"j9": 0.5})], columns(), 3, FLOOR)


@pytest.mark.parametrize(
    ("decision", "refusal"),
    [
        (
            {"j0": 0.5},
            r"step_decision takes a Decision\(limits=\{job id: limit\}, migrations=\(\.\.\.\)\), "
            r"not \{'j0': 0\.5\}; use step\(\) for an action array",
        ),
        (Decision(limits=[("j0", 0.5)]), r"step_decision takes a Decision"),
        (Decision(migrations=Migration("j0", 1)), r"step_decision takes a Decision"),
        (Decision(migrations=(("j0", 1),)), r"migrations hold \('j0', 1\); expected Migration"),
        (Decision(migrations=(Migration("j0", 1.0),)), r"the worker a whole number"),
        (Decision(migrations=(Migration("j0", True),)), r"the worker a whole number"),
    ],
)
def test_a_decision_of_the_wrong_types_is_refused(decision, refusal):
    with pytest.raises(ActionError, match=refusal):
        check_decision(decision)
    with pytest.raises(ActionError, match=refusal):
        decision_limits([decision], columns(), 3, FLOOR)


def test_a_well_formed_decision_passes_the_check():
    check_decision(Decision(limits={"j0": 0.5}, migrations=(Migration("j0", np.int64(1)),)))
