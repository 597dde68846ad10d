"""Every column of every table dlsched prints has a line in the table's legend.

A newcomer met ``|S| end``, ``|G| end`` and ``|B| end`` in ``dlsched evaluate``'s table with
nothing saying what they were. Each test here prints a table as a user gets it, reads its header
back (columns are two spaces apart in plain text, ``|``-separated in Markdown) and asks for a
legend line ``<header>: <meaning>`` (in Markdown ``- <header>: <meaning>``) for each column.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import pytest

from dlsched.baselines import make
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.runs.cli import main
from dlsched.runs.fidelity.validation_report import render_report
from dlsched.runs.fidelity.validation_sides import REPLAY, run_validation
from dlsched.runs.tracking.compare import render_markdown
from dlsched.runs.tracking.tracked_evaluation import EvaluationRequest, evaluate_untracked


def _text_header(text: str, first: str) -> list[str]:
    """The cells of the plain-text header line that starts (past its indent) with ``first``."""
    line = next(line for line in text.splitlines() if line.strip().startswith(first + "  "))
    return re.split(r"\s{2,}", line.strip())


def _markdown_headers(text: str) -> list[list[str]]:
    """The cells of every Markdown table's header line (the line above a ``|---`` line)."""
    lines = text.splitlines()
    return [
        [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line, below in itertools.pairwise(lines)
        if line.startswith("|") and below.startswith("|---")
    ]


def unexplained(text: str, header: list[str]) -> list[str]:
    """The columns of ``header`` without a legend line in ``text``."""
    starts = {line.strip().removeprefix("- ") for line in text.splitlines()}
    return [cell for cell in header if not any(s.startswith(f"{cell}: ") for s in starts)]


def _short(tmp_path: Path, name: str, horizon_s: float) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(dump_scenario(dataclasses.replace(load_scenario(name), horizon_s=horizon_s)))
    return str(path)


@pytest.mark.parametrize(
    ("scenario", "horizon_s"), [("dqoes-varied-burst", 100.0), ("flowcon-poc-3", 600.0)]
)
def test_evaluate_explains_every_column(tmp_path, capsys, scenario, horizon_s):
    args = ["evaluate", "--scenario", _short(tmp_path, scenario, horizon_s)]
    args += ["--policy", "default,oracle", "--episodes", "2", "--no-tracking", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    header = _text_header(out, "policy")
    assert "x default" in header and len(header) >= 7
    assert unexplained(out, header) == []


def test_compare_markdown_explains_every_column(tmp_path):
    scenario = load_scenario(_short(tmp_path, "dqoes-varied-burst", 100.0))
    comparison = evaluate_untracked(
        EvaluationRequest(scenario, (make("default"), make("dqoes")), (0, 1), "replay"),
        progress=False,
    )
    markdown = render_markdown([comparison])
    (header,) = _markdown_headers(markdown)
    assert "|B| end" in header
    assert unexplained(markdown, header) == []


def test_validate_explains_every_column():
    scenario = load_scenario("docker-training-4")
    report, _, _ = run_validation(
        scenario, [make("default"), make("equal")], seeds=(0,), reference=REPLAY, progress=False
    )
    text = render_report(report)
    header = _text_header(text, "policy")
    assert "median |err|" in header
    assert unexplained(text, header) == []


def test_reproduce_explains_every_column_it_prints_and_reports(tmp_path, capsys):
    args = ["reproduce", "--only", "dqoes-vb1-target20-all-in-b,flowcon-63-poc-vae-share"]
    args += ["--episodes", "1", "--no-tracking", "--no-progress", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    header = _text_header(out, "claim")
    assert header[:2] == ["claim", "paper"]
    assert unexplained(out, header) == []
    (report,) = tmp_path.glob("*/report.md")
    markdown = report.read_text()
    headers = _markdown_headers(markdown)
    assert len(headers) >= 3  # the claims, and the readings of DQoES's and FlowCon's pseudocode
    for header in headers:
        assert unexplained(markdown, header) == [], header


def test_the_baselines_report_explains_every_column(capsys):
    args = ["baselines", "report", "--scenario", "dqoes-cluster-40,flowcon-poc-3"]
    assert main([*args, "--policy", "default"]) == 0
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.startswith("scenario  ")]
    assert len(headers) == 2  # an inference table and a training table
    for line in headers:
        header = re.split(r"\s{2,}", line.strip())
        assert unexplained(out, header) == [], header


def test_the_scenario_listing_explains_every_column(capsys):
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    header = _text_header(out, "NAME")
    assert "WORKERS x CORES" in header
    assert unexplained(out, header) == []
