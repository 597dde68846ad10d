"""The two sides of a validation: where each one's episodes come from, and running both.

A :class:`Side` is a backend, its options, and for replay another profile set: the model
(:data:`REPLAY` by default) is held against the reference (:data:`HOST`, the local Docker
engine, by default). Any side can stand on either side, so that a recalibrated set can be held
against the shipped one, and so that replay against itself is a test of the comparison (zero
error). A side may also be *recorded*: the episodes of an earlier evaluation read from its
folder, so that a change of the replay model is held against yesterday's host run without
running it again. A recording's files are measured, every episode's, before any side runs
(within :data:`~dlsched.runs.tracking.trajectory.MAX_RECORD_BYTES` and
:data:`~dlsched.runs.tracking.trajectory.MAX_TRAJECTORY_BYTES`, as ``dlsched runs sync`` reads
them).

:func:`run_validation` runs every policy on every seed on both sides (:func:`run_sides` says
in which order) and builds the report (:mod:`~dlsched.runs.fidelity.validation_report`);
:mod:`~dlsched.runs.fidelity.validation_run` is the same run tracked in MLflow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dlsched.envs.errors import BackendError, TrackingError
from dlsched.envs.scenarios.model import Scenario
from dlsched.policies.policy import Policy
from dlsched.runs.evaluation.records import EpisodeResult, PolicyIdentity, backend_label
from dlsched.runs.fidelity.validation_report import ValidationReport, build_report
from dlsched.runs.fidelity.validation_statistics import same_jobs_every_seed
from dlsched.runs.tracking.trajectory import (
    EPISODE_FILE,
    EvaluationFolder,
    episode_files,
    read_episode,
)

if TYPE_CHECKING:
    from dlsched.runs.fidelity.host_speed import HostSpeed
    from dlsched.runs.fidelity.speed_interval import SpeedNoise


@dataclass(frozen=True)
class Side:
    """One side of a validation: where its episodes run.

    Attributes:
        backend: the backend's registered name.
        options: keyword arguments of its constructor (``workload_threading`` for Docker).
        profile_set: replay only: the profile set to use instead of the scenario's.
        recorded: the local folder of an earlier evaluation whose episodes are this side's
            (the host side of an earlier validation, or ``dlsched evaluate --out``): nothing
            runs, so a changed replay model is held against one host recording in seconds.
        speed_note: replay only: how :attr:`profile_set` differs from the scenario's, for the
            report's label (a set rescaled to the host's speed lives in a temporary folder whose
            path says nothing).
    """

    backend: str
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    profile_set: str | None = None
    recorded: Path | None = None
    speed_note: str | None = None

    def __post_init__(self) -> None:
        if self.profile_set is not None and self.backend != "replay":
            raise BackendError(
                f"profile set {self.profile_set!r} given for the {self.backend} backend; only "
                "replay runs on profiles"
            )

    def label(self) -> str:
        """How reports name the side: ``replay``, ``docker[workload_threading=stock]``, ..."""
        base = backend_label(self.backend, self.options)
        if self.recorded is not None:
            return f"{base}, recorded"
        if self.speed_note is not None:
            return f"{base}[{self.speed_note}]"
        return base if self.profile_set is None else f"{base}[profile_set={self.profile_set}]"

    @classmethod
    def of_recording(cls, folder: Path) -> Side:
        """The side an evaluation recorded in ``folder`` ran on (its backend and options).

        Raises:
            TrackingError: ``folder`` holds no recorded episode.
        """
        episodes = EvaluationFolder(folder).episode_dirs()
        if not episodes:
            raise TrackingError(
                f"--against recorded:{folder}: no recorded episode there (expected "
                "<policy>-seed<seed>/episode.json folders, as dlsched evaluate and validate "
                "write under --out); name the folder of one evaluation"
            )
        for episode in episodes:  # at once, rather than once the model's episodes have run
            episode_files(episode)
        first = read_episode(episodes[0])
        return cls(first.backend, dict(first.backend_options), recorded=folder)

    def recorded_episodes(
        self, scenario: Scenario, policies: Sequence[Policy], seeds: Sequence[int]
    ) -> list[EpisodeResult]:
        """Every policy's episode of every seed, read from :attr:`recorded`.

        Raises:
            TrackingError: an episode is missing, or was recorded on another scenario, policy
                parameters or backend than asked.
        """
        assert self.recorded is not None
        folder = EvaluationFolder(self.recorded)
        results = []
        for policy in policies:
            identity = PolicyIdentity.of(policy)
            for seed in seeds:
                path = folder.episode_dir(identity, seed)
                if not (path / EPISODE_FILE).is_file():
                    held = ", ".join(p.name for p in folder.episode_dirs()) or "nothing"
                    raise TrackingError(
                        f"--against recorded:{self.recorded}: no episode {path.name} there (it "
                        f"holds {held}); validate the policies and seeds it recorded"
                    )
                result = read_episode(path, containers=True)
                recorded, asked = result.scenario.content_hash(), scenario.content_hash()
                if recorded != asked:
                    raise TrackingError(
                        f"{path} ran scenario {result.scenario.name!r} as it was then "
                        f"(content {recorded}), not {scenario.name!r} as it is now (content "
                        f"{asked}): do not match; record the host again with this scenario"
                    )
                if result.policy != identity:
                    raise TrackingError(
                        f"{path} ran {result.policy.name} with {dict(result.policy.params)}, "
                        f"not with {dict(identity.params)}: do not match; pass the same --set"
                    )
                if (result.backend, dict(result.backend_options)) != (
                    self.backend,
                    dict(self.options),
                ):
                    raise TrackingError(
                        f"{path} ran on {backend_label(result.backend, result.backend_options)}"
                        f", not {backend_label(self.backend, self.options)}: one recording "
                        "holds one backend's episodes"
                    )
                results.append(result)
        return results

    def scenario_for(self, scenario: Scenario) -> Scenario:
        """``scenario`` as this side runs it."""
        if self.profile_set is None:
            return scenario
        return dataclasses.replace(scenario, profile_set=self.profile_set)


#: The model: replay on the scenario's own profiles.
REPLAY = Side("replay")
#: What it models: the local Docker engine.
HOST = Side("docker")


class ModelAfterReference(Protocol):
    """A model known only once the reference's episodes are done: replay rescaled to the host's
    speed during them (:class:`~dlsched.runs.fidelity.host_speed.SpeedBracket`)."""

    #: the speed replay was rescaled to, once :meth:`after_reference` ran
    speed: HostSpeed | None

    def after_reference(self) -> tuple[Side, list[str]]:
        """The model's side, and what the report should say of it."""
        ...


@dataclass(frozen=True)
class SidesRun:
    """Both sides' episodes, each run in the order its model allows (:func:`run_sides`).

    Attributes:
        model: the model's side (a bracket's, once the reference ran).
        model_episodes: its episodes.
        reference_episodes: the reference's.
        notes: what the model said of itself once made (none for a side given as such).
    """

    model: Side
    model_episodes: list[EpisodeResult]
    reference_episodes: list[EpisodeResult]
    notes: list[str]

    def speed_noise(
        self,
        scenario: Scenario,
        policies: Sequence[Policy],
        seeds: Sequence[int],
        speed: HostSpeed | None,
        progress: bool = False,
    ) -> SpeedNoise | None:
        """The verdict held through the interval of the ``speed`` the model was rescaled to
        (:func:`~dlsched.runs.fidelity.rescaled_profiles.speed_noise`; ``None``: no rescale)."""
        if speed is None:
            return None
        # imported here: the rescaled profiles build on this module's sides
        from dlsched.runs.fidelity.rescaled_profiles import speed_noise

        return speed_noise(
            scenario,
            policies,
            seeds,
            self.model_episodes,
            self.reference_episodes,
            speed,
            progress,
        )


def run_sides(
    model: Side | ModelAfterReference,
    reference: Side,
    episodes_of: Callable[[Side], list[EpisodeResult]],
) -> SidesRun:
    """Run the model first where it is a side (replay takes seconds, and a scenario that fails
    on replay fails before any container starts), else the reference first and the model it
    makes after."""
    if isinstance(model, Side):
        model_episodes = episodes_of(model)
        return SidesRun(model, model_episodes, episodes_of(reference), [])
    reference_episodes = episodes_of(reference)
    side, notes = model.after_reference()
    return SidesRun(side, episodes_of(side), reference_episodes, notes)


#: Seeds replay runs in all for a validation's distributions by default where the scenario's
#: jobs run stock threading (the host's reruns spread: ``docs/fidelity.md``); none otherwise.
STOCK_REPLAY_SEEDS = 50


def replay_spread(
    model: Side,
    scenario: Scenario,
    policies: Sequence[Policy],
    seeds: Sequence[int],
    replay_seeds: int,
    progress: bool = False,
) -> list[EpisodeResult]:
    """Replay's episodes of the seeds after ``seeds``, up to ``replay_seeds`` seeds in all,
    for the distributions of a scenario that draws the same jobs every seed (its seeds are
    reruns of one episode): none where the model is not replay run now, or the scenario draws
    other jobs per seed.
    """
    from dlsched.runs.evaluation.runners import evaluate

    extra = replay_seeds - len(seeds)
    if model.backend != "replay" or model.recorded is not None or extra <= 0:
        return []
    if not same_jobs_every_seed(scenario):
        return []
    start = max(seeds) + 1
    return evaluate(
        model.scenario_for(scenario),
        policies,
        range(start, start + extra),
        "replay",
        progress=progress,
    )


def run_validation(
    scenario: Scenario,
    policies: Sequence[Policy],
    seeds: Sequence[int],
    reference: Side = HOST,
    model: Side | ModelAfterReference = REPLAY,
    held_out: Sequence[str] = (),
    progress: bool = True,
    warnings: Sequence[str] = (),
    replay_seeds: int = 0,
    host_speed: HostSpeed | None = None,
) -> tuple[ValidationReport, list[EpisodeResult], list[EpisodeResult]]:
    """Run every policy on every seed on the model and on the reference, and compare.

    The sides run in the order :func:`run_sides` says. Nothing is recorded (see
    :mod:`.validation_run` for the tracked run).

    Args:
        scenario: a scenario both sides can run (the host-scale ones, for the host).
        policies: the policies, built (:func:`dlsched.runs.policy_specs.build_policies`).
        seeds: the seeds, the same on both sides.
        reference: what the model is held against (the local engine by default).
        model: the model (replay on the scenario's profiles by default), or what makes it once
            the reference's episodes are done; its notes join the report's warnings.
        held_out: names of the policies calibration did not see.
        progress: show a progress bar.
        warnings: warnings to carry into the report (a busy or different host).
        replay_seeds: seeds replay runs in all for the distributions (:func:`replay_spread`).
        host_speed: the speed a model given as a side was rescaled to (a bracket's own is its
            speed once the reference ran), for the errors its probe's interval allows.

    Returns:
        The report, and the model's and the reference's episodes.
    """
    from dlsched.runs.evaluation.runners import evaluate

    def episodes_of(side: Side) -> list[EpisodeResult]:
        if side.recorded is not None:
            return side.recorded_episodes(scenario, policies, seeds)
        return evaluate(
            side.scenario_for(scenario),
            policies,
            seeds,
            side.backend,
            progress=progress,
            backend_options=side.options,
        )

    sides = run_sides(model, reference, episodes_of)
    speed = host_speed if isinstance(model, Side) else model.speed
    report = build_report(
        scenario,
        sides.model_episodes,
        sides.reference_episodes,
        held_out,
        [*warnings, *sides.notes],
        (sides.model.label(), reference.label()),
        replay_spread(sides.model, scenario, policies, seeds, replay_seeds, progress),
        sides.speed_noise(scenario, policies, seeds, speed, progress),
    )
    return report, sides.model_episodes, sides.reference_episodes
