"""The baselines report: each paper scenario under every baseline, beside ``default``, ``oracle``.

It runs whole episodes on the replay backend through the same path as any evaluation
(:class:`~dlsched.policies.TelemetryFeed` and ``predict``) and reads the papers' metrics off the
last telemetry: the number of satisfied services at the end (inference), the mean completion time
and the makespan (training). ``dlsched baselines report`` prints it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import dlsched.envs  # noqa: F401  (registers the environments)
from dlsched.baselines.registry import make
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.runs import evaluation

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

    The episode is :func:`dlsched.runs.evaluation.run_episode`'s; this reads the papers'
    metrics off its record.

    Args:
        policy_name: a registered baseline, built with its paper defaults.
        scenario: a shipped scenario's name or path, or a Scenario.
        seed: the episode's seed.
        backend: the environment's backend.
    """
    resolved = load_scenario(scenario) if isinstance(scenario, str) else scenario
    result = evaluation.run_episode(resolved, make(policy_name), seed, backend)
    base = EpisodeOutcome(resolved.name, policy_name, seed, resolved.kind, jobs=len(result.jobs))
    if resolved.kind is JobKind.INFERENCE:
        after_reset = result.steps[1:]
        mean = statistics.fmean(step.satisfied for step in after_reset) if after_reset else 0.0
        return replace(base, satisfied=result.steps[-1].satisfied, satisfied_mean=mean)
    completions = [job.completion_s for job in result.jobs if job.completion_s is not None]
    return replace(
        base,
        finished=len(completions),
        mean_completion_s=statistics.fmean(completions) if completions else None,
        makespan_s=result.metrics.makespan_s,
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
