"""Cgroup parents that give each local engine CPUs of its own, as a separate host would have.

Several Docker engines started on one machine (:mod:`dlsched.envs.docker.local_engines`) stand
for the hosts of a cluster only if each has cores of its own: otherwise a job on one engine runs
faster while the other engines idle, which no cluster of separate hosts does and no replay twin
of it models. Each such engine is started with ``--cgroup-parent /<name>``, so that its
containers' cgroups are created under ``<name>``, and this module gives ``<name>`` a set of
CPUs (``cpuset.cpus``) before the engine starts. The kernel moves a task that joins a cpuset
onto that cpuset's CPUs, so the containers run there whatever the engine's own affinity; the
engine itself is started on the same CPUs, so that it reports that many cores (``NCPU``,
which the Docker backend takes as the worker's cores).

Whole CPUs only. A CFS quota on the parent could split 2 CPUs among 3 engines (0.67 core
each), but an engine would still report the CPUs it may run on, and the backend's limits are
fractions of those: a limit would mean something else on the host than on its replay twin. So
engines beyond the host's CPUs share CPUs round-robin (:func:`assign_cpus`), and say so.

Only the directories this module created are removed again (:func:`release`), and only once
they are empty: the engine removes its containers' cgroups when the containers end.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Sequence
from pathlib import Path

from dlsched.envs.docker.cgroup import DEFAULT_CGROUP_ROOT, CgroupVersion, detect_cgroup_version
from dlsched.envs.errors import BackendError


def assign_cpus(count: int, host_cpus: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The CPUs of each of ``count`` engines on a host with ``host_cpus``.

    Each engine gets ``len(host_cpus) // count`` CPUs of its own (at least one); with more
    engines than CPUs, engine ``i`` gets CPU ``i mod len(host_cpus)``, so some share one.

    Raises:
        BackendError: ``count`` below 1, or no CPU to run on.
    """
    if count < 1:
        raise BackendError(f"engine count {count!r} must be at least 1")
    cpus = sorted(host_cpus)
    if not cpus:
        raise BackendError("this process may run on no CPU (empty affinity); cannot place engines")
    each = max(len(cpus) // count, 1)
    if count * each <= len(cpus):
        return tuple(tuple(cpus[i * each : (i + 1) * each]) for i in range(count))
    return tuple((cpus[i % len(cpus)],) for i in range(count))


def cpu_list(cpus: Sequence[int]) -> str:
    """``cpus`` as the kernel writes a CPU list (``"0"``, ``"0,1"``)."""
    return ",".join(map(str, cpus))


def confine(name: str, cpus: Sequence[int], root: Path = DEFAULT_CGROUP_ROOT) -> list[Path]:
    """Create the cgroup parent ``name`` on ``cpus``; the directories made.

    Args:
        name: the parent's name, as the engine's ``--cgroup-parent /<name>`` gives it.
        cpus: the CPUs its tasks may run on.
        root: where the host mounts its cgroup tree.

    Raises:
        BackendError: the parent exists already, or the cgroup tree cannot be written (not
            root, or no cpuset controller).
    """
    try:
        if detect_cgroup_version(root) is CgroupVersion.V2:
            return _confine_v2(root, name, cpu_list(cpus))
        return _confine_v1(root, name, cpu_list(cpus))
    except OSError as error:
        raise BackendError(
            f"cannot confine engine cgroup {name!r} to CPUs {cpu_list(cpus)} under {root}: "
            f"{error}; starting engines needs root and a writable cgroup tree"
        ) from error


def release(directories: Sequence[Path | str]) -> list[Path]:
    """Remove cgroup directories :func:`confine` made (and empty ones the engine made below
    them); the ones left because something still runs in them."""
    left = []
    for directory in map(Path, directories):
        for path in sorted(_tree(directory), key=lambda p: len(p.parts), reverse=True):
            try:
                path.rmdir()
            except FileNotFoundError:
                continue
            except OSError as error:
                if error.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise
                left.append(path)
    return left


def _tree(directory: Path) -> Iterator[Path]:
    if not directory.is_dir():
        return
    for child in directory.iterdir():
        if child.is_dir():
            yield from _tree(child)
    yield directory


def _confine_v1(root: Path, name: str, cpus: str) -> list[Path]:
    cpuset = root / "cpuset"
    if not (cpuset / "cpuset.cpus").is_file():
        raise BackendError(f"no cgroup v1 cpuset controller at {cpuset}")
    parent = _make(cpuset / name)
    # a v1 cpuset takes no task before it has memory nodes
    (parent / "cpuset.mems").write_text((cpuset / "cpuset.mems").read_text().strip())
    (parent / "cpuset.cpus").write_text(cpus)
    return [parent]


def _confine_v2(root: Path, name: str, cpus: str) -> list[Path]:
    if "cpuset" not in (root / "cgroup.controllers").read_text().split():
        raise BackendError(f"the cgroup v2 tree at {root} has no cpuset controller")
    if "cpuset" not in (root / "cgroup.subtree_control").read_text().split():
        (root / "cgroup.subtree_control").write_text("+cpuset")
    parent = _make(root / name)
    (parent / "cpuset.cpus").write_text(cpus)
    return [parent]


def _make(path: Path) -> Path:
    if path.exists():
        raise BackendError(
            f"cgroup {path} exists already: another engine of that name runs, or a stopped one "
            "left it; stop that engine (`dlsched docker engines down`) or remove the empty "
            f"directory (`rmdir {path}`)"
        )
    path.mkdir()
    return path
