"""The workload image: its identity, the offline root filesystem, and real containers of it.

The first part needs no engine. Tests marked ``docker`` build (or reuse) the image on the local
engine and run workload containers of it: skipped without an engine, failed with
DLSCHED_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tarfile
from pathlib import Path

import docker.errors
import pytest

from dlsched.envs.docker import engine, image
from dlsched.envs.docker.image import (
    IMAGE_TAG,
    IMAGE_VERSION,
    DirectoryEntry,
    FileEntry,
    InlineFileEntry,
    Rootfs,
    SymlinkEntry,
    collect_rootfs,
    parse_ldd_line,
    write_rootfs_tar,
)
from dlsched.envs.docker.sandbox import STATE_DIR, WORKLOAD_UID, WORKLOAD_USER
from dlsched.envs.errors import DockerUnavailableError
from dlsched.envs.workloads.events import BatchEvent, DoneEvent, IterationEvent, parse_event
from dlsched.runs import cli

# --- identity and errors ---


def test_the_tag_carries_a_hash_of_the_workload_sources(tmp_path, monkeypatch):
    assert re.fullmatch(r"dlsched-workloads:\d+\.\d+\.\d+-[0-9a-f]{10}", IMAGE_TAG)
    assert IMAGE_TAG.endswith(IMAGE_VERSION)
    copy = tmp_path / "workloads"
    shutil.copytree(image.WORKLOADS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(image, "WORKLOADS_DIR", copy)
    assert image._source_hash() == IMAGE_VERSION.rsplit("-", 1)[1]
    (copy / "models.py").write_text((copy / "models.py").read_text() + "\n# edited\n")
    assert image._source_hash() != IMAGE_VERSION.rsplit("-", 1)[1]


def test_build_hint_is_the_offline_build_command():
    assert image.build_hint() == "dlsched image build --offline"


def test_an_unreachable_engine_names_the_endpoint_and_the_fix(tmp_path, monkeypatch):
    endpoint = f"unix://{tmp_path / 'no-engine.sock'}"
    monkeypatch.setenv("DOCKER_HOST", endpoint)
    with pytest.raises(DockerUnavailableError) as raised:
        engine.connect(timeout_s=5)
    message = str(raised.value)
    assert endpoint in message and "dockerd" in message and "DOCKER_HOST" in message


def test_the_cli_reports_an_unreachable_engine_as_one_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    assert cli.main(["image", "status"]) == 2
    assert "no Docker engine answers" in capsys.readouterr().err


# --- the offline root filesystem ---


LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
LOADER = "/lib64/ld-linux-x86-64.so.2"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"\tlibc.so.6 => {LIBC} (0x00007f)", (Path(LIBC), None)),
        (f"\t{LOADER} (0x00007f)", (Path(LOADER), None)),
        ("\tlibfoo.so.1 => not found", (None, "libfoo.so.1")),
        ("\tlinux-vdso.so.1 (0x00007ffd)", (None, None)),
        ("/usr/lib/python3.11/lib-dynload/_ssl.so:", (None, None)),
        ("\tstatically linked", (None, None)),
    ],
)
def test_ldd_lines_are_read(line, expected):
    assert parse_ldd_line(line) == expected


@pytest.fixture(scope="module")
def rootfs() -> Rootfs:
    return collect_rootfs()


def test_the_rootfs_holds_the_interpreter_torch_the_loader_and_the_workloads(rootfs):
    import sys

    import torch

    names = {str(path) for path in rootfs.entries}
    assert not rootfs.missing_libraries
    prefix = Path(sys.base_prefix).resolve()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert isinstance(rootfs.entries[prefix / "bin" / version], FileEntry)
    site = prefix / "lib" / version / "site-packages"
    torch_c = Path(torch._C.__file__).name
    assert isinstance(rootfs.entries[site / "torch" / torch_c], FileEntry)
    assert isinstance(rootfs.entries[site / "torch" / "bin" / "torch_shm_manager"], FileEntry)
    assert any(name.endswith("/ld-linux-x86-64.so.2") for name in names)
    assert any(re.search(r"/libc\.so\.6$", name) for name in names)
    package = Path(image.IMAGE_PACKAGE_ROOT) / image.IMAGE_PACKAGE_NAME
    assert isinstance(rootfs.entries[package / "__main__.py"], FileEntry)
    assert isinstance(rootfs.entries[package / "data" / "digits.npz"], FileEntry)
    assert package / "Dockerfile" not in rootfs.entries
    assert isinstance(rootfs.entries[Path("/etc/passwd")], InlineFileEntry)
    assert rootfs.entries[Path("/tmp")] == DirectoryEntry(0o1777)


def test_the_workload_user_reads_every_file_of_the_rootfs_and_owns_only_its_state(rootfs):
    """The workloads run as uid 10001: the interpreter may live under a home directory that
    is private on the host (``/root/.pyenv``), and files may be the host user's alone."""
    for path, entry in rootfs.entries.items():
        if isinstance(entry, DirectoryEntry):
            assert entry.mode & 0o005 == 0o005, f"{path} {entry.mode:o}"
            assert entry.owner == (WORKLOAD_UID if path == Path(STATE_DIR) else 0), path
        elif isinstance(entry, FileEntry | InlineFileEntry):
            assert entry.mode & 0o004 and not entry.mode & 0o6022, f"{path} {entry.mode:o}"
    passwd = rootfs.entries[Path("/etc/passwd")]
    assert f"dlsched:x:{WORKLOAD_UID}:{WORKLOAD_UID}:" in passwd.content.decode()


def test_the_rootfs_leaves_out_what_workloads_never_load(rootfs):
    names = [str(path) for path in rootfs.entries]
    assert not [name for name in names if "/torch/include/" in name]
    assert not [name for name in names if "/tests/" in name]
    assert not [name for name in names if name.endswith(".a")]
    assert not [name for name in names if "/site-packages/pytest/" in name]
    assert not [name for name in names if "/lib/python3.11/test/" in name]


def resolve_in(rootfs: Rootfs, path: Path, hops: int = 40) -> Path | None:
    """Where ``path`` leads inside ``rootfs`` (links followed as the kernel would), or None."""
    resolved = Path("/")
    for part in path.parts[1:]:
        if part == "..":
            resolved = resolved.parent
            continue
        candidate = resolved / part
        entry = rootfs.entries.get(candidate)
        if entry is None:
            return None
        if isinstance(entry, SymlinkEntry):
            if hops == 0:
                return None
            target = Path(entry.target)
            following = resolve_in(
                rootfs, target if target.is_absolute() else resolved / target, hops - 1
            )
            if following is None:
                return None
            candidate = following
        resolved = candidate
    return resolved


def test_every_symlink_in_the_rootfs_resolves_inside_it(rootfs):
    links = [path for path, entry in rootfs.entries.items() if isinstance(entry, SymlinkEntry)]
    assert Path("/lib64") in links or any("ld-linux" in str(link) for link in links)
    for link in links:
        assert resolve_in(rootfs, link) is not None, f"{link} dangles"


def test_the_tar_stream_lists_parents_before_children_with_root_ownership(tmp_path):
    source = tmp_path / "payload.txt"
    source.write_text("payload")
    rootfs = Rootfs(
        {
            Path("/opt/a/payload.txt"): FileEntry(source, 7, 0o644, 1_700_000_000),
            Path("/opt"): DirectoryEntry(),
            Path("/opt/a"): DirectoryEntry(),
            Path("/opt/link"): SymlinkEntry("a/payload.txt"),
            Path("/etc/hosts"): InlineFileEntry(b"127.0.0.1 localhost\n"),
            Path("/etc"): DirectoryEntry(),
        }
    )
    buffer = io.BytesIO()
    write_rootfs_tar(rootfs, buffer)
    assert len(buffer.getvalue()) <= rootfs.tar_size_estimate() + 10240  # tar's final padding
    with tarfile.open(fileobj=io.BytesIO(buffer.getvalue())) as tar:
        members = tar.getmembers()
        names = [member.name for member in members]
        assert names.index("opt") < names.index("opt/a") < names.index("opt/a/payload.txt")
        assert all(member.uid == 0 and member.gid == 0 for member in members)
        payload = tar.extractfile("opt/a/payload.txt")
        assert payload is not None and payload.read() == b"payload"
        assert tar.getmember("opt/link").linkname == "a/payload.txt"
        assert tar.getmember("opt/a/payload.txt").mtime == 1_700_000_000


# --- the image on a real engine ---


def run_container(client, tag, command, **options):
    """Run ``command`` in ``tag`` to completion; its exit status and stdout events."""
    container = client.containers.run(
        tag, command, detach=True, labels={image.MANAGED_LABEL: "1"}, **options
    )
    try:
        status = container.wait(timeout=600)["StatusCode"]
        stdout = container.logs(stdout=True, stderr=False).decode()
        stderr = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    events = [parse_event(line) for line in stdout.splitlines()]
    assert all(event is not None for event in events), stdout + stderr
    return status, events, stderr


@pytest.mark.docker
def test_the_built_image_is_labelled_and_runs_python_with_torch(docker_engine, workload_image):
    built = docker_engine.images.get(workload_image)
    assert workload_image == IMAGE_TAG and image.image_present(docker_engine)
    assert built.labels[image.IMAGE_LABEL] == "1"
    # Containers inherit their image's labels: one a user starts from it must not look managed.
    assert image.MANAGED_LABEL not in built.labels
    assert built.labels["dlsched.image.version"] == IMAGE_VERSION
    env = dict(item.split("=", 1) for item in built.attrs["Config"]["Env"])
    assert env["PYTHONPATH"] == image.IMAGE_PACKAGE_ROOT and env["OMP_NUM_THREADS"] == "1"
    assert built.attrs["Config"]["User"] == WORKLOAD_USER and env["HOME"] == "/tmp"


@pytest.mark.docker
def test_a_training_container_follows_its_quota_and_reports_json_lines(
    docker_engine, workload_image
):
    status, events, stderr = run_container(
        docker_engine,
        workload_image,
        ["python", "-m", "dlsched_workloads", "mlp-digits", "--iterations", "3"],
        cpu_period=100_000,
        cpu_quota=100_000,  # one core: one thread where uncapped it would take every core
        network_mode="none",
    )
    assert status == 0, stderr
    assert events[0].workload == "mlp-digits" and events[0].threads == 1
    iterations = [event for event in events if isinstance(event, IterationEvent)]
    assert [event.iteration for event in iterations] == [1, 2, 3]
    assert isinstance(events[-1], DoneEvent) and events[-1].iterations == 3


@pytest.mark.docker
def test_an_uncapped_service_uses_every_core_and_answers_batches(docker_engine, workload_image):
    cores = docker_engine.info()["NCPU"]
    status, events, stderr = run_container(
        docker_engine,
        workload_image,
        ["python", "-m", "dlsched_workloads", "vgg-svc", "--iterations", "2", "--batch-size", "8"],
        network_mode="none",
    )
    assert status == 0, stderr
    assert events[0].kind == "inference" and events[0].threads == cores
    batches = [event for event in events if isinstance(event, BatchEvent)]
    assert [event.batch for event in batches] == [1, 2]
    assert all(event.latency_s > 0 and event.images == 8 for event in batches)


@pytest.mark.docker
def test_a_service_stopped_by_the_engine_exits_cleanly(docker_engine, workload_image):
    container = docker_engine.containers.run(
        workload_image,
        ["python", "-m", "dlsched_workloads", "mobilenet-svc", "--batch-size", "4"],
        detach=True,
        labels={image.MANAGED_LABEL: "1"},
        network_mode="none",
    )
    try:
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=False):
            if any(isinstance(parse_event(line), BatchEvent) for line in chunk.splitlines()):
                break
        # As pid 1 the workload must handle SIGTERM itself; SIGKILL after the grace period
        # would give 137.
        container.stop(timeout=60)
        assert container.wait(timeout=120)["StatusCode"] == 0
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_building_again_reuses_the_image(docker_engine, workload_image, capsys):
    before = docker_engine.images.get(workload_image).id
    assert cli.main(["image", "build", "--offline"]) == 0
    assert "already built" in capsys.readouterr().out
    assert docker_engine.images.get(workload_image).id == before
    assert cli.main(["image", "status"]) == 0


@pytest.mark.docker
def test_prune_removes_old_workload_images_only(docker_engine, workload_image, capsys):
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w") as tar:
        info = tarfile.TarInfo("marker")
        tar.addfile(info, io.BytesIO(b""))
    docker_engine.api.import_image_from_data(
        payload.getvalue(),
        repository=image.IMAGE_REPOSITORY,
        tag="0.0.0-old",
        changes=[f"LABEL {image.IMAGE_LABEL}=1"],
    )
    try:
        assert cli.main(["image", "prune"]) == 0
        assert f"removed {image.IMAGE_REPOSITORY}:0.0.0-old" in capsys.readouterr().out
        with pytest.raises(docker.errors.ImageNotFound):
            docker_engine.images.get(f"{image.IMAGE_REPOSITORY}:0.0.0-old")
        assert image.image_present(docker_engine)
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_engine.images.remove(f"{image.IMAGE_REPOSITORY}:0.0.0-old")
