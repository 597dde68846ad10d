"""``dlsched docker cleanup``: remove the containers that killed runs left behind; and
``dlsched docker engines up|down``: extra local engines for cluster scenarios
(:mod:`dlsched.envs.docker.local_engines`).

The Docker backend removes its containers itself on close, on reset, at exit and on SIGINT or
SIGTERM; a process killed outright (SIGKILL, a lost machine) cannot. This command removes the
containers labelled ``dlsched.managed=1`` whose owner process is gone (of one episode with
``--episode``); the containers of live episodes (another shell's, another user's), and running
ones without owner labels (whose episode may be live), are listed with the reason and left
running unless ``--include-live``. A container without the ``dlsched.managed`` label is never
listed, so it is never touched.
"""

from __future__ import annotations

import argparse

from dlsched.envs.docker.cleanup import cleanup
from dlsched.envs.docker.engine import connect, endpoint_url
from dlsched.runs.commands.argument_types import positive_int
from dlsched.runs.commands.options import Subcommands, add_command_with_actions
from dlsched.runs.parser import ListOption


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched docker`` (with its ``cleanup`` subcommand) to the CLI."""
    actions = add_command_with_actions(
        subparsers,
        "docker",
        "manage the containers of the Docker backend",
        "Manage the containers the Docker backend starts.",
    )
    command = actions.add_parser(
        "cleanup",
        help="remove the containers that killed runs left behind",
        description=(
            "Remove every container labelled dlsched.managed=1 whose owner process is gone, and "
            "print each one removed; list the containers of live episodes, and running ones "
            "without owner labels, and leave them running (--include-live removes them too). "
            "Containers without the label are never touched."
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
    _register_engines(actions)


def _register_engines(actions: Subcommands) -> None:
    steps = add_command_with_actions(
        actions,
        "engines",
        "start or stop extra local engines that stand for the hosts of a cluster",
        "Start (up) or stop (down) extra Docker engines on this machine, engine-1 ... engine-N, "
        "each with its own socket (unix:///run/dlsched/engines/engine-<i>/docker.sock: the "
        "endpoint a cluster scenario's workers name), data root, exec root and pid file, no "
        "network, and CPUs of its own; the workload image is copied into each from the "
        "machine's engine. down stops only engines that up started, and removes only what up "
        "made. Needs root.",
        dest="engines_action",
        metavar="up|down",
    )
    start = steps.add_parser(
        "up",
        help="start engines 1..N (those not running already) and load the image into each",
        description="Start local engines 1..N (those not running already) and put the "
        "workload image on each; print each engine's endpoint, CPUs and what it took.",
    )
    start.add_argument("--count", type=positive_int, default=2, help="how many engines (default 2)")
    start.add_argument(
        "--no-image", action="store_true", help="do not put the workload image on them"
    )
    start.set_defaults(handler=run_engines_up)
    stop = steps.add_parser(
        "down",
        help="stop the engines up started (their containers stop with them)",
        description="Stop the local engines that `dlsched docker engines up` started; their "
        "containers stop with them, as with a host that is shut down. Their data roots (and the "
        "image in them) are kept for the next up unless --purge.",
    )
    stop.add_argument(
        "--count", type=positive_int, help="stop engines 1..N (default: every one that runs)"
    )
    stop.add_argument(
        "--purge", action="store_true", help="also remove their data roots (images, containers)"
    )
    stop.set_defaults(handler=run_engines_down)


def run_engines_up(args: argparse.Namespace) -> int:
    """Start local engines; print one line each. The exit code (0)."""
    from dlsched.envs.docker import local_engines

    started = local_engines.up(args.count, image=not args.no_image, report=print)
    endpoints = ", ".join(start.engine.endpoint for start in started)
    print(f"{len(started)} local engines up: {endpoints}")
    return 0


def run_engines_down(args: argparse.Namespace) -> int:
    """Stop the local engines ``up`` started; print one line each. The exit code (0)."""
    from dlsched.envs.docker import local_engines

    stopped = local_engines.down(args.count, purge=args.purge)
    for stop in stopped:
        if stop.pid is None:
            print(f"{stop.engine.name}: not running; removed its run folder")
            continue
        line = f"{stop.engine.name}: stopped (pid {stop.pid}, {stop.containers} containers)"
        if stop.left:
            line += f"; cgroups left in use: {', '.join(map(str, stop.left))}"
        print(line + ("; data root removed" if args.purge else ""))
    if not stopped:
        print("no local engine runs")
    return 0


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
