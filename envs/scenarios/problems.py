"""The problems of one scenario file, collected and raised as one :class:`ScenarioError`.

A problem names the field's path in the file (``jobs[2].arrival.every_s``), its line when the
scenario came from a file, the value found and what was expected, and for a misspelt field the
closest field name. :func:`report_validation_error` turns pydantic's errors into such problems:
it follows each error's location through the definition in :mod:`.schema` to the value type
there, whose :class:`~dlsched.envs.scenarios.schema.Expected` says what was expected.

Another file a user hands dlsched and pydantic validates (the claims file of
:mod:`dlsched.runs.reproduce`) is reported the same way: a :class:`Report` raising its own error,
and its own definition to follow.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Tag, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from dlsched.envs.errors import DlschedError, ScenarioError
from dlsched.envs.scenarios.schema import RULE_ERROR, Expected, ScenarioDocument

TOP_LEVEL = "(top level)"
"""How a problem with the file as a whole names its path."""


class Report:
    """Collects every problem of one scenario; raised at the end as one ScenarioError.

    Args:
        lines: the line in the file of each field path (``jobs[0].count``), empty for data that
            did not come from a file.
        what: what the file is, for the message (``invalid scenario <origin>``).
        error: the error raised.
    """

    def __init__(
        self,
        lines: Mapping[str, int],
        what: str = "scenario",
        error: type[DlschedError] = ScenarioError,
    ) -> None:
        self._lines = lines
        self._what = what
        self._error = error
        self._problems: list[tuple[int, str]] = []

    def add(self, path: str, text: str) -> None:
        """Record one problem about the field at ``path``; ``text`` is the full sentence."""
        self._problems.append((self._line(path), text))

    def bad(self, path: str, value: object, expected: str) -> None:
        """Record that the field at ``path`` holds ``value`` where ``expected`` was needed."""
        self.add(path, f"{path or TOP_LEVEL} = {show(value)}: expected {expected}")

    def missing(self, path: str, expected: str) -> None:
        """Record that the field at ``path`` is missing where ``expected`` was needed."""
        self.add(path, f"{path} is missing; expected {expected}")

    @property
    def count(self) -> int:
        return len(self._problems)

    def raise_if_any(self, origin: str) -> None:
        """Raise the problems recorded so far, if any, as one error (a :class:`ScenarioError`
        unless the report was made with another).

        Args:
            origin: where the scenario came from, named in the message (a path, a label).
        """
        if not self._problems:
            return
        # Stable sort: file order, and discovery order within a line.
        ordered = sorted(self._problems, key=lambda problem: problem[0])
        entries = [f"line {line}: {text}" if line else text for line, text in ordered]
        plural = "s" if len(entries) > 1 else ""
        raise self._error(
            f"invalid {self._what} {origin} ({len(entries)} problem{plural}):\n"
            + "\n".join(f"  {entry}" for entry in entries)
        )

    def _line(self, path: str) -> int:
        """The line of ``path`` in the file, or of its nearest ancestor (a missing field is
        reported at the mapping that lacks it); 0 without a file."""
        while path:
            if path in self._lines:
                return self._lines[path]
            path = _parent(path)
        return self._lines.get("", 0)


def join(path: str, key: str) -> str:
    """The path of field ``key`` of the mapping at ``path``."""
    return f"{path}.{key}" if path else key


def show(value: object) -> str:
    """``value`` as a message quotes it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def suggest(word: object, options: Sequence[str]) -> str:
    """A "did you mean" clause naming the option closest to ``word``, or ``""``."""
    close = difflib.get_close_matches(word, options, n=1) if isinstance(word, str) else []
    return f"; did you mean {close[0]!r}?" if close else ""


def one_of(options: Sequence[str], value: object = None) -> str:
    """``one of a, b, c``, with a suggestion for ``value`` when it is close to one of them."""
    return f"one of {', '.join(options)}{suggest(value, options)}"


def _parent(path: str) -> str:
    cut = max(path.rfind("."), path.rfind("[") if path.endswith("]") else -1)
    return path[:cut] if cut > 0 else ""


# --- following an error's location through the definition -----------------------------------


@dataclasses.dataclass(frozen=True)
class _Node:
    """One value of the file, as the definition types it.

    Attributes:
        path: its path in the file.
        annotation: its type, without ``Annotated`` and ``| None``.
        metadata: the ``Annotated`` metadata found on the way to ``annotation``.
        description: the description of the field it is, if it is a field.
        union: the union it was chosen from by the tag ``tag``, when it is a member of one.
        tag: that tag.
    """

    path: str
    annotation: Any
    metadata: tuple[Any, ...]
    description: str | None = None
    union: _Node | None = None
    tag: str = ""

    @property
    def marker(self) -> Expected | None:
        """The definition's words for a value here, if it has some."""
        return next((item for item in self.metadata if isinstance(item, Expected)), None)

    @property
    def expected(self) -> str:
        """What a value here must be."""
        if self.marker is not None:
            return self.marker.text
        options = _options(self.annotation)
        if options:
            return one_of(options)
        raise AssertionError(f"the definition says nothing expected at {self.path!r}")

    def field_names(self) -> list[str]:
        """The fields of the mapping this node is, in the definition's order."""
        if isinstance(self.annotation, type) and issubclass(self.annotation, BaseModel):
            return list(self.annotation.model_fields)
        return []


def _node(path: str, annotation: Any, metadata: Sequence[Any] = (), **more: Any) -> _Node:
    """A node of ``annotation`` with ``Annotated`` and ``| None`` taken off (their metadata
    kept)."""
    found = list(metadata)
    while True:
        if typing.get_origin(annotation) is Annotated:
            found += annotation.__metadata__
            annotation = annotation.__origin__
            continue
        members = [arg for arg in _union_members(annotation) if arg is not type(None)]
        if len(members) == 1:  # an Omittable: ``T | None``
            annotation = members[0]
            continue
        return _Node(path, annotation, tuple(found), **more)


def _union_members(annotation: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(annotation)
    return typing.get_args(annotation) if origin in (typing.Union, types.UnionType) else ()


def _options(annotation: Any) -> list[str]:
    """The values an enum or a ``Literal`` allows, as written in a file."""
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(member.value) for member in annotation]
    if typing.get_origin(annotation) is Literal:
        return [
            str(arg.value if isinstance(arg, enum.Enum) else arg) for arg in annotation.__args__
        ]
    return []


def _discriminator(node: _Node) -> str | None:
    """The field a tagged union tells its members apart by, or None for a shape test."""
    for item in node.metadata:
        if isinstance(item, FieldInfo) and isinstance(item.discriminator, str):
            return item.discriminator
        if isinstance(item, Discriminator) and isinstance(item.discriminator, str):
            return item.discriminator
    return None


def _tagged_members(node: _Node) -> dict[str, _Node]:
    """The members of the tagged union at ``node`` by tag."""
    discriminator = _discriminator(node)
    members: dict[str, _Node] = {}
    for member in _union_members(node.annotation):
        untagged = _node(node.path, member)
        if discriminator is not None:
            tags = _options(untagged.annotation.model_fields[discriminator].annotation)
        else:
            tags = [item.tag for item in untagged.metadata if isinstance(item, Tag)]
        for tag in tags:
            members[tag] = dataclasses.replace(untagged, union=node, tag=tag)
    return members


def _step(node: _Node, part: str | int) -> _Node | None:
    """The node below ``node`` at location part ``part``; None where the definition has none
    (an unknown field, a key that is not a string)."""
    annotation = node.annotation
    if _union_members(annotation):
        return _tagged_members(node).get(str(part))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(part))
        if field is None:
            return None
        return _node(
            join(node.path, str(part)),
            field.annotation,
            (*field.metadata, field),
            description=field.description,
        )
    if typing.get_origin(annotation) is list and isinstance(part, int):
        return _node(f"{node.path}[{part}]", typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is dict and isinstance(part, str):
        return _node(join(node.path, part), typing.get_args(annotation)[1])
    return None


def _follow(
    loc: tuple[str | int, ...], definition: Any
) -> tuple[list[_Node], tuple[str | int, ...]]:
    """The nodes along ``loc`` from the file's top (``definition``), and the parts of ``loc``
    past the last."""
    trail = [_node("", definition)]
    for index, part in enumerate(loc):
        child = _step(trail[-1], part)
        if child is None:
            return trail, loc[index:]
        trail.append(child)
    return trail, ()


# --- the problems of one pydantic error ------------------------------------------------------


def report_validation_error(
    error: ValidationError, report: Report, definition: Any = ScenarioDocument
) -> None:
    """Record each of pydantic's errors of one file as a problem in ``report``.

    Args:
        error: what pydantic raised.
        report: where the problems go.
        definition: the file's model (a scenario file's by default), with an
            :class:`~dlsched.envs.scenarios.schema.Expected` for the file as a whole if it is
            given ``Annotated``.
    """
    for details in error.errors(include_url=False):
        _report_one(details, report, definition)


def _report_one(details: ErrorDetails, report: Report, definition: Any) -> None:
    trail, rest = _follow(tuple(details["loc"]), definition)
    node = trail[-1]
    kind = details["type"]
    value = details["input"]
    if kind == "invalid_key":
        report.bad(join(node.path, str(value)), value, "a field name (a string)")
    elif kind == "extra_forbidden":
        _report_unknown_field(node, str(rest[0]), report)
    elif kind == "missing":
        report.missing(node.path, node.description or node.expected)
    elif kind.startswith("union_tag") and _discriminator(node) and isinstance(value, Mapping):
        _report_bad_tag(node, value, report)
    elif kind == RULE_ERROR:
        report.bad(node.path, value, details["msg"])
    elif kind in ("float_type", "int_type") and isinstance(value, str):
        report.add(node.path, _text_for_a_number(node.path, value, node.expected, kind))
    else:
        report.bad(node.path, value, _expected_value(node, details, value))


def _expected_value(node: _Node, details: ErrorDetails, value: object) -> str:
    expected = node.expected
    kind = details["type"]
    if kind == "string_too_long":
        return f"{expected}, of at most {(details.get('ctx') or {}).get('max_length')} characters"
    if kind == "finite_number":
        return expected.replace("a number", "a finite number", 1)
    if kind in ("enum", "literal_error"):
        return expected + suggest(value, _options(node.annotation))
    return expected


def _text_for_a_number(path: str, text: str, expected: str, kind: str) -> str:
    """The problem of a number field that YAML read as a string: what it read, what the field
    takes, and how to write it.

    A newcomer writes ``interval_s: ten``, or quotes a number, or writes ``1e3``, which PyYAML
    (YAML 1.1) reads as text because its exponent has no dot; each gets its own fix.
    """
    read = f"{path}: read the string {show(text)}, not a number; {path} takes {expected}"
    try:
        float(text)
    except ValueError:
        example = "10" if kind == "int_type" else "10 or 2.5"
        return f"{read}, written in digits (e.g. {example})"
    if "e" in text.lower():
        return f"{read}: write it unquoted and with a dot before the exponent (1.0e+3, not 1e3)"
    return f"{read}: write it without quotes"


def _report_unknown_field(mapping: _Node, key: str, report: Report) -> None:
    """A field the mapping at ``mapping`` does not take: misplaced if another kind of the same
    union takes it, else unknown, with the closest known name."""
    path = join(mapping.path, key)
    known = mapping.field_names()
    union = mapping.union
    misplaced = union.marker.misplaced if union is not None and union.marker else ""
    if union is not None and misplaced and _taken_by_a_member(union, key):
        keys = ", ".join(name for name in known if name != _discriminator(union))
        report.add(path, f"{path}: {misplaced.format(tag=mapping.tag, keys=keys)}")
        return
    report.add(path, f"{path}: unknown field; expected {one_of(known, key)}")


def _taken_by_a_member(union: _Node, key: str) -> bool:
    return any(key in member.field_names() for member in _tagged_members(union).values())


def _report_bad_tag(union: _Node, value: Mapping[object, object], report: Report) -> None:
    """A tagged union's mapping whose tag field is missing or not one of the tags; with it, the
    fields no member takes (those a member takes wait until the tag is right)."""
    discriminator = _discriminator(union)
    assert discriminator is not None
    members = _tagged_members(union)
    path = join(union.path, discriminator)
    if discriminator in value:
        report.bad(path, value[discriminator], one_of(list(members), value[discriminator]))
    else:
        report.missing(path, one_of(list(members)))
    taken = list(
        dict.fromkeys(name for member in members.values() for name in member.field_names())
    )
    for key in value:
        if isinstance(key, str) and key not in taken:
            field = join(union.path, key)
            report.add(field, f"{field}: unknown field; expected {one_of(taken, key)}")
