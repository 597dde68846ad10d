"""The baselines report: each paper scenario under every baseline, beside the papers' numbers.

A thin view of the reproduction's machinery (``dlsched baselines report``): the episodes run
through :func:`~dlsched.runs.reproduce.runner.run_episodes`, the columns are statistics of
:mod:`~dlsched.runs.reproduce.statistics`, and a cell's paper value is that of the claim of the
claims file about the same scenario, policy and statistic. Where ``dlsched reproduce`` judges
claims, this sets every baseline side by side on the papers' scenarios.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import JobKind
from dlsched.runs.evaluation.metrics import METRIC_SPECS, EpisodeMetrics
from dlsched.runs.evaluation.summaries import Estimate, estimate
from dlsched.runs.reproduce.claims import ClaimsFile
from dlsched.runs.reproduce.claims_loader import load_claims
from dlsched.runs.reproduce.runner import EpisodeKey, run_episodes, run_key
from dlsched.runs.reproduce.statistics import STATISTICS, EpisodePair
from dlsched.runs.tables import Column, aligned, legend

#: The baselines compared on each kind of scenario, ``default`` first and ``oracle`` last.
POLICIES: dict[JobKind, tuple[str, ...]] = {
    JobKind.INFERENCE: ("default", "equal", "dqoes", "autothrottle", "k8s-autoscaler", "oracle"),
    JobKind.TRAINING: (
        "default",
        "equal",
        "flowcon",
        "specon",
        "tradl",
        "k8s-autoscaler",
        "oracle",
    ),
}

#: The statistics shown for each kind, with their column headers.
COLUMNS: dict[JobKind, tuple[tuple[str, str], ...]] = {
    JobKind.INFERENCE: (
        ("satisfied_final", METRIC_SPECS["satisfied_final"].label),
        ("satisfied_fraction_mean", METRIC_SPECS["satisfied_fraction_mean"].label),
    ),
    JobKind.TRAINING: (
        ("unfinished_jobs", "unfinished"),
        ("mean_completion_s", "mean completion s"),
        ("makespan_s", "makespan s"),
    ),
}


@dataclass(frozen=True)
class Cell:
    """One statistic of one row: ours across seeds, and the paper's if a claim gives it."""

    statistic: str
    estimate: Estimate
    paper: float | None = None


@dataclass(frozen=True)
class ReportRow:
    """One scenario under one baseline."""

    scenario: str
    policy: str
    kind: JobKind
    seeds: int
    jobs: float
    cells: tuple[Cell, ...]


def paper_scenarios(claims: ClaimsFile) -> tuple[str, ...]:
    """The scenarios the claims are measured on, in the claims file's order."""
    return tuple(dict.fromkeys(claim.measure.scenario for claim in claims.claims))


def run_episode(
    policy_name: str, scenario: str, seed: int = 0, backend: str = "replay"
) -> EpisodeMetrics:
    """The metrics of one episode of the shipped ``scenario`` under a baseline's paper defaults."""
    key = EpisodeKey(scenario, policy_name, (), seed, backend)
    return run_key(key, load_scenario(scenario)).metrics


def report(
    scenarios: Sequence[str] | None = None,
    seeds: Sequence[int] = (0,),
    policies: Sequence[str] | None = None,
    claims: ClaimsFile | None = None,
    progress: bool = False,
) -> list[ReportRow]:
    """Every (scenario, policy) row over ``seeds``.

    Args:
        scenarios: scenario names; ``None`` takes every scenario of the claims.
        seeds: the episodes' seeds.
        policies: baselines; ``None`` takes :data:`POLICIES` of each scenario's kind.
        claims: the claims file giving the papers' values (default: the shipped one).
        progress: show a progress bar.
    """
    claims = claims or load_claims()
    names = scenarios if scenarios is not None else paper_scenarios(claims)
    plan: list[tuple[str, str, JobKind]] = []
    for name in names:
        kind = load_scenario(name).kind
        plan += [(name, policy, kind) for policy in policies or POLICIES[kind]]
    keys = [
        EpisodeKey(name, policy, (), seed, "replay") for name, policy, _ in plan for seed in seeds
    ]
    episodes = run_episodes(keys, progress=progress)
    rows = []
    for name, policy, kind in plan:
        results = [episodes[EpisodeKey(name, policy, (), seed, "replay")] for seed in seeds]
        cells = []
        for statistic, _ in COLUMNS[kind]:
            values = [STATISTICS[statistic].value(EpisodePair(result), {}) for result in results]
            paper = next(
                (
                    claim.value
                    for claim in claims.claims
                    if claim.measure.scenario == name
                    and claim.measure.policy == policy
                    and claim.measure.statistic == statistic
                    and not claim.measure.args
                ),
                None,
            )
            spec = METRIC_SPECS[statistic]
            defined = [v for v in values if v is not None]
            cells.append(Cell(statistic, estimate(defined, spec.low, spec.high), paper))
        jobs = sum(len(result.jobs) for result in results) / len(results)
        rows.append(ReportRow(name, policy, kind, len(results), jobs, tuple(cells)))
    return rows


#: The columns every row starts with, before the statistics of its kind.
_ROW_COLUMNS = (
    Column("scenario", "the paper scenario (dlsched scenarios NAME shows it)", left=True),
    Column(
        "policy",
        "the baseline, with its paper's parameters; oracle is privileged: it reads the profiles",
        left=True,
    ),
    Column("seeds", "episodes run, one per seed from the first"),
    Column("jobs", "jobs per episode, mean over the seeds"),
)


def format_report(rows: Sequence[ReportRow]) -> str:
    """A plain-text table per kind, one line per scenario and policy, the papers' values in
    brackets, then the legend: a line per column."""
    blocks = []
    columns: list[Column] = []
    for kind in (JobKind.INFERENCE, JobKind.TRAINING):
        chosen = [row for row in rows if row.kind is kind]
        if not chosen:
            continue
        kind_columns = [
            *_ROW_COLUMNS,
            *(
                Column(label, STATISTICS[statistic].description)
                for statistic, label in COLUMNS[kind]
            ),
        ]
        columns += kind_columns
        blocks.append(
            aligned(
                kind_columns,
                [
                    [row.scenario, row.policy, str(row.seeds), f"{row.jobs:.0f}"]
                    + [_cell(cell) for cell in row.cells]
                    for row in chosen
                ],
            )
        )
    notes = [
        "Each statistic: mean across seeds ± 95% CI half-width, or mean [low, high] where the "
        "interval is clipped to the range the statistic can take (none below 0); [paper: x] "
        "where a claim of the claims file gives the paper's value (`dlsched reproduce` judges "
        "it); '-' where undefined (a completion time or makespan unless every job finished "
        "before the horizon)"
    ]
    return "\n\n".join([*blocks, legend(columns, notes)])


def _cell(cell: Cell) -> str:
    mean = cell.estimate.mean
    if mean is None:
        text = "-"
    else:
        digits = 1 if abs(mean) >= 10 else 2
        low, high = cell.estimate.ci_low, cell.estimate.ci_high
        half = cell.estimate.half_width
        if cell.estimate.clipped and low is not None and high is not None:
            text = f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
        else:
            text = f"{mean:.{digits}f}" + (
                f" ± {half:.{digits}f}" if half and not math.isnan(half) else ""
            )
    if cell.paper is not None:
        text += f" [paper: {cell.paper:g}]"
    return text
