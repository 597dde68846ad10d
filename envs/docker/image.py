"""The workload image: its tag, whether an engine has it, and building it.

The Docker backend runs every job in one image, tagged :data:`IMAGE_TAG`, whose command
``python -m dlsched_workloads <workload> ...`` is described in :mod:`dlsched.envs.workloads`.
Its version ends with a hash of the workload sources, so editing a workload asks for a rebuild.

Two ways to build it:

- **offline** (the default; for hosts without an image registry, like CI here): a root
  filesystem is assembled from the local Python installation (the interpreter, its standard
  library, numpy, torch and the distributions torch requires), the shared libraries all of that
  links against (found with ``ldd``), the dynamic loader, a minimal ``/etc`` and the workload
  package, and streamed as a tar to the engine's import endpoint (``docker import``). Files
  keep their absolute host paths, so the interpreter finds its prefix without relocation (which
  may be under a home directory such as ``/root/.pyenv``); every file is root's, readable (and,
  if executable on the host, executable) by anyone and writable by nobody else, and every
  directory on the way open to anyone, so that the workload user (not root) reads all it needs
  and changes nothing;
- **dockerfile**: ``envs/workloads/Dockerfile`` (``FROM python:3.11-slim``, torch and numpy from
  the registry) for hosts that can pull.

Either way the image runs as the workload user
(:data:`~dlsched.envs.docker.sandbox.WORKLOAD_USER`: ``dlsched``, not root, with no home of its
own: ``HOME`` is ``/tmp``, which the Docker backend mounts as a tmpfs) and has
:data:`~dlsched.envs.docker.sandbox.STATE_DIR`, that user's, where a training job keeps the
checkpoint a migration carries over. An image already present under :data:`IMAGE_TAG` is
reused unless a rebuild is forced.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import requests
from packaging.requirements import Requirement

from dlsched.envs.docker.sandbox import STATE_DIR, WORKLOAD_UID, WORKLOAD_USER
from dlsched.envs.errors import BackendError

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"
DOCKERFILE = WORKLOADS_DIR / "Dockerfile"

IMAGE_REPOSITORY = "dlsched-workloads"
#: Label every image and container dlsched owns carries; nothing without it is touched.
MANAGED_LABEL = "dlsched.managed"
#: On the image only. Never MANAGED_LABEL: containers inherit their image's labels, and one a
#: user starts from this image must not look like a container dlsched started.
IMAGE_LABEL = "dlsched.image"
#: Where the workload package lives in the image (on ``PYTHONPATH`` as ``dlsched_workloads``).
IMAGE_PACKAGE_ROOT = "/opt/dlsched"
IMAGE_PACKAGE_NAME = "dlsched_workloads"
#: Distributions the workloads import; their requirements are added to the offline image.
WORKLOAD_DISTRIBUTIONS = ("torch", "numpy")
#: Thread counts the image starts with; each workload then follows its CPU quota.
IMAGE_THREAD_DEFAULTS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Parts of the installation the workloads never load: headers, static libraries, test suites,
# torch's test binaries and its C++ build tree, the interpreter's build configuration and GUI.
# (torch/bin/torch_shm_manager stays: importing torch checks that it exists.)
_EXCLUDED_DIR_NAMES = frozenset({"tests", "__phello__"})
_EXCLUDED_SITE_PREFIXES = ("torch/include/", "torch/share/", "torch/test/")
_EXCLUDED_SITE_PATTERNS = ("torch/bin/*test*", "torch/bin/*Test", "torch/bin/protoc*")
_EXCLUDED_STDLIB_DIRS = frozenset(
    {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
)
_EXCLUDED_SUFFIXES = (".a", ".h", ".hpp", ".cuh", ".pyi")
_EXCLUDED_SHARED_OBJECTS = frozenset(
    {
        "libaoti_custom_ops.so",
        "libbackend_with_compiler.so",
        "libjitbackend_test.so",
        "libtorchbind_test.so",
    }
)


def _workload_source_files() -> list[Path]:
    """The files that make up the workload package in the image, sorted."""
    return sorted(
        path
        for path in WORKLOADS_DIR.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in _workload_source_files():
        digest.update(path.relative_to(WORKLOADS_DIR).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


#: The image version: the release of the image layout, then a hash of the workload sources.
IMAGE_VERSION = f"0.2.0-{_source_hash()}"
IMAGE_TAG = f"{IMAGE_REPOSITORY}:{IMAGE_VERSION}"


def build_hint() -> str:
    """The command that builds the workload image (for error messages)."""
    return "dlsched image build --offline"


def image_present(client: docker.DockerClient) -> bool:
    """Whether the engine of ``client`` has :data:`IMAGE_TAG`."""
    try:
        client.images.get(IMAGE_TAG)
    except docker.errors.ImageNotFound:
        return False
    return True


class BuildMethod(StrEnum):
    """How the image was obtained."""

    OFFLINE = "offline"
    DOCKERFILE = "dockerfile"
    REUSED = "reused"


@dataclass(frozen=True)
class ImageBuild:
    """The outcome of :func:`build_image`.

    Attributes:
        tag: the image's tag (:data:`IMAGE_TAG`).
        image_id: the engine's id of the image.
        size_bytes: the image's size on the engine.
        seconds: wall time the build took (0 when reused).
        method: offline, dockerfile, or reused.
        missing_libraries: shared libraries ``ldd`` could not resolve on this host (offline
            builds); empty when the image is complete.
    """

    tag: str
    image_id: str
    size_bytes: int
    seconds: float
    method: BuildMethod
    missing_libraries: tuple[str, ...] = ()


#: Receives progress: a phase name, the units done so far and the total (``None`` if unknown).
ProgressCallback = Callable[[str, int, int | None], None]


def build_image(
    client: docker.DockerClient,
    offline: bool = True,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> ImageBuild:
    """Make sure the engine of ``client`` has the workload image; build it if needed.

    Args:
        client: the engine to build on (see :func:`~dlsched.envs.docker.engine.connect`).
        offline: assemble the image from the local Python (``True``) or build the Dockerfile,
            which pulls ``python:3.11-slim`` and torch from the registries (``False``).
        force: rebuild even if :data:`IMAGE_TAG` is present.
        progress: called as the build advances (files collected, bytes sent, build steps).

    Raises:
        BackendError: the engine refused the image or the build failed.
    """
    if not force and image_present(client):
        image = client.images.get(IMAGE_TAG)
        return ImageBuild(IMAGE_TAG, image.id, int(image.attrs["Size"]), 0.0, BuildMethod.REUSED)
    report = progress or _no_progress
    started = time.monotonic()
    previous = _current_image_id(client)
    missing: tuple[str, ...] = ()
    if offline:
        rootfs = collect_rootfs(report)
        missing = rootfs.missing_libraries
        _import_rootfs(client, rootfs, report)
        method = BuildMethod.OFFLINE
    else:
        _build_dockerfile(client, report)
        method = BuildMethod.DOCKERFILE
    image = client.images.get(IMAGE_TAG)
    if previous is not None and previous != image.id:
        _remove_replaced(client, previous)
    return ImageBuild(
        IMAGE_TAG,
        image.id,
        int(image.attrs["Size"]),
        time.monotonic() - started,
        method,
        missing,
    )


def _no_progress(phase: str, done: int, total: int | None) -> None:
    """A progress callback that reports nothing."""


def _current_image_id(client: docker.DockerClient) -> str | None:
    try:
        return str(client.images.get(IMAGE_TAG).id)
    except docker.errors.ImageNotFound:
        return None


def _remove_replaced(client: docker.DockerClient, image_id: str) -> None:
    # A forced rebuild leaves the old image untagged; remove it unless a container still uses it.
    try:
        client.images.remove(image_id)
    except docker.errors.APIError:
        return


def image_changes() -> list[str]:
    """The Dockerfile instructions applied to the imported root filesystem."""
    prefix = Path(os.path.realpath(sys.base_prefix))
    env = {
        "PATH": f"{prefix / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": IMAGE_PACKAGE_ROOT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "HOME": "/tmp",
        **IMAGE_THREAD_DEFAULTS,
    }
    return [
        *(f"ENV {key}={value}" for key, value in env.items()),
        f"USER {WORKLOAD_USER}",
        f"LABEL {IMAGE_LABEL}=1",
        f"LABEL dlsched.image.version={IMAGE_VERSION}",
        f"WORKDIR {IMAGE_PACKAGE_ROOT}",
        'CMD ["python", "-m", "dlsched_workloads", "--help"]',
    ]


# --- offline root filesystem ---


@dataclass(frozen=True)
class FileEntry:
    """A regular file of the image, copied from ``source`` on the host."""

    source: Path
    size: int
    mode: int
    mtime: int


@dataclass(frozen=True)
class InlineFileEntry:
    """A regular file of the image whose content is generated (``/etc`` basics)."""

    content: bytes
    mode: int = 0o644

    @property
    def size(self) -> int:
        return len(self.content)


@dataclass(frozen=True)
class DirectoryEntry:
    """A directory of the image, root's unless ``owner`` (uid and gid) says otherwise."""

    mode: int = 0o755
    owner: int = 0


@dataclass(frozen=True)
class SymlinkEntry:
    """A symbolic link of the image, pointing at ``target`` as written on the host."""

    target: str


RootfsEntry = FileEntry | InlineFileEntry | DirectoryEntry | SymlinkEntry


@dataclass(frozen=True)
class Rootfs:
    """The files of an offline image, by absolute path inside it.

    Attributes:
        entries: every file, directory and link, by its absolute path in the image.
        missing_libraries: sonames ``ldd`` reported as not found.
    """

    entries: dict[Path, RootfsEntry]
    missing_libraries: tuple[str, ...] = ()

    def tar_size_estimate(self) -> int:
        """About how many bytes the tar stream has (headers and padding included)."""
        blocks = 2  # the end-of-archive marker
        for path, entry in self.entries.items():
            # A name longer than the header's 100 bytes takes a PAX header and its data block.
            blocks += 1 + (2 if len(str(path)) > 100 else 0)
            if isinstance(entry, FileEntry | InlineFileEntry):
                blocks += -(-entry.size // 512)
        return 512 * blocks


class _RootfsCollector:
    """Gathers :class:`Rootfs` entries, adding the directories above each path."""

    def __init__(self) -> None:
        self.entries: dict[Path, RootfsEntry] = {}
        self.sources: set[Path] = set()
        self._followed: set[Path] = set()

    def add_file(self, destination: Path, source: Path) -> None:
        """Store the host file ``source`` (links resolved) at ``destination`` in the image,
        readable by the workload user (:func:`image_file_mode`)."""
        real = Path(os.path.realpath(source))
        stat = real.stat()
        self._add_parents(destination)
        # Whole seconds: a fractional mtime costs a PAX header per file, and compiled caches
        # compare only the whole seconds of their source's mtime.
        self.entries[destination] = FileEntry(
            real, stat.st_size, image_file_mode(stat.st_mode), int(stat.st_mtime)
        )
        self.sources.add(real)

    def add_inline_file(self, destination: Path, content: str) -> None:
        """Store a generated text file at ``destination``."""
        self._add_parents(destination)
        self.entries[destination] = InlineFileEntry(content.encode())

    def add_directory(self, destination: Path, mode: int = 0o755, owner: int = 0) -> None:
        """Create the directory ``destination`` (and its parents) in the image."""
        self._add_parents(destination)
        self.entries[destination] = DirectoryEntry(mode, owner)

    def add_symlink(self, destination: Path, target: str) -> None:
        """Create a link at ``destination`` pointing at ``target``."""
        self._add_parents(destination)
        self.entries[destination] = SymlinkEntry(target)

    def add_host_path(self, path: Path) -> None:
        """Store the host file ``path`` at the same path, with every link on the way.

        Links stay links (``/lib`` -> ``usr/lib``, ``libz.so.1`` -> ``libz.so.1.2.13``); the
        file they end at is stored under its real path, so names resolve as on the host.
        """
        if path in self._followed:
            return
        self._followed.add(path)
        resolved = Path("/")
        for part in path.parts[1:]:
            candidate = resolved / part
            if candidate.is_symlink():
                target = os.readlink(candidate)
                self.add_symlink(candidate, target)
                self.add_host_path(Path(os.path.normpath(resolved / target)))
                resolved = Path(os.path.realpath(candidate))
            else:
                resolved = candidate
        if resolved.is_file():
            self.add_file(resolved, resolved)

    def _add_parents(self, destination: Path) -> None:
        for parent in reversed(destination.parents):
            if parent != Path("/") and parent not in self.entries:
                self.entries[parent] = DirectoryEntry()


def collect_rootfs(progress: ProgressCallback | None = None) -> Rootfs:
    """The root filesystem of the offline image, from this host's Python installation.

    Args:
        progress: called with the entries collected so far.

    Raises:
        BackendError: ``ldd`` or a required distribution is missing.
    """
    report = progress or _no_progress
    collector = _RootfsCollector()
    prefix = Path(os.path.realpath(sys.base_prefix))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = prefix / "lib" / version

    interpreter = prefix / "bin" / version
    collector.add_file(interpreter, interpreter)
    for alias in ("python3", "python"):
        collector.add_symlink(prefix / "bin" / alias, version)
    collector.add_symlink(Path("/usr/local/bin/python"), str(interpreter))
    elf_files = [interpreter]

    for source in _stdlib_files(stdlib):
        collector.add_file(source, source)
        if _is_elf(source):
            elf_files.append(source)
    report("collect", len(collector.entries), None)

    # Distributions may live in a virtual environment; the image has them in the base prefix.
    for source, relative in _distribution_files(WORKLOAD_DISTRIBUTIONS):
        collector.add_file(stdlib / "site-packages" / relative, source)
        if _is_elf(source):
            elf_files.append(source)
    report("collect", len(collector.entries), None)

    for source in _workload_source_files():
        if source != DOCKERFILE:
            relative = source.relative_to(WORKLOADS_DIR)
            collector.add_file(Path(IMAGE_PACKAGE_ROOT) / IMAGE_PACKAGE_NAME / relative, source)

    libraries, missing = _linked_libraries(elf_files)
    for library in sorted(libraries):
        # Libraries bundled in a distribution (torch/lib, numpy.libs) are already collected.
        if Path(os.path.realpath(library)) not in collector.sources:
            collector.add_host_path(library)
    for name, text in _ETC_BASICS.items():
        collector.add_inline_file(Path("/etc") / name, text)
    collector.add_directory(Path("/tmp"), 0o1777)
    collector.add_directory(Path(STATE_DIR), 0o755, WORKLOAD_UID)
    for mount_point in ("/proc", "/sys", "/dev"):
        collector.add_directory(Path(mount_point))
    report("collect", len(collector.entries), len(collector.entries))
    return Rootfs(collector.entries, tuple(sorted(missing)))


# Root, the workload user and nobody, name resolution from files: what a Python program may look
# up (torch names its cache folder after the user, and fails if the uid has no name).
_ETC_BASICS = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"dlsched:x:{WORKLOAD_UID}:{WORKLOAD_UID}:dlsched workloads:/tmp:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\ndlsched:x:{WORKLOAD_UID}:\nnogroup:x:65534:\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
}


def image_file_mode(host_mode: int) -> int:
    """The mode of a host file in the image: readable by anyone, executable by anyone where it is
    by someone on the host, writable by its owner (root) alone, no set-id bits.

    The host may hold the installation with modes meant for its one user (``0600`` files,
    ``0700`` directories under ``/root``); the image runs the workloads as another user, who
    must read everything and change nothing.
    """
    executable = 0o111 if host_mode & 0o111 else 0
    return (host_mode & 0o755) | 0o444 | executable


def _is_elf(path: Path) -> bool:
    """Whether ``path`` is a shared object or an executable binary (ldd needs to see it)."""
    if ".so" not in path.suffixes and not os.access(path, os.X_OK):
        return False
    with open(path, "rb") as head:
        return head.read(4) == b"\x7fELF"


def _stdlib_files(stdlib: Path) -> Iterator[Path]:
    """The standard library files the image keeps (compiled caches included)."""
    for directory, subdirectories, files in os.walk(stdlib):
        here = Path(directory)
        subdirectories[:] = sorted(
            name
            for name in subdirectories
            if not (here == stdlib and name in _EXCLUDED_STDLIB_DIRS)
            and not name.startswith("config-")
            and name not in _EXCLUDED_DIR_NAMES
        )
        for name in sorted(files):
            # _tkinter would pull in X11 and Tcl/Tk through ldd; tkinter itself is left out.
            if not name.endswith(_EXCLUDED_SUFFIXES) and not name.startswith("_tkinter"):
                yield here / name


def _distribution_files(names: Iterable[str]) -> Iterator[tuple[Path, Path]]:
    """``(host file, path relative to site-packages)`` of the distributions and their requires.

    Files come from each distribution's RECORD plus the compiled cache of each module; scripts
    installed outside site-packages and the excluded parts are left out.
    """
    for distribution in _required_distributions(names):
        for record in distribution.files or ():
            relative = Path(str(record))
            if relative.parts[0] == ".." or _excluded_from_site(relative):
                continue
            source = Path(str(distribution.locate_file(record)))
            if not source.is_file():
                continue
            yield source, relative
            if source.suffix == ".py":
                cached = Path(importlib.util.cache_from_source(str(source)))
                if cached.is_file():
                    yield cached, relative.parent / "__pycache__" / cached.name


def _excluded_from_site(relative: Path) -> bool:
    text = relative.as_posix()
    return (
        text.startswith(_EXCLUDED_SITE_PREFIXES)
        or any(fnmatch.fnmatch(text, pattern) for pattern in _EXCLUDED_SITE_PATTERNS)
        or text.endswith(_EXCLUDED_SUFFIXES)
        or relative.name in _EXCLUDED_SHARED_OBJECTS
        or any(part in _EXCLUDED_DIR_NAMES for part in relative.parts[:-1])
    )


def _required_distributions(names: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The named distributions and, transitively, what they require (extras not included)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = list(names)
    while pending:
        name = pending.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as error:
            raise BackendError(
                f"the offline image needs the Python distribution {name!r}, which is not "
                f"installed in {sys.prefix}: pip install {name}"
            ) from error
        found[key] = distribution
        for text in distribution.requires or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return [found[key] for key in sorted(found)]


def _linked_libraries(elf_files: list[Path]) -> tuple[set[Path], set[str]]:
    """Libraries ``ldd`` resolves for ``elf_files`` (loader included), and the sonames it cannot."""
    ldd = shutil.which("ldd")
    if ldd is None:
        raise BackendError(
            "the offline image build needs 'ldd' to find shared libraries, and it is not on "
            "PATH: install it (Debian/Ubuntu: apt-get install libc-bin)"
        )
    libraries: set[Path] = set()
    missing: set[str] = set()
    # ldd takes many files per call; a few calls instead of hundreds keep the build quick.
    for start in range(0, len(elf_files), 64):
        group = [str(path) for path in elf_files[start : start + 64]]
        output = subprocess.run([ldd, *group], capture_output=True, text=True, check=False)
        for line in output.stdout.splitlines():
            resolved, unresolved = parse_ldd_line(line)
            if resolved is not None:
                libraries.add(resolved)
            if unresolved is not None:
                missing.add(unresolved)
    return libraries, missing


def parse_ldd_line(line: str) -> tuple[Path | None, str | None]:
    """Read one line of ``ldd`` output.

    Returns:
        ``(library path, None)`` for a resolved library or the dynamic loader,
        ``(None, soname)`` for one not found, ``(None, None)`` for anything else (headers,
        the vDSO).
    """
    text = line.strip()
    if "=>" in text:
        name, _, location = text.partition("=>")
        location = location.strip()
        if location.startswith("not found"):
            return None, name.strip()
        path = location.split(" (")[0].strip()
        return (Path(path), None) if path.startswith("/") else (None, None)
    if text.startswith("/") and " (" in text:
        return Path(text.split(" (")[0]), None
    return None, None


# --- streaming to the engine ---


def write_rootfs_tar(rootfs: Rootfs, sink: IO[bytes]) -> None:
    """Write ``rootfs`` as an uncompressed tar stream to ``sink`` (parents before children)."""
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.entries, key=lambda item: item.parts):
            entry = rootfs.entries[path]
            info = tarfile.TarInfo(str(path.relative_to("/")))
            info.uid = info.gid = entry.owner if isinstance(entry, DirectoryEntry) else 0
            info.uname = info.gname = "dlsched" if info.uid == WORKLOAD_UID else "root"
            if isinstance(entry, FileEntry):
                info.size, info.mode, info.mtime = entry.size, entry.mode, entry.mtime
                with open(entry.source, "rb") as content:
                    tar.addfile(info, content)
            elif isinstance(entry, InlineFileEntry):
                info.size, info.mode, info.mtime = entry.size, entry.mode, int(time.time())
                tar.addfile(info, io.BytesIO(entry.content))
            elif isinstance(entry, DirectoryEntry):
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, entry.mode, int(time.time())
                tar.addfile(info)
            else:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
                tar.addfile(info)


_CHUNK = 1 << 20


def _import_rootfs(client: docker.DockerClient, rootfs: Rootfs, report: ProgressCallback) -> None:
    """Stream ``rootfs`` to the engine's import endpoint as :data:`IMAGE_TAG`."""
    read_fd, write_fd = os.pipe()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_fd, "wb", buffering=_CHUNK) as sink:
                write_rootfs_tar(rootfs, sink)
        except BrokenPipeError:
            return  # the engine stopped reading; its answer says why
        except BaseException as error:
            failures.append(error)

    total = rootfs.tar_size_estimate()
    source = os.fdopen(read_fd, "rb", buffering=0)

    def chunks() -> Iterator[bytes]:
        sent = 0
        while chunk := source.read(_CHUNK):
            sent += len(chunk)
            report("send", sent, total)
            yield chunk

    producer = threading.Thread(target=produce, name="dlsched-rootfs-tar", daemon=True)
    producer.start()
    try:
        answer = client.api.import_image_from_stream(
            chunks(), repository=IMAGE_REPOSITORY, tag=IMAGE_VERSION, changes=image_changes()
        )
    except (docker.errors.DockerException, requests.RequestException) as error:
        raise BackendError(f"the engine refused the image import: {error}") from error
    finally:
        source.close()
        producer.join()
    if failures:
        raise BackendError(f"assembling the image failed: {failures[0]!r}") from failures[0]
    _raise_on_stream_error(answer)
    report("import", total, total)


def _raise_on_stream_error(answer: str | bytes | dict[str, Any]) -> None:
    """Raise if the engine's JSON-lines answer to an import reports an error."""
    text = answer.decode() if isinstance(answer, bytes) else answer
    lines = [text] if isinstance(text, dict) else text.splitlines()
    for line in lines:
        message = line if isinstance(line, dict) else _json_object(line)
        if message and "error" in message:
            raise BackendError(f"the engine refused the image: {message['error']}")


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


# --- Dockerfile ---


def _build_dockerfile(client: docker.DockerClient, report: ProgressCallback) -> None:
    """Build ``envs/workloads/Dockerfile`` with the workload package as ``dlsched_workloads``."""
    with tempfile.TemporaryDirectory(prefix="dlsched-image-") as context:
        package = Path(context) / IMAGE_PACKAGE_NAME
        for source in _workload_source_files():
            target = package / source.relative_to(WORKLOADS_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        shutil.move(str(package / DOCKERFILE.name), str(Path(context) / DOCKERFILE.name))
        steps = 0
        try:
            for message in client.api.build(
                path=context,
                tag=IMAGE_TAG,
                labels={IMAGE_LABEL: "1", "dlsched.image.version": IMAGE_VERSION},
                rm=True,
                decode=True,
            ):
                if "error" in message:
                    raise BackendError(
                        f"building {DOCKERFILE} failed: {message['error'].strip()}; on a host "
                        f"without a registry, build offline instead: {build_hint()}"
                    )
                if str(message.get("stream", "")).startswith("Step "):
                    steps += 1
                    report("build", steps, None)
        except (docker.errors.DockerException, requests.RequestException) as error:
            raise BackendError(f"the engine could not build {DOCKERFILE}: {error}") from error
