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
  (removed by someone else) is also an incident of the episode (:meth:`DockerBackend.incidents`),
  so that its figures are not trusted silently, as is one paused (``docker pause``: the engine
  lists it ``paused``) or stopped by a signal (SIGSTOP: its main process in state ``T``, seen
  where the engine runs on this host) from outside while its job ran: it stays ``RUNNING`` at
  no CPU, as it is;
- removes its containers on :meth:`~DockerBackend.close`, on the next
  :meth:`~DockerBackend.reset`, at interpreter exit and on SIGINT/SIGTERM
  (:mod:`dlsched.envs.docker.interruption`), one after another (a thread pool refuses work at
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
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import docker
import docker.errors
import numpy as np
import requests

from dlsched.envs.backend import Backend, BackendCapabilities
from dlsched.envs.decision import Placement, Placements
from dlsched.envs.docker.cgroup import (
    DEFAULT_CGROUP_ROOT,
    CfsLimit,
    CfsThrottling,
    stats_throttling,
)
from dlsched.envs.docker.container_start import ContainerStarter, inspected_cfs
from dlsched.envs.docker.containers import managed_containers
from dlsched.envs.docker.engine import endpoint_url, unix_time
from dlsched.envs.docker.engine_connections import EngineConnections
from dlsched.envs.docker.interruption import remove_episode, track, untrack
from dlsched.envs.docker.records import Job, Run
from dlsched.envs.docker.sandbox import DEFAULT_LIMITS, ContainerLimits
from dlsched.envs.errors import ActionError, BackendError, EngineLostError, ScenarioError
from dlsched.envs.owner import ProcessOwner
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry, WorkerTelemetry
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading

_log = logging.getLogger(__name__)

DEFAULT_CPU_PERIOD_US = 100_000

#: A container's exit code when its process was killed by SIGKILL (128 + 9).
_KILLED_EXIT_CODE = 137
#: Engine states in which a container's process still exists.
_LIVE_STATES = frozenset({"created", "running", "paused", "restarting"})


class DockerBackend(Backend):
    """Runs each job in a container on a Docker engine and measures it from outside.

    Time is wall-clock time: :meth:`advance` sleeps until the asked time has passed since the
    previous measurement (minus the time actuation took) and reports the time it measured at,
    so ``time_s`` moves forward by about, never exactly, the asked seconds.

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
        """Configure the backend; nothing is contacted before :meth:`reset`.

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
                the scenario's is refused at :meth:`reset`.
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
        self._cpu_period_us = int(cpu_period_us)
        self._output_grace_s = float(output_grace_s)
        self._stop_timeout_s = float(stop_timeout_s)
        self._min_usage_window_s = float(min_usage_window_s)
        self._actuation_threads = actuation_threads
        self._workload_threading = workload_threading
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        # The parts below hold the clock and the incident list, never the backend itself: a
        # backend dropped without close() is freed (and its finalizer run) at once.
        self._clock = _EpisodeClock()
        self._incidents: list[str] = []
        self._engines = EngineConnections(
            image, float(api_timeout_s), self._clock.now, self._incidents.append
        )
        self._starter = ContainerStarter(
            self._engines,
            self._clock.now,
            ProcessOwner.current(),
            self._cpu_period_us,
            network_mode,
            use_cgroup_files,
            Path(cgroup_root),
        )
        self._specs: dict[str, JobSpec] = {}
        self._jobs: dict[str, Job] = {}
        self._limits = DEFAULT_LIMITS  # the episode's, from its scenario, at reset()
        self._episode: str | None = None
        self._cleanup: weakref.finalize[Any, Any] | None = None
        self._time_s = 0.0

    # ------------------------------------------------------------------ properties

    @property
    def episode(self) -> str | None:
        """The id (``dlsched.episode`` label) of the current or, after close, the last episode."""
        return self._episode

    @property
    def image(self) -> str:
        """The workload image the containers run."""
        if self._image is not None:
            return self._image
        from dlsched.envs.docker.image import IMAGE_TAG

        return IMAGE_TAG

    # ------------------------------------------------------------------ Backend API

    def reset(
        self, scenario: Scenario, jobs: Sequence[JobSpec], rng: np.random.Generator
    ) -> Telemetry:
        """Remove the previous episode's containers, check the engines and start the clock.

        Raises:
            ScenarioError: a job's workload has no program in the image (a replay-only
                workload of a paper's profile set).
            BackendError: the backend's ``workload_threading`` contradicts the scenario's.
            DockerUnavailableError: a worker's engine does not answer or refuses this user.
            ImageMissingError: the workload image is not on a worker's engine.
        """
        self._end_episode()
        threading = _episode_threading(self._workload_threading, scenario)
        self._incidents.clear()
        unknown = sorted({job.workload for job in jobs} - set(WORKLOADS))
        if unknown:
            raise ScenarioError(
                f"scenario {scenario.name!r} has workloads {unknown} that the Docker backend "
                f"cannot run; the workload image has {sorted(WORKLOADS)}. Run it on the replay "
                "backend, or use a scenario of those workloads (`dlsched scenarios` lists the "
                "docker-* ones)"
            )
        self._engines.open([worker.endpoint for worker in scenario.workers])
        for index, (worker, engine) in enumerate(zip(scenario.workers, self._engines, strict=True)):
            if not math.isclose(worker.cores, engine.cores):
                warnings.warn(
                    f"scenario {scenario.name!r} gives worker {index} {worker.cores:g} cores, but "
                    f"its engine at {endpoint_url(engine.endpoint)} has {engine.cores:g}: "
                    f"{worker.cores:g} != {engine.cores:g}; limits are fractions of the "
                    "engine's cores. Set `cores` in the scenario to match.",
                    stacklevel=2,
                )
        self._specs = {job.job_id: job for job in jobs}
        seeds = {job.job_id: int(rng.integers(2**31 - 1)) for job in jobs}
        self._jobs = {}
        self._episode = uuid.uuid4().hex
        self._limits = ContainerLimits.of(scenario)
        self._starter.begin(self._episode, self.image, threading, self._limits, seeds)
        self._cleanup = weakref.finalize(self, remove_episode, self._episode, _endpoints(scenario))
        track(self._cleanup)
        self._clock.restart()
        self._time_s = 0.0
        return Telemetry(0.0, 0.0, self._worker_telemetry({}), ())

    def check_ready(self, scenario: Scenario) -> None:
        """Connect to every worker's engine and check that it holds the workload image, as
        :meth:`reset` does; the connections are released, nothing is started.

        Raises:
            DockerUnavailableError: a worker's engine does not answer or refuses this user.
            ImageMissingError: the workload image is not on a worker's engine.
        """
        try:
            self._engines.open([worker.endpoint for worker in scenario.workers])
        finally:
            self._engines.close()

    def apply(
        self, limits: Mapping[str, float], placements: Placements = (), migrations: Placements = ()
    ) -> None:
        """Start placed jobs, move migrating ones, then set limits, reading each back.

        Engine calls run in parallel. The limits are checked by the caller (see
        :class:`~dlsched.envs.backend.Backend`); a limit for a job that has finished or failed is
        ignored, one for a job that was never placed is an error.

        Raises:
            ActionError: an unknown or already placed job, a bad worker.
        """
        self._require_episode()
        for placement in placements:
            self._check_placement(placement, new=True)
        for migration in migrations:
            self._check_placement(migration, new=False)
        placed_now = {placement.job_id for placement in placements}
        for job_id in limits:
            if job_id not in self._jobs and job_id not in placed_now:
                raise ActionError(
                    f"limit for job {job_id!r}, which is not placed; placed jobs: "
                    f"{sorted(self._jobs)}"
                )
        with self._engine_calls():
            self._map(
                lambda placement: self._place(placement, limits.get(placement.job_id)), placements
            )
            self._map(self._migrate, migrations)
            changes = [
                (job_id, limit)
                for job_id, limit in limits.items()
                if job_id not in placed_now
                and self._jobs[job_id].state is JobState.RUNNING
                and self._starter.cfs_of(self._jobs[job_id].worker, limit)
                != self._jobs[job_id].in_force
            ]
            self._map(lambda change: self._set_limit(*change), changes)

    def advance(self, seconds: float) -> Telemetry:
        """Sleep until ``seconds`` have passed since the previous measurement, then measure.

        Raises:
            ActionError: ``seconds`` is negative or not finite.
        """
        self._require_episode()
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ActionError(f"advance(seconds={seconds!r}); expected a finite number >= 0")
        delay = self._time_s + seconds - self._now()
        if delay > 0:
            time.sleep(delay)
        with self._engine_calls():
            return self._measure()

    def incidents(self) -> tuple[str, ...]:
        """What happened this episode that makes its figures doubtful: here, containers that
        vanished (removed by someone else), were killed, paused or stopped from outside while
        their job ran, whose CPU limit another process changed, or that went over their memory
        limit, and engines that stopped answering."""
        return tuple(self._incidents)

    def progress_traces(self) -> tuple[ProgressTrace, ...]:
        """Every placed job's iterations or batches as its workload reported them, in episode
        seconds (the workload's clock against the episode's Unix start: on a remote engine whose
        clock is off this host's, shifted by the difference)."""
        return tuple(job.progress_trace(self._clock.epoch_start) for job in self._in_order())

    def _in_order(self) -> list[Job]:
        """The placed jobs by arrival, then id: the order telemetry and traces list them in."""
        return sorted(self._jobs.values(), key=lambda j: (j.spec.arrival_s, j.spec.job_id))

    def close(self) -> None:
        """Remove this backend's containers and release its connections."""
        self._end_episode()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._engines.close()

    # ------------------------------------------------------------------ episode

    @contextlib.contextmanager
    def _engine_calls(self) -> Iterator[None]:
        """Engine calls after which an episode whose every engine is lost is an
        :class:`EngineLostError`; its containers are then left to ``dlsched docker cleanup``."""
        try:
            with self._engines.calls(self._episode):
                yield
        except EngineLostError:
            if self._cleanup is not None:
                # removing the containers would only fail again, and say so at length
                self._cleanup.detach()
            raise

    def _end_episode(self) -> None:
        for job in self._jobs.values():
            for run in job.runs:
                run.output.close()
        if self._cleanup is not None:
            self._cleanup()  # a finalizer runs at most once, whoever calls it first
            untrack(self._cleanup)
            self._cleanup = None
        self._jobs = {}

    def _require_episode(self) -> None:
        if self._cleanup is None:
            raise BackendError("the Docker backend has no episode; call reset() first")

    def _now(self) -> float:
        return self._clock.now()

    def _map(self, function: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``function`` over ``items`` in the thread pool; the first error is raised."""
        if len(items) <= 1:
            return [function(item) for item in items]
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._actuation_threads, thread_name_prefix="dlsched-docker"
            )
        return list(self._pool.map(function, items))

    # ------------------------------------------------------------------ actuation

    def _placed(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise ActionError(
                f"job {job_id!r} is not placed; placed jobs: {sorted(self._jobs)}"
            ) from None

    def _check_placement(self, placement: Placement, new: bool) -> None:
        what = "placement" if new else "migration"
        if placement.job_id not in self._specs:
            raise ActionError(
                f"{what} of unknown job {placement.job_id!r}; jobs of this episode: "
                f"{sorted(self._specs)}"
            )
        if not 0 <= placement.worker < len(self._engines):
            raise ActionError(
                f"{what} of {placement.job_id!r} to worker {placement.worker}; workers are "
                f"0..{len(self._engines) - 1}"
            )
        if new and placement.job_id in self._jobs:
            raise ActionError(f"job {placement.job_id!r} is already placed")
        if not new:
            self._placed(placement.job_id)

    def _place(self, placement: Placement, limit: float | None) -> None:
        spec = self._specs[placement.job_id]
        asked = 1.0 if limit is None else limit
        if not self._engines.worker_lost(placement.worker):
            with self._engines.answering(self._engines[placement.worker].endpoint):
                run, read_back = self._starter.start(spec, placement.worker, asked, 0, 0)
        if self._engines.worker_lost(placement.worker):
            # placed on a host that is gone: the job fails there, as it would in a cluster
            never = self._starter.cfs_of(placement.worker, asked)
            self._jobs[spec.job_id] = Job(
                spec, placement.worker, placement.slot, asked, never, never, state=JobState.FAILED
            )
            return
        job = Job(
            spec=spec,
            worker=placement.worker,
            slot=placement.slot,
            limit=self._starter.limit_of(placement.worker, read_back),
            in_force=read_back,
            applied=read_back,
            runs=[run],
        )
        self._jobs[spec.job_id] = job

    def _migrate(self, placement: Placement) -> None:
        job = self._jobs[placement.job_id]
        if job.state is not JobState.RUNNING:
            return  # it finished or died since the decision; nothing is left to move
        if self._engines.worker_lost(placement.worker) or self._engines.worker_lost(job.worker):
            return  # a lost engine's jobs fail at the next measurement; none moves to one
        old = job.run
        source = self._engines[old.worker]
        with self._engines.answering(source.endpoint):
            self._read_cpu(old)
            # SIGTERM: the workload stops at the end of its current unit, so the count it last
            # reported is exactly the work done; SIGKILL after stop_timeout_s if it does not.
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                source.client.api.stop(old.container_id, timeout=math.ceil(self._stop_timeout_s))
            old.output.wait_ended(self._output_grace_s)
            progress = old.output.progress()
            training = job.spec.kind is JobKind.TRAINING
            resume = progress.iterations if training else progress.batches
            checkpoint = self._starter.checkpoint_of(job) if training else None
        if self._engines.worker_lost(old.worker):
            return
        with self._engines.answering(self._engines[placement.worker].endpoint):
            run, read_back = self._starter.start(
                job.spec, placement.worker, job.limit, resume, len(job.runs), checkpoint
            )
        if self._engines.worker_lost(placement.worker):
            job.state = JobState.FAILED  # stopped on its engine, and its new one is gone
            return
        job.runs.append(run)
        job.worker = placement.worker
        job.slot = placement.slot
        job.limit = self._starter.limit_of(job.worker, read_back)
        job.in_force = job.applied = read_back

    def _set_limit(self, job_id: str, limit: float) -> None:
        job = self._jobs[job_id]
        client = self._engines[job.worker].client
        quota = self._starter.cfs_of(job.worker, limit).quota_us
        endpoint = self._engines[job.worker].endpoint
        try:
            client.api.update_container(
                job.run.container_id, cpu_period=self._cpu_period_us, cpu_quota=quota
            )
            read_back = self._read_limit(job.run)
        except requests.exceptions.ConnectionError as error:
            self._engines.lose(endpoint, error)  # its jobs fail at the next measurement
            return
        except docker.errors.NotFound:
            return  # it is gone: the next measurement reports it failed
        except docker.errors.APIError as error:
            if _exited(error):
                return  # it ended meanwhile: the next measurement says how
            raise BackendError(
                f"the engine refused limit {limit!r} (cpu_quota={quota}, "
                f"cpu_period={self._cpu_period_us}) for job {job_id!r}: {error}"
            ) from error
        if read_back is None:
            return  # it ended meanwhile: the next measurement says how
        job.limit = self._starter.limit_of(job.worker, read_back)
        job.in_force = job.applied = read_back

    # ------------------------------------------------------------------ measurement

    def _stats_reading(self, run: Run) -> tuple[float, float, CfsThrottling | None] | None:
        """Cumulative CPU-seconds of a container, when the engine sampled them (Unix time), and
        its CFS counters (``None`` where the engine gives none).

        The engine answers a one-shot request at its next sampling tick (up to a second
        later), so the sample's own timestamp, not the time of the request, times it.
        """
        client = self._engines[run.worker].client
        try:
            stats = client.api.stats(run.container_id, stream=False, one_shot=True)
        except docker.errors.NotFound:
            return None
        total = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage")
        if not total:
            return None  # an exited container reports zeros; its last reading stands
        return total / 1e9, unix_time(stats["read"]), stats_throttling(stats)

    def _read_limit(self, run: Run) -> CfsLimit | None:
        """The CFS limit in force on ``run``'s container, from its cgroup files where the engine
        runs on this host, else from the engine's inspect; ``None`` once it is gone.

        Raises:
            requests.exceptions.ConnectionError: the engine does not answer.
        """
        if run.limit_files is not None:
            return run.limit_files.read()
        try:
            inspected = self._engines[run.worker].client.api.inspect_container(run.container_id)
        except docker.errors.NotFound:
            return None
        return inspected_cfs(inspected)

    def _read(self, job: Job) -> CfsLimit | None:
        """Read a job's CPU time and the limit in force on it (from its cgroup files, else from
        its engine); the limit, ``None`` if it is gone or its engine was lost meanwhile."""
        run = job.run
        with self._engines.answering(self._engines[run.worker].endpoint):
            self._read_cpu(run)
            return self._read_limit(run)
        return None

    def _read_cpu(self, run: Run) -> None:
        if run.cpu_file is not None:
            seconds = run.cpu_file.read_seconds()
            throttling = None if run.limit_files is None else run.limit_files.read_throttling()
            if seconds is not None:
                run.record(seconds, self._now(), self._min_usage_window_s, throttling)
            return
        with self._engines.answering(self._engines[run.worker].endpoint):
            reading = self._stats_reading(run)
            if reading is not None:
                seconds, at, throttling = reading
                run.record(seconds, at, self._min_usage_window_s, throttling)

    def _engine_states(self) -> dict[str, str]:
        """The state of every container of the episode, by id (one call per engine that
        answers; one that does not is lost)."""
        states: dict[str, str] = {}
        for endpoint, client in self._engines.clients().items():
            with self._engines.answering(endpoint):
                for summary in managed_containers(client, self._episode):
                    states[summary["Id"]] = summary["State"]
        return states

    def _measure(self) -> Telemetry:
        states = self._engine_states()
        for job in self._jobs.values():
            if job.state is JobState.RUNNING and self._engines.worker_lost(job.worker):
                job.state = JobState.FAILED  # its host is gone (an incident says so)
                job.run.output.close()
        running = [job for job in self._jobs.values() if job.state is JobState.RUNNING]
        live = [job for job in running if states.get(job.run.container_id) in _LIVE_STATES]
        # Files first (microseconds each); the engine's statistics and inspects in parallel.
        local = [job for job in live if job.run.read_from_files]
        limits = {job.spec.job_id: self._read(job) for job in local}
        remote = [job for job in live if not job.run.read_from_files]
        for job, limit in zip(remote, self._map(self._read, remote), strict=True):
            limits[job.spec.job_id] = limit
        now = self._now()
        for job in running:
            if self._engines.worker_lost(job.worker):  # lost while its CPU was read
                job.state = JobState.FAILED
                job.run.output.close()
            elif states.get(job.run.container_id) not in _LIVE_STATES:
                self._finish(job, now)
            else:
                self._check_limit(job, limits[job.spec.job_id], now)
                self._check_stopped(job, states[job.run.container_id], now)
        jobs = []
        for job in self._in_order():
            jobs.append(job.telemetry(now))
        interval = now - self._time_s
        self._time_s = now
        return Telemetry(
            now, interval, self._worker_telemetry({j.job_id: j for j in jobs}), tuple(jobs)
        )

    def _check_limit(self, job: Job, found: CfsLimit | None, now: float) -> None:
        """Take the limit read back as the one in force; one the backend did not set, and not
        seen before, was set by another process: an incident."""
        if found is None:
            return  # gone since it was listed: the next measurement says how it ended
        if found not in (job.applied, job.in_force):
            self._incidents.append(
                f"job {job.spec.job_id} ({job.spec.workload}): the CPU limit of container "
                f"{job.run.name} was changed from outside at {now:.0f} s: "
                f"{found.describe()} in force where dlsched set {job.applied.describe()} (by "
                "another process, e.g. `docker update`); telemetry reports the limit in force, "
                "and the next decision sets its own"
            )
        job.in_force = found
        job.limit = self._starter.limit_of(job.worker, found)

    def _check_stopped(self, job: Job, engine_state: str, now: float) -> None:
        """An incident when the job's container is found paused or stopped by a signal (once
        per stop: it may be resumed, and stopped again)."""
        run = job.run
        if engine_state == "paused":
            how = "paused (`docker pause`: its cgroup frozen)"
        elif run.process is not None and run.process.stopped():
            how = (
                "stopped by a signal (its process in state T: SIGSTOP, e.g. `docker kill "
                "--signal STOP`)"
            )
        else:
            run.stopped = False
            return
        if not run.stopped:
            self._incidents.append(
                f"job {job.spec.job_id} ({job.spec.workload}): container {run.name} was {how} "
                f"from outside at {now:.0f} s while its job ran; it makes no progress until "
                "resumed"
            )
        run.stopped = True

    def _finish(self, job: Job, now: float) -> None:
        """Decide how an exited (or vanished) container ended: DONE or FAILED."""
        run = job.run
        client = self._engines[run.worker].client
        exit_code: int | None
        out_of_memory = False
        try:
            state = client.api.inspect_container(run.container_id)["State"]
            exit_code, out_of_memory = int(state["ExitCode"]), bool(state.get("OOMKilled"))
        except docker.errors.NotFound:
            exit_code = None
        except requests.exceptions.ConnectionError as error:
            self._engines.lose(self._engines[run.worker].endpoint, error)
            job.state = JobState.FAILED
            run.output.close()
            return
        run.output.wait_ended(self._output_grace_s)
        progress = run.output.progress()
        finished = (
            job.spec.kind is JobKind.TRAINING and exit_code == 0 and progress.done_at is not None
        )
        if finished:
            assert progress.done_at is not None
            job.state = JobState.DONE
            # The workload's clock says when; bounded by what this host saw, in case the
            # engine's host keeps another time.
            job.completed_s = min(
                max(progress.done_at - self._clock.epoch_start, run.started_s), now
            )
            return
        job.state = JobState.FAILED
        if exit_code is None:
            self._incidents.append(
                f"job {job.spec.job_id} ({job.spec.workload}): container {run.name} vanished at "
                f"{now:.0f} s while its job ran (removed by another process, e.g. `docker rm` "
                "or `dlsched docker cleanup --include-live`)"
            )
        elif out_of_memory:
            self._incidents.append(
                f"job {job.spec.job_id} ({job.spec.workload}): container {run.name} was killed "
                f"by the out-of-memory killer at {now:.0f} s; its memory limit is "
                f"{self._limits.memory_mb} MiB: raise the scenario's container_memory_mb if "
                "the workload needs more"
            )
        elif exit_code == _KILLED_EXIT_CODE:
            # `docker rm -f` kills before it removes: a poll between the two sees this
            self._incidents.append(
                f"job {job.spec.job_id} ({job.spec.workload}): container {run.name} was killed "
                f"at {now:.0f} s while its job ran (SIGKILL, not by the out-of-memory killer: "
                "by another process, e.g. `docker kill`, `docker rm -f` or `dlsched docker "
                "cleanup --include-live`)"
            )
        _log.warning(
            "job %s (%s, container %s) %s%s",
            job.spec.job_id,
            job.spec.workload,
            run.name,
            "vanished" if exit_code is None else f"exited with code {exit_code}",
            "" if exit_code is None else self._last_errors(run),
        )

    def _last_errors(self, run: Run) -> str:
        with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
            tail = self._engines[run.worker].client.api.logs(
                run.container_id, stdout=False, stderr=True, tail=5
            )
            text = tail.decode("utf-8", errors="replace").strip()
            if text:
                return f"; its last error output:\n{text}"
        return ""

    def _worker_telemetry(self, jobs: Mapping[str, JobTelemetry]) -> tuple[WorkerTelemetry, ...]:
        return tuple(
            WorkerTelemetry(
                index,
                engine.cores,
                sum(job.cpu_usage for job in jobs.values() if job.worker == index and job.active),
            )
            for index, engine in enumerate(self._engines)
        )


class _EpisodeClock:
    """The episode's time: seconds since its reset (monotonic), and the Unix time it began."""

    def __init__(self) -> None:
        self._start = 0.0
        self.epoch_start = 0.0

    def restart(self) -> None:
        """Start the episode's time now."""
        self._start = time.monotonic()
        self.epoch_start = time.time()

    def now(self) -> float:
        """Seconds since :meth:`restart`."""
        return time.monotonic() - self._start


def _endpoints(scenario: Scenario) -> tuple[str | None, ...]:
    """The distinct engine endpoints of a scenario's workers, in worker order."""
    return tuple(dict.fromkeys(worker.endpoint for worker in scenario.workers))


def _exited(error: docker.errors.APIError) -> bool:
    """Whether the engine refused a call because the container is not running: a 409 (``is not
    running``), or, from Docker 20.10's update of a container whose process just ended, a 500
    whose runc message says ``container not running``."""
    return error.status_code == 409 or "not running" in str(error)


def _episode_threading(option: str | None, scenario: Scenario) -> Threading:
    """The threading of an episode: the backend's option, else the scenario's, else tuned."""
    said = scenario.workload_threading
    if option is not None and said is not None and option != said:
        raise BackendError(
            f"workload_threading={option!r} contradicts scenario {scenario.name!r}, whose "
            f"workloads run {said!r} (its replay twin is profiled so); drop the option "
            "(--workload-threading) or use a scenario of the other threading"
        )
    return "stock" if (option or said) == "stock" else "tuned"
