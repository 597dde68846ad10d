"""``dlsched image``: build, inspect and prune the workload image the Docker backend runs.

- ``dlsched image build [--offline | --dockerfile] [--force]``: make sure the local engine (or
  the one ``DOCKER_HOST`` names) has :data:`~dlsched.envs.docker.image.IMAGE_TAG`. Offline (the
  default) assembles it from this Python installation; ``--dockerfile`` builds
  ``envs/workloads/Dockerfile``, which pulls from the registries. An image already there is
  reused unless ``--force``.
- ``dlsched image status``: the tag this version of dlsched needs and whether the engine has it.
- ``dlsched image prune``: remove workload images of other versions (left by source edits).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import docker.errors
from tqdm import tqdm

from dlsched.envs.docker.engine import connect
from dlsched.envs.docker.image import (
    IMAGE_LABEL,
    IMAGE_REPOSITORY,
    IMAGE_TAG,
    ImageBuild,
    ProgressCallback,
    build_hint,
    build_image,
    image_present,
)
from dlsched.runs.commands.options import Subcommands, add_command_with_actions


def register(subparsers: Subcommands) -> None:
    """Add ``image`` and its subcommands to the ``dlsched`` parser."""
    actions = add_command_with_actions(
        subparsers,
        "image",
        "build or inspect the workload image of the Docker backend",
        __doc__,
        dest="image_command",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    build = actions.add_parser("build", help="build the workload image (offline by default)")
    method = build.add_mutually_exclusive_group()
    method.add_argument(
        "--offline",
        dest="offline",
        action="store_true",
        default=True,
        help="assemble the image from the local Python installation, no registry (default)",
    )
    method.add_argument(
        "--dockerfile",
        dest="offline",
        action="store_false",
        help="build envs/workloads/Dockerfile instead (pulls python:3.11-slim and torch)",
    )
    build.add_argument(
        "--force", action="store_true", help="rebuild even if the image is already there"
    )
    build.set_defaults(handler=run_build)

    status = actions.add_parser("status", help="show the image tag and whether it is built")
    status.set_defaults(handler=run_status)

    prune = actions.add_parser("prune", help="remove workload images of other versions")
    prune.set_defaults(handler=run_prune)


def run_build(args: argparse.Namespace) -> int:
    """Build (or reuse) the workload image; print what happened."""
    client = connect(timeout_s=600)
    with _ProgressDisplay() as display:
        result = build_image(client, offline=args.offline, force=args.force, progress=display)
    print(_describe(result))
    if result.missing_libraries:
        print(
            "warning: ldd found no file for "
            + ", ".join(result.missing_libraries)
            + "; a workload that loads them will fail in the image",
            file=sys.stderr,
        )
    return 0


def run_status(args: argparse.Namespace) -> int:
    """Print the tag this dlsched needs and whether the engine has it (exit 1 if not)."""
    client = connect(timeout_s=600)
    if not image_present(client):
        print(f"{IMAGE_TAG}: not built; build it with: {build_hint()}")
        return 1
    image = client.images.get(IMAGE_TAG)
    print(f"{IMAGE_TAG}: present, id {image.short_id}, {image.attrs['Size'] / 1e6:.0f} MB")
    return 0


def run_prune(args: argparse.Namespace) -> int:
    """Remove dlsched workload images whose tag is not the current one."""
    client = connect(timeout_s=600)
    removed = 0
    for image in client.images.list(name=IMAGE_REPOSITORY, filters={"label": IMAGE_LABEL}):
        if IMAGE_TAG in image.tags:
            continue
        try:
            client.images.remove(image.id)
        except docker.errors.APIError as error:
            print(f"kept {', '.join(image.tags) or image.short_id}: {error}", file=sys.stderr)
            continue
        print(f"removed {', '.join(image.tags) or image.short_id}")
        removed += 1
    print(f"{removed} old workload image(s) removed; current: {IMAGE_TAG}")
    return 0


def _describe(result: ImageBuild) -> str:
    size = f"{result.size_bytes / 1e6:.0f} MB"
    if result.method == "reused":
        return f"{result.tag}: already built ({size}); rebuild with --force"
    return f"{result.tag}: built ({result.method}) in {result.seconds:.1f} s, {size}"


class _ProgressDisplay:
    """Shows build progress on stderr: a byte bar while sending, one line per other phase."""

    def __init__(self) -> None:
        self._bar: tqdm[Any] | None = None
        self._phase = ""

    def __enter__(self) -> ProgressCallback:
        return self.update

    def __exit__(self, *exc_info: object) -> None:
        if self._bar is not None:
            self._bar.close()

    def update(self, phase: str, done: int, total: int | None) -> None:
        if phase == "send":
            if self._bar is None:
                self._bar = tqdm(
                    total=total,
                    unit="B",
                    unit_scale=True,
                    desc="sending image to the engine",
                    mininterval=1.0,
                    file=sys.stderr,
                )
            self._bar.total = max(total or 0, done)
            self._bar.update(done - self._bar.n)
            return
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if phase == "collect" and self._phase != "collect":
            print("collecting the image's files from the local Python ...", file=sys.stderr)
        if phase == "collect" and total is not None:
            print(f"collected {done} files, directories and links", file=sys.stderr)
        elif phase == "import":
            print("the engine stored the image", file=sys.stderr)
        elif phase == "build":
            print(f"Dockerfile step {done} ...", file=sys.stderr)
        self._phase = phase
