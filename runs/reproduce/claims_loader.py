"""Reading the claims file: versioned YAML, checked field by field into a :class:`ClaimsFile`.

The shipped file, :data:`CLAIMS_FILE` (``claims.yaml`` beside this module), holds the claims
:mod:`.claims` describes. :func:`load_claims` reads and checks a file; every problem is reported
at once with the file, its line and the field's path (``claims[3].measure.scenario``), as a
:class:`~dlsched.runs.reproduce.claims.ClaimsError`.

A claims file is data a user hands dlsched, as a scenario file is, and is read the same bounded
way (:mod:`dlsched.envs.scenarios.yaml_text`): its size and its values, aliases expanded, are
counted before anything is built from them.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from dlsched.baselines.registry import make, names
from dlsched.envs.errors import DlschedError
from dlsched.envs.scenarios.file_format import load_scenario
from dlsched.envs.scenarios.model import Scenario
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
from dlsched.runs.reproduce.statistics import STATISTICS, check_args
from dlsched.runs.reproduce.verdict import Direction

#: The shipped claims file.
CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
#: The file format this module reads (the ``format`` field); ``version`` versions the claims.
FORMAT = 1

_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")

_T = TypeVar("_T")


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
            :data:`~dlsched.envs.scenarios.limits.MAX_FILE_BYTES`, is not YAML, expands (its
            aliases used) to more than :data:`~dlsched.envs.scenarios.limits.MAX_YAML_VALUES`
            values, or has malformed fields; every problem is listed with its line and the
            field's path.
    """
    path = Path(path)
    text = read_text(path, CLAIMS_KIND)
    document = read_yaml(text, f"claims file {path}", CLAIMS_KIND)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return _Parser(path, document.lines, digest).parse(document.data)


class _Parser:
    """Builds a :class:`ClaimsFile`, collecting every problem before raising them together."""

    def __init__(self, path: Path, lines: Mapping[str, int], digest: str) -> None:
        self.path = path
        self.lines = lines
        self.digest = digest
        self.problems: list[tuple[int, str]] = []
        self.scenarios: dict[str, Scenario | None] = {}

    # ----------------------------------------------------------------- reporting

    def bad(self, where: str, text: str) -> None:
        """Record a problem of the field at ``where``, at its line (or its nearest parent's)."""
        probe = where
        while probe and probe not in self.lines:
            cut = max(probe.rfind("."), probe.rfind("[") if probe.endswith("]") else -1)
            probe = probe[:cut] if cut > 0 else ""
        self.problems.append((self.lines.get(probe, 0), f"{where}: {text}"))

    def raise_if_any(self) -> None:
        if not self.problems:
            return
        entries = [f"line {line}: {text}" if line else text for line, text in sorted(self.problems)]
        plural = "s" if len(entries) > 1 else ""
        raise ClaimsError(
            f"invalid claims file {self.path} ({len(entries)} problem{plural}):\n"
            + "\n".join(f"  {entry}" for entry in entries)
        )

    # ----------------------------------------------------------------- fields

    def mapping(self, value: object, where: str, required: Sequence[str], optional: Sequence[str]):
        if not isinstance(value, dict):
            self.bad(where, f"expected a mapping with {', '.join(required)}, got {value!r:.60}")
            return None
        for key in value:
            if key not in (*required, *optional):
                known = ", ".join((*required, *optional))
                hint = (
                    "; claims keep their papers' parameters: a reading of the pseudocode goes "
                    "under `readings:`"
                    if key == "params"
                    else ""
                )
                self.bad(f"{where}.{key}", f"unknown field (known: {known}){hint}")
        for key in required:
            if key not in value:
                self.bad(f"{where}.{key}", "missing")
        return value

    def text(
        self, data: Mapping[str, Any], key: str, where: str, default: str | None = None
    ) -> str:
        """The text at ``key``; a required one (``default=None``) must not be blank. A missing
        required key was reported by :meth:`mapping`."""
        value = data.get(key, default)
        if isinstance(value, str) and (default is not None or value.strip()):
            return value.strip()
        if key in data:
            self.bad(f"{where}.{key}", f"expected text, got {value!r:.60}")
        return default or ""

    def number(self, data: Mapping[str, Any], key: str, where: str, default: float | None = None):
        value = data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.bad(f"{where}.{key}", f"expected a number, got {value!r:.60}")
            return None
        return float(value)

    def choice(self, value: object, where: str, options: Sequence[str]) -> str | None:
        if not isinstance(value, str) or value not in options:
            self.bad(where, f"{value!r:.60} is not one of {', '.join(options)}")
            return None
        return value

    def args(self, value: object, where: str) -> tuple[tuple[str, Any], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            self.bad(where, f"expected a mapping of arguments, got {value!r:.60}")
            return ()
        return tuple(sorted((str(k), v) for k, v in value.items()))

    def listed_once(
        self,
        entries: Sequence[object],
        where: str,
        parse: Callable[[object, str], _T | None],
        key: str,
        repeated: str,
    ) -> list[_T]:
        """Each entry parsed at ``where[index]``, dropping those that fail; the field ``key``
        (named alike in the file and in what ``parse`` returns) must not repeat an earlier
        entry's (``repeated``: what the problem says of a value that does)."""
        parsed: list[_T] = []
        seen: set[object] = set()
        for index, entry in enumerate(entries):
            item = parse(entry, f"{where}[{index}]")
            if item is None:
                continue
            value = getattr(item, key)
            if value in seen:
                self.bad(f"{where}[{index}].{key}", f"{value!r} {repeated}")
            seen.add(value)
            parsed.append(item)
        return parsed

    def scenario(self, name: object, where: str) -> Scenario | None:
        if not isinstance(name, str):
            self.bad(where, f"expected a scenario name, got {name!r:.60}")
            return None
        if name not in self.scenarios:
            try:
                self.scenarios[name] = load_scenario(name)
            except DlschedError as error:
                self.scenarios[name] = None
                self.bad(where, f"scenario {name!r} cannot be loaded: {str(error).splitlines()[0]}")
                return None
        return self.scenarios[name]

    def policy(self, name: object, where: str) -> str | None:
        return self.choice(name, where, names())

    # ----------------------------------------------------------------- sections

    def parse(self, data: object) -> ClaimsFile:
        top = self.mapping(
            data, "(file)", ("format", "version", "units", "claims"), ("readings", "investigations")
        )
        if top is None:
            self.raise_if_any()
        assert isinstance(top, dict)
        if "format" in top and top["format"] != FORMAT:
            self.bad("format", f"{top['format']!r}: this dlsched reads format {FORMAT}")
        version = top.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            self.bad("version", f"expected a whole number of at least 1, got {version!r}")
            version = 0
        units = self.units(top.get("units"))
        readings = self.readings(top.get("readings") or {})
        claims = self.claims(top.get("claims"), units)
        investigations = self.investigations(top.get("investigations") or [], claims)
        self.raise_if_any()
        return ClaimsFile(self.path, version, units, readings, claims, investigations, self.digest)

    def units(self, data: object) -> dict[str, Unit]:
        units: dict[str, Unit] = {}
        if not isinstance(data, dict) or not data:
            self.bad("units", "expected a mapping of unit names to tolerances")
            return units
        for name, spec in data.items():
            where = f"units.{name}"
            spec = self.mapping(spec, where, (), ("absolute", "relative", "description"))
            if spec is None:
                continue
            absolute = self.number(spec, "absolute", where, 0.0) or 0.0
            relative = self.number(spec, "relative", where, 0.0) or 0.0
            if absolute < 0 or relative < 0:
                self.bad(where, "tolerances must be 0 or more")
            units[str(name)] = Unit(
                str(name), absolute, relative, self.text(spec, "description", where, "")
            )
        return units

    def readings(self, data: object) -> tuple[Reading, ...]:
        readings: list[Reading] = []
        if not isinstance(data, dict):
            self.bad("readings", "expected a mapping of policy names to lists of readings")
            return ()
        for policy, entries in data.items():
            where = f"readings.{policy}"
            if self.policy(policy, where) is None:
                continue
            if not isinstance(entries, list):
                self.bad(where, "expected a list of readings")
                continue
            parse = functools.partial(self.reading, policy=str(policy))
            readings += self.listed_once(entries, where, parse, "name", "is listed twice")
        return tuple(readings)

    def reading(self, entry: object, where: str, policy: str) -> Reading | None:
        spec = self.mapping(entry, where, ("name", "params"), ("source",))
        if spec is None:
            return None
        name = self.text(spec, "name", where)
        params = self.args(spec.get("params"), f"{where}.params")
        if not params:
            self.bad(f"{where}.params", "a reading sets at least one parameter")
        try:
            make(policy, **dict(params))
        except DlschedError as error:
            self.bad(f"{where}.params", str(error))
            return None
        return Reading(policy, name, params, self.text(spec, "source", where, ""))

    def claims(self, data: object, units: Mapping[str, Unit]) -> tuple[Claim, ...]:
        if not isinstance(data, list) or not data:
            self.bad("claims", "expected a list of claims")
            return ()
        parse = functools.partial(self.claim, units=units)
        return tuple(self.listed_once(data, "claims", parse, "id", "is used by an earlier claim"))

    def claim(self, entry: object, where: str, units: Mapping[str, Unit]) -> Claim | None:
        spec = self.mapping(
            entry,
            where,
            ("id", "paper", "section", "claim", "unit", "measure"),
            ("figure", "value", "direction", "no_effect", "twin", "fitted", "note"),
        )
        if spec is None:
            return None
        before = len(self.problems)
        claim_id = self.text(spec, "id", where)
        if claim_id and not _ID.match(claim_id):
            self.bad(f"{where}.id", f"{claim_id!r}: use lower-case letters, digits and '-'")
        paper = self.choice(spec.get("paper"), f"{where}.paper", tuple(PAPERS))
        unit = self.choice(spec.get("unit"), f"{where}.unit", tuple(units))
        value = self.number(spec, "value", where)
        direction_name = spec.get("direction")
        direction = None
        if direction_name is not None:
            chosen = self.choice(direction_name, f"{where}.direction", tuple(Direction))
            direction = Direction(chosen) if chosen else None
        no_effect = self.number(spec, "no_effect", where, 0.0) or 0.0
        if value is None and direction is None and "value" not in spec:
            self.bad(f"{where}.value", "missing: a claim has a number, or a direction (or both)")
        if value is not None and direction is not None:
            wrong = value <= no_effect if direction is Direction.HIGHER else value >= no_effect
            if wrong:
                self.bad(
                    f"{where}.value",
                    f"{value:g} is not {direction} than no_effect {no_effect:g}, as direction says",
                )
        fitted = spec.get("fitted", False)
        if not isinstance(fitted, bool):
            self.bad(f"{where}.fitted", f"expected true or false, got {fitted!r}")
        measure = self.measure(spec.get("measure"), f"{where}.measure", None)
        twin = None
        if spec.get("twin") is not None and measure is not None:
            twin = self.measure(spec["twin"], f"{where}.twin", measure)
        if len(self.problems) > before or measure is None or paper is None or unit is None:
            return None
        return Claim(
            id=claim_id,
            paper=paper,
            section=self.text(spec, "section", where),
            figure=self.text(spec, "figure", where, ""),
            text=" ".join(self.text(spec, "claim", where).split()),
            value=value,
            unit=unit,
            measure=measure,
            direction=direction,
            no_effect=no_effect,
            twin=twin,
            fitted=bool(fitted),
            note=" ".join(self.text(spec, "note", where, "").split()),
        )

    def measure(self, entry: object, where: str, base: Measure | None) -> Measure | None:
        """A claim's measure, or its twin (``base``: the measure it inherits the rest from)."""
        if base is None:
            required: tuple[str, ...] = ("scenario", "policy", "statistic")
            optional: tuple[str, ...] = ("args", "reference", "seeds", "backend_options")
        else:
            required, optional = ("scenario",), ("seeds", "backend_options")
        spec = self.mapping(entry, where, required, optional)
        if spec is None:
            return None
        before = len(self.problems)
        scenario = self.scenario(spec.get("scenario"), f"{where}.scenario")
        seeds = spec.get("seeds", base.seeds if base else 10)
        if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
            self.bad(f"{where}.seeds", f"expected a whole number of at least 1, got {seeds!r}")
        options = spec.get("backend_options") or {}
        if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
            self.bad(f"{where}.backend_options", "expected a mapping of option names to strings")
            options = {}
        if base is not None:
            self.check_kind(scenario, STATISTICS.get(base.statistic), where)
            if len(self.problems) > before:
                return None
            return Measure(
                spec["scenario"],
                base.policy,
                base.statistic,
                base.args,
                base.reference,
                seeds,
                tuple(sorted(options.items())),
            )
        policy = self.policy(spec.get("policy"), f"{where}.policy")
        reference = spec.get("reference")
        if reference is not None:
            reference = self.policy(reference, f"{where}.reference")
        name = self.choice(spec.get("statistic"), f"{where}.statistic", tuple(STATISTICS))
        args = self.args(spec.get("args"), f"{where}.args")
        if name is not None:
            statistic = STATISTICS[name]
            for problem in check_args(statistic, dict(args)):
                self.bad(f"{where}.args", problem)
            if statistic.paired and reference is None and "reference" not in spec:
                self.bad(f"{where}.reference", f"missing: {name} compares against a reference")
            if not statistic.paired and reference is not None:
                self.bad(f"{where}.reference", f"{name} reads one episode and takes no reference")
            self.check_kind(scenario, statistic, where)
        if len(self.problems) > before or policy is None or name is None:
            return None
        return Measure(
            spec["scenario"], policy, name, args, reference, seeds, tuple(sorted(options.items()))
        )

    def check_kind(self, scenario: Scenario | None, statistic: Any, where: str) -> None:
        if scenario is None or statistic is None:
            return
        if scenario.kind not in statistic.kinds:
            kinds = " or ".join(kind.value for kind in statistic.kinds)
            self.bad(
                f"{where}.scenario",
                f"{scenario.name!r} is a {scenario.kind.value} scenario; {statistic.name} "
                f"applies to {kinds} scenarios",
            )

    def investigations(self, data: object, claims: Sequence[Claim]) -> tuple[Investigation, ...]:
        if not isinstance(data, list):
            self.bad("investigations", "expected a list")
            return ()
        by_id = {claim.id: claim for claim in claims}
        found = []
        for index, entry in enumerate(data):
            where = f"investigations[{index}]"
            spec = self.mapping(
                entry,
                where,
                ("id", "question", "claim", "diagnostics", "explanation"),
                ("variants",),
            )
            if spec is None:
                continue
            claim = by_id.get(str(spec.get("claim")))
            if claim is None:
                self.bad(f"{where}.claim", f"{spec.get('claim')!r} is not a claim of this file")
                continue
            variants = tuple(
                reading
                for v_index, variant in enumerate(spec.get("variants") or [])
                if (
                    reading := self.reading(
                        variant, f"{where}.variants[{v_index}]", claim.measure.policy
                    )
                )
                is not None
            )
            diagnostics = []
            for d_index, item in enumerate(spec.get("diagnostics") or []):
                diagnostic = self.diagnostic(item, f"{where}.diagnostics[{d_index}]", claim)
                if diagnostic is not None:
                    diagnostics.append(diagnostic)
            if not diagnostics:
                self.bad(f"{where}.diagnostics", "list at least one statistic")
            found.append(
                Investigation(
                    self.text(spec, "id", where),
                    " ".join(self.text(spec, "question", where).split()),
                    claim.id,
                    variants,
                    tuple(diagnostics),
                    " ".join(self.text(spec, "explanation", where).split()),
                )
            )
        return tuple(found)

    def diagnostic(self, item: object, where: str, claim: Claim) -> Diagnostic | None:
        if isinstance(item, str):
            item = {"statistic": item}
        spec = self.mapping(item, where, ("statistic",), ("args",))
        if spec is None:
            return None
        name = self.choice(spec.get("statistic"), f"{where}.statistic", tuple(STATISTICS))
        if name is None:
            return None
        args = self.args(spec.get("args"), f"{where}.args")
        statistic = STATISTICS[name]
        problems = check_args(statistic, dict(args))
        if statistic.paired and claim.measure.reference is None:
            problems.append(f"{name} needs a reference, and claim {claim.id} has none")
        for problem in problems:
            self.bad(where, problem)
        return None if problems else Diagnostic(name, args)
