"""Placers decide which worker an arriving job runs on."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from dlsched.envs.scenarios.model import JobSpec
from dlsched.envs.telemetry import Telemetry


class Placer(ABC):
    """Chooses the worker of an arriving job among those with a free slot."""

    @abstractmethod
    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        """Return one of ``candidates`` (worker indices, never empty) for ``job``."""


class SpreadPlacer(Placer):
    """Docker Swarm's default ``spread`` strategy: the worker running the fewest containers.

    Ties go to the lowest worker index, so placement is deterministic.
    """

    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        return min(candidates, key=lambda worker: (len(telemetry.on_worker(worker)), worker))
