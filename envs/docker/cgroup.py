"""A container's cumulative CPU time, read from its cgroup files on the engine's host.

Reading a file costs microseconds where the engine's statistics endpoint costs about a second per
container, so the Docker backend reads these files whenever the engine runs on the same host (and
shares its cgroup tree with this process).

Where a container's CPU accounting lives depends on the cgroup version and on the engine's cgroup
driver:

=========  ========  ===============================================================
version    driver    file
=========  ========  ===============================================================
v1         cgroupfs  ``<root>/<cpuacct dir>/docker/<id>/cpuacct.usage`` (nanoseconds)
v1         systemd   ``<root>/<cpuacct dir>/system.slice/docker-<id>.scope/cpuacct.usage``
v2         cgroupfs  ``<root>/docker/<id>/cpu.stat`` (line ``usage_usec``)
v2         systemd   ``<root>/system.slice/docker-<id>.scope/cpu.stat``
=========  ========  ===============================================================

``<cpuacct dir>`` is ``cpuacct``, ``cpu,cpuacct`` or ``cpuacct,cpu`` depending on how the host
mounts the v1 controllers. An engine started with another ``--cgroup-parent`` puts containers
elsewhere; :func:`find_cpu_usage_file` then follows the container's main process through
``/proc/<pid>/cgroup``.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_PROC_ROOT = Path("/proc")
_V1_USAGE_FILE = "cpuacct.usage"
_V2_USAGE_FILE = "cpu.stat"


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
        try:
            text = self.path.read_text()
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
            return None
        except OSError as error:
            # The kernel answers ENODEV for a cgroup being removed while it is read.
            if error.errno == errno.ENODEV:
                return None
            raise
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


def _v1_cpuacct_dirs(root: Path) -> list[Path]:
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    return [entry for entry in entries if "cpuacct" in entry.name.split(",") and entry.is_dir()]


def candidate_paths(
    container_id: str, root: Path = DEFAULT_CGROUP_ROOT, version: CgroupVersion | None = None
) -> list[CpuUsageFile]:
    """Where the engine's cgroupfs and systemd drivers put ``container_id``'s CPU accounting.

    Args:
        container_id: the full 64-character container id.
        root: the cgroup mount point.
        version: the cgroup version; ``None`` detects it from ``root``.
    """
    version = version or detect_cgroup_version(root)
    scope = f"docker-{container_id}.scope"
    if version is CgroupVersion.V2:
        return [
            CpuUsageFile(root / "system.slice" / scope / _V2_USAGE_FILE, version),
            CpuUsageFile(root / "docker" / container_id / _V2_USAGE_FILE, version),
        ]
    files = []
    for controller in _v1_cpuacct_dirs(root):
        files.append(CpuUsageFile(controller / "docker" / container_id / _V1_USAGE_FILE, version))
        files.append(CpuUsageFile(controller / "system.slice" / scope / _V1_USAGE_FILE, version))
    return files


def file_of_process(
    container_id: str,
    pid: int,
    root: Path = DEFAULT_CGROUP_ROOT,
    proc_root: Path = DEFAULT_PROC_ROOT,
    version: CgroupVersion | None = None,
) -> CpuUsageFile | None:
    """The CPU accounting file of container ``container_id``, found through its process ``pid``.

    ``/proc/<pid>/cgroup`` has one ``hierarchy:controllers:path`` line per hierarchy; the v2 line
    is ``0::path``. The path is relative to the hierarchy's mount point.

    Args:
        container_id: the full container id; a cgroup whose path does not contain it is not
            the container's.
        pid: the process, as numbered in this process's pid namespace.
        root: the cgroup mount point.
        proc_root: the proc file system.
        version: the cgroup version; ``None`` detects it from ``root``.
    """
    version = version or detect_cgroup_version(root)
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.lstrip("/")
        if container_id not in relative:
            # The engine numbers pids in its own namespace; a path without the container's id
            # means the pid named another process here, whose CPU time would be wrong.
            continue
        if version is CgroupVersion.V2 and hierarchy == "0" and controllers == "":
            candidate = CpuUsageFile(root / relative / _V2_USAGE_FILE, version)
        elif version is CgroupVersion.V1 and "cpuacct" in controllers.split(","):
            for controller in _v1_cpuacct_dirs(root):
                candidate = CpuUsageFile(controller / relative / _V1_USAGE_FILE, version)
                if candidate.path.is_file():
                    return candidate
            continue
        else:
            continue
        if candidate.path.is_file():
            return candidate
    return None


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
    for candidate in candidate_paths(container_id, root, version):
        if candidate.path.is_file():
            return candidate
    if pid is not None and pid > 0:
        return file_of_process(container_id, pid, root, proc_root, version)
    return None
