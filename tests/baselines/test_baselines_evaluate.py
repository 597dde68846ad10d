"""Every baseline through SB3's evaluate_policy, and the rules every decision obeys."""

from __future__ import annotations

import math

import pytest
from replay_feed import replay_feed
from stable_baselines3.common.evaluation import evaluate_policy

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched import baselines
from dlsched.baselines.base import Baseline
from dlsched.envs.backend_registry import backend_class
from dlsched.envs.decision import Decision, Migration
from dlsched.envs.errors import ActionError, PolicyError
from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    JobGroup,
    JobKind,
    Scenario,
    WorkerSpec,
)
from dlsched.envs.telemetry import JobState, Telemetry

SERVICES = Scenario(
    name="two-workers-services",
    kind=JobKind.INFERENCE,
    workers=(WorkerSpec(cores=4.0), WorkerSpec(cores=4.0)),
    groups=(
        JobGroup(workloads=("resnet50",), count=3, targets_s=(30.0, 60.0)),
        JobGroup(
            workloads=("vgg16", "xception"),
            count=3,
            arrival=ArrivalPattern(ArrivalKind.FIXED, every_s=15.0, start_s=5.0),
            targets_s=(40.0,),
        ),
    ),
    horizon_s=120.0,
)

TRAINING = Scenario(
    name="two-workers-training",
    kind=JobKind.TRAINING,
    workers=(WorkerSpec(cores=4.0), WorkerSpec(cores=2.0)),
    groups=(
        JobGroup(workloads=("mnist-tensorflow", "gru"), count=2, iterations=60),
        JobGroup(
            workloads=("mnist-tensorflow",),
            count=3,
            arrival=ArrivalPattern(ArrivalKind.FIXED, every_s=20.0, start_s=10.0),
            iterations=40,
            loss_targets=(0.6, 0.4),
        ),
    ),
    horizon_s=400.0,
)


@pytest.mark.parametrize("scenario", [SERVICES, TRAINING], ids=["inference", "training"])
@pytest.mark.parametrize("name", baselines.names())
def test_evaluate_policy_runs_every_baseline(name: str, scenario: Scenario) -> None:
    policy = baselines.make(name)
    if scenario.kind not in type(policy).kinds:
        pytest.skip(f"{name} does not schedule {scenario.kind.value} jobs (it refuses them)")
    env = replay_feed(policy, scenario)
    rewards, lengths = evaluate_policy(
        policy, env, n_eval_episodes=2, return_episode_rewards=True, warn=False
    )
    assert isinstance(rewards, list) and isinstance(lengths, list)
    assert len(rewards) == 2 and all(math.isfinite(r) for r in rewards)
    assert all(length >= 1 for length in lengths)
    env.close()


class Rogue(Baseline):
    """Returns one fixed decision, whatever it sees."""

    name = "rogue"

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision

    def act(self, telemetry: Telemetry) -> Decision:
        return self.decision


def step_once(policy: Baseline, scenario: Scenario = TRAINING) -> Telemetry:
    env = replay_feed(policy, scenario)
    observation, _ = env.reset(seed=0)
    action, _ = policy.predict(observation)
    _, _, _, _, info = env.step(action)
    env.close()
    telemetry: Telemetry = info["telemetry"]
    return telemetry


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Decision(limits={"j00": math.nan}), "j00"),
        (Decision(limits={"j00": -0.5}), "-0.5"),
        (Decision(limits={"j99": 0.5}), "j99"),
        (Decision(migrations=(Migration("j00", 7),)), "worker 7"),
        (Decision(migrations=(Migration("j77", 1),)), "j77"),
    ],
)
def test_environment_refuses_decisions_outside_the_rules(decision: Decision, message: str) -> None:
    with pytest.raises(ActionError, match=message):
        step_once(Rogue(decision))


def test_overcommitted_limits_are_accepted() -> None:
    # Docker quotas may sum above a worker's cores; the kernel shares the CPU then.
    telemetry = step_once(Rogue(Decision(limits={"j00": 0.9, "j01": 0.9})))
    limits = {job.job_id: job.limit for job in telemetry.jobs if job.state is JobState.RUNNING}
    assert limits["j00"] == pytest.approx(0.9) and limits["j01"] == pytest.approx(0.9)


def test_a_policys_migrations_reach_the_environment() -> None:
    # A migration in a decision is carried through the feed to the backend (SpeCon's path).
    telemetry = step_once(Rogue(Decision(migrations=(Migration("j00", 1),))))
    assert telemetry.job("j00").worker == 1


def test_oracle_refuses_to_run_without_a_replay_backend() -> None:
    oracle = baselines.make("oracle")
    with pytest.raises(PolicyError, match="does not know its scenario and backend yet"):
        oracle.act(Telemetry(0.0, 10.0, (), ()))
    docker = backend_class("docker").capabilities
    oracle.bind(SERVICES, docker)
    with pytest.raises(PolicyError, match="backend='replay'"):
        oracle.act(Telemetry(0.0, 10.0, (), ()))
