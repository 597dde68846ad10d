"""Starting a job's container for the Docker backend, and the CPU limit as a CFS quota and back.

:class:`ContainerStarter` builds a job's workload command (its iterations, the iteration it
resumes at, its checkpoint file, the episode's threading and the job's seed), creates the
container with dlsched's labels (:mod:`dlsched.envs.docker.containers`), its quota and least
privilege (:mod:`dlsched.envs.docker.sandbox`: the workload user, no capabilities, a read-only
root filesystem, memory and pids limits), puts a migrated job's checkpoint into it, starts it
and follows its output; it finds the container's cgroup files and process where the engine runs
on this host, and takes the checkpoint a stopped training container saved. It also converts
limits to CFS limits and back (:meth:`ContainerStarter.cfs_of`, :meth:`ContainerStarter.
limit_of`), which the backend's limit updates and measurements use too.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker.errors

from dlsched.envs.docker.cgroup import (
    NO_CFS_LIMIT,
    CfsLimit,
    CpuLimitFiles,
    CpuUsageFile,
    ProcessStat,
    cfs_limit,
    find_cpu_limit_files,
    find_cpu_usage_file,
    find_process_stat,
)
from dlsched.envs.docker.container_output import ContainerOutput
from dlsched.envs.docker.containers import (
    LABEL_EPISODE,
    LABEL_JOB,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_WORKER,
)
from dlsched.envs.docker.engine import endpoint_url, unix_time
from dlsched.envs.docker.engine_connections import EngineConnections
from dlsched.envs.docker.records import Job, Run, total_iterations
from dlsched.envs.docker.sandbox import (
    STATE_DIR,
    WORKLOAD_USER,
    ContainerLimits,
    least_privilege,
)
from dlsched.envs.errors import BackendError
from dlsched.envs.owner import ProcessOwner
from dlsched.envs.scenarios.model import JobKind, JobSpec
from dlsched.envs.workloads.cpu_quota import Threading

_log = logging.getLogger(__name__)

#: Linux refuses CFS quotas below one millisecond per period.
MIN_CPU_QUOTA_US = 1000
#: The period the kernel applies where the engine sets none (inspect then says 0).
KERNEL_CPU_PERIOD_US = 100_000
#: Where a training container saves its state when stopped; a migration carries it over. On
#: the volume at STATE_DIR: it outlives the container's stop, which a tmpfs does not.
CHECKPOINT_PATH = f"{STATE_DIR}/checkpoint.pt"


class ContainerStarter:
    """Starts the containers of an episode's jobs on their workers' engines.

    The settings are the backend's, fixed at construction; :meth:`begin` gives each episode's
    own (its id, image, threading, container limits and the jobs' seeds) before its first
    :meth:`start`.
    """

    def __init__(
        self,
        engines: EngineConnections,
        clock: Callable[[], float],
        owner: ProcessOwner,
        cpu_period_us: int,
        network_mode: str,
        use_cgroup_files: bool | None,
        cgroup_root: Path,
    ) -> None:
        """Configure the starts (see :class:`~dlsched.envs.docker.backend.DockerBackend`).

        Args:
            engines: the engine of each worker.
            clock: the episode's time in seconds, at which a container started.
            owner: the process the containers are labelled with.
            cpu_period_us: the CFS period of every container.
            network_mode: the containers' network.
            use_cgroup_files: read CPU time from cgroup files (``True``: required), from the
                engine's statistics (``False``), or from the files where found (``None``).
            cgroup_root: where this host mounts the cgroup tree.
        """
        self._engines = engines
        self._clock = clock
        self._owner = owner
        self._cpu_period_us = cpu_period_us
        self._network_mode = network_mode
        self._use_cgroup_files = use_cgroup_files
        self._cgroup_root = cgroup_root
        self._episode: str | None = None
        self._image = ""
        self._threading: Threading = "tuned"
        self._limits: ContainerLimits | None = None
        self._seeds: Mapping[str, int] = {}

    def begin(
        self,
        episode: str,
        image: str,
        threading: Threading,
        limits: ContainerLimits,
        seeds: Mapping[str, int],
    ) -> None:
        """Start the containers of episode ``episode`` from now on, with its settings.

        Args:
            episode: the episode's id (its ``dlsched.episode`` label, and its containers'
                names).
            image: the workload image.
            threading: how the workloads size their thread pools.
            limits: the memory and pids each container may take.
            seeds: each job's seed, by job id.
        """
        self._episode = episode
        self._image = image
        self._threading = threading
        self._limits = limits
        self._seeds = seeds

    def start(
        self,
        spec: JobSpec,
        worker: int,
        limit: float,
        start_iteration: int,
        attempt: int,
        checkpoint: bytes | None = None,
    ) -> tuple[Run, CfsLimit]:
        """Start one container of ``spec``; the run and its CFS limit as read back.

        ``checkpoint``, a tar archive of :data:`CHECKPOINT_PATH`, is put into the container
        before it starts, so that the workload resumes from it.

        Raises:
            BackendError: the engine refused to create or start the container, or (with
                ``use_cgroup_files=True``) its cgroup CPU file cannot be found.
        """
        assert self._episode is not None and self._limits is not None
        client = self._engines[worker].client
        name = f"dlsched-{self._episode[:8]}-{spec.job_id}" + (f"-m{attempt}" if attempt else "")
        cfs = self.cfs_of(worker, limit)
        host_config = client.api.create_host_config(
            cpu_period=self._cpu_period_us,
            cpu_quota=None if cfs == NO_CFS_LIMIT else cfs.quota_us,
            network_mode=self._network_mode,
            **least_privilege(self._limits),
        )
        training = spec.kind is JobKind.TRAINING
        try:
            created = client.api.create_container(
                self._image,
                command=self._command(spec, start_iteration),
                name=name,
                detach=True,
                user=WORKLOAD_USER,
                # anonymous: removed with the container (``remove_container(v=True)``)
                volumes=[STATE_DIR] if training else None,
                labels={
                    LABEL_MANAGED: "1",
                    LABEL_EPISODE: self._episode,
                    LABEL_JOB: spec.job_id,
                    LABEL_WORKER: str(worker),
                    **self._owner.as_labels(LABEL_OWNER),
                },
                host_config=host_config,
            )
            container_id: str = created["Id"]
            if checkpoint is not None:
                client.api.put_archive(container_id, posixpath.dirname(CHECKPOINT_PATH), checkpoint)
            client.api.start(container_id)
            started_s = self._clock()
            inspected = client.api.inspect_container(container_id)
            stream = client.api.logs(
                container_id, stdout=True, stderr=False, stream=True, follow=True
            )
        except docker.errors.APIError as error:
            raise BackendError(
                f"the engine at {endpoint_url(self._engines[worker].endpoint)} could not start "
                f"job {spec.job_id!r} ({spec.workload}) in container {name}: {error}"
            ) from error
        output = ContainerOutput(stream, stream.close, name)
        cpu_file, limit_files, process = self._host_files(container_id, inspected)
        run = Run(
            container_id=container_id,
            name=name,
            worker=worker,
            started_s=started_s,
            output=output,
            cpu_file=cpu_file,
            limit_files=limit_files,
            process=process,
            window_start_at=(
                started_s if cpu_file is not None else unix_time(inspected["State"]["StartedAt"])
            ),
        )
        return run, inspected_cfs(inspected)

    def checkpoint_of(self, job: Job) -> bytes | None:
        """The tar archive of the checkpoint the job's stopped container saved, if it saved one."""
        run = job.run
        try:
            chunks, _ = self._engines[run.worker].client.api.get_archive(
                run.container_id, CHECKPOINT_PATH
            )
            return b"".join(chunks)
        except docker.errors.APIError as error:
            _log.warning(
                "job %s (container %s) left no checkpoint at %s (%s); it resumes at its "
                "iteration count from untrained weights",
                job.spec.job_id,
                run.name,
                CHECKPOINT_PATH,
                error,
            )
            return None

    def cfs_of(self, worker: int, limit: float) -> CfsLimit:
        """The CFS limit of ``limit`` on ``worker``: none at 1, else a quota of at least the
        minimum every :attr:`cpu_period_us`."""
        if limit >= 1.0:
            return NO_CFS_LIMIT
        quota = round(limit * self._engines[worker].cores * self._cpu_period_us)
        return cfs_limit(max(quota, MIN_CPU_QUOTA_US), self._cpu_period_us)

    def limit_of(self, worker: int, cfs: CfsLimit) -> float:
        """The limit (a fraction of ``worker``'s cores, at most 1) that ``cfs`` amounts to."""
        if cfs.cores is None:
            return 1.0
        return min(cfs.cores / self._engines[worker].cores, 1.0)

    @property
    def cpu_period_us(self) -> int:
        """The CFS period every container is started and updated with."""
        return self._cpu_period_us

    def _command(self, job: JobSpec, start_iteration: int) -> list[str]:
        command = ["python", "-m", "dlsched_workloads", job.workload]
        iterations = total_iterations(job)
        if iterations is not None:
            command += ["--iterations", str(iterations)]
        if start_iteration:
            command += ["--start-iteration", str(start_iteration)]
        if job.kind is JobKind.TRAINING:
            command += ["--checkpoint", CHECKPOINT_PATH]
        if self._threading != "tuned":
            command += ["--threading", self._threading]
        return [*command, "--seed", str(self._seeds[job.job_id])]

    def _host_files(
        self, container_id: str, inspected: Mapping[str, Any]
    ) -> tuple[CpuUsageFile | None, CpuLimitFiles | None, ProcessStat | None]:
        """Where this host shows the container's CPU time, CPU limit and main process (each
        ``None`` where it does not: the engine's statistics and inspect answer instead)."""
        if self._use_cgroup_files is False:
            return None, None, None
        pid = int(inspected["State"].get("Pid") or 0) or None
        found = find_cpu_usage_file(container_id, pid, self._cgroup_root)
        if found is None and self._use_cgroup_files and inspected["State"]["Running"]:
            raise BackendError(
                f"no cgroup CPU accounting file of container {container_id[:12]} under "
                f"{self._cgroup_root}; the engine does not run on this host or uses another "
                "cgroup layout. Pass use_cgroup_files=None (or False) to read the engine's "
                "statistics instead"
            )
        if found is None:
            return None, None, None
        return (
            found,
            find_cpu_limit_files(container_id, pid, self._cgroup_root),
            find_process_stat(container_id, pid),
        )


def inspected_cfs(inspected: Mapping[str, Any]) -> CfsLimit:
    """The CFS limit the engine says an inspected container has."""
    host_config = inspected["HostConfig"]
    period = int(host_config.get("CpuPeriod") or KERNEL_CPU_PERIOD_US)
    return cfs_limit(int(host_config.get("CpuQuota") or 0), period)
