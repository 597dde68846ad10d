"""How large an input may be: size bounds that keep reading and running it bounded in memory
and time (not CPU limits, which are the scheduler's).

Each bound is a :class:`SizeBound`, a count with a default that an environment variable raises.
This module holds a scenario's; other inputs that size work (a model's files, a training's
timesteps, an evaluation's episodes, a claims file) declare theirs where they are read.

A scenario is read and run in memory: the file's text, its YAML values, one observation row per
slot, one job record per job, one record per step. Each limit below is checked before what it
bounds is allocated: the file's size before it is read, the YAML values (aliases expanded)
before they are built, the counts before the workers, jobs and observations are. A refusal is a
:class:`~dlsched.envs.errors.ScenarioError` naming the field, its value, the limit and how to
raise it.

The defaults cover the papers' scenarios with a wide margin (the largest have 60 workers, 80
jobs and 420 steps) and users' clusters too: thousands of workers, tens of thousands of jobs, a
million steps. A count's limit can be raised for one process by the environment variable named
after it (``DLSCHED_MAX_WORKERS=10000 dlsched evaluate ...``): memory then grows with it. The
lengths of names and texts cannot: a name becomes a file, folder and MLflow run name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlsched.envs.errors import ScenarioError

if TYPE_CHECKING:  # problems imports the schema, which imports the lengths below
    from dlsched.envs.scenarios.problems import Report


@dataclass(frozen=True)
class SizeBound:
    """A bound on a count, with its default; raised by the environment variable
    ``DLSCHED_<name>``. Scenarios have theirs below; other inputs that size work (a model's
    files, a training's timesteps) declare theirs where they are read.

    Attributes:
        name: the limit's name, e.g. ``MAX_WORKERS``.
        default: its value unless the environment variable says otherwise.
        unit: what it counts, as a message says it (``"workers"``).
    """

    name: str
    default: int
    unit: str

    @property
    def variable(self) -> str:
        """The environment variable that raises (or lowers) the limit."""
        return f"DLSCHED_{self.name}"

    @property
    def value(self) -> int:
        """The limit in force: the environment variable's value, else the default.

        Raises:
            ScenarioError: the environment variable is not a whole number >= 1.
        """
        text = os.environ.get(self.variable, "").strip().replace("_", "")
        if not text:
            return self.default
        if not text.isdigit() or int(text) < 1:
            raise ScenarioError(
                f"{self.variable}={os.environ[self.variable]!r}: expected a whole number >= 1 "
                f"(the most {self.unit} dlsched accepts; default {self.default:,}); fix or "
                f"unset it"
            )
        return int(text)

    def exceeded(self, value: float) -> bool:
        """Whether ``value`` is above the limit."""
        return value > self.value

    def expected(self) -> str:
        """What a refusal expected: the limit and how to raise it."""
        return (
            f"at most {self.value:,} {self.unit} (dlsched's limit {self.name}; if your machine "
            f"has the memory and the time for more, raise it with the environment variable "
            f"{self.variable}=N)"
        )


MAX_FILE_BYTES = SizeBound("MAX_FILE_BYTES", 1 << 20, "bytes in a scenario or claims file")
"""A YAML file's size (a scenario, a claims file): 1 MiB, thousands of lines (a shipped scenario
has tens, the shipped claims file 26 KB)."""
MAX_YAML_VALUES = SizeBound("MAX_YAML_VALUES", 1_000_000, "YAML values (aliases expanded)")
"""The values of a YAML file (a scenario, a claims file) once its aliases (``*name``) are
expanded, each as often as it is used. Aliases are allowed (an arrival pattern written once,
used by several groups), but a few lines of aliases of aliases can expand to billions of values
(a "billion laughs" file)."""
MAX_WORKERS = SizeBound("MAX_WORKERS", 4096, "workers")
"""Workers of a scenario."""
MAX_SLOTS_PER_WORKER = SizeBound("MAX_SLOTS_PER_WORKER", 1024, "slots per worker")
"""``slots_per_worker``: containers one worker runs at once."""
MAX_SLOTS = SizeBound("MAX_SLOTS", 65_536, "slots (workers x slots_per_worker)")
"""Rows of the observation and entries of the action (4 MiB of observation at the limit)."""
MAX_JOBS = SizeBound("MAX_JOBS", 100_000, "jobs per episode")
"""Jobs of one episode (the sum of the groups' counts, each at its largest); also the longest
list a job group may hold (``targets_s``, ``times_s``, ...), one item per job."""
MAX_STEPS = SizeBound("MAX_STEPS", 1_000_000, "steps per episode (horizon_s / interval_s)")
"""Steps of one episode: an evaluation keeps a record of each."""
MAX_UNITS_PER_STEP = SizeBound(
    "MAX_UNITS_PER_STEP", 100_000, "units of work (batches or iterations) a job completes in a step"
)
"""Units one job can complete in one step (its workload's fastest throughput times
``interval_s``): the replay model draws and completes every one (a service's batches over a
step of 10**295 s never end). Checked against the profiles where a replay environment is made."""

MAX_ITERATIONS = SizeBound(
    "MAX_ITERATIONS", 10_000_000, "training iterations per episode (every job's, summed)"
)
"""Iterations of one episode's training jobs, each job's at its group's largest count (its own
``iterations``, else its workload's default): the replay model draws every iteration's work and
loss when a job is placed and keeps them (16 bytes an iteration: 160 MB at the limit). Checked
against the profiles where a replay environment is made."""

MAX_BATCH_SLOTS = SizeBound(
    "MAX_BATCH_SLOTS", 1 << 22, "slots in a batched environment (num_envs x the scenario's slots)"
)
"""Slots of all the episodes of a batched environment (``gym.make_vec``): its observations
take 64 bytes a slot, its state arrays as much again (about 512 MiB at the limit)."""

MAX_NAME_LENGTH = 100
"""Characters of a scenario's name: it is part of folder, experiment and run names."""
MAX_TEXT_LENGTH = 1000
"""Characters of a description, a source, a workload name or an endpoint."""
MAX_PATH_LENGTH = 4096
"""Characters of ``profile_set`` (a name or the path of a folder): Linux's longest path."""

COUNT_BOUNDS: tuple[SizeBound, ...] = (
    MAX_FILE_BYTES,
    MAX_YAML_VALUES,
    MAX_WORKERS,
    MAX_SLOTS_PER_WORKER,
    MAX_SLOTS,
    MAX_JOBS,
    MAX_STEPS,
    MAX_UNITS_PER_STEP,
    MAX_ITERATIONS,
    MAX_BATCH_SLOTS,
)
"""Every limit that an environment variable can raise."""


@dataclass(frozen=True)
class Counts:
    """The counts of one scenario that its limits bound, each ``None`` where the scenario's own
    value is invalid (and reported as such).

    Attributes:
        workers: how many workers.
        slots_per_worker: slots of each worker.
        horizon_s: the episode's length.
        interval_s: one step's length.
        group_counts: each job group's path (``jobs[2]``) and its largest count.
        lists: each list's path and length, for the lists that hold one item per job.
    """

    workers: int | None
    slots_per_worker: int | None
    horizon_s: float | None
    interval_s: float | None
    group_counts: Sequence[tuple[str, int]] = ()
    lists: Sequence[tuple[str, int]] = ()


def check_counts(counts: Counts, report: Report, workers_path: str = "workers") -> None:
    """Record in ``report`` every count of ``counts`` above its limit.

    Args:
        counts: the scenario's counts.
        report: where the problems go.
        workers_path: the field that gives the number of workers (``workers.count`` or
            ``workers``).
    """
    if counts.workers is not None and MAX_WORKERS.exceeded(counts.workers):
        report.bad(workers_path, counts.workers, MAX_WORKERS.expected())
    slots = counts.slots_per_worker
    if slots is not None and MAX_SLOTS_PER_WORKER.exceeded(slots):
        report.bad("slots_per_worker", slots, MAX_SLOTS_PER_WORKER.expected())
    elif (
        slots is not None
        and counts.workers is not None
        and not MAX_WORKERS.exceeded(counts.workers)
        and MAX_SLOTS.exceeded(counts.workers * slots)
    ):
        report.add(
            "slots_per_worker",
            f"slots_per_worker = {slots} on {counts.workers:,} workers makes "
            f"{counts.workers * slots:,} slots: expected {MAX_SLOTS.expected()}; use fewer "
            f"slots per worker or fewer workers",
        )
    for path, count in counts.group_counts:
        if MAX_JOBS.exceeded(count):
            report.bad(f"{path}.count", count, MAX_JOBS.expected())
    total = sum(count for _, count in counts.group_counts)
    if MAX_JOBS.exceeded(total) and not any(
        MAX_JOBS.exceeded(count) for _, count in counts.group_counts
    ):
        report.add(
            "jobs",
            f"jobs: the groups' counts add up to {total:,} jobs per episode: expected "
            f"{MAX_JOBS.expected()}",
        )
    for path, length in counts.lists:
        if MAX_JOBS.exceeded(length):
            report.add(
                path,
                f"{path}: a list of {length:,} items: expected at most {MAX_JOBS.value:,}, one "
                f"per job ({MAX_JOBS.expected()})",
            )
    _check_steps(counts.horizon_s, counts.interval_s, report)


def _check_steps(horizon_s: float | None, interval_s: float | None, report: Report) -> None:
    if horizon_s is None or interval_s is None or not interval_s > 0:
        return
    steps = horizon_s / interval_s
    if MAX_STEPS.exceeded(steps):
        report.add(
            "horizon_s",
            f"horizon_s / interval_s = {horizon_s:g} / {interval_s:g} = {steps:.3g} steps: "
            f"expected {MAX_STEPS.expected()}; shorten horizon_s or lengthen interval_s",
        )
