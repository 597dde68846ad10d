"""The Docker backend: real containers on one or more Docker engines, in wall-clock time.

Every job runs in its own container of the workload image
(``python -m dlsched_workloads <workload> ...``). The backend

- starts containers with the labels ``dlsched.managed=1``, ``dlsched.episode=<uuid>`` and
  ``dlsched.job=<job id>`` (:mod:`dlsched.envs.docker.container_start`), and lists, updates or
  removes only containers that carry them (:mod:`dlsched.envs.docker.containers`);
- confines each to what its workload needs (:mod:`dlsched.envs.docker.sandbox`): a user that is
  not root, no capabilities, a read-only root filesystem with a tmpfs for scratch, the memory and
  pids limits of the scenario (``container_memory_mb``, ``container_pids``), no network;
- labels every container with its owner process (``dlsched.owner.host``, ``.pid``, ``.started``:
  :class:`~dlsched.envs.owner.ProcessOwner`), so that ``dlsched docker cleanup`` removes only the
  containers of processes that are gone, never those of a live episode;
- sets limits with ``cpu_period``/``cpu_quota`` (docker-py's ``update`` has no ``nano_cpus``, and a
  container created with ``nano_cpus`` refuses quota updates), and reads the limit in force back
  at every measurement (from the container's cgroup files when the engine runs on this host, else
  from the engine's inspect): telemetry reports that limit, not the one the backend asked for or
  set. Another process may change it (``docker update``): that is an incident of the episode,
  and the next decision is applied whatever the backend set before, since an update is skipped
  only when the limit read back already equals it;
- measures CPU time and the throttling of the quota (the fraction of CFS periods in which the
  container used its whole quota, over the same window as its usage) from the container's
  cgroup files when the engine runs on this host (:mod:`dlsched.envs.docker.cgroup`) and from
  the engine's one-shot statistics otherwise;
- reads progress from the JSON lines the workload prints
  (:mod:`dlsched.envs.docker.container_output`);
- reports a container that dies as a ``FAILED`` job, never as an exception; one that vanished
  (removed by someone else) is also an incident of the episode (:meth:`DockerEpisode.incidents
  <dlsched.envs.docker.episode.DockerEpisode.incidents>`),
  so that its figures are not trusted silently, as is one paused (``docker pause``: the engine
  lists it ``paused``) or stopped by a signal (SIGSTOP: its main process in state ``T``, seen
  where the engine runs on this host) from outside while its job ran: it stays ``RUNNING`` at
  no CPU, as it is;
- removes its containers on :meth:`~DockerBackend.close` (or the episode's own), on the next
  reset of the episode, at interpreter exit and on SIGINT/SIGTERM
  (:mod:`dlsched.envs.docker.exit_cleanup`), one after another (a thread pool refuses work at
  interpreter exit), and a signal that arrives during that removal waits for its end. What a
  killed process leaves behind, ``dlsched docker cleanup`` removes;
- reports the jobs of an engine that stops answering mid-episode as ``FAILED`` (an incident of
  the episode) while the other engines' workers go on, as a cluster goes on without a lost host;
  when no engine of the episode answers any more, it raises
  :class:`~dlsched.envs.errors.EngineLostError`, naming the engine and ``dlsched docker
  cleanup`` (:mod:`dlsched.envs.docker.engine_connections`).

Workers map to engines through ``scenario.workers[i].endpoint``: ``None`` is the engine
docker-py finds from the environment (``DOCKER_HOST``, else the local socket); any other value is
a URL docker-py takes (``unix://``, ``tcp://``, ``ssh://``), with TLS configured as docker-py
reads it from ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH``. Workers that share an endpoint
share that engine's CPU.

The backend holds the options; each environment's episodes are a
:class:`~dlsched.envs.docker.episode.DockerEpisode` it gives (:meth:`DockerBackend.episode_batch`),
which runs the containers.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from dlsched.envs.backend import Backend, BackendCapabilities
from dlsched.envs.docker.cgroup import DEFAULT_CGROUP_ROOT
from dlsched.envs.docker.engine_connections import EngineConnections
from dlsched.envs.docker.episode import DockerEpisode, workload_image
from dlsched.envs.errors import BackendError
from dlsched.envs.scenarios.model import JobSpec, Scenario
from dlsched.envs.workloads.cpu_quota import THREADINGS

DEFAULT_CPU_PERIOD_US = 100_000


class DockerBackend(Backend):
    """Runs each job in a container on a Docker engine and measures it from outside.

    Time is wall-clock time: an episode's ``advance`` sleeps until the asked time has passed
    since the previous measurement (minus the time actuation took) and reports the time it
    measured at, so ``time_s`` moves forward by about, never exactly, the asked seconds.

    A worker's cores are those its engine reports (``NCPU``); a scenario that says otherwise
    gets a warning, and limits stay fractions of the real cores (``cpu_quota = limit * cores *
    cpu_period``, no quota at 1).

    A migration stops the job's container and starts a new one on the destination worker that
    resumes training at the last iteration the old one reported (``--start-iteration``), with
    the model and optimizer state the old one saved when stopped
    (:data:`~dlsched.envs.docker.container_start.CHECKPOINT_PATH`,
    copied from the stopped container into the new one, so it works across engines). A job
    killed before it could save resumes its count from untrained weights, with a warning. The
    time this takes is real time the step pays, and the scenario's ``migration_cost_s`` (a
    replay setting) is not added to it. An inference job restarts on the destination with its
    batch count carried over.

    A training job runs ``iterations`` of its scenario, or its workload's default
    (:data:`dlsched.envs.workloads.catalog.WORKLOADS`), passed explicitly so that telemetry knows
    the total from the start. It is ``DONE`` when its container exits 0 after printing its done
    event, and ``completed_s`` is that event's time (the workload's clock, bounded by what this
    host observed); any other exit, a kill, or a container that disappeared is ``FAILED``.

    CPU-seconds are read at each measurement. The engine drops a container's accounting when it
    exits, so a finished job's ``cpu_seconds`` is its last reading before the exit.
    """

    name: ClassVar[str] = "docker"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        simulated_time=False, deterministic=False, batchable=False, reads_profiles=False
    )

    def __init__(
        self,
        image: str | None = None,
        cpu_period_us: int = DEFAULT_CPU_PERIOD_US,
        use_cgroup_files: bool | None = None,
        cgroup_root: Path = DEFAULT_CGROUP_ROOT,
        network_mode: str = "none",
        api_timeout_s: float = 60.0,
        output_grace_s: float = 5.0,
        stop_timeout_s: float = 10.0,
        actuation_threads: int = 16,
        min_usage_window_s: float = 1.0,
        workload_threading: str | None = None,
    ) -> None:
        """Configure the backend; nothing is contacted before an episode is reset.

        Args:
            image: the workload image; ``None`` is dlsched's own (``dlsched.envs.docker.image``).
                Another must run as dlsched's does: the program as ``python -m
                dlsched_workloads``, the user 10001 named in its ``/etc/passwd``, and
                ``/var/lib/dlsched`` that user's (:mod:`dlsched.envs.docker.sandbox`).
            cpu_period_us: the CFS period of every container, in microseconds.
            use_cgroup_files: read CPU time from cgroup files (``True``: required, an error if a
                container's files cannot be found), from the engine's statistics (``False``),
                or from the files where found and the statistics elsewhere (``None``).
            cgroup_root: where this host mounts the cgroup tree.
            network_mode: the containers' network; the workloads need none.
            api_timeout_s: timeout of each engine API call.
            output_grace_s: how long to wait, once a container has exited, for the rest of its
                output before deciding whether it finished or died.
            stop_timeout_s: how long a migrating job's container may take to stop at the end
                of its current unit of work before it is killed.
            actuation_threads: engine calls made in parallel (limits, starts, statistics).
            min_usage_window_s: shortest window a CPU usage is averaged over. CFS hands out a
                quota per period, so a window of ``w`` seconds can see up to one period more
                than the quota (10 % at 1 s); a measurement sooner than this after the previous
                one (``advance(0)`` right after a placement) repeats the previous usage, and the
                next one averages over the whole time since.
            workload_threading: how the workloads size their thread pools: ``"tuned"``
                (threads follow the quota and wait passively) or ``"stock"`` (torch's and
                OpenMP's defaults, as unmodified framework jobs run); see
                :mod:`dlsched.envs.workloads.cpu_quota`. ``None`` takes the scenario's
                ``workload_threading``, ``"tuned"`` if it says none; a value that contradicts
                the scenario's is refused when an episode is reset.
        """
        if not 1000 <= cpu_period_us <= 1_000_000:
            raise BackendError(
                f"cpu_period_us={cpu_period_us!r} is outside the kernel's range 1000..1000000 "
                "microseconds; use the default 100000"
            )
        if actuation_threads < 1:
            raise BackendError(f"actuation_threads={actuation_threads!r} must be at least 1")
        if workload_threading is not None and workload_threading not in THREADINGS:
            raise BackendError(
                f"workload_threading={workload_threading!r} is not one of {list(THREADINGS)}; "
                'use "tuned" (the default) or "stock"'
            )
        self._image = image
        self._api_timeout_s = float(api_timeout_s)
        # Each episode batch is made with the options as checked here.
        self._new_episode = functools.partial(
            DockerEpisode,
            image=image,
            cpu_period_us=int(cpu_period_us),
            use_cgroup_files=use_cgroup_files,
            cgroup_root=Path(cgroup_root),
            network_mode=network_mode,
            api_timeout_s=float(api_timeout_s),
            output_grace_s=float(output_grace_s),
            stop_timeout_s=float(stop_timeout_s),
            actuation_threads=actuation_threads,
            min_usage_window_s=float(min_usage_window_s),
            workload_threading=workload_threading,
        )
        self._episodes: weakref.WeakSet[DockerEpisode] = weakref.WeakSet()
        self._latest: weakref.ref[DockerEpisode] | None = None

    @property
    def episode(self) -> str | None:
        """The id (``dlsched.episode`` label) of the current or, once closed, the last episode
        of the newest batch this backend gave; ``None`` before any."""
        latest = None if self._latest is None else self._latest()
        return None if latest is None else latest.episode

    @property
    def image(self) -> str:
        """The workload image the containers run."""
        return workload_image(self._image)

    def episode_batch(
        self, scenario: Scenario, episodes: int, jobs: Sequence[JobSpec] | None = None
    ) -> DockerEpisode:
        """The episodes of ``scenario``, one at a time, on its workers' engines; nothing is
        contacted before an episode is reset.

        Raises:
            BackendError: ``episodes`` is more than 1.
        """
        if episodes != 1:
            raise BackendError(
                f"the {self.name} backend runs one episode at a time, not {episodes}; step "
                'several with gym.make_vec(..., vectorization_mode="sync") instead'
            )
        batch = self._new_episode(scenario, None if jobs is None else len(jobs))
        self._episodes.add(batch)
        self._latest = weakref.ref(batch)
        return batch

    def check_ready(self, scenario: Scenario) -> None:
        """Connect to every worker's engine and check that it holds the workload image, as
        resetting an episode does; the connections are released, nothing is started.

        Raises:
            DockerUnavailableError: a worker's engine does not answer or refuses this user.
            ImageMissingError: the workload image is not on a worker's engine.
        """
        engines = EngineConnections(
            self._image, self._api_timeout_s, time.monotonic, lambda incident: None
        )
        try:
            engines.open([worker.endpoint for worker in scenario.workers])
        finally:
            engines.close()

    def close(self) -> None:
        """Remove the containers of every episode this backend gave and release their
        connections."""
        for batch in list(self._episodes):
            batch.close()
