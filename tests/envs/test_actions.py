"""Actions that are not numbers, as a fuzzer gives them: each is refused as an ActionError naming
what it holds; numbers of any numeric type are an action. Never another exception.
"""

from __future__ import annotations

import os
import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched.envs.errors import ActionClippedWarning, ActionError

FUZZ_SCALE = int(os.environ.get("DLSCHED_FUZZ_SCALE", "1"))
"""Examples of the property tests, times the CI's."""

SLOTS = 10
"""Slots of the stepped scenario (1 worker x 10 slots): its action's size."""


@pytest.fixture(scope="module")
def stepped_env():
    env = gym.make("dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20")
    env.reset(seed=0)
    assert env.action_space.shape == (SLOTS,)
    yield env
    env.close()


def step_or_refuse(env, action) -> bool:
    """Step ``env`` with ``action``: True if it stepped, False if it was refused as an
    ActionError (anything else fails the test); an episode that ends is reset."""
    try:
        _, _, terminated, truncated, _ = env.step(action)
    except ActionError:
        return False
    if terminated or truncated:
        env.reset(seed=0)
    return True


@pytest.mark.parametrize(
    ("action", "named"),
    [
        (["0.5"] * SLOTS, "holds <U3 values; expected numbers"),
        ("0.5", "holds <U3 values"),
        (np.array([0.5, None] * 5, dtype=object), "holds object values"),
        ([[0.5], [0.5, 0.5]], "is not an array of numbers"),
        ({"a": 0.5}, "holds object values"),
        (None, "holds object values"),
        (np.array([True, False] * 5), "holds bool values"),
        (np.array([0.5j] * SLOTS), "holds complex128 values"),
        ([0.5], "action shape (1,) does not match"),
        ([0.5] * 9 + [float("nan")], "non-finite values at indices [9]: [nan]"),
    ],
)
def test_an_action_that_is_not_numbers_is_an_action_error(stepped_env, action, named):
    with pytest.raises(ActionError) as caught:
        stepped_env.step(action)
    assert named in str(caught.value)


def test_numbers_of_any_numeric_type_are_an_action(stepped_env):
    size = stepped_env.action_space.shape[0]
    for action in (
        [0.5] * size,
        (1,) * size,
        [np.float16(0.5)] * size,
        np.full(size, 0, dtype=np.uint8),
        np.array([0.5] * size, dtype=object),
    ):
        assert step_or_refuse(stepped_env, action), action


def test_a_decision_of_the_wrong_types_is_an_action_error(stepped_env):
    from dlsched.envs import Decision
    from dlsched.envs.decision import Migration

    unwrapped = stepped_env.unwrapped
    job = unwrapped.telemetry.jobs[0].job_id
    with pytest.raises(ActionError, match=r"limit of job .* is '0\.5' \(str\)"):
        unwrapped.step_decision(Decision(limits={job: "0.5"}))
    with pytest.raises(ActionError, match="step_decision takes a Decision"):
        unwrapped.step_decision({job: 0.5})
    with pytest.raises(ActionError, match="expected Migration"):
        unwrapped.step_decision(Decision(migrations=((job, 0),)))
    with pytest.raises(ActionError, match="the worker a whole number"):
        unwrapped.step_decision(Decision(migrations=(Migration(job, "0"),)))


def object_array(items: list[object]) -> np.ndarray:
    """``items`` in a numpy array of Python objects, whatever they are."""
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers())


_anything = st.one_of(_numbers, st.none(), st.booleans(), st.text(max_size=4), st.complex_numbers())


random_actions = st.one_of(
    st.lists(_anything, max_size=12),
    st.lists(_numbers, min_size=SLOTS, max_size=SLOTS),  # the right size
    st.lists(st.lists(_numbers, max_size=3), max_size=4),  # nested, maybe ragged
    _anything,
    st.dictionaries(st.text(max_size=3), _numbers, max_size=3),
    st.lists(_anything, min_size=SLOTS, max_size=SLOTS).map(object_array),
    hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=2, max_side=5)),
    hnp.arrays(hnp.scalar_dtypes(), SLOTS),
)


@settings(max_examples=200 * FUZZ_SCALE, deadline=None)
@given(action=random_actions)
@example(action=["0.5"] * SLOTS)
@example(action=np.array([0.5, None] * 5, dtype=object))
@example(action=[2**70] * SLOTS)
@example(action=[10**400] * SLOTS)
def test_a_random_action_steps_or_is_an_action_error(stepped_env, action):
    event("stepped" if step_or_refuse(stepped_env, action) else "refused: ActionError")


@pytest.mark.parametrize("batched", [False, True])
def test_an_action_outside_the_box_is_clipped_and_said_once_per_environment(batched):
    scenario = "dqoes-resnet50-burst-target20"
    if batched:
        env = gym.make_vec("dlsched/Inference-v0", 2, "vector_entry_point", scenario=scenario)
    else:
        env = gym.make("dlsched/Inference-v0", scenario=scenario)
    env.reset(seed=0)
    outside = np.array([5.0, -1.0, 0.5, 1e9] + [0.5] * (SLOTS - 4))
    action = np.stack([np.full(SLOTS, 0.5), outside]) if batched else outside
    with pytest.warns(ActionClippedWarning) as said:
        env.step(action)
    where = "env 1, slot 0" if batched else "index 0"
    assert f"(3 of {action.size}; the first, at {where}: 5.0)" in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ActionClippedWarning)
        _, _, _, _, info = env.step(action)  # clipped again, not said again
    telemetry = env.unwrapped.telemetry(1) if batched else info["telemetry"]
    limits = {job.slot: job.limit for job in telemetry.active_jobs}
    assert limits[0] == 1.0 and limits[1] == pytest.approx(0.02)
    env.close()
