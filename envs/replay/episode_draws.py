"""What the replay model draws for an episode's jobs, read without running the episode.

The engine seeds every job's noise stream from the episode's backend generator, in the order the
jobs are placed, and draws from it the work of the job's units (:mod:`.unit_work`); a racing
job's chain runs from a stream seeded by the same seed (:mod:`.race`). None of it depends on
what a policy does, once the order of placement is known: :func:`job_draws` reads them for jobs
placed in the order given, with the engine's own classes, so they are the numbers an episode
runs by (``tests/envs/replay/test_episode_draws.py`` holds them to an episode's latencies and
completion times). What a bound on an episode's outcome needs beyond the jobs themselves
(:mod:`dlsched.runs.evaluation.bounds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlsched.envs.replay.profile_table import ProfileTable
from dlsched.envs.replay.race import RaceChains
from dlsched.envs.replay.unit_work import UnitWork
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario

__all__ = ["JobDraws", "job_draws"]


@dataclass(frozen=True)
class JobDraws:
    """What one job of an episode draws when it is placed.

    Attributes:
        job_id: the job.
        unit_bounds: the cumulative work (in units: a unit at the profile's throughput takes
            its work over that throughput) at which each of its units completes; a training
            job's every iteration, a service's at least as many batches as it could complete
            within the horizon at its profile's highest throughput.
        race_starts_s: seconds after its placement at which its race chain enters each level,
            up to the horizon (empty: its workload does not race in its profile set).
        race_levels: the multiplier of each of those levels on its efficiency when crowded.
    """

    job_id: str
    unit_bounds: np.ndarray
    race_starts_s: np.ndarray
    race_levels: np.ndarray


def job_draws(
    scenario: Scenario, jobs: Sequence[JobSpec], generator: np.random.Generator
) -> tuple[JobDraws, ...]:
    """The draws of ``jobs``, placed one after the other in the order given, of an episode of
    ``scenario`` whose backend generator is ``generator`` (which this consumes, as the engine
    does).

    Args:
        scenario: the scenario (its profile set, workers and horizon).
        jobs: the episode's jobs, in the order the loop places them.
        generator: the episode's backend generator, as its reset hands it over
            (:func:`dlsched.envs.loop.episode_generators`), not yet drawn from.

    Raises:
        UnknownNameError, ScenarioError: a job's workload is not in the scenario's profile set,
            or not of its kind.
    """
    table = ProfileTable(scenario, [job.workload for job in jobs])
    training = scenario.kind is JobKind.TRAINING
    count = len(jobs)
    # the losses' draws follow the work's in a job's stream: leaving them out changes no work
    work = UnitWork(table, 1, count, training, loss_noise_cv=0.0)
    work.reset_rows([0], [generator])
    rows = np.zeros(count, dtype=np.int64)
    columns = np.arange(count, dtype=np.int64)
    profile_of = np.array([table.index[job.workload] for job in jobs], dtype=np.int64)
    totals = np.array([table.total_iterations(job) for job in jobs], dtype=np.int64)
    work.draw(rows, columns, profile_of, totals)
    # a race changes a job's pace only where the set has a contention term (ProfileTable.racing)
    chains = RaceChains(table.races) if table.racing else None
    first_levels: dict[int, tuple[float, float]] = {}
    if chains is not None:
        for _, column, level, holding, _ in chains.start(rows, columns, profile_of, work.seeds[0]):
            first_levels[column] = (level, holding)
    largest = max(worker.cores for worker in scenario.workers)
    draws = []
    for index, job in enumerate(jobs):
        profile = int(profile_of[index])
        workload = table.profiles[profile]
        fastest = float(workload.units_per_s(min(workload.demand_cores, largest)))
        # no service completes more work than this within the horizon
        bounds = work.bounds_through(0, index, profile, fastest * scenario.horizon_s)
        starts: list[float] = []
        levels: list[float] = []
        if chains is not None and index in first_levels:
            level, holding = first_levels[index]
            time = 0.0
            while time < scenario.horizon_s:
                starts.append(time)
                levels.append(level)
                time += holding
                level, holding = chains.switch(0, index, profile)
        draws.append(JobDraws(job.job_id, np.array(bounds), np.array(starts), np.array(levels)))
    return tuple(draws)
