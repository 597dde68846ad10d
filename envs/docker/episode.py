"""One episode at a time on Docker engines, as the environment loop drives backends.

:class:`DockerEpisode` is the :class:`~dlsched.envs.episode_batch.EpisodeBatch` of the Docker
backend (:mod:`dlsched.envs.docker.backend`, which gives it and says what it guarantees): one row,
whose calls start, update, move and measure the episode's containers and whose arrays it writes
from what it measured, job by job (:meth:`~dlsched.envs.docker.records.Job.write`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import operator
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors
import numpy as np
import requests

from dlsched.envs.decision import Placement
from dlsched.envs.docker.cgroup import CfsLimit, CfsThrottling, stats_cpu_seconds, stats_throttling
from dlsched.envs.docker.container_start import ContainerStarter, inspected_cfs
from dlsched.envs.docker.containers import managed_containers
from dlsched.envs.docker.engine import endpoint_url, unix_time
from dlsched.envs.docker.engine_connections import EngineConnections
from dlsched.envs.docker.exit_cleanup import remove_episode, track, untrack
from dlsched.envs.docker.records import Job, Run, total_iterations
from dlsched.envs.docker.sandbox import DEFAULT_LIMITS, ContainerLimits
from dlsched.envs.episode_batch import (
    HAS_ENDED,
    IS_ACTIVE,
    MIGRATING,
    PHASE_OF_STATE,
    STARTING,
    EpisodeBatch,
    EpisodeJobs,
    Generators,
    Move,
)
from dlsched.envs.errors import BackendError, EngineLostError, ScenarioError
from dlsched.envs.owner import ProcessOwner
from dlsched.envs.progress_trace import ProgressTrace
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.telemetry import JobState
from dlsched.envs.workloads.catalog import WORKLOADS
from dlsched.envs.workloads.cpu_quota import Threading

_log = logging.getLogger(__name__)

#: A container's exit code when its process was killed by SIGKILL (128 + 9).
_KILLED_EXIT_CODE = 137
#: Engine states in which a container's process still exists.
_LIVE_STATES = frozenset({"created", "running", "paused", "restarting"})
#: The order of an episode's jobs (its columns): by arrival, then id.
_ARRIVAL_ORDER = operator.attrgetter("arrival_s", "job_id")


class DockerEpisode(EpisodeBatch):
    """The episodes of ``scenario`` on Docker engines, one at a time (see
    :class:`~dlsched.envs.docker.backend.DockerBackend` for what it does and guarantees).

    Args:
        scenario: the scenario its episodes run.
        jobs: the most jobs an episode holds (``None``: the scenario's most).

    The other arguments are the backend's options, as
    :class:`~dlsched.envs.docker.backend.DockerBackend` documents and checks them.
    """

    def __init__(
        self,
        scenario: Scenario,
        jobs: int | None,
        *,
        image: str | None,
        cpu_period_us: int,
        use_cgroup_files: bool | None,
        cgroup_root: Path,
        network_mode: str,
        api_timeout_s: float,
        output_grace_s: float,
        stop_timeout_s: float,
        actuation_threads: int,
        min_usage_window_s: float,
        workload_threading: str | None,
    ) -> None:
        super().__init__(scenario, 1, jobs)
        self._image = image
        self._cpu_period_us = int(cpu_period_us)
        self._output_grace_s = float(output_grace_s)
        self._stop_timeout_s = float(stop_timeout_s)
        self._min_usage_window_s = float(min_usage_window_s)
        self._actuation_threads = actuation_threads
        self._workload_threading = workload_threading
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        # The parts below hold the clock and the incident list, never the episode itself: an
        # episode dropped without close() is freed (and its finalizer run) at once.
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
        self._column: dict[str, int] = {}

    # ------------------------------------------------------------------ properties

    @property
    def episode(self) -> str | None:
        """The id (``dlsched.episode`` label) of the current or, after close, the last episode."""
        return self._episode

    @property
    def image(self) -> str:
        """The workload image the containers run."""
        return workload_image(self._image)

    # ------------------------------------------------------------------ EpisodeBatch

    def reset_rows(self, rows: Sequence[int], episodes: EpisodeJobs, rngs: Generators) -> None:
        """Remove the previous episode's containers, check the engines and start the clock: an
        episode of ``episodes[0]`` (none placed yet).

        Raises:
            ValueError: rows other than row 0 alone.
            ScenarioError: more jobs than the batch holds, repeated job ids, or a job's
                workload that has no program in the image (a replay-only workload of a
                paper's profile set).
            BackendError: the backend's ``workload_threading`` contradicts the scenario's.
            DockerUnavailableError: a worker's engine does not answer or refuses this user.
            ImageMissingError: the workload image is not on a worker's engine.
        """
        if list(rows) != [0] or len(episodes) != 1:
            raise ValueError(f"a one-episode batch resets row 0 alone, not rows {list(rows)}")
        scenario, jobs, rng = self.scenario, episodes[0], rngs[0]
        ordered = tuple(sorted(jobs, key=_ARRIVAL_ORDER))
        if len(ordered) > self.jobs:
            raise ScenarioError(
                f"episode has {len(ordered)} jobs but scenario {scenario.name!r} allows at "
                f"most {self.jobs}"
            )
        if len({job.job_id for job in ordered}) < len(ordered):
            raise ScenarioError(
                f"episode of scenario {scenario.name!r} repeats job ids: "
                f"{[job.job_id for job in ordered]}"
            )
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
        state = self.state
        state.describe(np.zeros(1, dtype=np.int64), [ordered])
        state.total[0, : len(ordered)] = [total_iterations(job) or 0 for job in ordered]
        self.set_jobs(0, ordered)
        self._column = {job.job_id: column for column, job in enumerate(ordered)}
        self.now[0] = 0.0
        self.cores = np.array([engine.cores for engine in self._engines], dtype=np.float64)

    def place(
        self, rows: np.ndarray, jobs: np.ndarray, workers: np.ndarray, slots: np.ndarray
    ) -> None:
        """Start the jobs' containers, uncapped, in parallel (the caller checked the places)."""
        specs = self.specs[0]
        placements = [
            Placement(specs[job].job_id, worker, slot)
            for job, worker, slot in zip(
                jobs.tolist(), workers.tolist(), slots.tolist(), strict=True
            )
        ]
        with self._engine_calls():
            self._map(self._place, placements)
        state = self.state
        # What is read back replaces these at the next measurement.
        state.phase[0, jobs] = STARTING
        state.worker[0, jobs] = workers
        state.slot[0, jobs] = slots
        state.limit[0, jobs] = 1.0

    def apply(self, limits: np.ndarray, migrations: Sequence[Move]) -> None:
        """Move the migrating jobs, then set the limits that change, reading each back; engine
        calls run in parallel. A job that has finished or failed keeps its own limit."""
        state = self.state
        specs = self.specs[0]
        active = np.flatnonzero(IS_ACTIVE[state.phase[0]]).tolist()
        asked = limits[0].tolist()
        with self._engine_calls():
            self._map(
                self._migrate,
                [Placement(specs[move.job].job_id, move.worker, move.slot) for move in migrations],
            )
            changes = []
            for column in active:
                job = self._jobs[specs[column].job_id]
                limit = asked[column]
                if (
                    job.state is JobState.RUNNING
                    and self._starter.cfs_of(job.worker, limit) != job.in_force
                ):
                    changes.append((job, limit))
            self._map(lambda change: self._set_limit(*change), changes)
        # What is read back replaces them at the next measurement.
        state.limit[0, active] = limits[0, active]
        for move in migrations:
            state.phase[0, move.job] = MIGRATING
            state.worker[0, move.job] = move.worker
            state.slot[0, move.job] = move.slot

    def advance(self, rows: np.ndarray, seconds: np.ndarray) -> None:
        """Sleep until ``seconds`` have passed since the previous measurement, then measure."""
        if not rows[0]:
            return
        delay = self._time_s + float(seconds[0]) - self._now()
        if delay > 0:
            time.sleep(delay)
        with self._engine_calls():
            self._measure()

    def incidents(self, row: int = 0) -> tuple[str, ...]:
        """What happened this episode that makes its figures doubtful: here, containers that
        vanished (removed by someone else), were killed, paused or stopped from outside while
        their job ran, whose CPU limit another process changed, or that went over their memory
        limit, and engines that stopped answering."""
        return tuple(self._incidents)

    def progress_traces(self, row: int = 0) -> tuple[ProgressTrace, ...]:
        """Every placed job's iterations or batches as its workload reported them, in episode
        seconds (the workload's clock against the episode's Unix start: on a remote engine whose
        clock is off this host's, shifted by the difference)."""
        return tuple(job.progress_trace(self._clock.epoch_start) for job in self._in_order())

    def _in_order(self) -> list[Job]:
        """The placed jobs by arrival, then id: the order their traces are listed in."""
        return sorted(self._jobs.values(), key=lambda j: (j.spec.arrival_s, j.spec.job_id))

    def close(self) -> None:
        """Remove the episode's containers and release the connections; closing twice is
        allowed."""
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

    def _place(self, placement: Placement) -> None:
        spec = self._specs[placement.job_id]
        asked = 1.0
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

    def _set_limit(self, job: Job, limit: float) -> None:
        job_id = job.spec.job_id
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
        seconds = stats_cpu_seconds(stats)
        if seconds is None:
            return None  # an exited container reports zeros; its last reading stands
        return seconds, unix_time(stats["read"]), stats_throttling(stats)

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

    def _measure(self) -> None:
        """Measure every placed job and write what was measured into the row."""
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
        state = self.state
        for job in self._jobs.values():
            column = self._column[job.spec.job_id]
            phase = PHASE_OF_STATE[job.state]
            if HAS_ENDED[phase] and not HAS_ENDED[state.phase[0, column]]:
                self.ended_jobs += 1
            state.phase[0, column] = phase
            job.write(state, column)
        self.now[0] = now
        self._time_s = now

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


def workload_image(image: str | None) -> str:
    """The workload image containers run: ``image``, or dlsched's own if ``None``."""
    if image is not None:
        return image
    from dlsched.envs.docker.image import IMAGE_TAG

    return IMAGE_TAG


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
