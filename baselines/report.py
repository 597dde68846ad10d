"""The baselines report: each paper scenario under every baseline, beside ``default``, ``oracle``.

It runs whole episodes on the replay backend through the same path as any evaluation
(:class:`~dlsched.policies.TelemetryFeed` and ``predict``) and reads the papers' metrics off the
last telemetry: the number of satisfied services at the end (inference), the mean completion time
and the makespan (training). ``dlsched baselines report`` prints it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import gymnasium as gym

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched.baselines.registry import make
from dlsched.envs.scenario import JobKind, Scenario
from dlsched.envs.scenario_file import load_scenario
from dlsched.envs.telemetry import JobState, QoEClass, Telemetry
from dlsched.policies.feed import TelemetryFeed

#: The paper scenarios of the report, in the papers' order.
PAPER_SCENARIOS: tuple[str, ...] = (
    "dqoes-resnet50-burst-target20",
    "dqoes-resnet50-burst-target40",
    "dqoes-varied-burst",
    "dqoes-varied-fixed50",
    "dqoes-random-models",
    "dqoes-cluster-40",
    "flowcon-poc-3",
    "flowcon-10-random",
    "flowcon-15-random",
    "flowcon-cluster-20",
    "flowcon-cluster-40",
    "flowcon-cluster-60-homogeneous",
    "flowcon-cluster-60-heterogeneous",
    "specon-7",
    "specon-20",
)

#: The baselines compared on each kind of scenario, ``default`` first and ``oracle`` last.
POLICIES: dict[JobKind, tuple[str, ...]] = {
    JobKind.INFERENCE: ("default", "equal", "dqoes", "oracle"),
    JobKind.TRAINING: ("default", "equal", "flowcon", "specon", "tradl", "oracle"),
}


@dataclass(frozen=True)
class EpisodeOutcome:
    """The papers' metrics of one episode.

    Attributes:
        scenario: the scenario's name.
        policy: the baseline's name.
        seed: the episode's seed.
        kind: inference or training.
        jobs: jobs that arrived.
        satisfied: services in S at the end (inference).
        satisfied_mean: services in S averaged over the episode's steps (inference).
        finished: jobs that completed (training).
        mean_completion_s: mean of completion minus arrival over the finished jobs (training).
        makespan_s: last completion minus first arrival, if every job finished (training).
    """

    scenario: str
    policy: str
    seed: int
    kind: JobKind
    jobs: int
    satisfied: int | None = None
    satisfied_mean: float | None = None
    finished: int | None = None
    mean_completion_s: float | None = None
    makespan_s: float | None = None


def run_episode(
    policy_name: str, scenario: str | Scenario, seed: int = 0, backend: str = "replay"
) -> EpisodeOutcome:
    """Run one whole episode of ``scenario`` under the baseline ``policy_name``.

    Args:
        policy_name: a registered baseline, built with its paper defaults.
        scenario: a shipped scenario's name or path, or a Scenario.
        seed: the episode's seed.
        backend: the environment's backend.
    """
    resolved = load_scenario(scenario) if isinstance(scenario, str) else scenario
    env_id = "dlsched/Inference-v0" if resolved.kind is JobKind.INFERENCE else "dlsched/Training-v0"
    policy = make(policy_name)
    env = TelemetryFeed(gym.make(env_id, scenario=resolved, backend=backend), policy)
    # Before the first reset places the jobs arriving at 0 s: the oracle's placer reads the
    # environment's profile set.
    policy.bind(env.scheduling_env)
    try:
        observation, info = env.reset(seed=seed)
        satisfied_counts: list[int] = []
        terminated = truncated = False
        while not (terminated or truncated):
            action, _ = policy.predict(observation)
            observation, _, terminated, truncated, info = env.step(action)
            satisfied_counts.append(info["telemetry"].count(QoEClass.S))
    finally:
        env.close()
    return _outcome(resolved, policy_name, seed, info["telemetry"], satisfied_counts, terminated)


def _outcome(
    scenario: Scenario,
    policy: str,
    seed: int,
    last: Telemetry,
    satisfied_counts: list[int],
    terminated: bool,
) -> EpisodeOutcome:
    base = EpisodeOutcome(scenario.name, policy, seed, scenario.kind, jobs=len(last.jobs))
    if scenario.kind is JobKind.INFERENCE:
        mean = sum(satisfied_counts) / len(satisfied_counts) if satisfied_counts else 0.0
        return replace(base, satisfied=last.count(QoEClass.S), satisfied_mean=mean)
    completed = {
        job.job_id: job.completed_s
        for job in last.jobs
        if job.state is JobState.DONE and job.completed_s is not None
    }
    completions = [
        completed[job.job_id] - job.arrival_s for job in last.jobs if job.job_id in completed
    ]
    makespan = None
    if terminated and completed:  # the environment ends an episode once every job is done
        makespan = max(completed.values()) - min(job.arrival_s for job in last.jobs)
    return replace(
        base,
        finished=len(completed),
        mean_completion_s=sum(completions) / len(completions) if completions else None,
        makespan_s=makespan,
    )


def report(
    scenarios: Sequence[str] = PAPER_SCENARIOS,
    seeds: Sequence[int] = (0,),
    policies: Sequence[str] | None = None,
) -> list[EpisodeOutcome]:
    """Every (scenario, policy, seed) episode; ``policies=None`` takes :data:`POLICIES`."""
    outcomes = []
    for name in scenarios:
        scenario = load_scenario(name)
        for policy in policies or POLICIES[scenario.kind]:
            for seed in seeds:
                outcomes.append(run_episode(policy, scenario, seed))
    return outcomes


def format_report(outcomes: Sequence[EpisodeOutcome]) -> str:
    """A plain-text table, one row per scenario and policy, averaged over seeds."""
    groups: dict[tuple[str, str], list[EpisodeOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault((outcome.scenario, outcome.policy), []).append(outcome)
    header = (
        f"{'scenario':34} {'policy':8} {'seeds':>5} {'jobs':>5}  "
        f"{'satisfied':>9} {'mean S':>7}  {'finished':>8} {'mean completion':>15} "
        f"{'makespan':>9}"
    )
    lines = [header, "-" * len(header)]
    for (scenario, policy), rows in groups.items():
        first = rows[0]
        if first.kind is JobKind.INFERENCE:
            metrics = (
                f"{_mean([r.satisfied for r in rows]):9.1f} "
                f"{_mean([r.satisfied_mean for r in rows]):7.2f}  {'':8} {'':15} {'':9}"
            )
        else:
            metrics = (
                f"{'':9} {'':7}  {_mean([r.finished for r in rows]):8.1f} "
                f"{_seconds([r.mean_completion_s for r in rows]):>15} "
                f"{_seconds([r.makespan_s for r in rows]):>9}"
            )
        lines.append(
            f"{scenario:34} {policy:8} {len(rows):5d} {_mean([r.jobs for r in rows]):5.0f}  "
            f"{metrics}"
        )
    lines.append(
        "satisfied: services in S at the end; mean S: over all steps. mean completion: finished "
        "jobs only; makespan: '-' unless every job finished before the horizon. oracle cheats."
    )
    return "\n".join(lines)


def _mean(values: Sequence[float | int | None]) -> float:
    present = [float(v) for v in values if v is not None]
    return sum(present) / len(present) if present else math.nan


def _seconds(values: Sequence[float | None]) -> str:
    if any(v is None for v in values):
        return "-"
    return f"{_mean(values):.1f} s"
