"""The race: how a crowded job's pace switches between levels, drawn per seed.

Where co-located stock thread pools spin at their barriers, which job's threads keep meeting each
other is a race: one seeded stock episode rerun on an idle host finishes each job at very different
times, and a job's own pace switches between levels for long spells (``docs/replay-model.md``, 'The
race'). The deterministic contention model (:mod:`.contention`) gives a crowded job its *mean*
efficiency; the race multiplies it by a level that follows a continuous-time Markov chain per job:

- The chain has levels ``m_1 < ... < m_K`` (multipliers, >= 0), a mean holding time per level
  (exponentially distributed), and the chances of each next level on leaving one (``jumps``).
  A job's chain starts when it is placed, at a level drawn from the chain's stationary
  distribution, and runs in episode time.
- Its effect grows with the worker's oversubscription ``R = N / C`` (:mod:`.contention`) up to
  ``full_at`` and fades beyond: the efficiency is multiplied by ``1 + (m - 1) s(R)``, ``s(R) =
  min(1, (R - 1) / (full_at - 1)) (full_at / max(R, full_at)) ** fade``. Measured on a 2-core
  host, three stock jobs race hardest (log spread 0.78 of their pace over the model's); four,
  five and six ever less (0.6, 0.53, 0.46): the more threads share the cores, the more evenly
  the scheduler's time slices spread over them (``fade`` 0: the levels apply whole beyond
  ``full_at``).
  Where threads fit the cores the factor is exactly 1 and nothing changes, bit for bit (the
  engine asks :func:`~dlsched.envs.replay.contention.crowded` first).
- A job draws its chain from a stream of its own, seeded from its unit-work seed and
  :data:`RACE_STREAM`: one seed gives one episode, and a profile set with a race draws the same
  units of work as one without.

A profile set holds its race models in ``contention.json`` under ``races``, by threading (format
on :func:`parse_race`); ``dlsched`` fits them from fine host traces
(:mod:`dlsched.runs.fidelity.race_fit`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlsched.envs.replay.fit_provenance import FitProvenance, parse_provenance, provenance_data

#: The second word of a race stream's seed (the first is the job's unit-work seed): a stream
#: apart from the job's units of work.
RACE_STREAM = 0x7ACE


@dataclass(frozen=True)
class RaceModel:
    """One threading's race (see the module docstring).

    Attributes:
        levels: the multipliers on a crowded job's efficiency, ascending, each >= 0.
        holding_s: the mean seconds a job stays at each level.
        jumps: ``jumps[k][j]``: the chance that a job leaving level ``k`` goes to level ``j``
            (each row sums to 1, 0 on the diagonal).
        full_at: the worker oversubscription at which the levels apply whole (> 1).
        fade: how fast the levels' effect fades beyond ``full_at`` (>= 0; 0: not at all).
        fit: how the race was fitted (``None``: written by hand, as in tests).
    """

    levels: tuple[float, ...]
    holding_s: tuple[float, ...]
    jumps: tuple[tuple[float, ...], ...]
    full_at: float = 2.0
    fade: float = 0.0
    fit: FitProvenance | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        problems = race_problems(self)
        if problems:
            raise ValueError("; ".join(problems))

    def stationary(self) -> np.ndarray:
        """The share of time the chain spends at each level in the long run."""
        jumps = np.asarray(self.jumps)
        # the embedded jump chain's stationary vector, weighed by the time spent per visit
        values, vectors = np.linalg.eig(jumps.T)
        visits = np.abs(np.real(vectors[:, np.argmin(np.abs(values - 1.0))]))
        time = visits * np.asarray(self.holding_s)
        return time / time.sum()

    def sample_path(self, rng: np.random.Generator, seconds: float) -> tuple[np.ndarray, ...]:
        """One chain over ``seconds``, as a job draws it: the times it enters each level
        (from 0) and the levels' indices."""
        starts, levels = [], []
        level = int(rng.choice(len(self.levels), p=self.stationary()))
        time = 0.0
        while time < seconds:
            starts.append(time)
            levels.append(level)
            time += rng.exponential(self.holding_s[level])
            level = int(rng.choice(len(self.levels), p=self.jumps[level]))
        return np.asarray(starts), np.asarray(levels, dtype=np.int64)


def race_factor(
    level: np.ndarray, oversubscription: np.ndarray, full_at: np.ndarray, fade: np.ndarray
) -> np.ndarray:
    """Per job, the factor on its efficiency: ``1 + (m - 1) s(R)`` at level multiplier ``m``,
    worker oversubscription ``R`` and its race's ``full_at`` (``inf``: no race, factor 1) and
    ``fade`` (see the module docstring)."""
    return 1.0 + (level - 1.0) * race_reach(oversubscription, full_at, fade)


def race_reach(oversubscription: np.ndarray, full_at: np.ndarray, fade: np.ndarray) -> np.ndarray:
    """Per job, ``s(R)``: the share of its level's effect at oversubscription ``R`` (see the
    module docstring; 1 at ``full_at``, 0 where threads fit the cores)."""
    spread = np.clip((oversubscription - 1.0) / (full_at - 1.0), 0.0, 1.0)
    beyond = np.where(oversubscription > full_at, full_at / oversubscription, 1.0) ** fade
    return spread * beyond


def race_problems(model: RaceModel) -> list[str]:
    """What is wrong with ``model``'s numbers, one line each (none: it is valid)."""
    count = len(model.levels)
    problems = []
    if count < 2:
        problems.append(f"levels: got {list(model.levels)}, expected at least 2")
    if any(not (math.isfinite(m) and m >= 0) for m in model.levels) or list(model.levels) != sorted(
        model.levels
    ):
        problems.append(f"levels: got {list(model.levels)}, expected ascending numbers >= 0")
    if len(model.holding_s) != count or any(
        not (math.isfinite(h) and h > 0) for h in model.holding_s
    ):
        problems.append(
            f"holding_s: got {list(model.holding_s)}, expected {count} positive seconds"
        )
    rows_ok = len(model.jumps) == count and all(len(row) == count for row in model.jumps)
    if not rows_ok or any(
        not all(math.isfinite(p) and p >= 0 for p in row)
        or abs(sum(row) - 1.0) > 1e-6
        or row[k] != 0.0
        for k, row in enumerate(model.jumps)
    ):
        problems.append(
            f"jumps: got {[list(row) for row in model.jumps]}, expected {count} rows of {count} "
            "chances >= 0 summing to 1, 0 on the diagonal"
        )
    if not (math.isfinite(model.full_at) and model.full_at > 1.0):
        problems.append(f"full_at: got {model.full_at!r}, expected a number > 1")
    if not (math.isfinite(model.fade) and model.fade >= 0.0):
        problems.append(f"fade: got {model.fade!r}, expected a number >= 0")
    return problems


def parse_race(data: Any, where: str) -> tuple[RaceModel | None, list[str]]:
    """A race model from its JSON object, and what is wrong with it (the model is ``None`` then)::

        {"levels": [0.45, 1.0, 1.7], "holding_s": [40.0, 25.0, 30.0],
         "jumps": [[0, 0.6, 0.4], [0.5, 0, 0.5], [0.4, 0.6, 0]], "full_at": 2.0, "fade": 0.8,
         "fit": {"source": ..., "host": ..., "date": ..., "objective": ..., "residuals": [...]}}

    (``full_at``, ``fade`` and ``fit`` are optional.)

    Args:
        data: the decoded JSON.
        where: names the object in the problems (``races.stock``).
    """
    if not isinstance(data, dict):
        return None, [f"{where}: got {data!r}, expected an object"]
    known = {"levels", "holding_s", "jumps", "full_at", "fade", "fit"}
    problems = [
        f"{where}.{key}: unknown field; known fields: {', '.join(sorted(known))}"
        for key in sorted(set(data) - known)
    ]
    fit = None
    if data.get("fit") is not None:
        fit, fit_problems = parse_provenance(data["fit"], f"{where}.fit")
        problems += fit_problems
    try:
        model = RaceModel(
            levels=tuple(float(v) for v in data["levels"]),
            holding_s=tuple(float(v) for v in data["holding_s"]),
            jumps=tuple(tuple(float(p) for p in row) for row in data["jumps"]),
            full_at=float(data.get("full_at", 2.0)),
            fade=float(data.get("fade", 0.0)),
            fit=fit,
        )
    except KeyError as missing:
        return None, [*problems, f"{where}: missing field {missing}"]
    except (TypeError, ValueError) as error:
        return None, [*problems, f"{where}: {error}"]
    return (model if not problems else None), problems


def race_data(model: RaceModel) -> dict[str, Any]:
    """The JSON object of ``model``, as :func:`parse_race` reads it."""
    data: dict[str, Any] = {
        "levels": list(model.levels),
        "holding_s": list(model.holding_s),
        "jumps": [list(row) for row in model.jumps],
        "full_at": model.full_at,
        "fade": model.fade,
    }
    if model.fit is not None:
        data["fit"] = provenance_data(model.fit)
    return data


class RaceChains:
    """Every racing job's chain in the replay engine: its stream and its next switch.

    Args:
        models: per profile of the scenario's table, its threading's race (``None``: none).
    """

    def __init__(self, models: Sequence[RaceModel | None]) -> None:
        self.models = tuple(models)
        self._streams: dict[tuple[int, int], np.random.Generator] = {}
        self._current: dict[tuple[int, int], int] = {}

    def reset_rows(self, rows: Sequence[int]) -> None:
        """Forget the chains of ``rows``."""
        gone = set(rows)
        for key in [key for key in self._streams if key[0] in gone]:
            del self._streams[key], self._current[key]

    def start(
        self, rows: np.ndarray, jobs: np.ndarray, profiles: np.ndarray, seeds: np.ndarray
    ) -> list[tuple[int, int, float, float, RaceModel]]:
        """Start the chains of jobs just placed whose profile races.

        Returns:
            Per racing job: its row, its job, its level's multiplier, seconds until its first
            switch, and its model.
        """
        started = []
        for row, job, profile, seed in zip(
            rows.tolist(), jobs.tolist(), profiles.tolist(), seeds.tolist(), strict=True
        ):
            model = self.models[profile]
            if model is None:
                continue
            stream = np.random.default_rng((seed, RACE_STREAM))
            level = int(stream.choice(len(model.levels), p=model.stationary()))
            self._streams[row, job], self._current[row, job] = stream, level
            holding = float(stream.exponential(model.holding_s[level]))
            started.append((row, job, model.levels[level], holding, model))
        return started

    def switch(self, row: int, job: int, profile: int) -> tuple[float, float]:
        """Move a job's chain to its next level: that level's multiplier and its holding time."""
        model = self.models[profile]
        assert model is not None
        stream = self._streams[row, job]
        level = int(stream.choice(len(model.levels), p=model.jumps[self._current[row, job]]))
        self._current[row, job] = level
        return model.levels[level], float(stream.exponential(model.holding_s[level]))


def races_by_threading(
    data: Mapping[str, Any], where: str
) -> tuple[dict[str, RaceModel], list[str]]:
    """The ``races`` object of a contention file: threading to race model, and its problems."""
    races: dict[str, RaceModel] = {}
    problems: list[str] = []
    for threading, raw in data.items():
        model, found = parse_race(raw, f"{where}.{threading}")
        problems += found
        if model is not None:
            races[threading] = model
    return races, problems
