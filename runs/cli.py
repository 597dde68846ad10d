"""The ``dlsched`` command line.

Each subcommand lives in its own module of :mod:`dlsched.runs.commands` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` to a function of the parsed
arguments returning the exit code. Errors dlsched raises on purpose (a user's mistake, or a
store or engine that fails) are printed as one message (exit 2) naming the log file that holds
the traceback; anything else is a bug of dlsched, said as such in one message naming the log
file (exit 1), with its traceback in the terminal too under ``--verbose``. MLflow's own log
messages go to that file too, unless ``--verbose`` (:mod:`dlsched.runs.command_log`).

SIGINT and SIGTERM stop a command the same way (:mod:`dlsched.runs.interruption`): containers are
removed and runs ended ``KILLED``, repeated signals do not cut that cleanup short, and the exit
code is 130 or 143.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from dlsched.envs.errors import DlschedError
from dlsched.runs.command_log import CommandLog
from dlsched.runs.interruption import Interrupted, exit_code_of, interruptible

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
    "runs",
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
    for command in subparsers.choices.values():
        command.add_argument(
            "--verbose",
            action="store_true",
            help="show MLflow's own log messages in the terminal (they go to the log file)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = CommandLog.open(args.command, args.verbose)
    with interruptible():
        try:
            return int(args.handler(args))
        except DlschedError as error:
            log.record_exception(error)
            print(f"dlsched {args.command}: error: {error}\n(details: {log.path})", file=sys.stderr)
            return 2
        except BrokenPipeError:  # the reader (``| head``) went away: not an error of ours
            # Point stdout at /dev/null so the interpreter's final flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except KeyboardInterrupt as interruption:
            name = interruption.name if isinstance(interruption, Interrupted) else "SIGINT"
            print(
                f"dlsched {args.command}: interrupted ({name}); its containers are removed and "
                "its runs ended as KILLED",
                file=sys.stderr,
            )
            return exit_code_of(interruption)
        except Exception as error:  # a bug: its traceback is for a report, not for the user
            log.record_exception(error)
            if args.verbose:
                raise
            print(
                f"dlsched {args.command}: internal error (a bug of dlsched, not of your input): "
                f"{type(error).__name__}: {error}\n(traceback: {log.path}; please report it with "
                "that file, or rerun with --verbose to see it here)",
                file=sys.stderr,
            )
            return 1


if __name__ == "__main__":
    sys.exit(main())
