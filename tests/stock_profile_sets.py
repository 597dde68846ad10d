"""Copies of the shipped measured-stock profile set with their race or crowding curves set by a
test (the fits and the race are checked against sets whose truth the test chose)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from dlsched.envs.replay.profile import PROFILES_DIR
from dlsched.envs.replay.race import RaceModel, race_data


def measured_stock_copy(
    directory: Path,
    race: RaceModel | None = None,
    curves: Mapping[str, tuple[float, float]] | None = None,
) -> str:
    """measured-stock copied to ``directory``, with ``race`` for its stock jobs and ``curves``
    for the workloads they name; the folder's path, as a profile set's name.

    Args:
        directory: where the copy goes (it must not exist yet).
        race: the stock jobs' race (``None``: the copy has none).
        curves: each named workload's crowding curve, ``(exponent, floor)`` (``None``: the
            shipped ones).
    """
    shutil.copytree(PROFILES_DIR / "measured-stock", directory)
    contention = directory / "contention.json"
    data = json.loads(contention.read_text())
    data["races"] = {} if race is None else {"stock": race_data(race)}
    contention.write_text(json.dumps(data))
    for workload, (exponent, floor) in (curves or {}).items():
        path = directory / f"{workload}.json"
        profile = json.loads(path.read_text())
        profile["contention_exponent"], profile["contention_floor"] = exponent, floor
        path.write_text(json.dumps(profile))
    return str(directory)
