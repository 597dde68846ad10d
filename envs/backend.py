"""The backend interface: the system an environment drives, real or replayed.

An environment owns time and arrivals; a backend runs the jobs it is given. Per step the
environment calls :meth:`Backend.apply` with the limits (and any placements and migrations) and
then :meth:`Backend.advance` for the interval, splitting it where a job arrives: up to an
arrival it may call :meth:`Backend.advance_to_arrival` instead, which reports only what placing
the arrival needs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dlsched.envs.decision import Placement
from dlsched.envs.scenarios.model import JobSpec, Scenario
from dlsched.envs.telemetry import JobState, Telemetry


@dataclass(frozen=True)
class Occupancy:
    """Where a backend's jobs are at one instant: what placing an arriving job needs.

    Attributes:
        time_s: seconds since the episode start.
        active_per_worker: per worker, its active jobs (the length of
            :meth:`Telemetry.on_worker <dlsched.envs.telemetry.Telemetry.on_worker>`).
        ended: ``(job_id, worker, slot)`` of every placed job that is done or failed, whose
            slot is free again.
    """

    time_s: float
    active_per_worker: tuple[int, ...]
    ended: tuple[tuple[str, int, int], ...]

    @classmethod
    def of(cls, telemetry: Telemetry) -> Occupancy:
        """The occupancy that ``telemetry`` shows."""
        counts = [0] * len(telemetry.workers)
        ended = []
        for job in telemetry.jobs:
            if job.worker is None or job.slot is None:
                continue
            if job.active:
                counts[job.worker] += 1
            elif job.state in (JobState.DONE, JobState.FAILED):
                ended.append((job.job_id, job.worker, job.slot))
        return cls(telemetry.time_s, tuple(counts), tuple(ended))


class Backend(ABC):
    """A host or cluster that runs jobs under CPU limits and reports their telemetry.

    Contract (checked by ``tests/test_backend_contract.py`` for every backend):

    - ``reset`` ends whatever ran before and starts an empty episode at time 0.
    - ``apply`` places arriving jobs (``placements``, each started uncapped unless ``limits``
      names it), moves jobs (``migrations``, the destination as a placement) and sets limits;
      a limit of 1 means no cap.
    - ``advance`` lets ``seconds`` pass and returns the telemetry of every placed job, with
      ``cpu_usage`` averaged over that call and ``cpu_seconds`` cumulative.
    - A job whose process dies is reported ``FAILED``; it never raises.
    - ``close`` releases everything the backend started, and only that.
    """

    #: Registered name (``backend=`` of the environments).
    name: ClassVar[str]
    #: Whether the same seed replays the same episode.
    deterministic: ClassVar[bool]

    @abstractmethod
    def reset(
        self, scenario: Scenario, jobs: Sequence[JobSpec], rng: np.random.Generator
    ) -> Telemetry:
        """Start an episode of ``scenario`` whose jobs (not yet placed) are ``jobs``."""

    @abstractmethod
    def apply(
        self,
        limits: Mapping[str, float],
        placements: Sequence[Placement] = (),
        migrations: Sequence[Placement] = (),
    ) -> None:
        """Actuate: start placed jobs, move migrating ones, set limits (by job id)."""

    @abstractmethod
    def advance(self, seconds: float) -> Telemetry:
        """Let ``seconds`` pass and measure."""

    def advance_to_arrival(self, seconds: float) -> Occupancy:
        """Let ``seconds`` pass, as :meth:`advance` does, and report only the occupancy.

        The environment calls it where a step stops for an arriving job, whose placement needs
        no more than where the jobs are. The backend is left exactly as :meth:`advance` leaves
        it; a backend that can say where its jobs are without measuring them all overrides this
        (the replay backend: a full measurement per arrival made a step's cost grow with the
        square of its jobs).
        """
        return Occupancy.of(self.advance(seconds))

    @abstractmethod
    def close(self) -> None:
        """Stop everything this backend started."""

    def incidents(self) -> tuple[str, ...]:
        """What happened in the current (or last) episode that makes its figures doubtful,
        one sentence each (a container removed from outside, say); none by default."""
        return ()
