"""``dlsched docker cleanup``: remove the containers that killed runs left behind.

The Docker backend removes its containers itself on close, on reset, at exit and on SIGINT or
SIGTERM; a process killed outright (SIGKILL, a lost machine) cannot. This command removes the
containers labelled ``dlsched.managed=1`` whose owner process is gone (of one episode with
``--episode``); the containers of live episodes (another shell's, another user's) are listed
with their owner and left running unless ``--include-live``. A container without the
``dlsched.managed`` label is never listed, so it is never touched.
"""

from __future__ import annotations

import argparse

from dlsched.envs.docker.cleanup import cleanup
from dlsched.envs.docker.engine import connect, endpoint_url
from dlsched.runs.parser import ListOption


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``dlsched docker`` (with its ``cleanup`` subcommand) to the CLI."""
    parser = subparsers.add_parser(
        "docker",
        help="manage the containers of the Docker backend",
        description="Manage the containers the Docker backend starts.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    command = actions.add_parser(
        "cleanup",
        help="remove the containers that killed runs left behind",
        description=(
            "Remove every container labelled dlsched.managed=1 whose owner process is gone, and "
            "print each one removed; list the containers of live episodes and leave them "
            "running (--include-live removes them too). Containers without the label are "
            "never touched."
        ),
    )
    command.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be removed, remove nothing",
    )
    command.add_argument(
        "--endpoint",
        action=ListOption,
        metavar="URL[,URL...]",
        help="engines to clean (repeatable or comma-separated); default: the one docker finds "
        "from the environment (DOCKER_HOST, else the local socket)",
    )
    command.add_argument(
        "--episode",
        metavar="ID",
        help="only the containers of this episode (its dlsched.episode label)",
    )
    command.add_argument(
        "--include-live",
        action="store_true",
        help="also remove the containers of episodes whose process still runs (they break)",
    )
    command.set_defaults(handler=run_cleanup)


def run_cleanup(args: argparse.Namespace) -> int:
    """Remove (or with ``args.dry_run`` list) orphaned managed containers; the exit code (0)."""
    endpoints: list[str | None] = list(args.endpoint) if args.endpoint else [None]
    verb = "would remove" if args.dry_run else "removed"
    for endpoint in endpoints:
        client = connect(endpoint)
        try:
            result = cleanup(
                client,
                args.episode,
                args.include_live,
                args.dry_run,
                before_live=lambda container: print(
                    f"{'would remove' if args.dry_run else 'removing'} a LIVE container "
                    f"(--include-live): {container.describe()}",
                    flush=True,
                ),
            )
        finally:
            client.close()
        for container in result.removed:
            if container.orphan:
                print(f"{verb} {container.describe()}")
        for container in result.left:
            print(f"left running {container.describe()}")
        where = endpoint_url(endpoint)
        count = len(result.removed)
        line = f"{where}: {verb} {count} dlsched container{'s' if count != 1 else ''}"
        if result.left:
            line += (
                f"; left {len(result.left)} of live episodes running (--include-live removes "
                "them, and breaks those episodes)"
            )
        print(line)
    return 0
