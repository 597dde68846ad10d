"""How a workload container is confined: least privilege, and the resources it may take.

A workload reads its program, data and libraries from the image, computes, prints JSON lines,
and, when a training is stopped to migrate, writes one checkpoint. It needs nothing else, so every
workload container the Docker backend (or a calibration) starts runs

- as the image's workload user (:data:`WORKLOAD_USER`), not root;
- without any Linux capability (``cap_drop=["ALL"]``), and unable to gain one, or another user's
  rights, through a set-id program (``no-new-privileges``);
- on a read-only root filesystem, with a tmpfs of :data:`TMPFS_MB` MiB at ``/tmp`` for scratch
  (``HOME`` is there, and torch's cache folder; nothing on it may be executed) and, for a
  training job, an anonymous volume at :data:`STATE_DIR` for its
  checkpoint, which must outlive the stop of its container (a tmpfs does not) and goes when the
  container is removed;
- within a memory limit (RAM; no swap beyond it) and a limit of processes and threads
  (:class:`ContainerLimits`, a scenario's ``container_memory_mb`` and ``container_pids``);
- without a network (the backend's ``network_mode="none"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlsched.envs.scenarios.model import Scenario

#: The user and group the workloads run as: ``dlsched`` in the image's ``/etc/passwd`` (where
#: Python's and torch's user lookups find it; :mod:`dlsched.envs.docker.image` puts it there),
#: not root, and no id a user of the host is likely to have.
WORKLOAD_UID = 10001
WORKLOAD_USER = f"{WORKLOAD_UID}:{WORKLOAD_UID}"
#: The workload user's directory in the image: the one place a workload keeps state across a
#: stop of its container (a training's checkpoint, on a volume: the root filesystem is read-only).
STATE_DIR = "/var/lib/dlsched"
#: Size of the scratch tmpfs at ``/tmp``; what a workload writes there counts in its memory.
TMPFS_MB = 64


@dataclass(frozen=True)
class ContainerLimits:
    """What one workload container may take of its host.

    Attributes:
        memory_mb: memory (RAM, no swap beyond it), in MiB; a workload over it is killed by the
            kernel's out-of-memory killer.
        pids: processes and threads.
    """

    memory_mb: int
    pids: int

    @classmethod
    def of(cls, scenario: Scenario) -> ContainerLimits:
        """The limits ``scenario`` gives its jobs' containers (its defaults if it says none)."""
        return cls(scenario.container_memory_mb, scenario.container_pids)


#: The limits of a container no scenario describes (a calibration's).
DEFAULT_LIMITS = ContainerLimits(Scenario.container_memory_mb, Scenario.container_pids)


def least_privilege(limits: ContainerLimits) -> dict[str, Any]:
    """The keyword arguments of docker-py's ``create_host_config`` (the same as of
    ``containers.run``) that confine a workload container within ``limits``. Its user
    (:data:`WORKLOAD_USER`) and a training's checkpoint volume are arguments of the container
    itself."""
    memory = f"{limits.memory_mb}m"
    return {
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,noexec,size={TMPFS_MB}m,mode=1777"},
        "mem_limit": memory,
        "memswap_limit": memory,
        "pids_limit": limits.pids,
    }
