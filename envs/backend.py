"""The backend interface: the system an environment drives, real or replayed.

A backend is the factory of the episodes an environment drives: its
:meth:`Backend.episode_batch` gives them as one
:class:`~dlsched.envs.episode_batch.EpisodeBatch`, the arrays and the four calls (reset, place,
apply, advance) every backend implements and nothing drives but through the checks of the
environment loop (:mod:`dlsched.envs.loop`) or of a controlled episode
(:mod:`dlsched.envs.controlled_episode`). The replay backend gives its engine of any number of
episodes; the Docker backend a batch of one episode at a time. What a backend can do it declares
(:class:`BackendCapabilities`); callers ask that, never its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from dlsched.envs.episode_batch import EpisodeBatch
from dlsched.envs.scenarios.model import JobSpec, Scenario


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend can do, for the callers that choose how to run it.

    Attributes:
        simulated_time: time passes when the environment asks (a simulation: faster than real
            time, and a host measurement is never disturbed by it); otherwise on the wall clock.
        deterministic: the same seed replays the same episode.
        batchable: it runs many episodes side by side in one
            :class:`~dlsched.envs.episode_batch.EpisodeBatch` (the batched environment, vector
            training); otherwise one episode at a time.
        reads_profiles: its jobs progress by the scenario's workload profiles, which a
            privileged policy may read (the oracle).
    """

    simulated_time: bool
    deterministic: bool
    batchable: bool
    reads_profiles: bool


class Backend(ABC):
    """A host or cluster that runs jobs under CPU limits and reports their telemetry.

    Contract (checked by the backend contract tests for every backend, on the batch it gives):

    - :meth:`episode_batch` gives the episodes of a scenario as an
      :class:`~dlsched.envs.episode_batch.EpisodeBatch`; its ``reset_rows`` ends whatever ran
      before in those rows and starts empty episodes at time 0.
    - ``place`` starts arrived jobs uncapped; ``apply`` sets limits (1: no cap) and moves jobs;
      both receive only what the caller checked (limits in ``(0, 1]`` of active jobs, free
      slots, running jobs to move).
    - ``advance`` lets the time pass and measures every placed job: ``usage`` averaged over
      that call, ``cpu_seconds`` cumulative.
    - A job whose process dies is ``FAILED``; it never raises.
    - ``close`` (of the batch, and of the backend for every batch it gave) releases everything
      it started, and only that.
    """

    #: Registered name (``backend=`` of the environments), for messages and records.
    name: ClassVar[str]
    #: What it can do.
    capabilities: ClassVar[BackendCapabilities]

    @abstractmethod
    def episode_batch(
        self, scenario: Scenario, episodes: int, jobs: Sequence[JobSpec] | None = None
    ) -> EpisodeBatch:
        """The episodes of ``scenario`` an environment (or a controlled episode) drives.

        Args:
            scenario: the scenario every episode runs.
            episodes: how many run side by side (more than 1 needs a batchable backend).
            jobs: the jobs one episode will hold where they are not the scenario's draws (a
                measurement's own jobs); ``None``: sized for the scenario's.

        Raises:
            BackendError: ``episodes`` is more than the backend can hold.
            ScenarioError: the scenario (or ``jobs``) cannot run on this backend.
        """

    def close(self) -> None:  # noqa: B027  (nothing to release by default)
        """Release everything this backend started (every batch it gave is closed)."""

    def check_ready(self, scenario: Scenario) -> None:  # noqa: B027  (nothing by default)
        """Check that an episode of ``scenario`` could start now, starting nothing: what a
        command asks before it records anything, so that one that cannot run records nothing.
        Nothing to check by default (a simulation needs nothing outside the process).

        Raises:
            BackendError: it could not start (a subclass saying why and the fix).
        """
