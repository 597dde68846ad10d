"""The reproduction report: Markdown, a self-contained HTML page, and JSON data.

One row per claim: the paper, section and figure, what it claims, the paper's value, ours with
its 95% confidence interval across seeds, the verdict by the rule of :mod:`.verdict` (stated in
the report) and, where it is not reproduced, the reason. Then the readings of the pseudocode
beside the default, one table per policy; the investigations of the open gaps; and the figures
redrawn from the runs (:mod:`.figures`). The HTML page embeds its figures, so it is one file to
open or send.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dlsched.runs.evaluation.records import to_jsonable
from dlsched.runs.evaluation.summaries import Estimate
from dlsched.runs.reproduce.claims import PAPERS, ClaimsFile
from dlsched.runs.reproduce.figures import DrawnFigure
from dlsched.runs.reproduce.runner import ClaimResult, Outcome, Reproduction, VariantRow
from dlsched.runs.reproduce.statistics import STATISTICS
from dlsched.runs.reproduce.verdict import RULE, Verdict, format_number
from dlsched.runs.tables import Column, aligned, legend, markdown_legend

MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
JSON_FILE = "results.json"


@dataclass(frozen=True)
class ReportContext:
    """What the report says about how it was made.

    Attributes:
        version: the dlsched version.
        commit: the git commit of the code, if it runs from a checkout.
        created: when (UTC).
    """

    version: str
    commit: str | None
    created: datetime


# ---------------------------------------------------------------------------------- numbers


def format_estimate(ours: Estimate, seeds: int) -> str:
    """``5.8 [5.3, 6.3]``: the mean and its CI; ``n=8/10`` when some seeds had no value."""
    if ours.mean is None:
        return "undefined"
    text = format_number(ours.mean)
    if ours.ci_low is not None and ours.ci_high is not None:
        text += f" [{format_number(ours.ci_low)}, {format_number(ours.ci_high)}]"
    if ours.n < seeds:
        text += f" (n={ours.n}/{seeds})"
    return text


def counts(results: Sequence[ClaimResult]) -> dict[Verdict, int]:
    """How many claims got each verdict."""
    tally = dict.fromkeys(Verdict, 0)
    for result in results:
        tally[result.outcome.judgement.verdict] += 1
    return tally


def _measure_text(result: ClaimResult) -> str:
    measure = result.measure
    args = ", ".join(f"{k}={v}" for k, v in measure.args)
    statistic = f"{measure.statistic}({args})" if args else measure.statistic
    against = f" vs {measure.reference}" if measure.reference else ""
    options = ", ".join(f"{k}={v}" for k, v in measure.backend_options)
    backend = f" [{options}]" if options else ""
    return f"{measure.scenario}{backend}: {measure.policy}{against}, {statistic}"


def evaluate_command(result: ClaimResult) -> str:
    """The ``dlsched evaluate`` command that runs the same episodes as the claim."""
    measure = result.measure
    policies = ",".join(measure.policies)
    command = (
        f"dlsched evaluate --scenario {measure.scenario} --policy {policies} "
        f"--episodes {len(result.seeds)} --seed {result.seeds[0]}"
    )
    if result.backend != "replay":
        command += f" --backend {result.backend}"
    for key, value in measure.backend_options:
        command += f" --{key.replace('_', '-')} {value}"
    return command


# ---------------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class _Table:
    """A table of the report: its columns (each with its legend line) and its rows."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]

    @property
    def header(self) -> tuple[str, ...]:
        return tuple(column.header for column in self.columns)


#: The claims table's columns before its policy's readings (and the printed table's, in part).
_CLAIM = Column(
    "claim", "the claim's id in the claims file (dlsched reproduce --list says each)", left=True
)
_PAPER_VALUE = Column("paper value", "the paper's number in the claim's unit, or its direction")
_OURS = "our mean across seeds [its 95% CI]; (n=k/N) where only k of N seeds had a value"
_VERDICT = (
    "reproduced, direction only or not reproduced, by the verdict rule; (fitted): a number the "
    "profiles were derived from, so agreement is by construction"
)

#: The columns of the table ``dlsched reproduce`` prints: a line per claim.
PRINTED_COLUMNS = (
    _CLAIM,
    Column("paper", _PAPER_VALUE.meaning),
    Column("ours", _OURS, left=True),
    Column("verdict", _VERDICT + "; then, where not reproduced, why", left=True),
)


def render_claims_lines(reproduction: Reproduction) -> str:
    """What ``dlsched reproduce`` prints: the claims table (a line per claim that ran), the
    claims skipped, and the table's legend."""
    rows = []
    for result in reproduction.results:
        outcome, claim = result.outcome, result.claim
        verdict = outcome.judgement.verdict.value + (" (fitted)" if claim.fitted else "")
        reason = f"  ({outcome.judgement.reason})" if outcome.judgement.reason else ""
        rows.append(
            [
                claim.id,
                claim.paper_text(),
                format_estimate(outcome.estimate, len(result.seeds)),
                verdict + reason,
            ]
        )
    blocks = [aligned(PRINTED_COLUMNS, rows)]
    skipped = reproduction.skipped
    if skipped:
        reasons = dict.fromkeys(s.reason for s in skipped)
        blocks[0] += (
            f"\n{len(skipped)} claims skipped ({'; '.join(reasons)}): "
            f"{', '.join(s.claim.id for s in skipped)}"
        )
    return "\n\n".join([*blocks, legend(PRINTED_COLUMNS)])


def _how_measured(reproduction: Reproduction) -> list[tuple[str, str, str, str]]:
    """The section "How each claim is measured", a line per claim that ran: its id, its measure
    with the statistic and the seeds, the command that measures it by hand, and the claim's
    note (with a space before it, or empty)."""
    lines = []
    for result in reproduction.results:
        statistic = STATISTICS[result.measure.statistic].description
        how = f"{_measure_text(result)} ({statistic}); seeds {result.seeds[0]}-{result.seeds[-1]}"
        note = f" {result.claim.note}" if result.claim.note else ""
        lines.append((result.claim.id, how, evaluate_command(result), note))
    return lines


def _claims_table(reproduction: Reproduction) -> _Table:
    columns = (
        _CLAIM,
        Column("paper", "the paper: DQoES, FlowCon, SpeCon or TRADL", left=True),
        Column("where", "its section, and figure or table", left=True),
        Column("what the paper claims", "the claim, in the paper's terms", left=True),
        _PAPER_VALUE,
        Column("ours (95% CI)", _OURS),
        Column("unit", "the claim's unit, whose tolerance the verdict rule lists", left=True),
        Column("verdict", _VERDICT, left=True),
        Column("reason", "why a claim is not reproduced", left=True),
    )
    rows = []
    for result in reproduction.results:
        claim, outcome = result.claim, result.outcome
        where = claim.section + (f", {claim.figure}" if claim.figure else "")
        verdict = outcome.judgement.verdict.value + (" (fitted)" if claim.fitted else "")
        rows.append(
            (
                claim.id,
                claim.paper,
                where,
                claim.text,
                claim.paper_text(),
                format_estimate(outcome.estimate, len(result.seeds)),
                claim.unit,
                verdict,
                outcome.judgement.reason,
            )
        )
    return _Table(columns, tuple(rows))


def _readings_tables(reproduction: Reproduction) -> list[tuple[str, _Table]]:
    """Per policy with readings: its table (claim x reading), each reading's column explained
    by its parameters and the lines of the paper that admit it."""
    tables = []
    for policy in dict.fromkeys(r.measure.policy for r in reproduction.results if r.readings):
        readings = reproduction.claims.readings_of(policy)
        results = [r for r in reproduction.results if r.measure.policy == policy and r.readings]
        cell = "ours: mean [95% CI]: verdict"
        columns = (
            _CLAIM,
            _PAPER_VALUE,
            Column("default", f"the baseline with its paper's parameters; {cell}"),
            *(
                Column(
                    reading.name,
                    f"{', '.join(f'{k}={v}' for k, v in reading.params)} ({reading.source}); "
                    f"{cell}",
                )
                for reading in readings
            ),
        )
        rows = []
        for result in results:
            cells = [_reading_cell(result.outcome, len(result.seeds))]
            by_name = {outcome.reading: outcome for outcome in result.readings}
            cells += [
                _reading_cell(by_name[r.name], len(result.seeds)) if r.name in by_name else "-"
                for r in readings
            ]
            rows.append((result.claim.id, result.claim.paper_text(), *cells))
        tables.append((policy, _Table(columns, tuple(rows))))
    return tables


def _reading_cell(outcome: Outcome, seeds: int) -> str:
    return f"{format_estimate(outcome.estimate, seeds)}: {outcome.judgement.verdict.value}"


def _investigation_tables(reproduction: Reproduction) -> list[tuple[str, str, _Table, str, str]]:
    found = []
    for result in reproduction.investigations:
        investigation = result.investigation
        columns = (
            Column(
                "variant",
                "default (the paper's parameters), a reading of the pseudocode, or a variant of "
                "the investigation",
                left=True,
            ),
            Column("parameters", "the parameters that differ from the paper's", left=True),
            *(
                Column(
                    d.label,
                    f"{STATISTICS[d.statistic].description}: mean across seeds [its 95% CI]",
                )
                for d in investigation.diagnostics
            ),
            Column(
                f"{result.claim.id}: verdict", "the claim's verdict under the variant", left=True
            ),
        )
        seeds = len(next(r for r in reproduction.results if r.claim.id == result.claim.id).seeds)
        rows = tuple(
            (
                row.variant,
                ", ".join(f"{k}={v}" for k, v in row.params) or "(the paper's)",
                *(format_estimate(estimate, seeds) for estimate in row.diagnostics),
                row.claim.judgement.verdict.value,
            )
            for row in result.rows
        )
        reproduced = [
            r.variant for r in result.rows if r.claim.judgement.verdict is Verdict.REPRODUCED
        ]
        claim = result.claim
        finding = (
            f"Under the rule, the paper's {claim.paper_text()} ({claim.id}) is reproduced by: "
            f"{', '.join(reproduced)}."
            if reproduced
            else f"Under the rule, no variant reproduces the paper's {claim.paper_text()} "
            f"({claim.id})."
        )
        closest = _closest(result.rows, claim.value)
        if closest:
            finding += f" Closest to it: {closest}."
        found.append(
            (
                investigation.id,
                investigation.question,
                _Table(columns, rows),
                investigation.explanation,
                finding,
            )
        )
    return found


def _closest(rows: Sequence[VariantRow], value: float | None) -> str:
    if value is None:
        return ""
    scored = [
        (abs(mean - value), row.variant)
        for row in rows
        if (mean := row.claim.estimate.mean) is not None
    ]
    return min(scored)[1] if scored else ""


def _units(claims: ClaimsFile) -> list[str]:
    return [
        f"{unit.name}: {unit.description}" if unit.description else unit.name
        for unit in claims.units.values()
    ]


def _header_lines(reproduction: Reproduction, context: ReportContext) -> list[str]:
    claims, options = reproduction.claims, reproduction.options
    seeds = sorted({len(result.seeds) for result in reproduction.results})
    per_claim = (
        f"{options.episodes} episodes per claim"
        if options.episodes is not None
        else f"each claim's own seeds ({', '.join(map(str, seeds))} episodes)"
    )
    commit = f", commit {context.commit[:12]}" if context.commit else ""
    return [
        f"Claims file `{claims.path.name}` version {claims.version} (sha256 "
        f"{claims.content_hash}); backend `{options.backend}`; {per_claim} from seed "
        f"{options.first_seed}; dlsched {context.version}{commit}; "
        f"{context.created.strftime('%Y-%m-%d %H:%M UTC')}.",
        f"{len(reproduction.episodes)} episodes ran. Readings of the pseudocode: "
        f"{'run' if options.readings else 'not run'}.",
    ]


def _summary(reproduction: Reproduction) -> str:
    tally = counts(reproduction.results)
    by_paper = []
    for paper in PAPERS:
        results = [r for r in reproduction.results if r.claim.paper == paper]
        if results:
            paper_tally = counts(results)
            by_paper.append(
                f"{paper} {paper_tally[Verdict.REPRODUCED]}/{paper_tally[Verdict.DIRECTION_ONLY]}/"
                f"{paper_tally[Verdict.NOT_REPRODUCED]}"
            )
    return (
        f"{len(reproduction.results)} claims: {tally[Verdict.REPRODUCED]} reproduced, "
        f"{tally[Verdict.DIRECTION_ONLY]} direction only, {tally[Verdict.NOT_REPRODUCED]} not "
        f"reproduced (by paper, reproduced/direction only/not: {', '.join(by_paper)})."
    )


# ---------------------------------------------------------------------------------- markdown


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(table: _Table) -> list[str]:
    """The table, then its legend (a list item per column) after a blank line."""
    lines = [
        "| " + " | ".join(_md_cell(cell) for cell in table.header) + " |",
        "|" + "---|" * len(table.header),
    ]
    lines += ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in table.rows]
    return [*lines, "", markdown_legend(table.columns)]


def render_markdown(
    reproduction: Reproduction, figures: Sequence[DrawnFigure], context: ReportContext
) -> str:
    """The report as Markdown (figures linked from the ``figures`` folder beside it)."""
    lines = ["# dlsched reproduce: the papers' claims against our runs", ""]
    lines += [*_header_lines(reproduction, context), "", _summary(reproduction), ""]
    lines += ["## Verdict rule", "", RULE, "", "Tolerances by unit:", ""]
    lines += [f"- {unit}" for unit in _units(reproduction.claims)]
    lines += [
        "",
        "A verdict marked *(fitted)* is that of a number the paper profiles were derived from: "
        "agreement there is by construction, not evidence.",
        "",
        "## Claims",
        "",
    ]
    lines += _md_table(_claims_table(reproduction))
    if reproduction.skipped:
        lines += ["", "Not run on this backend:", ""]
        lines += [f"- `{s.claim.id}`: {s.reason}" for s in reproduction.skipped]
    lines += ["", "## How each claim is measured", ""]
    for claim, how, command, note in _how_measured(reproduction):
        lines.append(f"- `{claim}`: {how}; by hand: `{command}`.{note}")
    readings = _readings_tables(reproduction)
    if readings:
        lines += [
            "",
            "## Readings of the pseudocode",
            "",
            "Where a paper's pseudocode admits several readings, each runs beside the default "
            "(the baseline's paper parameters) on the same seeds; the verdict of the claims "
            "above is the default's.",
        ]
        for policy, table in readings:
            lines += ["", f"### {policy}", "", *_md_table(table)]
    investigations = _investigation_tables(reproduction)
    if investigations:
        lines += ["", "## Open gaps investigated"]
        for name, question, table, explanation, finding in investigations:
            lines += ["", f"### {name}", "", question, "", *_md_table(table), "", finding, ""]
            lines += [explanation]
    if figures:
        lines += ["", "## Figures redrawn from our runs"]
        for scenario in dict.fromkeys(figure.scenario for figure in figures):
            lines += ["", f"### {scenario}", ""]
            for figure in (f for f in figures if f.scenario == scenario):
                lines += [
                    f"![{figure.caption}]({figure.path.as_posix()})",
                    "",
                    f"*{figure.caption}*",
                    "",
                ]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------- html

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 110em; padding: 0 1em;
       color: #222; line-height: 1.4; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; text-align: left; }
th { background: #f0f0f0; position: sticky; top: 0; }
tr.reproduced td.verdict { background: #d9f2d9; }
tr.direction-only td.verdict { background: #fff2cc; }
tr.not-reproduced td.verdict { background: #f8d7d7; }
td.num { white-space: nowrap; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; } code { background: #f4f4f4; padding: 0 0.2em; }
"""

_VERDICT_CLASSES = {v.value: v.value.replace(" ", "-") for v in Verdict}


def _inline(text: str) -> str:
    """Markdown's ``code`` and **bold** in a line of text, as HTML."""
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def _html_table(
    table: _Table, verdict_column: int | None = None, numeric: Sequence[int] = ()
) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in table.header)
    body = []
    for row in table.rows:
        css = ""
        if verdict_column is not None:
            verdict = row[verdict_column].split(" (")[0]
            css = f' class="{_VERDICT_CLASSES.get(verdict, "")}"'
        cells = []
        for index, cell in enumerate(row):
            cls = "verdict" if index == verdict_column else "num" if index in numeric else ""
            attribute = f' class="{cls}"' if cls else ""
            cells.append(f"<td{attribute}>{_inline(cell)}</td>")
        body.append(f"<tr{css}>{''.join(cells)}</tr>")
    items = "".join(
        f"<li>{_inline(f'{column.header}: {column.meaning}')}</li>" for column in table.columns
    )
    return (
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f'<ul class="legend">{items}</ul>'
    )


def render_html(
    reproduction: Reproduction,
    figures: Sequence[DrawnFigure],
    context: ReportContext,
    folder: Path,
) -> str:
    """The report as one self-contained HTML page: the figures under ``folder`` are embedded."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>dlsched reproduce</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>dlsched reproduce: the papers' claims against our runs</h1>",
    ]
    parts += [f"<p>{_inline(line)}</p>" for line in _header_lines(reproduction, context)]
    parts += [f"<p><strong>{html.escape(_summary(reproduction))}</strong></p>"]
    parts += ["<h2>Verdict rule</h2>", f"<p>{_inline(RULE)}</p>", "<p>Tolerances by unit:</p><ul>"]
    parts += [f"<li>{_inline(unit)}</li>" for unit in _units(reproduction.claims)]
    parts += [
        "</ul><p>A verdict marked <em>(fitted)</em> is that of a number the paper profiles were "
        "derived from: agreement there is by construction, not evidence.</p>",
        "<h2>Claims</h2>",
        _html_table(_claims_table(reproduction), verdict_column=7, numeric=(4, 5)),
    ]
    if reproduction.skipped:
        parts += ["<p>Not run on this backend:</p><ul>"]
        parts += [
            f"<li><code>{html.escape(s.claim.id)}</code>: {html.escape(s.reason)}</li>"
            for s in reproduction.skipped
        ]
        parts += ["</ul>"]
    parts += ["<h2>How each claim is measured</h2><ul>"]
    for claim, how, command, note in _how_measured(reproduction):
        parts.append(
            f"<li><code>{html.escape(claim)}</code>: {html.escape(how)}; by hand: "
            f"<code>{html.escape(command)}</code>.{html.escape(note)}</li>"
        )
    parts += ["</ul>"]
    readings = _readings_tables(reproduction)
    if readings:
        parts += [
            "<h2>Readings of the pseudocode</h2>",
            "<p>Where a paper's pseudocode admits several readings, each runs beside the default "
            "(the baseline's paper parameters) on the same seeds; the verdict of the claims "
            "above is the default's.</p>",
        ]
        for policy, table in readings:
            parts += [
                f"<h3>{html.escape(policy)}</h3>",
                _html_table(table, numeric=range(1, len(table.header))),
            ]
    investigations = _investigation_tables(reproduction)
    if investigations:
        parts += ["<h2>Open gaps investigated</h2>"]
        for name, question, table, explanation, finding in investigations:
            parts += [
                f"<h3>{html.escape(name)}</h3>",
                f"<p>{_inline(question)}</p>",
                _html_table(table, numeric=range(2, len(table.header))),
                f"<p><strong>{_inline(finding)}</strong></p>",
                f"<p>{_inline(explanation)}</p>",
            ]
    if figures:
        parts += ["<h2>Figures redrawn from our runs</h2>"]
        for scenario in dict.fromkeys(figure.scenario for figure in figures):
            parts += [f"<h3>{html.escape(scenario)}</h3>"]
            for figure in (f for f in figures if f.scenario == scenario):
                data = base64.b64encode((folder / figure.path).read_bytes()).decode("ascii")
                parts.append(
                    f'<figure><img alt="{html.escape(figure.caption)}" '
                    f'src="data:image/png;base64,{data}">'
                    f"<figcaption>{html.escape(figure.caption)}</figcaption></figure>"
                )
    parts += ["</body></html>"]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------- json


def results_data(reproduction: Reproduction, context: ReportContext) -> dict[str, object]:
    """The results as JSON data: every claim's values per seed, estimate and verdict."""
    claims = reproduction.claims
    return {
        "claims_file": str(claims.path),
        "claims_version": claims.version,
        "claims_hash": claims.content_hash,
        "backend": reproduction.options.backend,
        "options": to_jsonable(reproduction.options),
        "dlsched_version": context.version,
        "commit": context.commit,
        "created": context.created.isoformat(),
        "summary": {
            verdict.value: count for verdict, count in counts(reproduction.results).items()
        },
        "claims": [
            {
                "id": result.claim.id,
                "paper": result.claim.paper,
                "section": result.claim.section,
                "figure": result.claim.figure,
                "paper_value": result.claim.value,
                "unit": result.claim.unit,
                "measure": to_jsonable(result.measure),
                "seeds": list(result.seeds),
                "evaluate_command": evaluate_command(result),
                "outcome": to_jsonable(result.outcome),
                "readings": to_jsonable(result.readings),
            }
            for result in reproduction.results
        ],
        "skipped": [{"id": s.claim.id, "reason": s.reason} for s in reproduction.skipped],
        "investigations": [
            {
                "id": inv.investigation.id,
                "claim": inv.claim.id,
                "diagnostics": [d.label for d in inv.investigation.diagnostics],
                "rows": to_jsonable(inv.rows),
            }
            for inv in reproduction.investigations
        ],
    }


def now_context(version: str, commit: str | None) -> ReportContext:
    """A context stamped now."""
    return ReportContext(version, commit, datetime.now(UTC))
