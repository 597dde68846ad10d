"""The ``dlsched`` command line.

Each subcommand lives in its own module of :mod:`dlsched.runs.commands` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` to a function of the parsed
arguments returning the exit code. Errors dlsched raises on purpose are printed as one message
(exit 2); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from dlsched.envs.errors import DlschedError

COMMAND_MODULES: tuple[str, ...] = (
    "scenarios",
    "evaluate",
    "compare",
    "docker",
    "bench",
    "baselines",
    "image",
    "calibrate",
    "validate",
    "train",
    "reproduce",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlsched",
        description="Learning CPU schedulers for deep-learning containers.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(f"dlsched.runs.commands.{module_name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except DlschedError as error:
        print(f"dlsched {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (``| head``) went away: not an error of ours
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"dlsched {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
