"""How crowded stock trainings fare in a mix, fitted from recorded host episodes.

A workload's own contention curve (:mod:`.contention_fit`, ``f + (1 - f) R ** -a`` of its solo
progress per CPU-second at the oversubscription ``R``; :mod:`dlsched.envs.replay.contention`) is
measured on copies of that one workload. In a *mix* of stock trainings the host gives far less
(``docs/replay-model.md``, 'Crowded in a mix'). So the
curve of a stock training is fitted again to the steps of recorded host episodes in which stock
jobs crowded a worker, every job running whenever it can (no quota; :func:`crowded_steps`):

- per job and step, its **efficiency**: the units it completed over what its profile gives at
  the cores the host gave it in the step (progress per CPU-second, relative to alone), at the
  oversubscription of the worker's jobs;
- per workload, the floor ``f`` and exponent ``a`` whose curve minimises the squared error of
  those efficiencies (:func:`fit_crowding`): least squares, not of their logarithms, so that the
  curve is the *mean* efficiency, whose time integral is the progress a job makes. The race
  (:mod:`.race_fit`) is then the spread around that mean, with a long-run mean of 1.

The steps are those the race is fitted from (the same jobs on the worker from a step's start to
its end, each past its first unit, none under a quota), so both fits see the same crowding.
:func:`write_crowding` writes each curve into its profile with its account, as ``dlsched
calibrate --race-from`` does before it fits the race.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from dlsched.envs.errors import ProfileError
from dlsched.envs.replay.contention import oversubscription
from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState
from dlsched.envs.workloads.cpu_quota import Threading
from dlsched.runs.evaluation.records import ContainerSample, EpisodeResult
from dlsched.runs.fidelity.calibration_profile import set_derivation, write_profile
from dlsched.runs.fidelity.contention_fit import EXPONENT_GRID

#: The steepest exponent the fit tries (the bounded optimum lies a rounding error inside it).
STEEPEST = float(EXPONENT_GRID[-1])
#: Job-steps a workload needs for its curve to be fitted again (else it keeps its own).
MIN_CROWDED_STEPS = 30


@dataclass(frozen=True)
class CrowdedStep:
    """One job in one step of a crowded worker.

    Attributes:
        job_id: the job.
        workload: its workload.
        oversubscription: the worker's ``R`` over the step (:mod:`~dlsched.envs.replay.
            contention`), every job running whenever it can.
        done: the units the job completed in the step.
        solo: the units its profile gives alone at the cores the host gave it in the step.
    """

    job_id: str
    workload: str
    oversubscription: float
    done: float
    solo: float

    @property
    def efficiency(self) -> float:
        """Progress per CPU-second relative to alone."""
        return self.done / self.solo


def crowded_steps(
    result: EpisodeResult, table: ProfileTable, threading: Threading = "stock"
) -> Iterator[list[CrowdedStep]]:
    """Per step of ``result``, in order, the training jobs of ``threading`` on its crowded
    workers where the step counts (none where no worker's does): the same jobs ran on the
    worker from its start to its end, each past its first unit (a start-up or a finish inside
    the step would count as slow progress) and none under a quota, and their threads exceeded
    the worker's cores.

    Args:
        result: an episode read with its containers
            (:func:`~dlsched.runs.tracking.trajectory.read_episode`).
        table: the profiles of ``result.scenario``'s workloads that progress is measured against.
        threading: the threading whose jobs are given (the crowding counts every job's threads).

    Raises:
        UnknownNameError: a workload of the episode has no profile in ``table``'s set.
    """
    for before, after in itertools.pairwise(result.steps):
        earlier = {sample.job_id: sample for sample in before.containers}
        seconds = after.time_s - before.time_s
        step: list[CrowdedStep] = []
        for worker in sorted({s.worker for s in after.containers if s.worker is not None}):
            jobs = [s for s in after.containers if s.worker == worker and not _ended(s, earlier)]
            if seconds > 0 and jobs and all(_steady(job, earlier) for job in jobs):
                cores = result.scenario.workers[worker].cores
                step += _crowded_jobs(jobs, earlier, table, threading, seconds, cores)
        yield step


def _crowded_jobs(
    jobs: Sequence[ContainerSample],
    earlier: Mapping[str, ContainerSample],
    table: ProfileTable,
    threading: Threading,
    seconds: float,
    cores: float,
) -> list[CrowdedStep]:
    """The ``threading`` trainings among one worker's steady ``jobs``, if they crowd it."""
    rows = np.array([table.index[job.workload] for job in jobs])
    ratio = oversubscription(np.ones(len(jobs)), table.demand[rows], table.stock[rows], cores)
    if ratio <= 1.0:
        return []
    found = []
    for job, row in zip(jobs, rows.tolist(), strict=True):
        profile = table.profiles[row]
        solo = float(profile.units_per_s(job.cpu_usage)) * seconds
        if profile.threading == threading and profile.kind is JobKind.TRAINING and solo > 0:
            done = job.iterations - earlier[job.job_id].iterations
            found.append(CrowdedStep(job.job_id, job.workload, ratio, done, solo))
    return found


#: States a job leaves no more.
_ENDED = (JobState.DONE, JobState.FAILED)


def _ended(sample: ContainerSample, earlier: Mapping[str, ContainerSample]) -> bool:
    """Whether the job had ended before the step began (one that ends within it counts: it
    ran part of the step)."""
    first = earlier.get(sample.job_id)
    return sample.state in _ENDED and first is not None and first.state in _ENDED


def _steady(job: ContainerSample, earlier: Mapping[str, ContainerSample]) -> bool:
    """Whether ``job`` ran the whole step uncapped on one worker, past its first unit."""
    first = earlier.get(job.job_id)
    return (
        job.state is JobState.RUNNING
        and job.limit >= 1.0
        and first is not None
        and first.state is JobState.RUNNING
        and first.worker == job.worker
        and first.iterations > 0
    )


@dataclass(frozen=True)
class WorkloadCrowding:
    """One workload's curve fitted to its crowded steps.

    Attributes:
        workload: the workload.
        exponent: ``a``.
        floor: ``f``.
        steps: the job-steps fitted.
        residuals: per crowd (``R`` to a tenth), the mean efficiency measured and modelled.
    """

    workload: str
    exponent: float
    floor: float
    steps: int
    residuals: tuple[str, ...]

    def describe(self) -> str:
        """The curve and its fit, for a profile's provenance."""
        steepest = (
            " (the steepest the fit tries: the job keeps its floor once crowded)"
            if round(self.exponent, 4) >= STEEPEST
            else ""
        )
        return (
            f"contention_exponent: {self.exponent:.4f}{steepest} and contention_floor: "
            f"{self.floor:.4f}, "
            f"fitted to {self.steps} steps of this workload crowded in a mix of stock jobs on "
            "a host, all uncapped (least squares of each step's progress per CPU-second over "
            "the throughput above's, against f + (1 - f) R ** -a); per crowd, mean efficiency "
            f"measured / modelled: {', '.join(self.residuals)}"
        )


def fit_crowding(steps: Sequence[CrowdedStep]) -> dict[str, WorkloadCrowding]:
    """Per workload with at least :data:`MIN_CROWDED_STEPS` of ``steps``, the floor and
    exponent minimising ``sum (e - f - (1 - f) R ** -a) ** 2`` over its steps' efficiencies
    ``e`` (see the module docstring), by SciPy's bounded least squares: ``f`` in ``[0, 1)``,
    ``a`` in ``[0,`` :data:`STEEPEST` ``]``."""
    by_workload: dict[str, list[CrowdedStep]] = {}
    for step in steps:
        by_workload.setdefault(step.workload, []).append(step)
    fits = {}
    for workload, mine in sorted(by_workload.items()):
        if len(mine) < MIN_CROWDED_STEPS:
            continue
        ratios = np.array([step.oversubscription for step in mine])
        measured = np.array([step.efficiency for step in mine])
        fitted = least_squares(
            _curve_errors,
            x0=(0.5, 1.0),
            bounds=((0.0, 0.0), (1.0 - 1e-6, STEEPEST)),
            args=(ratios, measured),
        )
        floor, exponent = float(fitted.x[0]), float(fitted.x[1])
        fits[workload] = WorkloadCrowding(
            workload, exponent, floor, len(mine), _residuals(ratios, measured, exponent, floor)
        )
    return fits


def _curve_errors(curve: np.ndarray, ratios: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """The curve ``(f, a)``'s efficiency at each step's ``R`` less the step's measured one."""
    floor, exponent = curve
    return floor + (1.0 - floor) * ratios**-exponent - measured


def _residuals(
    ratios: np.ndarray, measured: np.ndarray, exponent: float, floor: float
) -> tuple[str, ...]:
    crowds = np.round(ratios, 1)
    return tuple(
        f"R {crowd:.1f} {measured[crowds == crowd].mean():.3f} / "
        f"{floor + (1.0 - floor) * crowd**-exponent:.3f} ({int((crowds == crowd).sum())} steps)"
        for crowd in np.unique(crowds)
    )


def crowding_from_episodes(
    episodes: Sequence[EpisodeResult], profile_set: str, threading: Threading = "stock"
) -> dict[str, WorkloadCrowding]:
    """:func:`fit_crowding` over every crowded step of ``episodes`` measured against
    ``profile_set`` (a shipped name or a folder)."""
    steps = []
    for episode in episodes:
        table = ProfileTable(dataclasses.replace(episode.scenario, profile_set=profile_set))
        for step in crowded_steps(episode, table, threading):
            steps += step
    return fit_crowding(steps)


def write_crowding(
    directory: Path, fits: Mapping[str, WorkloadCrowding], source: str
) -> list[Path]:
    """Write each fitted curve into its workload's profile in ``directory``, its account in the
    profile's provenance (``source`` says which episodes), keeping everything else.

    Raises:
        ProfileError: a fitted workload has no profile in ``directory``.
    """
    written = []
    for workload, fit in sorted(fits.items()):
        path = directory / f"{workload}.json"
        if not path.is_file():
            raise ProfileError(
                f"{path} does not exist: the crowding of {workload} is fitted into its profile; "
                f"calibrate it first (dlsched calibrate --workload {workload} --output-dir "
                f"{directory})"
            )
        profile = json.loads(path.read_text(encoding="utf-8"))
        set_derivation(profile, "contention_exponent", f"{fit.describe()}; from {source}")
        profile["contention_exponent"] = round(fit.exponent, 4)
        profile["contention_floor"] = round(fit.floor, 4)
        write_profile(path, profile)
        written.append(path)
    return written
