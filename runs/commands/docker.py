"""``dlsched docker cleanup``: remove the containers an interrupted Docker run left behind.

The Docker backend removes its containers itself on close, on reset, at exit and on SIGINT or
SIGTERM; a process killed outright (SIGKILL, a lost machine) cannot. This command removes every
container labelled ``dlsched.managed=1`` (of one episode with ``--episode``) and nothing else: a
container without that label is never listed, so it is never touched.
"""

from __future__ import annotations

import argparse
from typing import Any

from dlsched.envs.docker.backend import (
    LABEL_EPISODE,
    LABEL_JOB,
    managed_containers,
    remove_managed_containers,
)
from dlsched.envs.docker.engine import connect, endpoint_url


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``dlsched docker`` (with its ``cleanup`` subcommand) to the CLI."""
    parser = subparsers.add_parser(
        "docker",
        help="manage the containers of the Docker backend",
        description="Manage the containers the Docker backend starts.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    cleanup = actions.add_parser(
        "cleanup",
        help="remove the containers an interrupted run left behind",
        description=(
            "Remove every container labelled dlsched.managed=1 (only those) and print each one "
            "removed. Containers without the label are never touched."
        ),
    )
    cleanup.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be removed, remove nothing",
    )
    cleanup.add_argument(
        "--endpoint",
        action="append",
        metavar="URL",
        help="engine to clean (repeatable); default: the one docker finds from the environment "
        "(DOCKER_HOST, else the local socket)",
    )
    cleanup.add_argument(
        "--episode",
        metavar="ID",
        help="only the containers of this episode (its dlsched.episode label)",
    )
    cleanup.set_defaults(handler=run_cleanup)


def run_cleanup(args: argparse.Namespace) -> int:
    """Remove (or with ``args.dry_run`` list) managed containers; the exit code (0)."""
    endpoints: list[str | None] = list(args.endpoint) if args.endpoint else [None]
    for endpoint in endpoints:
        client = connect(endpoint)
        try:
            if args.dry_run:
                found = managed_containers(client, args.episode)
            else:
                found = remove_managed_containers(client, args.episode)
        finally:
            client.close()
        verb = "would remove" if args.dry_run else "removed"
        for summary in found:
            print(f"{verb} {_describe(summary)}")
        where = endpoint_url(endpoint)
        print(f"{where}: {verb} {len(found)} dlsched container{'s' if len(found) != 1 else ''}")
    return 0


def _describe(summary: dict[str, Any]) -> str:
    labels = summary.get("Labels") or {}
    names = ",".join(name.lstrip("/") for name in summary.get("Names") or [])
    return (
        f"{summary['Id'][:12]} {names} (episode {labels.get(LABEL_EPISODE, '?')}, job "
        f"{labels.get(LABEL_JOB, '?')}, {summary.get('State', '?')})"
    )
