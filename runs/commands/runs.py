"""``dlsched runs``: repair and sync the runs of a tracking store.

- ``dlsched runs repair`` marks ``KILLED`` the runs left ``RUNNING`` by a process that is gone
  (every command that opens a store does it too, and says how many);
- ``dlsched runs sync FOLDER...`` uploads what a store missed while it was down: the on-disk
  episodes of an evaluation, the files of a training (idempotent).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlsched.runs.commands.options import Subcommands, add_command_with_actions, add_tracking_uri


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched runs`` (``repair``, ``sync``) to the CLI."""
    actions = add_command_with_actions(
        subparsers,
        "runs",
        "repair runs left RUNNING, upload episodes a store missed",
        "Keep a tracking store whole after crashes and outages.",
    )
    repair = actions.add_parser(
        "repair",
        help="mark KILLED the runs whose process is gone",
        description=(
            "Mark KILLED every RUNNING run of this host whose owner process is gone (killed, "
            "crashed, its machine restarted). Runs of live processes and of other hosts are "
            "left alone."
        ),
    )
    repair.add_argument("--dry-run", action="store_true", help="list them, change nothing")
    add_tracking_uri(repair)
    repair.set_defaults(handler=run_repair)
    sync = actions.add_parser(
        "sync",
        help="upload the on-disk episodes (or training files) a store missed",
        description=(
            "Upload to its store what a tracked evaluation or training kept on disk while the "
            "store was unreachable: each folder is one evaluation or training "
            "(dlsched-runs/<id>/). What the store has is never uploaded twice."
        ),
    )
    sync.add_argument("folders", nargs="+", type=Path, metavar="FOLDER")
    sync.set_defaults(handler=run_sync)


def run_repair(args: argparse.Namespace) -> int:
    """Run ``dlsched runs repair``; the exit code (0)."""
    # imported here, so that parsing (and --help) does not wait for MLflow
    from dlsched.runs.tracking.owners import end_orphaned_runs, orphaned_runs
    from dlsched.runs.tracking.store import connect
    from dlsched.runs.tracking.target import resolve_tracking_uri

    target = resolve_tracking_uri(args.tracking_uri)
    print(target.describe(), file=sys.stderr)
    client = connect(target)
    orphans = orphaned_runs(client) if args.dry_run else end_orphaned_runs(client)
    verb = "would mark" if args.dry_run else "marked"
    for orphan in orphans:
        print(
            f"{verb} KILLED: run {orphan.run_id} ({orphan.name}, experiment "
            f"{orphan.experiment_id}) of pid {orphan.owner.pid} on {orphan.owner.host}"
        )
    print(f"{target.uri}: {verb} {len(orphans)} run{'s' if len(orphans) != 1 else ''} KILLED")
    return 0


def run_sync(args: argparse.Namespace) -> int:
    """Run ``dlsched runs sync``; the exit code (0)."""
    from dlsched.runs.tracking.sync import describe, sync_folder

    for folder in args.folders:
        result = sync_folder(folder, lambda line: print(line, file=sys.stderr))
        print(f"{folder}: {describe(result)}")
    return 0
