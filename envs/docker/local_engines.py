"""Extra Docker engines on this machine, standing for the hosts of a cluster.

``dlsched docker engines up --count N`` starts N engines (``engine-1`` ... ``engine-N``) beside
the machine's own, and ``down`` stops them; the test suite starts two once per session. Each
engine has everything of its own, so it never meets the machine's engine or another's:

- a socket, ``unix:///run/dlsched/engines/engine-<i>/docker.sock`` (:func:`endpoint`, what a
  scenario's ``workers[i].endpoint`` names), an exec root, a pid file, a log and a config file
  (an empty one, so that ``/etc/docker/daemon.json`` cannot give two engines the same socket),
  all in its run folder ``/run/dlsched/engines/engine-<i>/``;
- a data root, ``/var/lib/dlsched/engines/engine-<i>/``, kept when it stops, so that the
  workload image loaded once stays there for the next start (``down --purge`` removes it);
- no network: ``--bridge none --iptables=false --ip-masq=false``, so it adds no bridge, no
  iptables rule and no NAT beside the machine's engine (the workloads need no network; its
  containers run with ``network_mode="none"``);
- CPUs of its own (:mod:`dlsched.envs.docker.confinement`): its containers run under the cgroup
  parent ``/dlsched-engine-<i>`` confined to them, and the engine itself runs on them, so it
  reports them as its cores (``NCPU``).

The workload image is copied from the machine's engine (``docker save | docker load``, streamed)
or, where that has none, built offline into the engine.

What ``up`` started it records in the engine's run folder (``engine.json``: its pid and the
cgroup directories it made); ``down`` stops only a pid recorded there that is still that
engine's ``dockerd``, removes what it recorded, and nothing else. Stopping an engine stops the
containers on it, as stopping a host would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from dlsched.envs.docker.cgroup import DEFAULT_CGROUP_ROOT
from dlsched.envs.docker.confinement import assign_cpus, confine, cpu_list, release
from dlsched.envs.docker.engine import connect
from dlsched.envs.errors import BackendError, DockerUnavailableError

#: Where the engines' sockets, exec roots, pid files and logs live (a tmpfs: gone at reboot).
RUN_ROOT = Path("/run/dlsched/engines")
#: Where their data roots live (images and containers), kept across a stop.
DATA_ROOT = Path("/var/lib/dlsched/engines")
_RECORD = "engine.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class LocalEngine:
    """Where one local engine keeps its things.

    Attributes:
        name: ``engine-<i>``.
        run_dir: its socket, exec root, pid file, log and record.
        data_root: its images and containers.
    """

    name: str
    run_dir: Path
    data_root: Path

    @property
    def socket(self) -> Path:
        """The engine's API socket."""
        return self.run_dir / "docker.sock"

    @property
    def endpoint(self) -> str:
        """The engine's URL, as a scenario's worker names it."""
        return f"unix://{self.socket}"

    @property
    def cgroup_parent(self) -> str:
        """The cgroup parent its containers run under (without the leading ``/``)."""
        return f"dlsched-{self.name}"

    @property
    def log(self) -> Path:
        """The engine's own output."""
        return self.run_dir / "dockerd.log"


def local_engine(index: int, run_root: Path = RUN_ROOT, data_root: Path = DATA_ROOT) -> LocalEngine:
    """Local engine number ``index`` (from 1)."""
    if index < 1:
        raise BackendError(f"engine index {index!r}: engines are numbered from 1")
    name = f"engine-{index}"
    return LocalEngine(name, run_root / name, data_root / name)


def endpoint(index: int, run_root: Path = RUN_ROOT) -> str:
    """The endpoint of local engine number ``index``: ``unix:///run/dlsched/engines/...``."""
    return local_engine(index, run_root).endpoint


@dataclass(frozen=True)
class EngineStart:
    """What starting one engine did and cost.

    Attributes:
        engine: the engine.
        pid: its ``dockerd``.
        cpus: the CPUs it and its containers run on.
        reused: it was running already; nothing was started.
        start_s: seconds from starting ``dockerd`` to its first answer.
        image_s: seconds spent putting the workload image on it.
        image: how the image got there: ``present``, ``loaded`` (from the machine's engine) or
            ``built`` (offline).
    """

    engine: LocalEngine
    pid: int
    cpus: tuple[int, ...]
    reused: bool
    start_s: float
    image_s: float
    image: str


@dataclass(frozen=True)
class EngineStop:
    """What stopping one engine did.

    Attributes:
        engine: the engine.
        pid: the ``dockerd`` stopped (``None``: it was not running).
        containers: containers that were on it (stopped with it).
        left: cgroup directories left because something still ran in them.
    """

    engine: LocalEngine
    pid: int | None
    containers: int
    left: tuple[Path, ...]


def up(
    count: int,
    image: bool = True,
    source: str | None = None,
    run_root: Path = RUN_ROOT,
    data_root: Path = DATA_ROOT,
    cgroup_root: Path = DEFAULT_CGROUP_ROOT,
    wait_s: float = 60.0,
    report: Callable[[str], None] | None = None,
) -> list[EngineStart]:
    """Start local engines ``engine-1`` ... ``engine-<count>`` (those not running already).

    Args:
        count: how many engines.
        image: put the workload image on each engine that lacks it.
        source: the engine to copy the image from (``None``: the machine's, as ``DOCKER_HOST``
            or the local socket says); without the image there, it is built offline.
        run_root: where the engines' run folders go.
        data_root: where their data roots go.
        cgroup_root: where the host mounts its cgroup tree.
        wait_s: how long an engine may take to answer.
        report: called with a line for each engine started or reused.

    Raises:
        BackendError: ``dockerd`` is not installed, an engine exited or did not answer within
            ``wait_s`` (its log's end is in the message), or its cgroup could not be made.
    """
    if shutil.which("dockerd") is None:
        raise BackendError(
            "no dockerd on PATH; install a Docker engine (`apt-get install docker.io`) to start "
            "local engines"
        )
    cpus = assign_cpus(count, sorted(os.sched_getaffinity(0)))
    started = []
    for index, engine_cpus in enumerate(cpus, start=1):
        engine = local_engine(index, run_root, data_root)
        start = _start(engine, engine_cpus, cgroup_root, wait_s)
        if image:
            start = _with_image(start, source)
        started.append(start)
        if report is not None:
            report(describe_start(start, len(cpus) > len(os.sched_getaffinity(0))))
    return started


def describe_start(start: EngineStart, shared: bool = False) -> str:
    """One line on an engine started (or reused): where, on which CPUs, what it took."""
    what = "running already" if start.reused else f"started in {start.start_s:.1f} s"
    line = (
        f"{start.engine.name}: {start.engine.endpoint} (pid {start.pid}, CPUs "
        f"{cpu_list(start.cpus)}), {what}; image {start.image}"
    )
    if start.image != "present":
        line += f" in {start.image_s:.1f} s"
    if shared:
        line += " (more engines than CPUs: some share a CPU, unlike separate hosts)"
    return line


def down(
    count: int | None = None,
    purge: bool = False,
    run_root: Path = RUN_ROOT,
    data_root: Path = DATA_ROOT,
    wait_s: float = 60.0,
) -> list[EngineStop]:
    """Stop local engines started by :func:`up` and remove what it made for them.

    Args:
        count: stop engines 1..``count``; ``None`` stops every engine with a run folder
            under ``run_root``.
        purge: also remove their data roots (the image loaded into them goes too).
        run_root: where the engines' run folders are.
        data_root: where their data roots are.
        wait_s: how long an engine may take to stop its containers and exit before it is
            killed.
    """
    if count is None:
        names = sorted(path.name for path in run_root.glob("engine-*") if path.is_dir())
        indexes = [int(name.removeprefix("engine-")) for name in names if name[7:].isdigit()]
    else:
        indexes = list(range(1, count + 1))
    stopped = []
    for index in indexes:
        stopped.append(stop(local_engine(index, run_root, data_root), purge, wait_s))
    return stopped


def stop(engine: LocalEngine, purge: bool = False, wait_s: float = 60.0) -> EngineStop:
    """Stop one local engine (if :func:`up` started it) and remove its run folder and cgroup.

    Raises:
        BackendError: it did not exit within ``wait_s`` after SIGTERM, nor after SIGKILL.
    """
    record = _read_record(engine)
    pid: int | None = record.pid if record else None
    containers = 0
    if pid is not None and _is_our_dockerd(pid, engine):
        containers = _container_count(engine)
        _terminate(pid, wait_s, engine)
    else:
        pid = None
    left = tuple(release(record.cgroups)) if record else ()
    if engine.run_dir.is_dir():
        shutil.rmtree(engine.run_dir, ignore_errors=True)
    if purge and engine.data_root.is_dir():
        shutil.rmtree(engine.data_root)
    return EngineStop(engine, pid, containers, left)


# ---------------------------------------------------------------------- starting


def _start(
    engine: LocalEngine, cpus: tuple[int, ...], cgroup_root: Path, wait_s: float
) -> EngineStart:
    record = _read_record(engine)
    if record and _is_our_dockerd(record.pid, engine) and _answers(engine):
        return EngineStart(engine, record.pid, record.cpus, True, 0.0, 0.0, "present")
    if record:
        stop(engine, wait_s=wait_s)  # a stale or half-dead start of ours: clear it first
    engine.run_dir.mkdir(parents=True, exist_ok=True)
    engine.data_root.mkdir(parents=True, exist_ok=True)
    # The engine's runtime makes the parent in every hierarchy (cpu, memory, ...) besides the
    # cpuset made here: all are released at the stop, empty ones only. An empty leftover of a
    # killed run of ours is removed now; a busy one makes confine() refuse.
    cgroups = [cgroup_root / name / engine.cgroup_parent for name in _hierarchies(cgroup_root)]
    release(cgroups)
    confine(engine.cgroup_parent, cpus, cgroup_root)
    config = engine.run_dir / "daemon.json"
    config.write_text("{}\n")
    command = [
        "dockerd",
        "--host", engine.endpoint,
        "--data-root", str(engine.data_root),
        "--exec-root", str(engine.run_dir / "exec"),
        "--pidfile", str(engine.run_dir / "docker.pid"),
        "--config-file", str(config),
        "--bridge", "none",
        "--iptables=false",
        "--ip-masq=false",
        "--cgroup-parent", f"/{engine.cgroup_parent}",
    ]  # fmt: skip
    began = time.monotonic()
    with engine.log.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C meant for the caller does not stop the engine
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )
    _write_record(engine, _Record(process.pid, cpus, tuple(cgroups)))
    while not _answers(engine):
        if process.poll() is not None:
            stop(engine)
            raise BackendError(
                f"dockerd of {engine.name} exited with code {process.returncode} before "
                f"answering at {engine.endpoint}; the end of its log:\n{_log_tail(engine)}"
            )
        if time.monotonic() - began > wait_s:
            stop(engine)
            raise BackendError(
                f"dockerd of {engine.name} did not answer at {engine.endpoint} within {wait_s:g} "
                f"s; the end of its log:\n{_log_tail(engine)}"
            )
        time.sleep(0.1)
    return EngineStart(engine, process.pid, cpus, False, time.monotonic() - began, 0.0, "present")


def _with_image(start: EngineStart, source: str | None) -> EngineStart:
    """``start`` after putting the workload image on its engine (if it lacks it)."""
    from dataclasses import replace

    from dlsched.envs.docker.image import IMAGE_TAG, build_image, image_present

    began = time.monotonic()
    target = connect(start.engine.endpoint, timeout_s=600.0)
    try:
        if image_present(target):
            return start
        how = "built"
        try:
            origin = connect(source, timeout_s=600.0)
        except DockerUnavailableError:
            origin = None
        if origin is not None:
            try:
                if image_present(origin):
                    # streamed chunk by chunk: the 800 MB archive is never held in memory
                    target.api.load_image(origin.api.get_image(IMAGE_TAG, chunk_size=_CHUNK))
                    how = "loaded"
            finally:
                origin.close()
        if how == "built":
            build_image(target, offline=True)
        if not image_present(target):
            raise BackendError(
                f"the workload image {IMAGE_TAG!r} did not arrive on {start.engine.name} "
                f"({start.engine.endpoint}); see its log {start.engine.log}"
            )
    finally:
        target.close()
    return replace(start, image_s=time.monotonic() - began, image=how)


# ---------------------------------------------------------------------- bookkeeping


def _hierarchies(cgroup_root: Path) -> list[str]:
    """The cgroup hierarchies a parent has a directory in ("" for v2's single one)."""
    from dlsched.envs.docker.cgroup import CgroupVersion, detect_cgroup_version

    if detect_cgroup_version(cgroup_root) is CgroupVersion.V2:
        return [""]
    return sorted(path.name for path in cgroup_root.iterdir() if path.is_dir())


@dataclass(frozen=True)
class _Record:
    """What :func:`up` started for an engine, so that :func:`stop` removes that and no more."""

    pid: int
    cpus: tuple[int, ...]
    cgroups: tuple[Path, ...]


def _read_record(engine: LocalEngine) -> _Record | None:
    try:
        data = json.loads((engine.run_dir / _RECORD).read_text())
        return _Record(
            int(data["pid"]),
            tuple(int(cpu) for cpu in data.get("cpus", ())),
            tuple(Path(path) for path in data.get("cgroups", ())),
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # not ours, or torn: nothing is stopped on its word


def _write_record(engine: LocalEngine, record: _Record) -> None:
    data = {
        "pid": record.pid,
        "cpus": list(record.cpus),
        "cgroups": [str(path) for path in record.cgroups],
    }
    (engine.run_dir / _RECORD).write_text(json.dumps(data) + "\n")


def _is_our_dockerd(pid: int, engine: LocalEngine) -> bool:
    """Whether ``pid`` is still the ``dockerd`` started for ``engine`` (not a reused pid)."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        bool(arguments)
        and os.path.basename(arguments[0]) == b"dockerd"
        and str(engine.run_dir / "docker.pid").encode() in arguments
    )


def _answers(engine: LocalEngine) -> bool:
    if not engine.socket.exists():
        return False
    try:
        client = docker.DockerClient(base_url=engine.endpoint, timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except (docker.errors.DockerException, OSError):
        return False
    return True


def _container_count(engine: LocalEngine) -> int:
    try:
        client = docker.DockerClient(base_url=engine.endpoint, timeout=10)
        try:
            return len(client.api.containers(all=True))
        finally:
            client.close()
    except (docker.errors.DockerException, OSError):
        return 0


def _terminate(pid: int, wait_s: float, engine: LocalEngine) -> None:
    os.kill(pid, signal.SIGTERM)  # the engine stops its containers, then exits
    if _exited(pid, wait_s):
        return
    os.kill(pid, signal.SIGKILL)
    if not _exited(pid, 10.0):
        raise BackendError(
            f"dockerd of {engine.name} (pid {pid}) did not exit after SIGTERM and SIGKILL; "
            f"see {engine.log}"
        )


def _exited(pid: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it
            if finished:
                return True
        except ChildProcessError:
            if not Path(f"/proc/{pid}").exists() or _zombie(pid):
                return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _log_tail(engine: LocalEngine, lines: int = 20) -> str:
    try:
        return "\n".join(engine.log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def endpoints(count: int, run_root: Path = RUN_ROOT) -> Sequence[str]:
    """The endpoints of local engines 1..``count``."""
    return [endpoint(index, run_root) for index in range(1, count + 1)]
