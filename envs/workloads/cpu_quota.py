"""How many threads a workload should use: as many as the CPU its container may use.

A container's CPU limit is a CFS quota (``cpu_quota`` microseconds of CPU per ``cpu_period``).
A torch program that keeps one thread per host core under a quota of one core spends most of each
period throttled, with its threads waiting on each other; one that keeps one thread under a raised
quota leaves CPU unused. So the workloads read the quota before every unit of work and resize
torch's intra-op pool whenever it changes: ``ceil(quota / period)`` threads, at least 1, at most
the cores the process may run on; without a quota, those cores. This is the ``"tuned"``
threading; ``"stock"`` (:class:`StockThreads`) leaves torch's pool as an unmodified program has
it, one thread per usable core whatever the quota, so that a host of stock framework jobs can be
reproduced (``dlsched bench contention`` compares the two).

The cgroup files are read under ``/sys/fs/cgroup`` (inside a container, its own cgroup), or under
the directory named by the environment variable ``DLSCHED_CGROUP_ROOT`` (tests point it at fake
files):

- cgroup v2: ``cpu.max`` holds ``"<quota> <period>"`` or ``"max <period>"``;
- cgroup v1: ``cpu/cpu.cfs_quota_us`` (``-1`` without a quota) and ``cpu/cpu.cfs_period_us``,
  the controller directory being ``cpu`` or ``cpu,cpuacct`` depending on how the host mounts it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

CGROUP_ROOT_ENV = "DLSCHED_CGROUP_ROOT"
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")

Threading = Literal["tuned", "stock"]
#: The ways a workload can size its thread pool, the default first.
THREADINGS: tuple[Threading, ...] = ("tuned", "stock")


@dataclass(frozen=True)
class CpuQuota:
    """A CFS quota: ``quota_us`` of CPU time per ``period_us`` of wall time."""

    quota_us: int
    period_us: int

    @property
    def cores(self) -> float:
        """The quota in cores (1.5 = one and a half cores' worth of CPU time)."""
        return self.quota_us / self.period_us


def cgroup_root() -> Path:
    """The directory the cgroup files are read from (``DLSCHED_CGROUP_ROOT`` or the default)."""
    configured = os.environ.get(CGROUP_ROOT_ENV)
    return Path(configured) if configured else DEFAULT_CGROUP_ROOT


def read_cpu_quota(root: Path | None = None) -> CpuQuota | None:
    """The CPU quota in force under ``root`` (default :func:`cgroup_root`), ``None`` if none.

    Unreadable or malformed files count as no quota: a workload must keep running on a host whose
    cgroup layout it does not know, at the host's core count.
    """
    base = cgroup_root() if root is None else root
    try:
        v2 = base / "cpu.max"
        if v2.is_file():
            quota_text, period_text = v2.read_text().split()
            if quota_text == "max":
                return None
            return _positive_quota(int(quota_text), int(period_text))
        for directory in _V1_CPU_DIRS:
            quota_file = base / directory / "cpu.cfs_quota_us"
            if quota_file.is_file():
                quota = int(quota_file.read_text())
                period = int((base / directory / "cpu.cfs_period_us").read_text())
                return _positive_quota(quota, period)
    except (OSError, ValueError):
        return None
    return None


def _positive_quota(quota_us: int, period_us: int) -> CpuQuota | None:
    # v1 writes -1 for "no quota"; a zero period cannot be a quota either.
    if quota_us <= 0 or period_us <= 0:
        return None
    return CpuQuota(quota_us, period_us)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    return max(1, len(os.sched_getaffinity(0)))


def threads_for(quota: CpuQuota | None, cores: int) -> int:
    """Threads for a quota on a host with ``cores`` usable cores.

    Args:
        quota: the quota in force, or ``None`` for none.
        cores: the cores the process may run on.

    Returns:
        ``ceil(quota / period)`` clamped to ``[1, cores]``; ``cores`` without a quota.
    """
    if quota is None:
        return max(1, cores)
    return max(1, min(cores, -(-quota.quota_us // quota.period_us)))


class ThreadFollower:
    """Keeps torch's intra-op thread count equal to :func:`threads_for` the current quota.

    Call :meth:`update` before each unit of work; it reads the quota files (a few microseconds)
    and calls ``torch.set_num_threads`` only when the count changes.
    """

    def __init__(self, root: Path | None = None) -> None:
        """Args:
        root: cgroup root to read; ``None`` reads :func:`cgroup_root` at each update.
        """
        self._root = root
        self._threads = 0

    @property
    def threads(self) -> int:
        """The thread count set by the last :meth:`update` (0 before the first)."""
        return self._threads

    def update(self) -> int:
        """Read the quota, resize torch's pool if needed, and return the thread count."""
        import torch

        wanted = threads_for(read_cpu_quota(self._root), usable_cores())
        if wanted != self._threads:
            torch.set_num_threads(wanted)
            self._threads = wanted
        return wanted


class StockThreads:
    """Keeps one intra-op thread per usable core, as torch sizes its pool when nothing says.

    The image sets ``OMP_NUM_THREADS=1`` so that the tuned workloads start small; the first
    :meth:`update` undoes it. A CFS quota does not change the pool: under a quota of one core a
    job on an 8-core host keeps 8 threads, as an unmodified program does.
    """

    def __init__(self) -> None:
        self._threads = 0

    def update(self) -> int:
        """Size the pool on the first call; return its thread count."""
        if not self._threads:
            import torch

            self._threads = usable_cores()
            torch.set_num_threads(self._threads)
        return self._threads


class ThreadKeeper(Protocol):
    """What a workload calls before each unit of work: sizes the pool, returns its threads."""

    def update(self) -> int: ...


def thread_keeper(threading: Threading) -> ThreadKeeper:
    """The keeper of ``threading``: :class:`ThreadFollower` (tuned) or :class:`StockThreads`."""
    return ThreadFollower() if threading == "tuned" else StockThreads()
