"""Comparison tables: scenario x policy, with means, confidence intervals, ratios, best marked.

The same tables serve ``dlsched evaluate`` (one scenario, the episodes it just ran) and
``dlsched compare`` (any episodes read back from MLflow), so both print the same numbers for the
same episodes.

Reading back, episodes are grouped by scenario (name and content hash, so an edited scenario is
not mixed with its earlier version) and backend, then by policy and evaluation: a policy that
was evaluated several times on a scenario gets one row per evaluation, labelled
``<policy>@<evaluation time>``, so nothing is pooled or dropped silently; evaluations whose
episodes are identical (the same seeds and scores: a deterministic evaluation run again) are
one row, under the newest, labelled with how many there were (``default x4``). An episode
stored twice (two runs of one evaluation, policy and seed: uploaded by two syncs at once, say)
is counted once, by its first run. A row's ratios are to the ``default`` (and ``oracle``) of
its own evaluation if there is one, else to the newest such row of the scenario. Where the
episodes ran on a backend and scenario that have a bound (:mod:`dlsched.runs.evaluation.bounds`),
it is computed again for their seeds from the scenario they ran, as ``evaluate`` computed it.
Every row is ranked on what it achieves (the primary metric) and on what it costs (the cores
allocated), and marked where it is on the Pareto front of the two.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlsched.envs.backend_registry import BACKENDS
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.runs.evaluation.metrics import (
    COST_METRIC,
    METRIC_SPECS,
    PRIMARY_METRIC,
    MetricSpec,
    metrics_for,
)
from dlsched.runs.evaluation.records import DEFAULT_POLICY, ORACLE_POLICY
from dlsched.runs.evaluation.summaries import (
    BoundSummary,
    MetricSummary,
    PolicySummary,
    summarise_policy,
    with_ratios,
)
from dlsched.runs.tables import Column, aligned, legend, markdown_legend

FORMATS: tuple[str, ...] = ("table", "markdown", "json")
#: How the tables name the bound's line: in parentheses, as no policy is named.
BOUND_LABEL = "(bound)"

# plots (matplotlib) and stored runs (MLflow) are imported where used: dlsched evaluate prints
# its table with this module and needs neither to parse its arguments
if TYPE_CHECKING:
    from dlsched.runs.tracking.plots import ComparisonPanel
    from dlsched.runs.tracking.stored_runs import StoredEpisode


@dataclass(frozen=True)
class ScenarioComparison:
    """The policies evaluated on one scenario and backend.

    Attributes:
        scenario: the scenario's name.
        scenario_hash: its content hash.
        kind: inference or training.
        backend: the backend's name.
        summaries: one per row, ratios filled in.
        evaluations: the evaluation id of each row.
        bound: the bound of the primary metric on the rows' seeds, where one is given
            (:mod:`dlsched.runs.evaluation.bounds`); the rows' ratios to it are filled in.
    """

    scenario: str
    scenario_hash: str
    kind: JobKind
    backend: str
    summaries: tuple[PolicySummary, ...]
    evaluations: tuple[str, ...] = field(default=())
    bound: BoundSummary | None = None

    @property
    def metrics(self) -> tuple[MetricSpec, ...]:
        return metrics_for(self.kind)

    def best(self, metric: str) -> set[int]:
        """Indices of the rows with the best mean of ``metric``; ties (means that print alike,
        :func:`_shown`) share it, and when every row ties none is best; none for a metric that
        is not ranked (:attr:`~dlsched.runs.evaluation.metrics.MetricSpec.ranked`)."""
        spec = next(spec for spec in self.metrics if spec.name == metric)
        if not spec.ranked:
            return set()
        means = {
            index: _shown(spec, mean)
            for index, summary in enumerate(self.summaries)
            if (mean := summary.metric(metric).estimate.mean) is not None
        }
        top = (
            max(means.values(), default=None)
            if spec.higher_is_better
            else min(means.values(), default=None)
        )
        best = {index for index, mean in means.items() if mean == top}
        return best if len(best) < len(means) else set()  # nothing stands out when all tie

    @property
    def ranked_metrics(self) -> tuple[str, str]:
        """What the rows are ranked on: the scenario's primary metric, then the cores allocated
        (:data:`~dlsched.runs.evaluation.metrics.COST_METRIC`)."""
        return PRIMARY_METRIC[self.kind], COST_METRIC

    def ranks(self, metric: str) -> list[int | None]:
        """Each row's rank on ``metric``'s mean, 1 the best (competition ranking: rows that tie,
        their means printing alike, share the better rank, and the next rank is skipped);
        ``None`` for a row without one."""
        spec = METRIC_SPECS[metric]
        means = [
            None if (mean := summary.metric(metric).estimate.mean) is None else _shown(spec, mean)
            for summary in self.summaries
        ]
        sign = -1.0 if spec.higher_is_better else 1.0
        keyed = [sign * mean for mean in means if mean is not None]
        return [
            None if mean is None else 1 + sum(1 for other in keyed if other < sign * mean)
            for mean in means
        ]

    def pareto(self) -> list[bool]:
        """Per row, whether no other row is at least as good on both :attr:`ranked_metrics`
        and better on one (a row without both means is on no front)."""
        primary, cost = self.ranked_metrics
        signs = [-1.0 if METRIC_SPECS[name].higher_is_better else 1.0 for name in (primary, cost)]
        points: list[tuple[float, float] | None] = []
        for summary in self.summaries:
            values = [
                None
                if (mean := summary.metric(name).estimate.mean) is None
                else _shown(METRIC_SPECS[name], mean)
                for name in (primary, cost)
            ]
            points.append(
                None
                if values[0] is None or values[1] is None
                else (signs[0] * values[0], signs[1] * values[1])
            )
        return [
            point is not None
            and not any(
                other is not None
                and other[0] <= point[0]
                and other[1] <= point[1]
                and other != point
                for other in points
            )
            for point in points
        ]


def _shown(spec: MetricSpec, mean: float) -> float:
    """``mean`` to the digits the tables print it with: what ranks and marks the best, so that
    two policies whose means print alike tie (eight cores allocated, and a hair less from limits
    in float32, are the same cost)."""
    return round(mean, spec.decimals)


def compare_stored(
    episodes: Sequence[StoredEpisode],
    scenario_of: Callable[[StoredEpisode], Scenario | None] | None = None,
) -> list[ScenarioComparison]:
    """Group stored episodes into comparisons, ordered by scenario name and backend; each
    episode once, however many runs hold it.

    Args:
        episodes: the stored episodes.
        scenario_of: the scenario an episode ran (``None``: not known), for the bound of its
            comparison (:func:`~dlsched.runs.tracking.stored_runs.stored_scenario`); without
            it, no comparison has a bound.
    """
    groups: dict[tuple[str, str, str], list[StoredEpisode]] = {}
    first_runs: dict[tuple[str, str, int], StoredEpisode] = {}
    for episode in sorted(episodes, key=lambda e: (e.started_ms, e.run_id)):
        first_runs.setdefault(episode.identity, episode)
    for episode in first_runs.values():
        groups.setdefault((episode.scenario, episode.scenario_hash, episode.backend), []).append(
            episode
        )
    comparisons = []
    for (scenario, scenario_hash, backend), members in sorted(groups.items()):
        grouped: dict[tuple[str, str], list[StoredEpisode]] = {}
        for episode in members:  # oldest first, so rows keep the order they ran in
            key = (episode.evaluation_id, episode.score.policy.name)
            grouped.setdefault(key, []).append(episode)
        names = [name for _, name in grouped]
        # the evaluations of one policy side by side, policies in the order they first ran
        rows = _merge_identical(sorted(grouped.items(), key=lambda item: names.index(item[0][1])))
        kind = members[0].kind
        bound = _stored_bound(members, scenario_of) if scenario_of is not None else None
        plain = []
        for (evaluation, name), (row, count) in rows.items():
            distinct = sum(1 for _, other in rows if other == name)
            label = name if distinct == 1 else f"{name}@{_evaluation_time(evaluation)}"
            if count > 1:
                label += f" x{count}"
            plain.append(summarise_policy(label, [e.score for e in row], kind, bound))
        evaluations = tuple(evaluation for evaluation, _ in rows)
        summaries = tuple(
            with_ratios(
                summary,
                _reference(DEFAULT_POLICY, evaluation, plain, evaluations),
                _reference(ORACLE_POLICY, evaluation, plain, evaluations),
            )
            for summary, evaluation in zip(plain, evaluations, strict=True)
        )
        comparisons.append(
            ScenarioComparison(
                scenario, scenario_hash, kind, backend, summaries, evaluations, bound
            )
        )
    return comparisons


def _stored_bound(
    members: Sequence[StoredEpisode], scenario_of: Callable[[StoredEpisode], Scenario | None]
) -> BoundSummary | None:
    """The bound on the seeds of one scenario's and backend's stored episodes, where one is
    given, from the scenario the newest of them ran."""
    # it imports Gymnasium and the replay model, which the tables' other readers do not need
    from dlsched.runs.evaluation.bounds import evaluation_bound

    newest = max(members, key=lambda episode: (episode.started_ms, episode.run_id))
    if newest.backend not in BACKENDS:
        return None  # a backend with options (its label names them), which the bound refuses
    scenario = scenario_of(newest)
    if scenario is None:
        return None
    seeds = sorted({episode.score.seed for episode in members})
    return evaluation_bound(scenario, newest.backend, {}, seeds)


def _merge_identical(
    rows: Sequence[tuple[tuple[str, str], list[StoredEpisode]]],
) -> dict[tuple[str, str], tuple[list[StoredEpisode], int]]:
    """One row per distinct evaluation of a policy: rows whose episodes are the same (policy and
    parameters, seeds and every score: a deterministic evaluation run again) become one, under
    the newest evaluation, with how many there were; keyed by (evaluation, policy)."""
    merged: dict[object, tuple[tuple[str, str], list[StoredEpisode], int]] = {}
    for key, episodes in rows:  # oldest first within a policy
        content = (key[1], tuple(sorted((e.score for e in episodes), key=lambda s: s.seed)))
        _, _, count = merged.get(content, (key, episodes, 0))
        merged[content] = (key, episodes, count + 1)  # where the first copy stood
    return {key: (episodes, count) for key, episodes, count in merged.values()}


def _reference(
    name: str, evaluation: str, summaries: Sequence[PolicySummary], evaluations: Sequence[str]
) -> PolicySummary | None:
    candidates = [
        (summary, other)
        for summary, other in zip(summaries, evaluations, strict=True)
        if summary.policy.name == name
    ]
    for summary, other in candidates:
        if other == evaluation:
            return summary
    return candidates[-1][0] if candidates else None  # the newest evaluation's


def _evaluation_time(evaluation_id: str) -> str:
    """``<date>-<time>-<hex>`` of ``<scenario>-<date>-<time>-<hex>``."""
    return "-".join(evaluation_id.rsplit("-", 3)[-3:])


# ---------------------------------------------------------------------------------- rendering


def _value(metric: MetricSummary) -> str:
    estimate = metric.estimate
    if estimate.mean is None:
        return "undefined"
    digits = metric.spec.decimals
    if estimate.clipped and estimate.ci_low is not None and estimate.ci_high is not None:
        # A symmetric +- would reach past the range the metric can take.
        low, high = estimate.ci_low, estimate.ci_high
        return f"{estimate.mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
    half = estimate.half_width
    return f"{estimate.mean:.{digits}f} ± " + (f"{half:.{digits}f}" if half is not None else "n/a")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _rows(comparison: ScenarioComparison, best_mark: tuple[str, str]) -> list[list[str]]:
    primary = PRIMARY_METRIC[comparison.kind]
    best = {spec.name: comparison.best(spec.name) for spec in comparison.metrics}
    episodes = max((len(summary.seeds) for summary in comparison.summaries), default=0)
    ranks = _rank_cells(comparison)
    rows = []
    for index, summary in enumerate(comparison.summaries):
        cells = [summary.label]
        for spec in comparison.metrics:
            metric = summary.metric(spec.name)
            text = _value(metric)
            if metric.estimate.mean is not None and metric.estimate.n < episodes:
                text += f" [n={metric.estimate.n}]"
            if index in best[spec.name]:
                text = f"{best_mark[0]}{text}{best_mark[1]}"
            cells.append(text)
        cells.append(ranks[index])
        cells.append(_ratio(summary.metric(primary).ratio_to_default))
        cells.append(_ratio(summary.metric(primary).ratio_to_oracle))
        if comparison.bound is not None:
            cells.append(_ratio(summary.metric(primary).ratio_to_bound))
        rows.append(cells)
    if comparison.bound is not None:
        rows.append(_bound_row(comparison, comparison.bound))
    return rows


def _bound_row(comparison: ScenarioComparison, bound: BoundSummary) -> list[str]:
    """The bound's line: its mean and interval under the metric it bounds, nothing else."""
    cells = [BOUND_LABEL]
    for spec in comparison.metrics:
        cells.append(_value(MetricSummary(spec, bound.estimate)) if spec == bound.spec else "")
    return [*cells, "", "", "", ""]


def _rank_cells(comparison: ScenarioComparison) -> list[str]:
    """Each row's ranks on the primary metric and the cores allocated, ``<rank>/<rank>``
    (``-`` for a rank without a mean), with `` P`` on the Pareto front of the two."""
    primary, cost = (comparison.ranks(name) for name in comparison.ranked_metrics)
    return [
        f"{'-' if first is None else first}/{'-' if second is None else second}"
        + (" P" if front else "")
        for first, second, front in zip(primary, cost, comparison.pareto(), strict=True)
    ]


def _header(comparison: ScenarioComparison) -> list[str]:
    return [column.header for column in _columns(comparison)]


def _columns(comparison: ScenarioComparison) -> list[Column]:
    """The table's columns, each with what it holds, for its legend."""
    primary = METRIC_SPECS[PRIMARY_METRIC[comparison.kind]].label
    labels = [summary.label for summary in comparison.summaries]
    policy = "the policy evaluated"
    if any("@" in label for label in labels):
        policy += "; <policy>@<time>: one of its evaluations, by when it ran"
    if any(re.search(r" x\d+$", label) for label in labels):
        policy += "; <policy> xN: N evaluations whose episodes were identical, shown once"
    if comparison.bound is not None:
        policy += (
            f"; {BOUND_LABEL}: the {comparison.bound.spec.label} no policy can beat on these "
            "seeds, from each seed's jobs and their profiles (dlsched.runs.evaluation.bounds)"
        )
    ratios = [
        Column(
            "x default",
            f"the policy's mean {primary} over default's (Docker's own sharing; - where default "
            "was not evaluated, or its mean is 0)",
        ),
        Column(
            "x oracle",
            f"the policy's mean {primary} over the oracle's (the privileged policy that reads "
            "the profiles; - where it was not evaluated, or its mean is 0)",
        ),
    ]
    if comparison.bound is not None:
        ratios.append(
            Column("x bound", f"the policy's mean {primary} over the bound's on the same seeds")
        )
    cost = METRIC_SPECS[COST_METRIC].label
    rank = Column(
        "rank",
        f"the policy's rank on mean {primary}, then on mean {cost} (1 the best; tied policies "
        "share a rank; - without a mean); P: on the Pareto front of the two, no other policy "
        "at least as good on both and better on one",
    )
    return [
        Column("policy", policy, left=True),
        *(Column(spec.label, spec.description) for spec in comparison.metrics),
        rank,
        *ratios,
    ]


def _title(comparison: ScenarioComparison) -> str:
    seeds = sorted({seed for summary in comparison.summaries for seed in summary.seeds})
    return (
        f"{comparison.scenario} ({comparison.kind.value}, {comparison.backend} backend, "
        f"scenario hash {comparison.scenario_hash}): seeds {_seed_list(seeds)}"
    )


def _seed_list(seeds: Sequence[int]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def _legend_columns(comparisons: Sequence[ScenarioComparison]) -> list[Column]:
    """Every column of the comparisons' tables, each once; a column whose meaning differs
    between them (a policy's, a ratio's) joins its meanings."""
    meanings: dict[str, list[str]] = {}
    alignment: dict[str, bool] = {}
    for comparison in comparisons:
        for column in _columns(comparison):
            said = meanings.setdefault(column.header, [])
            if column.meaning not in said:
                said.append(column.meaning)
            alignment[column.header] = column.left
    return [
        Column(header, "; or ".join(said), alignment[header]) for header, said in meanings.items()
    ]


#: How a cell of the tables is written (the legend's last lines).
CELL_NOTES = (
    "Each cell: mean ± half-width of the 95% Student-t confidence interval across seeds (n/a: "
    "one seed, the interval is undefined); mean [low, high]: the interval clipped to the range "
    "the metric can take (no fraction or count below 0, no fraction above 1); [n=k]: only k "
    "episodes had a value; the best of each metric marked {best}",
)


def render_table(comparisons: Sequence[ScenarioComparison]) -> str:
    """Aligned plain-text tables, one per scenario, then their legend: a line per column."""
    blocks = [
        _title(comparison) + "\n" + aligned(_columns(comparison), _rows(comparison, ("*", "")))
        for comparison in comparisons
    ]
    if not comparisons:
        return ""
    notes = [note.format(best="with *") for note in CELL_NOTES]
    return "\n\n".join(blocks) + "\n\n" + legend(_legend_columns(comparisons), notes)


def render_markdown(comparisons: Sequence[ScenarioComparison]) -> str:
    """GitHub-flavoured Markdown tables, one per scenario, then their legend (a list item per
    column); the best in bold."""
    blocks = []
    for comparison in comparisons:
        header = _header(comparison)
        lines = [
            f"### {_title(comparison)}",
            "",
            _markdown_row(header),
            "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        ]
        lines += [_markdown_row(row) for row in _rows(comparison, ("**", "**"))]
        blocks.append("\n".join(lines))
    if not comparisons:
        return ""
    notes = [note.format(best="in bold") for note in CELL_NOTES]
    return "\n\n".join(blocks) + "\n\n" + markdown_legend(_legend_columns(comparisons), notes)


def _markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def comparison_data(comparisons: Sequence[ScenarioComparison]) -> list[dict[str, Any]]:
    """The comparisons as JSON-ready data (every metric, its interval, ratios and best flag)."""
    data = []
    for comparison in comparisons:
        best = {spec.name: comparison.best(spec.name) for spec in comparison.metrics}
        ranks = {name: comparison.ranks(name) for name in comparison.ranked_metrics}
        front = comparison.pareto()
        policies = []
        for index, summary in enumerate(comparison.summaries):
            entry: dict[str, Any] = {
                "label": summary.label,
                "policy": summary.policy.name,
                "params": dict(summary.policy.params),
                "seeds": list(summary.seeds),
                "metrics": {
                    metric.spec.name: {
                        "mean": metric.estimate.mean,
                        "ci95_low": metric.estimate.ci_low,
                        "ci95_high": metric.estimate.ci_high,
                        "n": metric.estimate.n,
                        "ratio_to_default": metric.ratio_to_default,
                        "ratio_to_oracle": metric.ratio_to_oracle,
                        "ratio_to_bound": metric.ratio_to_bound,
                        "best": index in best[metric.spec.name],
                    }
                    for metric in summary.metrics
                },
                "ranks": {name: ranked[index] for name, ranked in ranks.items()},
                "pareto": front[index],
            }
            if comparison.evaluations:
                entry["evaluation"] = comparison.evaluations[index]
            policies.append(entry)
        data.append(
            {
                "scenario": comparison.scenario,
                "scenario_hash": comparison.scenario_hash,
                "kind": comparison.kind.value,
                "backend": comparison.backend,
                "primary_metric": PRIMARY_METRIC[comparison.kind],
                "ranked_on": list(comparison.ranked_metrics),
                "policies": policies,
                "bound": _bound_data(comparison.bound),
            }
        )
    return data


def _bound_data(bound: BoundSummary | None) -> dict[str, Any] | None:
    """The bound as JSON-ready data (``None`` where none is given)."""
    if bound is None:
        return None
    return {
        "metric": bound.spec.name,
        "kind": "upper" if bound.spec.higher_is_better else "lower",
        "mean": bound.estimate.mean,
        "ci95_low": bound.estimate.ci_low,
        "ci95_high": bound.estimate.ci_high,
        "n": bound.estimate.n,
        "by_seed": {str(seed): value for seed, value in bound.by_seed},
    }


def comparison_panels(comparisons: Sequence[ScenarioComparison]) -> list[ComparisonPanel]:
    """The plot panels of the comparisons: each scenario's primary metric."""
    from dlsched.runs.tracking.plots import ComparisonPanel

    panels = []
    for comparison in comparisons:
        primary = PRIMARY_METRIC[comparison.kind]
        best = comparison.best(primary)
        panels.append(
            ComparisonPanel(
                title=f"{comparison.scenario} ({comparison.backend})",
                metric=primary,
                summaries=comparison.summaries,
                best=min(best) if best else None,
            )
        )
    return panels
