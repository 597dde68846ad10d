"""The backend interface: the system an environment drives, real or replayed.

An environment owns time and arrivals; a backend runs the jobs it is given. Per step the
environment calls :meth:`Backend.apply` with the limits (and any placements and migrations) and
then :meth:`Backend.advance` for the interval, splitting it where a job arrives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from dlsched.envs.decision import Placement
from dlsched.envs.scenarios.model import JobSpec, Scenario
from dlsched.envs.telemetry import Telemetry


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

    @abstractmethod
    def close(self) -> None:
        """Stop everything this backend started."""

    def incidents(self) -> tuple[str, ...]:
        """What happened in the current (or last) episode that makes its figures doubtful,
        one sentence each (a container removed from outside, say); none by default."""
        return ()
