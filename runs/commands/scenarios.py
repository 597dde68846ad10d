"""``dlsched scenarios``: list the shipped scenarios, show one shipped scenario's YAML, check a
scenario file, or print the JSON Schema of scenario files.

Every scenario is loaded (and so validated) before it is listed or shown; a scenario that fails
validation is reported on stderr with its problems, and the command exits with 2. A scenario
named or checked is also held against its replay profiles (its workloads, the units of work a
step holds), and its verdict is one line. A shipped scenario's name prints its file, comments
included, on stdout (``dlsched scenarios NAME > mine.yaml`` is how the README copies one) and the
verdict on stderr; a user's file is the user's own, so checking it prints the verdict alone, on
stdout, and the scenario as dlsched reads it only with ``--show`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass

from dlsched.envs.errors import ArgumentError, DlschedError
from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.scenarios.file_format import (
    dump_scenario,
    is_scenario_file,
    load_scenario,
    scenario_names,
    scenario_text,
    scenario_to_data,
)
from dlsched.envs.scenarios.model import IntRange, Scenario
from dlsched.envs.scenarios.schema import scenario_json_schema_text
from dlsched.runs.commands.options import Subcommands
from dlsched.runs.tables import Column, aligned, legend


@dataclass(frozen=True)
class ScenarioSummary:
    """One line of the listing.

    Attributes:
        name: the scenario's name.
        kind: ``inference`` or ``training``.
        worker_cores: the cores of each worker.
        min_jobs: the fewest jobs an episode can have.
        max_jobs: the most jobs an episode can have.
        interval_s: seconds per environment step.
        horizon_s: seconds per episode at most.
        source: the paper, section and figures it reproduces ("" for a user's own).
        description: one line saying what it is.
    """

    name: str
    kind: str
    worker_cores: list[float]
    min_jobs: int
    max_jobs: int
    interval_s: float
    horizon_s: float
    source: str
    description: str

    @classmethod
    def of(cls, scenario: Scenario) -> ScenarioSummary:
        """The summary of ``scenario``."""
        return cls(
            name=scenario.name,
            kind=scenario.kind.value,
            worker_cores=[worker.cores for worker in scenario.workers],
            min_jobs=sum(
                group.count.low if isinstance(group.count, IntRange) else group.count
                for group in scenario.groups
            ),
            max_jobs=scenario.max_jobs,
            interval_s=scenario.interval_s,
            horizon_s=scenario.horizon_s,
            source=scenario.source,
            description=scenario.description,
        )

    def workers_text(self) -> str:
        """``4 x 4`` for identical workers, ``8 x 2-16`` when their cores differ."""
        low, high = min(self.worker_cores), max(self.worker_cores)
        cores = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        return f"{len(self.worker_cores)} x {cores}"

    def jobs_text(self) -> str:
        if self.min_jobs == self.max_jobs:
            return str(self.max_jobs)
        return f"{self.min_jobs}-{self.max_jobs}"


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched scenarios`` to the CLI."""
    parser = subparsers.add_parser(
        "scenarios",
        help="list the shipped scenarios, show one, or check a scenario file",
        description=(
            "Without an argument, list the shipped scenarios: name, kind, workers x cores, "
            "jobs per episode, source. With a shipped scenario's name, validate it and print "
            "its YAML (a copy of a shipped file expects scenario.schema.json in its folder). "
            "With the path of a YAML file, check it and print the verdict (or every problem "
            "with its line); --show also prints the scenario as dlsched reads it. With "
            "--schema, print the JSON Schema of scenario files: save "
            "it beside your scenario and start the file with "
            "'# yaml-language-server: $schema=scenario.schema.json' for an editor to complete "
            "and check it."
        ),
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "scenario",
        nargs="?",
        metavar="NAME",
        help="a shipped scenario's name, to show; or the path of a scenario YAML file, to check",
    )
    parser.add_argument(
        "--show",
        action="store_true",
        help="with a scenario file, also print the scenario as dlsched reads it (YAML: every "
        "field, no comments); a shipped scenario's name always prints its file",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON: a list of scenario summaries, or one scenario's fields",
    )
    shown.add_argument(
        "--schema",
        action="store_true",
        help="print the JSON Schema of scenario files (what editors check scenario files with)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """List or show scenarios, or print their schema, as ``args`` (``scenario``, ``json``,
    ``schema``) ask; the exit code."""
    if args.schema:  # JSON already, so --json changes nothing
        print(scenario_json_schema_text(), end="")
        return 0
    if args.scenario is None:
        if args.show:
            raise ArgumentError(
                "--show prints one scenario: give a scenario file (dlsched scenarios mine.yaml "
                "--show) or a shipped scenario's name"
            )
        return _list(as_json=args.json)
    return _check(args.scenario, as_json=args.json, show=args.show)


def _list(*, as_json: bool) -> int:
    summaries: list[ScenarioSummary] = []
    failures: list[str] = []
    for name in scenario_names():
        try:
            summaries.append(ScenarioSummary.of(load_scenario(name)))
        except DlschedError as error:
            failures.append(str(error))
    if as_json:
        print(json.dumps([asdict(summary) for summary in summaries], indent=2))
    else:
        print(_table(summaries))
    for failure in failures:
        print(f"dlsched scenarios: error: {failure}", file=sys.stderr)
    return 2 if failures else 0


#: The listing's columns.
LISTING_COLUMNS = (
    Column("NAME", "what --scenario takes (dlsched scenarios NAME prints its file)", left=True),
    Column("KIND", "inference (services with latency targets) or training jobs", left=True),
    Column(
        "WORKERS x CORES",
        "how many workers (hosts) and the cores of each (low-high where they differ)",
        left=True,
    ),
    Column("JOBS", "jobs per episode (low-high where the scenario draws the count)", left=True),
    Column("SOURCE", "the paper, section and figures it reproduces", left=True),
)


def _table(summaries: list[ScenarioSummary]) -> str:
    """The listing, a line per scenario, then its legend after a blank line."""
    rows = [[s.name, s.kind, s.workers_text(), s.jobs_text(), s.source] for s in summaries]
    return aligned(LISTING_COLUMNS, rows) + "\n\n" + legend(LISTING_COLUMNS)


def _check(name_or_path: str, *, as_json: bool, show: bool) -> int:
    """Validate one scenario and print its verdict; print the scenario too where it is asked
    for (a shipped name, ``--show``, ``--json``), on stdout, with the verdict on stderr."""
    scenario = load_scenario(name_or_path)
    # What the replay engine checks against the profiles (workloads known, units per step
    # bounded), checked before the file is called valid rather than at its first episode.
    ProfileTable(scenario)
    file = is_scenario_file(name_or_path)
    if as_json:
        print(json.dumps(scenario_to_data(scenario), indent=2))
    elif file and show:
        print(dump_scenario(scenario), end="")
    elif not file:
        # The shipped file itself, not a re-dump, so its comments (the paper's numbers) are
        # shown, and a copy redirected to a file reads as the original.
        print(scenario_text(name_or_path), end="")
    summary = ScenarioSummary.of(scenario)
    steps = math.ceil(scenario.horizon_s / scenario.interval_s)
    shown = as_json or show or not file
    print(
        f"dlsched scenarios: {name_or_path} is valid: {summary.kind} scenario {summary.name!r}, "
        f"{summary.jobs_text()} jobs on {summary.workers_text()} cores, at most {steps:,} steps "
        f"of {scenario.interval_s:g} s",
        file=sys.stderr if shown else sys.stdout,
    )
    return 0
