"""The backend interface: the system an environment drives, real or replayed.

A backend runs the jobs it is given, one episode at a time (:class:`Backend`: reset, apply,
advance, close). An environment drives the episodes a backend holds through its
:meth:`Backend.episode_batch`, the same arrays for every backend
(:class:`~dlsched.envs.episode_batch.EpisodeBatch`): a backend of one episode at a time is
adapted by :class:`~dlsched.envs.backend_episode.BackendEpisode`; one that runs many at once
(the replay engine) gives its own. What a backend can do it declares
(:class:`BackendCapabilities`); callers ask that, never its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dlsched.envs.backend_episode import BackendEpisode
from dlsched.envs.decision import Placements
from dlsched.envs.episode_batch import EpisodeBatch
from dlsched.envs.errors import BackendError
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import JobSpec, Scenario
from dlsched.envs.telemetry import Telemetry


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

    Contract (checked by the backend contract tests for every backend):

    - ``reset`` ends whatever ran before and starts an empty episode at time 0.
    - ``apply`` places arriving jobs (``placements``, each started uncapped unless ``limits``
      names it), moves jobs (``migrations``, the destination as a placement) and sets limits;
      a limit of 1 means no cap. Its arguments are checked by the environment
      (:mod:`dlsched.envs.decision_checks`, :mod:`dlsched.envs.loop`): limits in ``(0, 1]`` of
      placed jobs, placements of jobs that arrived to free slots, migrations of running jobs to
      free slots of other workers.
    - ``advance`` lets ``seconds`` (finite, ``>= 0``) pass and returns the telemetry of every
      placed job, with ``cpu_usage`` averaged over that call and ``cpu_seconds`` cumulative.
    - A job whose process dies is reported ``FAILED``; it never raises.
    - ``close`` releases everything the backend started, and only that.
    """

    #: Registered name (``backend=`` of the environments), for messages and records.
    name: ClassVar[str]
    #: What it can do.
    capabilities: ClassVar[BackendCapabilities]

    @abstractmethod
    def reset(
        self, scenario: Scenario, jobs: Sequence[JobSpec], rng: np.random.Generator
    ) -> Telemetry:
        """Start an episode of ``scenario`` whose jobs (not yet placed) are ``jobs``."""

    @abstractmethod
    def apply(
        self, limits: Mapping[str, float], placements: Placements = (), migrations: Placements = ()
    ) -> None:
        """Actuate: start placed jobs, move migrating ones, set limits (by job id)."""

    @abstractmethod
    def advance(self, seconds: float) -> Telemetry:
        """Let ``seconds`` pass and measure."""

    @abstractmethod
    def close(self) -> None:
        """Stop everything this backend started."""

    def check_ready(self, scenario: Scenario) -> None:  # noqa: B027  (nothing by default)
        """Check that an episode of ``scenario`` could start now, starting nothing: what a
        command asks before it records anything, so that one that cannot run records nothing.
        Nothing to check by default (a simulation needs nothing outside the process).

        Raises:
            BackendError: it could not start (a subclass saying why and the fix).
        """

    def incidents(self) -> tuple[str, ...]:
        """What happened in the current (or last) episode that makes its figures doubtful,
        one sentence each (a container removed from outside, say); none by default."""
        return ()

    def progress_traces(self) -> tuple[ProgressTrace, ...]:
        """Every placed job's progress event by event in the current episode (until the next
        reset or close), for backends that see the workloads' own events; none by default (the
        replay model has no time finer than its step)."""
        return ()

    def episode_batch(self, scenario: Scenario, episodes: int) -> EpisodeBatch:
        """The episodes of ``scenario`` an environment drives on this backend.

        A backend of one episode at a time gives itself, adapted
        (:class:`~dlsched.envs.backend_episode.BackendEpisode`); a batchable one overrides
        this to hold ``episodes`` side by side.

        Raises:
            BackendError: ``episodes`` is more than the backend can hold.
        """
        if episodes != 1:
            raise BackendError(
                f"the {self.name} backend runs one episode at a time, not {episodes}; step "
                'several with gym.make_vec(..., vectorization_mode="sync") instead'
            )
        return BackendEpisode(self, scenario)
