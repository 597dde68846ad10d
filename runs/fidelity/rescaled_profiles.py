"""Replay on profiles rescaled to a probed host's speed, and a verdict held through the probe's
interval.

:func:`write_rescaled_set` writes a profile set whose probed workloads run at the host's speed
(throughput times the ratio, start-up divided by it; demands, noise and contention as measured),
as an ordinary profile-set folder; :func:`rescaled_model` is replay on it, the model a validation
holds against the host. :func:`speed_noise` reruns replay on the profiles as they are and at
each end of the probe's interval (:mod:`~dlsched.runs.fidelity.speed_interval`), so that a
report can say whether its verdict is within the probe's noise.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.contention import CONTENTION_FILE
from dlsched.envs.replay.profile import load_profile_set, profile_set_directory
from dlsched.envs.scenarios.model import Scenario
from dlsched.runs.fidelity.calibration_profile import significant
from dlsched.runs.fidelity.host_speed import HostSpeed
from dlsched.runs.fidelity.speed_interval import SpeedNoise
from dlsched.runs.fidelity.validation_sides import Side
from dlsched.runs.fidelity.validation_statistics import ErrorSummary, compare_episodes

if TYPE_CHECKING:
    from dlsched.policies.policy import Policy
    from dlsched.runs.evaluation.records import EpisodeResult


def write_rescaled_set(speed: HostSpeed, directory: Path) -> Path:
    """Write ``speed.profile_set`` rescaled to the probed host into ``directory``.

    Each probed workload's throughput is multiplied by its ratio and its start-up times
    divided by it; the other profiles and the set's contention file are copied unchanged. The
    profiles' derivations say so.

    Returns:
        ``directory``, a profile-set folder (``profile_set: DIR`` in a scenario).

    Raises:
        ProfileError: ``directory`` exists and is not empty, or the set cannot be read.
    """
    if directory.exists() and any(directory.iterdir()):
        raise ProfileError(
            f"{directory} is not empty; a rescaled profile set is written into a new folder"
        )
    source = profile_set_directory(speed.profile_set)
    load_profile_set(speed.profile_set)  # refuse a malformed set before copying it
    directory.mkdir(parents=True, exist_ok=True)
    ratios = speed.ratios()
    for path in sorted(source.glob("*.json")):
        if path.name == CONTENTION_FILE or path.stem not in ratios:
            shutil.copyfile(path, directory / path.name)
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        _rescale(data, ratios[path.stem], speed)
        (directory / path.name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return directory


def _rescale(profile: dict[str, Any], ratio: float, speed: HostSpeed) -> None:
    throughput = profile["throughput"]
    throughput["units_per_s"] = [significant(rate * ratio, 5) for rate in throughput["units_per_s"]]
    for field in ("startup_s", "startup_cpu_s"):
        if field in profile:
            profile[field] = significant(profile[field] / ratio, 5)
    note = (
        f"rescaled to {speed.host} on {speed.date}: throughput x{ratio:.4g} and start-up "
        f"/{ratio:.4g}, from {speed.which()} of dlsched validate (each workload alone and "
        "uncapped, against the profile)"
    )
    provenance = profile.get("provenance")
    if isinstance(provenance, dict):
        derivation = str(provenance.get("derivation", ""))
        provenance["derivation"] = f"{derivation}; {note}" if derivation else note


def rescaled_model(speed: HostSpeed, directory: Path) -> Side:
    """Replay on ``speed``'s profile set rescaled into ``directory`` (which must be new)."""
    write_rescaled_set(speed, directory)
    return Side("replay", {}, str(directory), speed_note="rescaled to this host's speed")


def speed_noise(
    scenario: Scenario,
    policies: Sequence[Policy],
    seeds: Sequence[int],
    model_episodes: Sequence[EpisodeResult],
    reference_episodes: Sequence[EpisodeResult],
    speed: HostSpeed,
    progress: bool = False,
) -> SpeedNoise:
    """A verdict held through ``speed``'s interval: the median per-job |error| of the model's
    episodes (replay rescaled to ``speed``), and of replay on ``seeds`` on the profiles as they
    are and rescaled to every workload's low end and to its high end, each against
    ``reference_episodes``. Replay takes seconds, so the three run beside any validation."""
    from dlsched.runs.evaluation.runners import evaluate

    def error(episodes: Sequence[EpisodeResult]) -> float | None:
        return ErrorSummary.of(compare_episodes(episodes, reference_episodes)).median

    def on(profile_set: str) -> float | None:
        changed = dataclasses.replace(scenario, profile_set=profile_set)
        return error(evaluate(changed, policies, seeds, "replay", progress=progress))

    with tempfile.TemporaryDirectory(prefix="dlsched-speed-ends-") as scratch:
        low, high = speed.at_end("low"), speed.at_end("high")
        return SpeedNoise(
            rescaled=error(model_episodes),
            unscaled=on(scenario.profile_set),
            at_low=None if low is None else on(str(write_rescaled_set(low, Path(scratch) / "low"))),
            at_high=None
            if high is None
            else on(str(write_rescaled_set(high, Path(scratch) / "high"))),
            workloads=speed.intervals(),
        )
