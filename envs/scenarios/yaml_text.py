"""YAML files a user hands dlsched (scenarios, claims) read to data, bounded, with the line of
every field.

Reading goes in three steps, so that a check of the input's size can stand before each
allocation it bounds: the raw text (its size is bounded by
:data:`~dlsched.envs.size_bounds.MAX_FILE_BYTES` before it is read); the node tree PyYAML
composes from it (nodes, anchors and aliases, not yet Python values), from which the line of
each field path is taken and duplicate keys are found, and whose values, aliases expanded, are
counted against :data:`~dlsched.envs.size_bounds.MAX_YAML_VALUES`; and the Python data
constructed from that tree.

Aliases are allowed: PyYAML builds an alias as a reference to its anchor's value, but everything
after it (validation, messages, copies) walks the data as a tree, where each use is a copy.

Every kind of file goes through these same steps, so that each is bounded alike; a
:class:`FileKind` says how its refusals name it and which error they raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from dlsched.envs.errors import DlschedError, ScenarioError
from dlsched.envs.scenarios.problems import show
from dlsched.envs.size_bounds import MAX_FILE_BYTES, MAX_YAML_VALUES


@dataclass(frozen=True)
class FileKind:
    """A kind of YAML file dlsched is handed, as the refusals of one describe it.

    Attributes:
        name: what a message calls one (``"scenario file"``).
        holds: what one holds, said of an empty file (``"a mapping with ..."``).
        size: how large one usually is, said of one refused as too large.
        unreadable: the fix for a file that cannot be read.
        error: the error every refusal of one raises.
    """

    name: str
    holds: str
    size: str
    unreadable: str
    error: type[DlschedError]


SCENARIO_FILE = FileKind(
    name="scenario file",
    holds=(
        "a mapping with at least name, kind, horizon_s, workers and jobs (see `dlsched "
        "scenarios NAME` for an example)"
    ),
    size="tens of lines and a few hundred values",
    unreadable="check the file is readable",
    error=ScenarioError,
)
"""A scenario, read by :func:`~dlsched.envs.scenarios.file_format.load_scenario`."""


def read_text(path: Path, kind: FileKind) -> str:
    """The text of the file at ``path``, read only as far as the size limit.

    Raises:
        DlschedError: ``kind.error``; the file cannot be read, is larger than
            :data:`~dlsched.envs.size_bounds.MAX_FILE_BYTES`, or is not UTF-8.
    """
    limit = MAX_FILE_BYTES.value
    try:
        with path.open("rb") as stream:
            # One byte more than the limit tells a file that is too long, however it grows.
            data = stream.read(limit + 1)
    except OSError as error:
        raise kind.error(
            f"cannot read {kind.name} {str(path)!r}: {error}; {kind.unreadable}"
        ) from error
    if len(data) > limit:
        raise kind.error(
            f"{kind.name} {str(path)!r} is larger than {limit:,} bytes: expected "
            f"{MAX_FILE_BYTES.expected()}; a {kind.name} has {kind.size}, is this the right "
            f"file?"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise kind.error(
            f"cannot read {kind.name} {str(path)!r}: {error}; expected UTF-8 text"
        ) from error


@dataclass(frozen=True)
class YamlDocument:
    """The one document of a scenario file.

    Attributes:
        data: what ``yaml.safe_load`` returns for it.
        lines: the line (from 1) of each field path in it (``jobs[0].count``; ``""`` for the
            document itself).
    """

    data: object
    lines: dict[str, int]


def read_yaml(text: str, origin: str, kind: FileKind) -> YamlDocument:
    """The YAML document in ``text``, with the line of each field path.

    Args:
        text: the file's text.
        origin: the file's path, named in error messages.
        kind: the kind of file, as messages name it.

    Raises:
        DlschedError: ``kind.error``; the text is empty, not YAML, holds several documents,
            expands to more values than :data:`~dlsched.envs.size_bounds.MAX_YAML_VALUES`
            (or endlessly, through an alias inside its own anchor), or gives a key twice in one
            mapping (which plain YAML loading silently collapses to the last).
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise kind.error(f"{origin}: the file is empty; a {kind.name} is {kind.holds}")
        _check_expanded_size(node, origin, kind)
        lines: dict[str, int] = {}
        duplicates: list[str] = []
        _index_lines(node, "", lines, duplicates, set())
        if duplicates:
            raise kind.error(
                f"{origin}: {len(duplicates)} duplicate key(s):\n"
                + "\n".join(f"  {line}" for line in duplicates)
            )
        data = _construct(loader, node, origin, kind)
    except yaml.MarkedYAMLError as error:
        problem = f"{error.problem or 'not valid YAML'}{_at(error.problem_mark)}"
        context = f"{error.context}{_at(error.context_mark)}; " if error.context else ""
        raise kind.error(
            f"{origin}: YAML syntax error: {context}{problem}; fix the YAML there (indentation, "
            f"a missing colon or an unclosed bracket are the usual causes)"
        ) from error
    except yaml.YAMLError as error:
        raise kind.error(f"{origin}: not valid YAML: {error}") from error
    except RecursionError as error:
        raise kind.error(
            f"{origin}: the YAML is nested too deeply to read; a {kind.name} nests a few levels"
        ) from error
    finally:
        loader.dispose()
    return YamlDocument(data=data, lines=lines)


def _check_expanded_size(root: yaml.Node, origin: str, kind: FileKind) -> None:
    """Refuse a document whose values, each alias expanded where it is used, are more than the
    limit, before any of them is built."""
    limit = MAX_YAML_VALUES.value
    sizes: dict[int, int] = {}  # expanded size of each node, by id; -1 while it is walked

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known == -1:
            raise kind.error(
                f"{origin}: line {node.start_mark.line + 1}: an alias (*name) used inside the "
                f"value its anchor (&name) marks repeats that value endlessly; write the value "
                f"out instead"
            )
        if known is not None:
            return known
        sizes[id(node)] = -1
        total = 1
        for child in _children(node):
            total += size(child)
            if total > limit:
                break  # an alias bomb doubles at every level: stop counting past the limit
        sizes[id(node)] = total
        return total

    expanded = size(root)
    if expanded > limit:
        aliases = " (through its aliases, *name)" if expanded > len(sizes) else ""
        raise kind.error(
            f"{origin}: the YAML holds more than {limit:,} values{aliases}; expected "
            f"{MAX_YAML_VALUES.expected()}. A {kind.name} has {kind.size}: write repeated "
            f"parts once per use rather than as aliases of aliases"
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _construct(loader: yaml.SafeLoader, node: yaml.Node, origin: str, kind: FileKind) -> object:
    """The Python data of ``node``; a scalar that its tag cannot read (``2020-13-45`` is read as
    a date) is reported with its line."""
    try:
        return loader.construct_document(node)
    except (ValueError, OverflowError) as error:
        probe = yaml.SafeLoader("")  # the failed construction left its loader mid-way
        try:
            scalar = _unreadable_scalar(probe, node, set())
        finally:
            probe.dispose()
        where = f"line {scalar.start_mark.line + 1}: {show(scalar.value)}" if scalar else "a value"
        raise kind.error(
            f"{origin}: {where} cannot be read as YAML reads it ({error}); quote it to make it "
            f"a string, or write the number or date it should be"
        ) from error


def _unreadable_scalar(
    loader: yaml.SafeLoader, node: yaml.Node, seen: set[int]
) -> yaml.ScalarNode | None:
    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        try:
            loader.construct_object(node)
        except (ValueError, OverflowError):
            return node
        return None
    for child in _children(node):
        found = _unreadable_scalar(loader, child, seen)
        if found is not None:
            return found
    return None


def _at(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _index_lines(
    node: yaml.Node,
    path: str,
    lines: dict[str, int],
    duplicates: list[str],
    seen: set[int],
) -> None:
    """Index the lines below ``node``, each node once: an alias repeats the node of its anchor
    (possibly one that contains it), whose fields keep the anchor's lines."""
    lines[path] = node.start_mark.line + 1
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                continue
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            line = key_node.start_mark.line + 1
            if key in keys:
                duplicates.append(
                    f"line {line}: {child} is given again (first on line {keys[key]})"
                )
            keys[key] = line
            _index_lines(value_node, child, lines, duplicates, seen)
            lines[child] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, f"{path}[{index}]", lines, duplicates, seen)
