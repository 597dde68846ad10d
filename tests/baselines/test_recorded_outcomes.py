"""Every baseline on every shipped scenario does what it did when its outcomes were recorded
(``recorded_outcomes.py``): seed 0 here, seeds 0-2 with
``python tests/baselines/recorded_outcomes.py``."""

import pytest
from recorded_outcomes import differences, outcomes, read_recording

from dlsched.envs.scenarios import scenario_names

RECORDED = read_recording()


@pytest.mark.parametrize("name", scenario_names())
def test_every_baseline_does_on_seed_0_what_it_did_when_recorded(name):
    assert name in RECORDED, (
        f"{name} is not in the recording: record it with "
        "python tests/baselines/recorded_outcomes.py --write"
    )
    recorded_seed_0 = {
        key: value for key, value in RECORDED[name].items() if key.endswith("/seed0")
    }
    assert differences(recorded_seed_0, outcomes(name, [0])) == []


def test_a_changed_metric_is_found():
    recorded = {"default/seed0": {"mean_completion_s": 10.0, "makespan_s": None}}
    assert (
        differences(recorded, {"default/seed0": {"mean_completion_s": 10.0, "makespan_s": None}})
        == []
    )
    assert differences(
        recorded, {"default/seed0": {"mean_completion_s": 10.5, "makespan_s": None}}
    ) == ["default/seed0 mean_completion_s: recorded 10.0 != now 10.5"]
    assert differences(recorded, {"equal/seed0": {"mean_completion_s": 10.0}}) == [
        "default/seed0: recorded, not run now",
        "equal/seed0: not in the recording",
    ]


def test_a_metric_added_since_the_recording_is_no_change_and_a_lost_one_is():
    recorded = {"default/seed0": {"mean_completion_s": 10.0}}
    now = {"default/seed0": {"mean_completion_s": 10.0, "cores_allocated_mean": 4.0}}
    assert differences(recorded, now) == []
    assert differences({"default/seed0": {"makespan_s": 1.0}}, now) == [
        "default/seed0 makespan_s: recorded, not measured now"
    ]


def test_wall_times_are_never_recorded():
    (metrics, *_) = outcomes("flowcon-poc-3", [0]).values()
    assert "cores_allocated_mean" in metrics
    assert not {"decision_ms_median", "decision_ms_p99"} & set(metrics)
