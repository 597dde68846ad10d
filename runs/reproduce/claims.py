"""The papers' claims as typed data: what each claims, how dlsched measures it, what is probed.

A :class:`ClaimsFile` holds every claim of the DQoES, FlowCon, SpeCon and TRADL evaluations that
dlsched can measure: where the paper makes it (section, figure or table), its number and unit, and
how dlsched measures it (scenario, policy, reference policy, statistic of
:mod:`~dlsched.runs.reproduce.statistics`, seeds), with an optional host-scale *twin* that runs
on the Docker backend. It also holds the *readings* of the pseudocode that a paper leaves open
(run beside the default for every claim of that policy) and the *investigations* of the open
gaps. It holds no result: every verdict is computed from runs.

A claim names its policy and never its parameters: the baselines keep their papers' values
(``dlsched baselines`` lists them), so no claim is tuned on its own.

The claims are read from a versioned YAML file and checked by :mod:`.claims_loader`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlsched.envs.errors import DlschedError
from dlsched.policies.policy import ParamValue
from dlsched.runs.reproduce.statistics import ArgValue
from dlsched.runs.reproduce.verdict import Direction, Expectation

#: The papers, by the key a claim names, and the source each key stands for.
PAPERS: Mapping[str, str] = {
    "dqoes": "DQoES journal",
    "flowcon": "FlowCon journal",
    "specon": "SpeCon (arXiv 2010.11307, abstract)",
    "tradl": "TRADL (thesis abstract)",
}


class ClaimsError(DlschedError, ValueError):
    """A claims file is malformed; the message lists every bad field with its line."""


@dataclass(frozen=True)
class Unit:
    """A unit of claims and the tolerance of the verdict rule in it.

    Attributes:
        name: how claims name it.
        absolute: tolerance in the unit.
        relative: tolerance as a fraction of the paper's value; the larger of the two applies.
        description: one line for the report.
    """

    name: str
    absolute: float = 0.0
    relative: float = 0.0
    description: str = ""

    def tolerance(self, value: float) -> float:
        """The tolerance around a paper value of ``value``."""
        return max(self.absolute, self.relative * abs(value))


@dataclass(frozen=True)
class Reading:
    """One reading of a paper's pseudocode: the policy's parameters that select it.

    Attributes:
        policy: the baseline it applies to.
        name: its short name in the report.
        params: the parameters that differ from the default reading.
        source: the lines of the paper that admit it.
    """

    policy: str
    name: str
    params: tuple[tuple[str, ParamValue], ...]
    source: str = ""


@dataclass(frozen=True)
class Measure:
    """How one claim is measured: a scenario, a policy against a reference, a statistic, seeds.

    Attributes:
        scenario: a shipped scenario's name (or a scenario file's path).
        policy: the baseline whose claim it is, with its paper parameters.
        statistic: a statistic of :data:`~dlsched.runs.reproduce.statistics.STATISTICS`.
        args: the statistic's arguments.
        reference: the policy a paired statistic sets it against (``default``: Docker).
        seeds: episodes, seeds 0 ... seeds-1, unless the command line says otherwise.
        backend_options: keyword arguments of the backend (a Docker twin's threading).
    """

    scenario: str
    policy: str
    statistic: str
    args: tuple[tuple[str, ArgValue], ...] = ()
    reference: str | None = None
    seeds: int = 10
    backend_options: tuple[tuple[str, str], ...] = ()

    @property
    def policies(self) -> tuple[str, ...]:
        """The policies its episodes run: the claim's and the reference."""
        return (self.policy,) if self.reference is None else (self.policy, self.reference)


@dataclass(frozen=True)
class Claim:
    """One claim of a paper and how dlsched measures it.

    Attributes:
        id: unique, stable: the report's and MLflow's name of the claim.
        paper: a key of :data:`PAPERS`.
        section: where the paper makes it.
        figure: the figure or table, ``""`` if none.
        text: what the paper claims, in our words.
        value: the paper's number, ``None`` for a qualitative claim.
        unit: a unit of the file's ``units``.
        direction: the side of ``no_effect`` the claimed effect lies on, if it states one.
        no_effect: the value of no effect.
        measure: how it is measured on the replay backend (and on Docker without a twin).
        twin: a host-scale version for the Docker backend on this machine, if there is one.
        fitted: the paper profiles were fitted to this number (agreement is by construction).
        note: what a reader should know to read the row (a choice, a caveat).
    """

    id: str
    paper: str
    section: str
    figure: str
    text: str
    value: float | None
    unit: str
    measure: Measure
    direction: Direction | None = None
    no_effect: float = 0.0
    twin: Measure | None = None
    fitted: bool = False
    note: str = ""

    def expectation(self, unit: Unit) -> Expectation:
        """What the verdict rule reads of this claim."""
        tolerance = unit.tolerance(self.value) if self.value is not None else 0.0
        return Expectation(self.value, tolerance, self.direction, self.no_effect)

    def paper_text(self) -> str:
        """The paper's value as the report shows it (``> 0`` for a qualitative claim)."""
        if self.value is None:
            sign = ">" if self.direction is Direction.HIGHER else "<"
            return f"{sign} {self.no_effect:g}"
        return f"{self.value:g}"


@dataclass(frozen=True)
class Diagnostic:
    """A statistic an investigation tabulates (paired ones against the claim's reference)."""

    statistic: str
    args: tuple[tuple[str, ArgValue], ...] = ()

    @property
    def label(self) -> str:
        inside = ", ".join(f"{value}" for _, value in self.args)
        return f"{self.statistic}({inside})" if inside else self.statistic


@dataclass(frozen=True)
class Investigation:
    """An open gap between a claim and our runs, and the runs that probe it.

    Attributes:
        id: unique name.
        question: what is asked.
        claim: the claim it probes (its scenario, policy, seeds and paper value).
        variants: extra parameter sets of the claim's policy, beyond its readings.
        diagnostics: what is tabulated for each variant.
        explanation: the mechanism the diagnostics bear on (no numbers: they are measured).
    """

    id: str
    question: str
    claim: str
    variants: tuple[Reading, ...]
    diagnostics: tuple[Diagnostic, ...]
    explanation: str


@dataclass(frozen=True)
class ClaimsFile:
    """A whole claims file.

    Attributes:
        path: where it was read from.
        version: the claims' version (raised when a claim's meaning changes).
        units: the units by name.
        readings: every reading of every policy.
        claims: the claims, in the file's order.
        investigations: the open gaps probed.
        content_hash: a short hash of the file's bytes.
    """

    path: Path
    version: int
    units: Mapping[str, Unit]
    readings: tuple[Reading, ...]
    claims: tuple[Claim, ...]
    investigations: tuple[Investigation, ...] = ()
    content_hash: str = ""

    def readings_of(self, policy: str) -> tuple[Reading, ...]:
        """The readings of ``policy``'s pseudocode, in the file's order."""
        return tuple(reading for reading in self.readings if reading.policy == policy)

    def claim(self, claim_id: str) -> Claim:
        """The claim ``claim_id``.

        Raises:
            ClaimsError: there is none; the message lists the ids.
        """
        for claim in self.claims:
            if claim.id == claim_id:
                return claim
        raise ClaimsError(
            f"no claim {claim_id!r} in {self.path}; its claims: "
            f"{', '.join(claim.id for claim in self.claims)}"
        )

    def select(self, patterns: Sequence[str]) -> ClaimsFile:
        """Only the claims whose id (or paper) matches one of ``patterns`` (``*`` wildcards), and
        the investigations of those claims.

        Raises:
            ClaimsError: a pattern that matches no claim.
        """
        chosen: list[Claim] = []
        for pattern in patterns:
            regex = re.compile("^" + ".*".join(map(re.escape, pattern.split("*"))) + "$")
            matched = [c for c in self.claims if regex.match(c.id) or c.paper == pattern]
            if not matched:
                raise ClaimsError(
                    f"--only {pattern!r} matches no claim of {self.path}; ids look like "
                    f"{self.claims[0].id!r} (`dlsched reproduce --list` lists them), or name a "
                    f"paper: {', '.join(PAPERS)}"
                )
            chosen.extend(c for c in matched if c not in chosen)
        kept = {claim.id for claim in chosen}
        return ClaimsFile(
            self.path,
            self.version,
            self.units,
            self.readings,
            tuple(claim for claim in self.claims if claim.id in kept),
            tuple(inv for inv in self.investigations if inv.claim in kept),
            self.content_hash,
        )
