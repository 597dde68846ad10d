"""Reading the claims file: versioned YAML, checked field by field into a :class:`ClaimsFile`.

The shipped file, :data:`CLAIMS_FILE` (``claims.yaml`` beside this module), holds the claims
:mod:`.claims` describes. :func:`load_claims` reads and checks a file; every problem is reported
at once with the file, its line and the field's path (``claims[3].measure.scenario``), as a
:class:`~dlsched.runs.reproduce.claims.ClaimsError`.

A claims file is data a user hands dlsched, as a scenario file is, and is read the same bounded
way (:mod:`dlsched.envs.scenarios.yaml_text`): its size and its values, aliases expanded, are
counted before anything is built from them. Its shape is checked as a scenario file's is, by
pydantic models (:class:`ClaimsDocument`) whose errors :mod:`dlsched.envs.scenarios.problems`
words; then what relates its fields and what they name (scenarios, policies, statistics, units,
claims) by :class:`_Checker`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from dlsched.baselines.registry import make, names
from dlsched.envs.errors import DlschedError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
from dlsched.envs.scenarios.problems import Report, report_validation_error
from dlsched.envs.scenarios.schema import RULE_ERROR, Expected
from dlsched.envs.scenarios.yaml_text import FileKind, read_text, read_yaml
from dlsched.runs.reproduce.claims import (
    PAPERS,
    Claim,
    ClaimsError,
    ClaimsFile,
    Diagnostic,
    Investigation,
    Measure,
    Reading,
    Unit,
)
from dlsched.runs.reproduce.statistics import STATISTICS, Statistic, check_args
from dlsched.runs.reproduce.verdict import Direction

#: The shipped claims file.
CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
#: The file format this module reads (the ``format`` field); ``version`` versions the claims.
FORMAT = 1
#: Seeds of a measure that names none.
DEFAULT_SEEDS = 10


CLAIMS_KIND = FileKind(
    name="claims file",
    holds=f"a mapping with format, version, units and claims (the shipped one is {CLAIMS_FILE})",
    size="a few hundred lines",
    unreadable=f"pass an existing file to --claims (the shipped one is {CLAIMS_FILE})",
    error=ClaimsError,
)
"""How the refusals of a claims file name it, and the error they raise."""


def load_claims(path: str | Path = CLAIMS_FILE) -> ClaimsFile:
    """Read and validate a claims file.

    Raises:
        ClaimsError: the file cannot be read, is larger than
            :data:`~dlsched.envs.size_bounds.MAX_FILE_BYTES`, is not YAML, expands (its
            aliases used) to more than :data:`~dlsched.envs.size_bounds.MAX_YAML_VALUES`
            values, or has malformed fields; every problem is listed with its line and the
            field's path.
    """
    path = Path(path)
    text = read_text(path, CLAIMS_KIND)
    document = read_yaml(text, f"claims file {path}", CLAIMS_KIND)
    report = Report(document.lines, "claims file", ClaimsError)
    try:
        checked = ClaimsDocument.model_validate(document.data)
    except ValidationError as error:
        report_validation_error(error, report, _FILE)
        report.raise_if_any(str(path))
        raise
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    claims = _Checker(report).claims_file(checked, path, digest)
    report.raise_if_any(str(path))
    return claims


# --- the file's shape ------------------------------------------------------------------------


def _no_params(value: object) -> object:
    raise PydanticCustomError(
        RULE_ERROR,
        "no params here: a claim keeps its paper's parameters, and a reading of the pseudocode "
        "goes under `readings:`",
    )


def _statistic_by_name(value: object) -> object:
    return {"statistic": value} if isinstance(value, str) else value


Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1), Expected("text")]
Note = Annotated[str, StringConstraints(strip_whitespace=True), Expected("text")]
Name = Annotated[str, Expected("a name")]
Number = Annotated[float, Field(allow_inf_nan=False), Expected("a finite number")]
Tolerance = Annotated[float, Field(ge=0, allow_inf_nan=False), Expected("a number >= 0")]
Count = Annotated[int, Field(ge=1), Expected("a whole number of at least 1")]
Arguments = Annotated[dict[str, Any], Expected("a mapping of argument names to values")]
Id = Annotated[
    str,
    Field(pattern=r"^[a-z0-9][a-z0-9-]*$"),
    Expected("an id of lower-case letters, digits and '-'"),
]


class _FileMapping(BaseModel):
    """A mapping of the claims file: only its own fields, each of exactly its type."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class UnitSpec(_FileMapping):
    absolute: Tolerance = 0.0
    relative: Tolerance = 0.0
    description: Note = ""


class ReadingSpec(_FileMapping):
    name: Text
    params: Annotated[
        dict[str, Any], Field(min_length=1), Expected("a mapping of at least one parameter")
    ]
    source: Note = ""


_Reading = Annotated[ReadingSpec, Expected("a reading: a mapping with name, params, source")]


class TwinSpec(_FileMapping):
    scenario: Name
    seeds: Count | None = None
    backend_options: Annotated[dict[str, str], Expected("a mapping of option names to strings")] = (
        Field(default_factory=dict)
    )


class MeasureSpec(TwinSpec):
    policy: Name
    statistic: Name
    args: Arguments = Field(default_factory=dict)
    reference: Name | None = None
    params: Annotated[Any, AfterValidator(_no_params), Expected("no params")] = None


class ClaimSpec(_FileMapping):
    id: Id
    paper: Name
    section: Text
    claim: Text
    unit: Name
    measure: Annotated[MeasureSpec, Expected("a mapping with scenario, policy and statistic")]
    figure: Note = ""
    value: Number | None = None
    direction: Annotated[Direction, Strict(False)] | None = None
    no_effect: Number = 0.0
    twin: Annotated[TwinSpec, Expected("a mapping with scenario")] | None = None
    fitted: Annotated[bool, Expected("true or false")] = False
    note: Note = ""


class DiagnosticSpec(_FileMapping):
    statistic: Name
    args: Arguments = Field(default_factory=dict)


class InvestigationSpec(_FileMapping):
    id: Text
    question: Text
    claim: Name
    diagnostics: Annotated[
        list[
            Annotated[
                DiagnosticSpec,
                BeforeValidator(_statistic_by_name),
                Expected("a statistic's name, or a mapping with statistic and args"),
            ]
        ],
        Field(min_length=1),
        Expected("a list of at least one statistic"),
    ]
    explanation: Text
    variants: Annotated[list[_Reading], Expected("a list of readings")] = Field(
        default_factory=list
    )


class ClaimsDocument(_FileMapping):
    """A claims file as written."""

    format: Annotated[int, Expected(f"{FORMAT}, the format this dlsched reads")]
    version: Count
    units: Annotated[
        dict[str, Annotated[UnitSpec, Expected("a mapping with absolute, relative, description")]],
        Field(min_length=1),
        Expected("a non-empty mapping of unit names to tolerances"),
    ]
    claims: Annotated[
        list[Annotated[ClaimSpec, Expected("a claim: a mapping with id, paper, section, ...")]],
        Field(min_length=1),
        Expected("a non-empty list of claims"),
    ]
    readings: Annotated[
        dict[str, Annotated[list[_Reading], Expected("a list of readings")]],
        Expected("a mapping of policy names to lists of readings"),
    ] = Field(default_factory=dict)
    investigations: Annotated[
        list[Annotated[InvestigationSpec, Expected("an investigation: a mapping with id, ...")]],
        Expected("a list of investigations"),
    ] = Field(default_factory=list)


_FILE = Annotated[ClaimsDocument, Expected(CLAIMS_KIND.holds)]
"""The definition the problems of a file's shape are found in."""


# --- what the fields name and how they relate ------------------------------------------------


class _Checker:
    """Builds a :class:`ClaimsFile` from a file of the right shape, recording in ``report``
    every name that names nothing and every field at odds with another."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.scenarios: dict[str, Scenario | None] = {}

    def bad(self, where: str, text: str) -> None:
        """Record a problem of the field at ``where``, at its line (or its nearest parent's)."""
        self.report.add(where, f"{where}: {text}")

    def known(self, value: str, where: str, options: Sequence[str]) -> bool:
        """Whether ``value`` is one of ``options``; a problem if not."""
        if value not in options:
            self.bad(where, f"{value!r} is not one of {', '.join(options)}")
            return False
        return True

    def claims_file(self, spec: ClaimsDocument, path: Path, digest: str) -> ClaimsFile:
        if spec.format != FORMAT:
            self.bad("format", f"{spec.format!r}: this dlsched reads format {FORMAT}")
        units = {
            name: Unit(name, unit.absolute, unit.relative, unit.description)
            for name, unit in spec.units.items()
        }
        readings = [
            reading
            for policy, entries in spec.readings.items()
            if self.known(policy, f"readings.{policy}", names())
            for reading in self.readings(entries, f"readings.{policy}", policy)
        ]
        claims: list[Claim] = []
        for index, entry in enumerate(spec.claims):
            where = f"claims[{index}]"
            if entry.id in (claim.id for claim in claims):
                self.bad(f"{where}.id", f"{entry.id!r} is used by an earlier claim")
            claim = self.claim(entry, where, units)
            if claim is not None:
                claims.append(claim)
        by_id = {claim.id: claim for claim in claims}
        investigations = [
            investigation
            for index, entry in enumerate(spec.investigations)
            if (investigation := self.investigation(entry, f"investigations[{index}]", by_id))
        ]
        return ClaimsFile(
            path,
            spec.version,
            units,
            tuple(readings),
            tuple(claims),
            tuple(investigations),
            digest,
        )

    def readings(self, entries: Sequence[ReadingSpec], where: str, policy: str) -> list[Reading]:
        """The readings of ``policy`` whose parameters it takes, each name listed once."""
        found: list[Reading] = []
        for index, entry in enumerate(entries):
            if entry.name in (reading.name for reading in found):
                self.bad(f"{where}[{index}].name", f"{entry.name!r} is listed twice")
            reading = self.reading(entry, f"{where}[{index}]", policy)
            if reading is not None:
                found.append(reading)
        return found

    def reading(self, entry: ReadingSpec, where: str, policy: str) -> Reading | None:
        try:
            make(policy, **entry.params)
        except DlschedError as error:
            self.bad(f"{where}.params", str(error))
            return None
        return Reading(policy, entry.name, tuple(sorted(entry.params.items())), entry.source)

    def claim(self, entry: ClaimSpec, where: str, units: Mapping[str, Unit]) -> Claim | None:
        before = self.report.count
        self.known(entry.paper, f"{where}.paper", tuple(PAPERS))
        self.known(entry.unit, f"{where}.unit", tuple(units))
        value, direction, no_effect = entry.value, entry.direction, entry.no_effect
        if value is None and direction is None and "value" not in entry.model_fields_set:
            self.bad(f"{where}.value", "missing: a claim has a number, or a direction (or both)")
        if (
            value is not None
            and direction is not None
            and (value == no_effect or (value > no_effect) != (direction is Direction.HIGHER))
        ):
            self.bad(
                f"{where}.value",
                f"{value:g} is not {direction} than no_effect {no_effect:g}, as direction says",
            )
        measure = self.measure(entry.measure, f"{where}.measure")
        twin = None
        if entry.twin is not None and measure is not None:
            twin = self.twin(entry.twin, f"{where}.twin", measure)
        if self.report.count > before or measure is None:
            return None
        return Claim(
            id=entry.id,
            paper=entry.paper,
            section=entry.section,
            figure=entry.figure,
            text=" ".join(entry.claim.split()),
            value=value,
            unit=entry.unit,
            measure=measure,
            direction=direction,
            no_effect=no_effect,
            twin=twin,
            fitted=entry.fitted,
            note=" ".join(entry.note.split()),
        )

    def measure(self, spec: MeasureSpec, where: str) -> Measure | None:
        before = self.report.count
        scenario = self.scenario(spec.scenario, f"{where}.scenario")
        self.known(spec.policy, f"{where}.policy", names())
        if spec.reference is not None:
            self.known(spec.reference, f"{where}.reference", names())
        if self.known(spec.statistic, f"{where}.statistic", tuple(STATISTICS)):
            statistic = STATISTICS[spec.statistic]
            for problem in check_args(statistic, spec.args):
                self.bad(f"{where}.args", problem)
            if statistic.paired and spec.reference is None:
                self.bad(
                    f"{where}.reference", f"missing: {statistic.name} compares against a reference"
                )
            if not statistic.paired and spec.reference is not None:
                self.bad(
                    f"{where}.reference",
                    f"{statistic.name} reads one episode and takes no reference",
                )
            self.check_kind(scenario, statistic, where)
        if self.report.count > before:
            return None
        return Measure(
            spec.scenario,
            spec.policy,
            spec.statistic,
            tuple(sorted(spec.args.items())),
            spec.reference,
            spec.seeds or DEFAULT_SEEDS,
            tuple(sorted(spec.backend_options.items())),
        )

    def twin(self, spec: TwinSpec, where: str, base: Measure) -> Measure | None:
        """A claim's twin: its own scenario, seeds and options, the rest its measure's."""
        before = self.report.count
        scenario = self.scenario(spec.scenario, f"{where}.scenario")
        self.check_kind(scenario, STATISTICS[base.statistic], where)
        if self.report.count > before:
            return None
        return replace(
            base,
            scenario=spec.scenario,
            seeds=spec.seeds or base.seeds,
            backend_options=tuple(sorted(spec.backend_options.items())),
        )

    def scenario(self, name: str, where: str) -> Scenario | None:
        if name not in self.scenarios:
            try:
                self.scenarios[name] = load_scenario(name)
            except DlschedError as error:
                self.scenarios[name] = None
                self.bad(where, f"scenario {name!r} cannot be loaded: {str(error).splitlines()[0]}")
        return self.scenarios[name]

    def check_kind(self, scenario: Scenario | None, statistic: Statistic, where: str) -> None:
        if scenario is not None and scenario.kind not in statistic.kinds:
            kinds = " or ".join(kind.value for kind in statistic.kinds)
            self.bad(
                f"{where}.scenario",
                f"{scenario.name!r} is a {scenario.kind.value} scenario; {statistic.name} "
                f"applies to {kinds} scenarios",
            )

    def investigation(
        self, spec: InvestigationSpec, where: str, claims: Mapping[str, Claim]
    ) -> Investigation | None:
        claim = claims.get(spec.claim)
        if claim is None:
            self.bad(f"{where}.claim", f"{spec.claim!r} is not a claim of this file")
            return None
        variants = [
            reading
            for index, variant in enumerate(spec.variants)
            if (
                reading := self.reading(variant, f"{where}.variants[{index}]", claim.measure.policy)
            )
        ]
        diagnostics = [
            diagnostic
            for index, item in enumerate(spec.diagnostics)
            if (diagnostic := self.diagnostic(item, f"{where}.diagnostics[{index}]", claim))
        ]
        return Investigation(
            spec.id,
            " ".join(spec.question.split()),
            claim.id,
            tuple(variants),
            tuple(diagnostics),
            " ".join(spec.explanation.split()),
        )

    def diagnostic(self, spec: DiagnosticSpec, where: str, claim: Claim) -> Diagnostic | None:
        if not self.known(spec.statistic, f"{where}.statistic", tuple(STATISTICS)):
            return None
        statistic = STATISTICS[spec.statistic]
        problems = check_args(statistic, spec.args)
        if statistic.paired and claim.measure.reference is None:
            problems.append(f"{statistic.name} needs a reference, and claim {claim.id} has none")
        for problem in problems:
            self.bad(where, problem)
        return None if problems else Diagnostic(spec.statistic, tuple(sorted(spec.args.items())))
