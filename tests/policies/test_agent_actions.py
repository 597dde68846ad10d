"""How agent actions become limits (:mod:`dlsched.policies.agent_actions`), the share mode
above all: its limits add up to the worker, whatever its size, and a teacher's limits come back
from the actions :meth:`ActionMapping.to_actions` gives."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched.envs.observation import FEATURES, ObservationLayout
from dlsched.policies.agent_actions import ActionMapping, ActionMode

SHARE = ActionMapping(ActionMode.SHARE, max_step=64.0)
SHARE_IDLE = ActionMapping(ActionMode.SHARE_IDLE, max_step=64.0)
ACTIVE = FEATURES.index("active")


def _observation(active: np.ndarray) -> np.ndarray:
    """Raw observations ``(..., slots, features)`` whose active column is ``active``."""
    observation = np.zeros((*active.shape, len(FEATURES)), dtype=np.float32)
    observation[..., ACTIVE] = active
    return observation


@settings(max_examples=200, deadline=None)
@given(
    workers=st.integers(1, 4),
    slots=st.integers(1, 8),
    data=st.data(),
)
def test_share_limits_give_each_worker_away_whole_or_leave_part_idle(workers, slots, data):
    """``share`` gives every worker away whole; ``share-idle`` too, unless its weights sum to
    less than 1, when they are the limits and the rest stays idle."""
    layout = ObservationLayout(workers, slots)
    active = data.draw(hnp.arrays(bool, (workers * slots,)))
    actions = data.draw(
        hnp.arrays(np.float32, (workers * slots,), elements=st.floats(-1, 1, width=32))
    )
    whole = SHARE.to_limits(actions, _observation(active), layout)
    idle = SHARE_IDLE.to_limits(actions, _observation(active), layout)
    weights = 64.0 ** actions.astype(np.float64)
    for worker in range(workers):
        rows = slice(worker * slots, (worker + 1) * slots)
        held = active[rows]
        if not held.any():
            continue
        assert float(whole[rows][held].sum()) == pytest.approx(1.0, rel=1e-5)
        if weights[rows][held].sum() >= 1.0:
            np.testing.assert_allclose(idle[rows][held], whole[rows][held], rtol=1e-6)
        else:
            np.testing.assert_allclose(idle[rows][held], weights[rows][held], rtol=1e-5)
        assert (whole[rows][held] > 0).all() and (idle[rows][held] > 0).all()


@pytest.mark.parametrize("scenario, cores", [("docker-inference-6", 2), ("dqoes-cluster-40", 8)])
def test_share_limits_in_force_add_up_to_the_worker_on_any_worker(scenario, cores):
    """On a 2-core host and on 8-core workers alike, untrained actions (0) split each worker
    equally among its services, and the limits in force of the services that held a slot when
    they were set add up to it (a service arriving meanwhile starts uncapped)."""
    env = gym.make("dlsched/Inference-v0", scenario=scenario)
    observation, info = env.reset(seed=3)
    layout = env.unwrapped.layout
    checked = 0
    for _ in range(30):
        before = {job.job_id for job in info["telemetry"].active_jobs}
        limits = SHARE.to_limits(np.zeros(layout.shape[0]), observation, layout)
        observation, *_, info = env.step(limits)
        telemetry = info["telemetry"]
        for worker in telemetry.workers:
            assert worker.cores == cores
            held = [job for job in telemetry.on_worker(worker.index) if job.job_id in before]
            if held:
                assert sum(job.limit for job in held) == pytest.approx(1.0, rel=1e-4)
                checked += 1
    assert checked >= 30


@pytest.mark.parametrize("mode", list(ActionMode))
def test_to_actions_inverts_to_limits(mode):
    """Limits a teacher sets (a worker's summing to at most 1, within each mode's reach) come
    back from the actions that ``to_actions`` gives them."""
    mapping = ActionMapping(mode, max_step=64.0 if mode.shares else 2.0)
    layout = ObservationLayout(2, 3)
    active = np.array([[True, True, False, True, True, True]])
    observation = _observation(active)
    observation[..., FEATURES.index("limit")] = 0.3
    observation[..., FEATURES.index("cpu_usage")] = 0.3
    # a worker's limits summing to 1 (every mode reaches them) and to less (share-idle's)
    wanted = np.array([[0.45, 0.55, 1.0, 0.25, 0.35, 0.4]])
    if mode is ActionMode.SHARE_IDLE:
        wanted = np.array([[0.25, 0.5, 1.0, 0.2, 0.3, 0.35]])
    limits = mapping.to_limits(mapping.to_actions(wanted, observation, layout), observation, layout)
    assert limits[active] == pytest.approx(wanted[active], rel=1e-5)


def test_share_idle_labels_a_worker_given_away_whole_away_from_the_edge():
    """Limits that give a worker away whole come back from actions whose weights sum to twice
    the worker: a student a little below them still gives it away whole."""
    layout = ObservationLayout(1, 3)
    observation = _observation(np.array([True, True, True]))
    wanted = np.array([1 / 3, 1 / 3, 1 / 3])
    actions = SHARE_IDLE.to_actions(wanted, observation, layout)
    assert (64.0 ** actions.astype(np.float64)).sum() == pytest.approx(2.0, rel=1e-5)
    np.testing.assert_allclose(SHARE_IDLE.to_limits(actions - 0.05, observation, layout), wanted)
