"""The tables dlsched prints: aligned columns under their headers, and a legend with one line per
column saying what it holds.

A newcomer reads ``|G| end`` or ``x bound`` in a table and has nowhere to look it up unless the
table says it. So every table a command prints (``evaluate``'s and ``compare``'s, ``validate``'s,
``reproduce``'s and its report's, the baselines report, the scenario listing) names its columns
as :class:`Column` s, each with its meaning, and renders them here: its legend then has a line
``<header>: <meaning>`` for every column, whatever the table holds (``tests/runs/
test_table_legends.py`` reads every table's header back and fails on a column without one).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

#: How wide a legend's lines are wrapped, as the tables' own notes are.
LEGEND_WIDTH = 100


@dataclass(frozen=True)
class Column:
    """One column of a table.

    Attributes:
        header: its header, as printed (at most one space between words: the columns of an
            aligned table are two spaces apart).
        meaning: what its cells hold, in one sentence without a final stop.
        left: aligned left (names); numbers align right.
    """

    header: str
    meaning: str
    left: bool = False


def aligned(columns: Sequence[Column], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """The header and ``rows`` (a cell per column) aligned, columns two spaces apart."""
    lines = [[column.header for column in columns], *(list(row) for row in rows)]
    widths = [max(len(line[index]) for line in lines) for index in range(len(columns))]
    return "\n".join(
        indent
        + "  ".join(
            cell.ljust(width) if column.left else cell.rjust(width)
            for column, cell, width in zip(columns, line, widths, strict=True)
        ).rstrip()
        for line in lines
    )


def legend(columns: Sequence[Column], notes: Sequence[str] = ()) -> str:
    """One line per column (``<header>: <meaning>``, wrapped with a hanging indent), each header
    once in the order given, then ``notes`` (how the cells are written), a line each."""
    entries = {column.header: column.meaning for column in columns}
    lines = [f"{header}: {meaning}" for header, meaning in entries.items()] + list(notes)
    return "\n".join(
        textwrap.fill(line, width=LEGEND_WIDTH, subsequent_indent="    ") for line in lines
    )


def markdown_legend(columns: Sequence[Column], notes: Sequence[str] = ()) -> str:
    """:func:`legend` as a Markdown list, so that a renderer keeps a line per column."""
    entries = {column.header: column.meaning for column in columns}
    lines = [f"{header}: {meaning}" for header, meaning in entries.items()] + list(notes)
    return "\n".join(f"- {line}" for line in lines)
