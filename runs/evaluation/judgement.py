"""A scheduler judged where users run it: on every shipped scenario of its kind.

A learned scheduler that wins on the distribution it was trained on can still lose, even to
Docker's ``default``, on a host of another size. :func:`judge` evaluates a policy on every shipped
scenario of its job kind (paper scale and host scale, single workers and clusters, tuned and
stock threading), beside ``default``, the papers' baselines of that kind and the privileged
``oracle``, on seeds the caller names (ones the policy never trained or validated on), with the
bound no policy can beat on them. :func:`verdict` reads the rows against the targets a shipped
model is held to: never worse than ``default`` (by more than 0.01 of a satisfied fraction or 2%
of a mean completion time) on any scenario, at least the best paper baseline, and the share of
the gap from that baseline to the oracle it closes.

A pretrained model's card holds these rows (:mod:`dlsched.policies.pretrained`), and
``dlsched judge`` prints or writes them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dlsched.baselines import make
from dlsched.envs.scenarios import load_scenario, scenario_names
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.policies.policy import Policy
from dlsched.policies.pretrained import HeldOutResult
from dlsched.runs.evaluation.bounds import evaluation_bound
from dlsched.runs.evaluation.metrics import PRIMARY_METRIC
from dlsched.runs.evaluation.runners import evaluate
from dlsched.runs.evaluation.summaries import PolicySummary, summarise

#: The papers' baselines of each kind of job a learned scheduler is held against.
PAPER_BASELINES: Mapping[JobKind, tuple[str, ...]] = {
    JobKind.INFERENCE: ("dqoes",),
    JobKind.TRAINING: ("flowcon", "tradl", "specon"),
}
#: The baselines whose better one a training scheduler is held to (``docs/training.md``).
HELD_TO: Mapping[JobKind, tuple[str, ...]] = {
    JobKind.INFERENCE: ("dqoes",),
    JobKind.TRAINING: ("flowcon", "tradl"),
}
#: How much worse than ``default`` a scheduler may be on a scenario: an absolute satisfied
#: fraction (inference), a fraction of the mean completion time (training).
TOLERANCE: Mapping[JobKind, float] = {JobKind.INFERENCE: 0.01, JobKind.TRAINING: 0.02}
DEFAULT = "default"
ORACLE = "oracle"


def shipped_scenarios(kind: JobKind) -> list[Scenario]:
    """Every shipped scenario whose jobs are of ``kind``, by name."""
    scenarios = (load_scenario(name) for name in scenario_names())
    return [scenario for scenario in scenarios if scenario.kind is kind]


def judge(
    policy: Policy,
    kind: JobKind,
    seeds: Sequence[int],
    scenarios: Sequence[Scenario] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[HeldOutResult]:
    """One row per scenario: ``policy``'s mean of the primary metric on ``seeds`` beside
    ``default``'s, the papers' baselines', the oracle's and the bound's (replay).

    Args:
        policy: the scheduler judged (a learned one is named after its model).
        kind: the kind of jobs it schedules.
        seeds: the seeds of every scenario's episodes.
        scenarios: the scenarios (default: every shipped one of ``kind``).
        progress: told the name of each scenario as it starts.
    """
    rows = []
    for scenario in scenarios if scenarios is not None else shipped_scenarios(kind):
        if progress is not None:
            progress(scenario.name)
        others = [make(name) for name in (DEFAULT, *PAPER_BASELINES[kind], ORACLE)]
        episodes = evaluate(scenario, [*others, policy], seeds, progress=False)
        bound = evaluation_bound(scenario, "replay", {}, seeds)
        summaries = summarise([episode.score for episode in episodes], kind, bound)
        rows.append(_row(scenario, kind, seeds, summaries, policy.name, bound))
    return rows


def _row(
    scenario: Scenario,
    kind: JobKind,
    seeds: Sequence[int],
    summaries: Sequence[PolicySummary],
    name: str,
    bound: object,
) -> HeldOutResult:
    metric = PRIMARY_METRIC[kind]
    means: dict[str, float] = {}
    half_widths: dict[str, float] = {}
    incomplete: list[str] = []
    for summary in summaries:
        estimate = summary.metric(metric).estimate
        label = "model" if summary.policy.name == name else summary.policy.name
        if estimate.mean is None:
            incomplete.append(label)
            continue
        means[label] = estimate.mean
        if estimate.ci_high is not None:
            half_widths[label] = (estimate.ci_high - estimate.ci_low) / 2  # type: ignore[operator]
        if estimate.n < len(seeds):
            incomplete.append(label)
    bound_mean = getattr(getattr(bound, "estimate", None), "mean", None)
    return HeldOutResult(
        scenario=scenario.name,
        seeds=f"{min(seeds)}-{max(seeds)}",
        metric=metric,
        model=means.pop("model"),
        baselines=means,
        half_widths=half_widths,
        bound=bound_mean,
        incomplete=tuple(incomplete),
    )


@dataclass(frozen=True)
class Verdict:
    """How a scheduler's rows read against a shipped model's targets.

    Attributes:
        kind: the kind of jobs.
        below_default: the scenarios where it is worse than ``default`` beyond
            :data:`TOLERANCE`.
        below_paper: the scenarios where it is worse than the better of :data:`HELD_TO`
            beyond the same tolerance.
        gap_closed: per scenario, the share of the gap from the better of :data:`HELD_TO` to the
            oracle it closes (``None`` where the oracle is no better than that baseline).
        mean_gap_closed: the mean of those shares over the scenarios where one is defined.
    """

    kind: JobKind
    below_default: tuple[str, ...]
    below_paper: tuple[str, ...]
    gap_closed: Mapping[str, float | None]
    mean_gap_closed: float | None


def better_paper(row: HeldOutResult, kind: JobKind) -> float | None:
    """The better of the baselines ``kind``'s scheduler is held to on ``row`` (a baseline that
    left jobs unfinished on some seed is not counted: its mean covers only the others)."""
    values = [
        row.baselines[name]
        for name in HELD_TO[kind]
        if name in row.baselines and name not in row.incomplete
    ]
    if not values:
        return None
    return max(values) if kind is JobKind.INFERENCE else min(values)


def verdict(rows: Sequence[HeldOutResult], kind: JobKind) -> Verdict:
    """Read ``rows`` (:func:`judge`'s) against the targets; see :class:`Verdict`."""
    tolerance = TOLERANCE[kind]
    higher = kind is JobKind.INFERENCE

    def worse(value: float, reference: float) -> bool:
        if higher:
            return value < reference - tolerance
        return value > reference * (1 + tolerance)

    below_default, below_paper = [], []
    closed: dict[str, float | None] = {}
    for row in rows:
        if DEFAULT in row.baselines and worse(row.model, row.baselines[DEFAULT]):
            below_default.append(row.scenario)
        paper = better_paper(row, kind)
        if paper is not None and worse(row.model, paper):
            below_paper.append(row.scenario)
        oracle = row.baselines.get(ORACLE)
        closed[row.scenario] = None
        if paper is not None and oracle is not None:
            # completion times: the oracle is better when lower
            gap = oracle - paper if higher else paper - oracle
            gained = row.model - paper if higher else paper - row.model
            if gap > 0:
                closed[row.scenario] = gained / gap
    shares = [share for share in closed.values() if share is not None]
    return Verdict(
        kind,
        tuple(below_default),
        tuple(below_paper),
        closed,
        statistics.fmean(shares) if shares else None,
    )
