"""What this host's kernel shows of a container: its CPU time, CPU limit and throttling in its
cgroup files, and whether its process is stopped in ``/proc``.

Reading a file costs microseconds where the engine's statistics endpoint costs about a second per
container (and its inspect a round trip), so the Docker backend reads these files whenever the
engine runs on the same host (and shares its cgroup tree with this process): the CPU time and the
limit in force at every measurement, so that a limit changed from outside (``docker update``, a
write to the files) is seen, and the process state, so that a container stopped from outside
(``docker kill --signal STOP``) is.

Where a container's cgroup lives depends on the cgroup version and on the engine's cgroup driver:

=========  ========  ===============================================================
version    driver    directory (CPU time; CPU limit)
=========  ========  ===============================================================
v1         cgroupfs  ``<root>/<controller dir>/docker/<id>/`` (``cpuacct.usage`` in
                     nanoseconds; ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``)
v1         systemd   ``<root>/<controller dir>/system.slice/docker-<id>.scope/``
v2         cgroupfs  ``<root>/docker/<id>/`` (``cpu.stat``, line ``usage_usec``; ``cpu.max``)
v2         systemd   ``<root>/system.slice/docker-<id>.scope/``
=========  ========  ===============================================================

A v1 ``<controller dir>`` is ``cpuacct`` (CPU time) or ``cpu`` (limit), or ``cpu,cpuacct`` or
``cpuacct,cpu`` where the host mounts the two together.

The throttling of a quota is in the ``cpu.stat`` beside the limit (v1: the ``cpu`` controller's,
``nr_periods``, ``nr_throttled``, ``throttled_time`` in nanoseconds; v2: the same file as the
CPU time, ``nr_periods``, ``nr_throttled``, ``throttled_usec``): the CFS periods in which the
cgroup ran under a quota, those of them in which it used the whole quota and waited for the next,
and the time it waited (:class:`CfsThrottling`). An engine started with another
``--cgroup-parent`` puts containers elsewhere; the files are then found by following the
container's main process through ``/proc/<pid>/cgroup``.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_PROC_ROOT = Path("/proc")
_V1_USAGE_FILE = "cpuacct.usage"
_V2_USAGE_FILE = "cpu.stat"
_V1_QUOTA_FILE = "cpu.cfs_quota_us"
_V1_PERIOD_FILE = "cpu.cfs_period_us"
_V2_LIMIT_FILE = "cpu.max"
_THROTTLING_FILE = "cpu.stat"


class CgroupVersion(StrEnum):
    """The cgroup hierarchy the host mounts: v1 (one tree per controller) or v2 (unified)."""

    V1 = "v1"
    V2 = "v2"


def detect_cgroup_version(root: Path = DEFAULT_CGROUP_ROOT) -> CgroupVersion:
    """Which cgroup version is mounted at ``root``.

    A unified (v2) mount has ``cgroup.controllers`` at its top; a v1 (or hybrid) host has one
    directory per controller there, and its ``unified`` subtree, if any, holds no CPU controller.
    """
    return CgroupVersion.V2 if (root / "cgroup.controllers").is_file() else CgroupVersion.V1


@dataclass(frozen=True)
class CpuUsageFile:
    """The file holding one cgroup's cumulative CPU time.

    Attributes:
        path: ``cpuacct.usage`` (v1, nanoseconds) or ``cpu.stat`` (v2, ``usage_usec`` line).
        version: which of the two formats ``path`` has.
    """

    path: Path
    version: CgroupVersion

    def read_seconds(self) -> float | None:
        """CPU-seconds the cgroup has used since it was created; ``None`` once it is gone.

        The engine removes a container's cgroup when the container stops, so ``None`` is the
        normal answer for an exited container, not an error.
        """
        text = _read_unless_gone(self.path)
        if text is None:
            return None
        if self.version is CgroupVersion.V1:
            return int(text.strip()) / 1e9
        return parse_cpu_stat_usage(text)


def parse_cpu_stat_usage(text: str) -> float:
    """CPU-seconds from the text of a v2 ``cpu.stat`` file (its ``usage_usec`` line).

    Raises:
        ValueError: the text has no ``usage_usec`` line.
    """
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise ValueError(f"cpu.stat has no usage_usec line: {text[:200]!r}")


@dataclass(frozen=True)
class CfsLimit:
    """A CFS bandwidth limit: ``quota_us`` of CPU time every ``period_us``, or none.

    Build one with :func:`cfs_limit`, which makes every way of saying "no quota" (the kernel's
    ``-1`` and ``max``, the engine's ``0``) the one :data:`NO_CFS_LIMIT`, whatever the period: a
    period limits nothing without a quota, and no quota must compare equal to no quota.

    Attributes:
        quota_us: CPU time per period, in microseconds; -1 for none.
        period_us: the period, in microseconds; 0 for none.
    """

    quota_us: int
    period_us: int

    @property
    def cores(self) -> float | None:
        """The cores' worth of CPU time it allows (``None``: no limit)."""
        return None if self.quota_us < 0 else self.quota_us / self.period_us

    def describe(self) -> str:
        """The limit in cores and as the kernel holds it, for messages."""
        if self.cores is None:
            return "no quota"
        return f"{self.cores:.3g} cores ({self.quota_us} us every {self.period_us} us)"


#: No CFS limit: the container may use every core.
NO_CFS_LIMIT = CfsLimit(-1, 0)


def cfs_limit(quota_us: int, period_us: int) -> CfsLimit:
    """The limit of ``quota_us`` every ``period_us``; :data:`NO_CFS_LIMIT` for a quota <= 0."""
    if quota_us <= 0 or period_us <= 0:
        return NO_CFS_LIMIT
    return CfsLimit(quota_us, period_us)


@dataclass(frozen=True)
class CpuLimitFiles:
    """The files holding one cgroup's CFS limit and its throttling.

    Attributes:
        directory: the cgroup's directory: ``cpu.max`` in it (v2), or ``cpu.cfs_quota_us`` and
            ``cpu.cfs_period_us`` (v1); ``cpu.stat`` in both.
        version: which of the two the directory holds.
    """

    directory: Path
    version: CgroupVersion

    def read(self) -> CfsLimit | None:
        """The limit in force; ``None`` once the cgroup is gone (the container stopped).

        Raises:
            ValueError: a file holds something else than a limit.
        """
        if self.version is CgroupVersion.V2:
            text = _read_unless_gone(self.directory / _V2_LIMIT_FILE)
            if text is None:
                return None
            quota, _, period = text.strip().partition(" ")
            return NO_CFS_LIMIT if quota == "max" else cfs_limit(int(quota), int(period))
        quota_text = _read_unless_gone(self.directory / _V1_QUOTA_FILE)
        period_text = _read_unless_gone(self.directory / _V1_PERIOD_FILE)
        if quota_text is None or period_text is None:
            return None
        return cfs_limit(int(quota_text), int(period_text))

    def read_throttling(self) -> CfsThrottling | None:
        """The cgroup's throttling counters (its ``cpu.stat``); ``None`` once it is gone.

        Raises:
            ValueError: the file lacks a counter.
        """
        text = _read_unless_gone(self.directory / _THROTTLING_FILE)
        return None if text is None else parse_cpu_stat_throttling(text, self.version)


@dataclass(frozen=True)
class CfsThrottling:
    """A cgroup's cumulative CFS bandwidth counters (since it was created).

    Attributes:
        periods: CFS periods that elapsed while the cgroup had a quota and runnable threads.
        throttled_periods: those of them in which it used its whole quota and was stopped until
            the next period.
        throttled_s: seconds its threads waited for the next period, summed.
    """

    periods: int
    throttled_periods: int
    throttled_s: float

    def ratio_since(self, before: CfsThrottling) -> float | None:
        """The fraction of the periods since ``before`` in which the cgroup was throttled;
        ``None`` where no period elapsed (no quota in force, or no thread ran)."""
        periods = self.periods - before.periods
        if periods <= 0:
            return None
        return min(max((self.throttled_periods - before.throttled_periods) / periods, 0.0), 1.0)


#: The counters of a cgroup just created.
NO_THROTTLING = CfsThrottling(0, 0, 0.0)


def parse_cpu_stat_throttling(text: str, version: CgroupVersion) -> CfsThrottling:
    """The throttling counters in the text of a ``cpu.stat`` file of ``version``.

    Raises:
        ValueError: a counter is missing (the file is not a CPU controller's ``cpu.stat``).
    """
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        values[key] = value
    waited = "throttled_time" if version is CgroupVersion.V1 else "throttled_usec"
    missing = [key for key in ("nr_periods", "nr_throttled", waited) if key not in values]
    if missing:
        raise ValueError(f"cpu.stat has no {', '.join(missing)} line: {text[:200]!r}")
    scale = 1e9 if version is CgroupVersion.V1 else 1e6
    return CfsThrottling(
        periods=int(values["nr_periods"]),
        throttled_periods=int(values["nr_throttled"]),
        throttled_s=int(values[waited]) / scale,
    )


def stats_cpu_seconds(stats: Mapping[str, Any]) -> float | None:
    """The cumulative CPU-seconds in the engine's statistics of a container
    (``cpu_stats.cpu_usage.total_usage``); ``None`` where they are zero or missing, as an
    exited container reports them."""
    total = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage")
    return total / 1e9 if total else None


def stats_throttling(stats: Mapping[str, Any]) -> CfsThrottling | None:
    """The throttling counters of the engine's statistics of a container
    (``cpu_stats.throttling_data``); ``None`` where it has none."""
    data = stats.get("cpu_stats", {}).get("throttling_data")
    if not isinstance(data, Mapping) or "periods" not in data:
        return None
    return CfsThrottling(
        periods=int(data["periods"]),
        throttled_periods=int(data.get("throttled_periods", 0)),
        throttled_s=int(data.get("throttled_time", 0)) / 1e9,
    )


@dataclass(frozen=True)
class ProcessStat:
    """The ``/proc/<pid>/stat`` file of a container's main process."""

    path: Path

    def stopped(self) -> bool:
        """Whether the process is stopped by a signal (state ``T``: SIGSTOP, SIGTSTP); ``False``
        once it is gone.

        A process frozen with its cgroup (``docker pause``) is not in state ``T`` (the freezer
        leaves it sleeping); the engine lists its container as ``paused`` instead.
        """
        text = _read_unless_gone(self.path)
        if text is None:
            return False
        # "pid (command) state ...": the command may hold spaces and parentheses.
        return text[text.rindex(")") + 2 :].startswith("T")


def find_cpu_usage_file(
    container_id: str,
    pid: int | None = None,
    root: Path = DEFAULT_CGROUP_ROOT,
    proc_root: Path = DEFAULT_PROC_ROOT,
) -> CpuUsageFile | None:
    """The CPU accounting file of a running container, or ``None`` if this host has none.

    ``None`` means the engine runs elsewhere (another host, a VM such as Docker Desktop's) or
    with a cgroup tree this process cannot see; the caller then asks the engine instead.

    Args:
        container_id: the full container id.
        pid: the container's main process id as the engine reports it (``State.Pid``), used
            when the container is not where the standard drivers put it.
        root: the cgroup mount point.
        proc_root: the proc file system (tests point both at fake trees).
    """
    version = detect_cgroup_version(root)
    name = _V2_USAGE_FILE if version is CgroupVersion.V2 else _V1_USAGE_FILE
    path = _find_file(container_id, pid, root, proc_root, version, "cpuacct", name)
    return None if path is None else CpuUsageFile(path, version)


def find_cpu_limit_files(
    container_id: str,
    pid: int | None = None,
    root: Path = DEFAULT_CGROUP_ROOT,
    proc_root: Path = DEFAULT_PROC_ROOT,
) -> CpuLimitFiles | None:
    """The CFS limit files of a running container, or ``None`` if this host has none (see
    :func:`find_cpu_usage_file`, whose arguments it takes)."""
    version = detect_cgroup_version(root)
    name = _V2_LIMIT_FILE if version is CgroupVersion.V2 else _V1_QUOTA_FILE
    path = _find_file(container_id, pid, root, proc_root, version, "cpu", name)
    return None if path is None else CpuLimitFiles(path.parent, version)


def find_process_stat(
    container_id: str, pid: int | None, proc_root: Path = DEFAULT_PROC_ROOT
) -> ProcessStat | None:
    """The stat file of a container's main process, or ``None`` where ``pid`` is not that
    process here (the engine runs on another host or in another pid namespace).

    Args:
        container_id: the full container id; a process whose cgroups do not name it is another.
        pid: the container's main process id as the engine reports it (``State.Pid``).
        proc_root: the proc file system.
    """
    if pid is None or pid <= 0:
        return None
    try:
        cgroups = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    if container_id not in cgroups:
        return None
    return ProcessStat(proc_root / str(pid) / "stat")


def _read_unless_gone(path: Path) -> str | None:
    """The text of a cgroup or proc file; ``None`` once its cgroup or process is gone.

    The engine removes a container's cgroup when the container stops, so ``None`` is the normal
    answer for an exited container, not an error.
    """
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except OSError as error:
        # The kernel answers ENODEV for a cgroup being removed while it is read.
        if error.errno == errno.ENODEV:
            return None
        raise


def _v1_controller_dirs(root: Path, controller: str) -> list[Path]:
    """The v1 mount directories of ``controller`` under ``root`` (``cpu``, ``cpu,cpuacct``...)."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    return [entry for entry in entries if controller in entry.name.split(",") and entry.is_dir()]


def _find_file(
    container_id: str,
    pid: int | None,
    root: Path,
    proc_root: Path,
    version: CgroupVersion,
    controller: str,
    name: str,
) -> Path | None:
    """The file ``name`` of ``container_id``'s cgroup (in the v1 hierarchy of ``controller``):
    where the engine's cgroupfs and systemd drivers put it, else where its process is."""
    for directory in _driver_dirs(container_id, root, version, controller):
        if (directory / name).is_file():
            return directory / name
    if pid is not None and pid > 0:
        for directory in _process_dirs(container_id, pid, root, proc_root, version, controller):
            if (directory / name).is_file():
                return directory / name
    return None


def _driver_dirs(
    container_id: str, root: Path, version: CgroupVersion, controller: str
) -> Iterator[Path]:
    """Where the engine's cgroupfs and systemd drivers put ``container_id``'s cgroup."""
    bases = [root] if version is CgroupVersion.V2 else _v1_controller_dirs(root, controller)
    for base in bases:
        yield base / "docker" / container_id
        yield base / "system.slice" / f"docker-{container_id}.scope"


def _process_dirs(
    container_id: str,
    pid: int,
    root: Path,
    proc_root: Path,
    version: CgroupVersion,
    controller: str,
) -> Iterator[Path]:
    """The cgroup directories of process ``pid`` that are ``container_id``'s.

    ``/proc/<pid>/cgroup`` has one ``hierarchy:controllers:path`` line per hierarchy; the v2 line
    is ``0::path``. The path is relative to the hierarchy's mount point.
    """
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.lstrip("/")
        if container_id not in relative:
            # The engine numbers pids in its own namespace; a path without the container's id
            # means the pid named another process here, whose files would be wrong.
            continue
        if version is CgroupVersion.V2 and hierarchy == "0" and controllers == "":
            yield root / relative
        elif version is CgroupVersion.V1 and controller in controllers.split(","):
            for base in _v1_controller_dirs(root, controller):
                yield base / relative
