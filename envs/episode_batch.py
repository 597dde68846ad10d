"""The episodes a backend runs side by side, as arrays: what the environment loop drives.

:class:`EpisodeBatch` is ``episodes`` episodes of one scenario held by a backend: per episode
(row) and job (column, in the order of arrival, then id), where the job is in its life
(:data:`UNPLACED` ... :data:`FAILED`), where it runs, its limit, the CPU it used and the progress
it reported (:class:`JobArrays`). The environment loop (:mod:`dlsched.envs.loop`) reads those
arrays and drives the batch with four calls: :meth:`~EpisodeBatch.reset_rows`,
:meth:`~EpisodeBatch.place`, :meth:`~EpisodeBatch.apply` (limits and migrations) and
:meth:`~EpisodeBatch.advance`.

It is the one contract every backend implements: the replay engine
(:mod:`dlsched.envs.replay.engine`) is an ``EpisodeBatch`` of any number of episodes, the Docker
backend's (:mod:`dlsched.envs.docker.episode`) one of one episode at a time; a backend gives its
own with :meth:`~dlsched.envs.backend.Backend.episode_batch`. Nothing calls a batch but the loop
and a controlled episode (:mod:`dlsched.envs.controlled_episode`), which check what they hand
it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import JobSpec, Scenario
from dlsched.envs.telemetry import JobState, measurement_template

# Where a job is in its life, finer than JobState; plain ints, as they index arrays.
UNPLACED = 0  # not placed yet (it may not have arrived, or wait for a slot)
STARTING = 1  # placed, its process starts; no demand until its resume time
RUNNING = 2
MIGRATING = 3  # paused while it moves; keeps its progress
DONE = 4  # a training job that finished its iterations
BOOTING = 5  # placed, its process starts on the CPU it gets
FAILED = 6  # its process died (a real backend's; replayed jobs never fail)

PHASE_NAMES = ("unplaced", "starting", "running", "migrating", "done", "starting", "failed")
#: Whether a phase holds a slot (the environment's active jobs): ``IS_ACTIVE[phase]``.
IS_ACTIVE = np.zeros(len(PHASE_NAMES), dtype=bool)
IS_ACTIVE[[STARTING, RUNNING, MIGRATING, BOOTING]] = True
#: Whether a phase has ended, freeing its slot: ``HAS_ENDED[phase]``.
HAS_ENDED = np.zeros(len(PHASE_NAMES), dtype=bool)
HAS_ENDED[[DONE, FAILED]] = True
#: The state seen from outside, by phase (a starting container is running).
STATE_OF_PHASE: dict[int, JobState] = {
    STARTING: JobState.RUNNING,
    RUNNING: JobState.RUNNING,
    MIGRATING: JobState.MIGRATING,
    DONE: JobState.DONE,
    BOOTING: JobState.RUNNING,
    FAILED: JobState.FAILED,
}
#: The phase of a measured state (the inverse of :data:`STATE_OF_PHASE` for a real backend).
PHASE_OF_STATE: dict[JobState, int] = {
    JobState.RUNNING: RUNNING,
    JobState.MIGRATING: MIGRATING,
    JobState.DONE: DONE,
    JobState.FAILED: FAILED,
}


#: Per episode, its jobs (``reset_rows``' episodes).
EpisodeJobs = Sequence[Sequence[JobSpec]]
#: Per episode, its generator.
Generators = Sequence[np.random.Generator]


def column(fill: float | bool, dtype: Any = np.float64, *trailing: int) -> dict[str, Any]:
    """The metadata of a field of an :class:`ArrayFields`: an ``(episodes, jobs, *trailing)``
    array of ``dtype`` whose value in a row just reset is ``fill``."""
    return {"fill": fill, "dtype": dtype, "trailing": trailing}


@dataclass
class ArrayFields:
    """Per-job arrays of many episodes, each declared with :func:`column`: allocated and reset
    in one place, so that no array is forgotten when an episode starts again."""

    @classmethod
    def allocate(cls, episodes: int, jobs: int) -> Self:
        """Every array, filled as in a row just reset."""
        arrays = {}
        for declared in dataclasses.fields(cls):
            meta = declared.metadata
            shape = (episodes, jobs, *meta["trailing"])
            arrays[declared.name] = np.full(shape, meta["fill"], dtype=meta["dtype"])
        return cls(**arrays)

    def reset(self, rows: np.ndarray) -> None:
        """Fill every array's ``rows`` as in a row just reset."""
        for declared in dataclasses.fields(self):
            getattr(self, declared.name)[rows] = declared.metadata["fill"]


@dataclass
class JobArrays(ArrayFields):
    """What is known of every job of every episode, ``(episodes, jobs)`` each.

    Columns beyond an episode's jobs are padding (``exists`` False) and never take part.

    Attributes:
        exists: the column holds one of the episode's jobs.
        arrival: when it arrives (s since the episode start); ``inf`` for padding.
        target: a service's latency target (s); NaN for training.
        tolerance: its satisfaction tolerance ``alpha``.
        total: the iterations a training job runs; 0 for a service.
        phase: where it is in its life (:data:`UNPLACED` ... :data:`FAILED`).
        worker: its worker (meaningful once placed).
        slot: its slot on that worker (meaningful once placed).
        limit: its limit in force, a fraction of its worker's cores (1: no cap).
        cpu_seconds: CPU-seconds it used since it was placed.
        usage: cores it used over the last :meth:`EpisodeBatch.advance` that let time pass.
        units: batches (service) or iterations (training) it completed.
        latency: latency of its last completed batch (s); NaN before the first.
        loss: the loss of its last iteration; NaN before the first.
        completed: when a training job finished (s); NaN before.
        throttle_ratio: the fraction of its quota's CFS periods in which it was throttled over
            the last :meth:`EpisodeBatch.advance` that let time pass; NaN where not measured (no
            quota in force, no period elapsed, or a backend that does not measure it).
    """

    exists: np.ndarray = field(metadata=column(False, bool))
    arrival: np.ndarray = field(metadata=column(np.inf))
    target: np.ndarray = field(metadata=column(np.nan))
    tolerance: np.ndarray = field(metadata=column(0.1))
    total: np.ndarray = field(metadata=column(0, np.int64))
    phase: np.ndarray = field(metadata=column(UNPLACED, np.int8))
    worker: np.ndarray = field(metadata=column(0, np.int64))
    slot: np.ndarray = field(metadata=column(0, np.int64))
    limit: np.ndarray = field(metadata=column(1.0))
    cpu_seconds: np.ndarray = field(metadata=column(0.0))
    usage: np.ndarray = field(metadata=column(0.0))
    units: np.ndarray = field(metadata=column(0, np.int64))
    latency: np.ndarray = field(metadata=column(np.nan))
    loss: np.ndarray = field(metadata=column(np.nan))
    completed: np.ndarray = field(metadata=column(np.nan))
    throttle_ratio: np.ndarray = field(metadata=column(np.nan))

    def describe(
        self, rows: np.ndarray, jobs: Sequence[Sequence[JobSpec]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Write what each job of ``jobs[i]`` (in column order) is into row ``rows[i]``, every
        other column of those rows padding, all of them reset; the (row, column) of every job,
        row by row."""
        self.reset(rows)
        every = [job for episode in jobs for job in episode]
        counts = np.array([len(episode) for episode in jobs], dtype=np.int64)
        starts = np.cumsum(counts) - counts
        at = (np.repeat(rows, counts), np.arange(len(every)) - np.repeat(starts, counts))
        self.exists[at] = True
        self.arrival[at] = [job.arrival_s for job in every]
        self.target[at] = [np.nan if job.target_s is None else job.target_s for job in every]
        self.tolerance[at] = [job.tolerance for job in every]
        return at


class EpisodeBatch(ABC):
    """``episodes`` episodes of one scenario, as a backend runs them (see the module docstring).

    Attributes:
        scenario: the scenario every episode runs.
        episodes: the rows.
        jobs: the columns: the most jobs an episode has (at least 1; by default the
            scenario's most).
        workers: the scenario's workers.
        slots: slots per worker.
        cores: per worker, its cores.
        specs: per row, its jobs in column order (arrival, then id).
        templates: per row, each job's measurement template
            (:func:`~dlsched.envs.telemetry.measurement_template`).
        now: per row, the seconds since its episode started.
        state: every job's arrays.
        ended_jobs: how many jobs have ended since the batch was made.
    """

    def __init__(self, scenario: Scenario, episodes: int, jobs: int | None = None) -> None:
        self.scenario = scenario
        self.episodes = episodes
        self.jobs = max(scenario.max_jobs if jobs is None else jobs, 1)
        self.workers = len(scenario.workers)
        self.slots = scenario.slots_per_worker
        self.cores = np.array([worker.cores for worker in scenario.workers], dtype=np.float64)
        self.specs: list[tuple[JobSpec, ...]] = [() for _ in range(episodes)]
        self.templates: list[tuple[dict[str, Any], ...]] = [() for _ in range(episodes)]
        self.now = np.zeros(episodes)
        self.state = JobArrays.allocate(episodes, self.jobs)
        #: How many jobs have ended (finished or failed) since the batch was made: the loop
        #: frees slots only when it grows.
        self.ended_jobs = 0

    def set_jobs(self, row: int, jobs: tuple[JobSpec, ...]) -> None:
        """Make ``jobs`` (in column order) row ``row``'s episode's."""
        self.specs[row] = jobs
        self.templates[row] = tuple(measurement_template(job) for job in jobs)

    @abstractmethod
    def reset_rows(self, rows: Sequence[int], episodes: EpisodeJobs, rngs: Generators) -> None:
        """Start an empty episode at time 0 in each of ``rows``: ``episodes[i]`` are row
        ``rows[i]``'s jobs (none placed yet), ``rngs[i]`` its generator.

        Raises:
            ScenarioError: an episode's jobs do not fit the scenario (too many, repeated ids,
                a workload the backend cannot run).
        """

    @abstractmethod
    def place(
        self, rows: np.ndarray, jobs: np.ndarray, workers: np.ndarray, slots: np.ndarray
    ) -> None:
        """Start job ``jobs[i]`` of row ``rows[i]`` on ``workers[i]``, slot ``slots[i]``,
        uncapped, a row's jobs in the order given.

        Precondition (the loop's): each job has arrived and is unplaced, each slot free."""

    @abstractmethod
    def apply(self, limits: np.ndarray, migrations: Sequence[Move]) -> None:
        """Put ``limits`` (per row and job; the limit in force where unchanged) in force and
        move the jobs of ``migrations``.

        Precondition (the loop's): limits of active jobs in ``(0, 1]``, every migration of a
        running job to a free slot of another worker."""

    @abstractmethod
    def advance(self, rows: np.ndarray, seconds: np.ndarray) -> None:
        """Let ``seconds[r]`` pass in every row ``r`` that ``rows`` (a mask) sets, and measure.

        Precondition: ``seconds`` finite and ``>= 0``."""

    def worker_cells(self, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``jobs`` (a mask) by their flat index ``row * jobs + job``, in row and job order,
        and each one's (episode, worker) cell ``row * workers + worker``."""
        at = jobs.ravel().nonzero()[0]
        return at, at // self.jobs * self.workers + self.state.worker.reshape(-1)[at]

    def per_worker(self, jobs: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
        """Per episode and worker, the sum of ``values`` (or the count) of the ``jobs`` (a mask)
        there, ``(episodes, workers)``.

        One ``bincount`` over (episode, worker) cells: it adds each cell's values in job order,
        from 0.
        """
        at, cells = self.worker_cells(jobs)
        weights = None if values is None else values.reshape(-1)[at]
        sums = np.bincount(cells, weights, minlength=self.episodes * self.workers)
        return sums.reshape(self.episodes, self.workers)

    def incidents(self, row: int) -> tuple[str, ...]:
        """What happened in row ``row``'s episode that makes its figures doubtful, one sentence
        each; none by default."""
        return ()

    def progress_traces(self, row: int) -> tuple[ProgressTrace, ...]:
        """Row ``row``'s placed jobs' progress event by event in its current episode, for
        backends that see the workloads' own events; none by default (the replay model has no
        time finer than its step)."""
        return ()

    def close(self) -> None:  # noqa: B027  (nothing to release by default)
        """Release what the batch holds outside the process."""


@dataclass(frozen=True)
class Move:
    """A migration of job ``job`` (a column) of row ``row`` to ``worker``, slot ``slot``."""

    row: int
    job: int
    worker: int
    slot: int
