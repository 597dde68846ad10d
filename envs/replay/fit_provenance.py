"""How a fitted part of a profile set was obtained: its measurements, host, date, objective and
residuals, written beside the numbers it explains (the contention term, each race)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The text fields of a provenance object, each a string.
_TEXT_FIELDS = ("source", "host", "date", "objective")


@dataclass(frozen=True)
class FitProvenance:
    """How a fitted model was obtained.

    Attributes:
        source: where the measurements come from (the command, or the paper's figure).
        host: the machine measured (CPU model and cores).
        date: when, ``YYYY-MM-DD``.
        objective: what the fit minimised.
        residuals: one line per measured cell or fitted part: measured against modelled.
    """

    source: str
    host: str
    date: str
    objective: str
    residuals: tuple[str, ...]


def provenance_data(fit: FitProvenance) -> dict[str, Any]:
    """The JSON object of ``fit``, as :func:`parse_provenance` reads it."""
    return {
        "source": fit.source,
        "host": fit.host,
        "date": fit.date,
        "objective": fit.objective,
        "residuals": list(fit.residuals),
    }


def parse_provenance(data: Any, where: str) -> tuple[FitProvenance | None, list[str]]:
    """A provenance from its JSON object, and what is wrong with it (``None`` then).

    Args:
        data: the decoded JSON.
        where: names the object in the problems (``fit``, ``races.stock.fit``).
    """
    if not isinstance(data, dict) or not all(isinstance(data.get(n), str) for n in _TEXT_FIELDS):
        return None, [f"{where}: got {data!r}, expected an object with strings {_TEXT_FIELDS}"]
    residuals = data.get("residuals", [])
    if not isinstance(residuals, list) or not all(isinstance(r, str) for r in residuals):
        return None, [f"{where}.residuals: expected a list of strings"]
    return FitProvenance(
        source=data["source"],
        host=data["host"],
        date=data["date"],
        objective=data["objective"],
        residuals=tuple(residuals),
    ), []
