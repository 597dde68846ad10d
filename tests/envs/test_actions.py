"""Actions as a fuzzer gives them: one that is not numbers of the action's shape is refused as an
ActionError naming what it holds, never another exception; numbers of any numeric type are an
action, and every step taken is checked: its observation lies in the observation space, and each
job that held a slot runs at the slot's entry clipped to ``[floor, 1]`` (one arriving during
the step starts uncapped). The same holds from the states the privileged oracle drives crowded
clusters to (jobs waiting for slots, done, at the floor), which random actions do not reach.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched import baselines
from dlsched.envs.errors import ActionClippedWarning, ActionError
from dlsched.envs.scenarios import load_scenario
from dlsched.envs.telemetry import JobState, Telemetry

FUZZ_SCALE = int(os.environ.get("DLSCHED_FUZZ_SCALE", "1"))
"""Examples of the property tests, times the CI's."""

SLOTS = 10
"""Slots of the stepped scenario (1 worker x 10 slots): its action's size."""

FLOOR = 0.1
"""The lowest limit of the environments stepped here (not the default, so that it is seen)."""


@pytest.fixture(scope="module")
def stepped_env():
    env = gym.make(
        "dlsched/Inference-v0", scenario="dqoes-resnet50-burst-target20", limit_floor=FLOOR
    )
    env.reset(seed=0)
    assert env.action_space.shape == (SLOTS,)
    yield env
    env.close()


def step_or_refuse(env, action) -> bool:
    """Step ``env`` with ``action``: True if it stepped (and the step honours the action), False
    if it was refused as an ActionError (anything else fails the test); an episode that ends is
    reset."""
    before = env.unwrapped.telemetry
    try:
        result = env.step(action)
    except ActionError:
        return False
    assert_the_step_honours(env, action, before, result)
    _, _, terminated, truncated, _ = result
    if terminated or truncated:
        env.reset(seed=0)
    return True


def assert_the_step_honours(env, action, before: Telemetry, result) -> None:
    """The step of ``action`` from ``before`` gave an observation in the observation space; every
    job that held a slot then runs at that slot's entry raised to the floor and clipped to 1,
    every job placed since runs uncapped, and no active job is outside ``[floor, 1]``."""
    observation, _, _, _, info = result
    assert env.observation_space.contains(observation), "observation outside its space"
    floor = env.unwrapped.limit_floor
    slots = env.unwrapped.layout.slots_per_worker
    entries = np.asarray(action, dtype=object).ravel().tolist()
    wanted = [min(max(float(entry), floor), 1.0) for entry in entries]
    held = {job.job_id: job.worker * slots + job.slot for job in before.active_jobs}
    after: Telemetry = info["telemetry"]
    for job in after.active_jobs:
        assert floor <= job.limit <= 1.0, (job.job_id, job.limit)
        if job.job_id in held:
            slot = held[job.job_id]
            assert job.worker * slots + job.slot == slot  # no migration was asked for
            assert job.limit == wanted[slot], (job.job_id, entries[slot], job.limit)
        else:
            assert job.limit == 1.0, (job.job_id, job.limit)


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


def assert_the_decision_is_honoured(env, decision, before: Telemetry, result) -> None:
    """The step of a typed ``decision`` from ``before`` gave an observation in the observation
    space; every job it names that held a slot runs at its limit raised to the floor and clipped
    to 1, the other jobs that held one keep theirs, and no active job is outside ``[floor, 1]``."""
    observation, _, _, _, info = result
    assert env.observation_space.contains(observation), "observation outside its space"
    floor = env.unwrapped.limit_floor
    held = {job.job_id: job.limit for job in before.active_jobs}
    for job in info["telemetry"].active_jobs:
        assert floor <= job.limit <= 1.0, (job.job_id, job.limit)
        if job.job_id in decision.limits and job.job_id in held:
            assert job.limit == min(max(float(decision.limits[job.job_id]), floor), 1.0)
        elif job.job_id in held:
            assert job.limit == held[job.job_id], job.job_id


def crowded_scenario(name: str, slots: int):
    """Shipped scenario ``name`` with ``slots`` per worker, so few that arrivals wait."""
    return dataclasses.replace(load_scenario(name), slots_per_worker=slots)


@pytest.fixture(scope="module")
def oracle_states() -> list[bytes]:
    """Environments (pickled) every 10 steps of episodes the oracle drives on crowded clusters
    of services and of trainings, with its own placer and a floor of :data:`FLOOR`; each of its
    steps is checked as an action's is."""
    states = []
    for env_id, name, slots in (
        ("dlsched/Inference-v0", "dqoes-cluster-40", 5),
        ("dlsched/Training-v0", "flowcon-cluster-20", 2),
    ):
        env = gym.make(env_id, scenario=crowded_scenario(name, slots), limit_floor=FLOOR)
        unwrapped = env.unwrapped
        oracle = baselines.make("oracle")
        oracle.bind(unwrapped.scenario, unwrapped.backend.capabilities)
        unwrapped.placer = oracle.placer
        _, info = env.reset(seed=0)
        oracle.reset()
        seen: set[JobState] = set()
        for step in range(1, 10_000):
            before = info["telemetry"]
            decision = oracle.act(before)
            result = unwrapped.step_decision(decision)
            assert_the_decision_is_honoured(env, decision, before, result)
            _, _, terminated, truncated, info = result
            seen |= {job.state for job in info["telemetry"].jobs}
            if terminated or truncated:
                break
            if step % 10 == 0:
                states.append(pickle.dumps(env))
        expected = {JobState.WAITING, JobState.RUNNING}
        if env_id == "dlsched/Training-v0":
            expected.add(JobState.DONE)
        assert expected <= seen, f"{name}: the oracle's episode reached only {seen}"
        env.close()
    return states


@settings(max_examples=40 * FUZZ_SCALE, deadline=None)
@given(data=st.data())
def test_an_arbitrary_action_from_a_state_the_oracle_reached_is_honoured(oracle_states, data):
    index = data.draw(st.integers(0, len(oracle_states) - 1), label="state")
    env = pickle.loads(oracle_states[index])
    size = env.action_space.shape[0]
    for _ in range(data.draw(st.integers(1, 3), label="steps")):
        action = data.draw(
            st.one_of(
                hnp.arrays(
                    st.sampled_from([np.float32, np.float64]),
                    size,
                    elements=st.floats(allow_nan=False, allow_infinity=False, width=32),
                ),
                st.lists(st.integers(-3, 3), min_size=size, max_size=size),
            ),
            label="action",
        )
        before = env.unwrapped.telemetry
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ActionClippedWarning)
            result = env.step(action)
        assert_the_step_honours(env, action, before, result)
        if result[2] or result[3]:
            break


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
