"""The ``dlsched`` command line.

Each subcommand lives in its own module of :mod:`dlsched.runs.commands` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` to a function of the parsed
arguments returning the exit code. Errors dlsched raises on purpose (a user's mistake, or a
store or engine that fails) are printed as one message (exit 2); a mistake refused before the
command logged anything leaves no file behind, while a command that ran (its libraries logged)
adds the traceback to its log file and names it. Anything else is a bug of dlsched, said as such
in one message naming the log file that holds its traceback (exit 1). The log messages of
MLflow and Docker's client go to that file too (:mod:`dlsched.runs.command_log`); the commands
that use them take ``--verbose``, which shows those messages, and a bug's traceback, in the
terminal.

``scenarios`` runs on ``pip install dlsched`` alone; every other command is the lab's and needs
the lab extra, said in one line (exit 2) before its module is imported.

SIGINT and SIGTERM stop a command the same way (:mod:`dlsched.runs.interruption`), from its
first moment: containers are removed and runs ended ``KILLED``, repeated signals do not cut that
cleanup short, one line says what the stop undid, and the exit code is 130 or 143.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from dlsched.runs.command_log import CommandLog
from dlsched.runs.interruption import (
    command_ended,
    exit_code_of,
    interruptible,
    raise_if_stopped,
    stop_report,
)
from dlsched.runs.parser import Parser, unrecognized

#: Each command (a module of :mod:`dlsched.runs.commands` of the same name) with the one line
#: ``dlsched --help`` shows for it, in that order. The table is here so that the listing imports
#: no command module: a command's module, and torch, SB3, MLflow or matplotlib if it needs them,
#: is imported only when that command runs.
COMMANDS: dict[str, str] = {
    "scenarios": "list the shipped scenarios, show one, or check a scenario file",
    "evaluate": "run policies on a scenario over seeds and track every episode in MLflow",
    "compare": "compare stored evaluations: scenario x policy, from MLflow",
    "docker": "manage the containers of the Docker backend",
    "bench": "measure the speed of parts of dlsched on this machine",
    "baselines": "list the papers' baselines and their parameters, or print their report",
    "judge": "run a scheduler on every shipped scenario of its kind beside the baselines",
    "image": "build or inspect the workload image of the Docker backend",
    "calibrate": "measure replay profiles (or the contention term) on the local Docker engine",
    "validate": "hold the replay model against the real host on the same policies and seeds",
    "train": "train a learned scheduler (Stable-Baselines3) and log it to MLflow",
    "runs": "repair runs left RUNNING, upload episodes a store missed",
    "models": "convert models saved by an earlier dlsched into files that are data",
    "reproduce": "run the papers' claims and report which dlsched reproduces",
}
COMMAND_MODULES: tuple[str, ...] = tuple(COMMANDS)
#: The commands that run on the core install alone; every other one needs the lab extra.
CORE_COMMANDS: frozenset[str] = frozenset({"scenarios"})
#: The commands that use neither MLflow nor Docker's client: no library of theirs logs, so they
#: take no ``--verbose``.
QUIET_COMMANDS: frozenset[str] = frozenset({"scenarios", "baselines"})


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``argv``: the command it names is registered in full, every other one by
    its name and help line only (``None``: every command in full, for documentation and tests).
    """
    parser = Parser(
        prog="dlsched",
        description="Learning CPU schedulers for deep-learning containers.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = set(COMMANDS) if argv is None else {_command_of(argv)}
    for name, summary in COMMANDS.items():
        if name in wanted:
            importlib.import_module(f"dlsched.runs.commands.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    for name, command in subparsers.choices.items():
        if name not in QUIET_COMMANDS:
            command.add_argument(
                "--verbose",
                action="store_true",
                help="show the log messages of MLflow and Docker's client, and a bug's "
                "traceback, in the terminal (else they go to the log file)",
            )
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Parser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def _missing_extra(command: str | None) -> str | None:
    """Why ``command`` cannot run (the lab extra is not installed), or ``None``."""
    if command not in COMMANDS or command in CORE_COMMANDS:
        return None
    # imported here: it loads the environments (numpy, Gymnasium), which --help does not need
    from dlsched.envs.errors import MissingExtraError
    from dlsched.envs.extras import require_extra

    try:
        require_extra("lab", "this command")
    except MissingExtraError as error:
        return str(error)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(word) for word in argv]
    # from the start: loading a command takes a second or more, and a stop then is one line too
    with interruptible():
        try:
            command = _command_of(argv)
            refused = _missing_extra(command)
            if refused is not None:
                print(f"dlsched {command}: error: {refused}", file=sys.stderr)
                return 2
            parser = build_parser(argv)
            args, extra = parser.parse_known_args(argv)
            raise_if_stopped()
        except KeyboardInterrupt as interruption:
            name = " ".join(filter(None, ("dlsched", _command_of(argv))))
            print(f"{name}: {stop_report(interruption, started=False)}", file=sys.stderr)
            return exit_code_of(interruption)
        if extra:  # said by the command's parser, with its usage and the option meant
            unrecognized(_subparsers(parser).choices[args.command], extra)
        # imported after the handlers are set: it loads the environments (numpy, Gymnasium)
        from dlsched.envs.errors import DlschedError

        verbose = bool(getattr(args, "verbose", False))
        log = CommandLog.open(args.command, verbose)
        try:
            code = int(args.handler(args))
            command_ended()  # a stop Python dropped on the way is still the user's stop
            return code
        except DlschedError as error:
            print(f"dlsched {args.command}: error: {error}", file=sys.stderr)
            if log.record_failure(error):
                print(f"(details: {log.path})", file=sys.stderr)
            return 2
        except BrokenPipeError:  # the reader (``| head``) went away: not an error of ours
            # Point stdout at /dev/null so the interpreter's final flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except KeyboardInterrupt as interruption:
            print(f"dlsched {args.command}: {stop_report(interruption)}", file=sys.stderr)
            return exit_code_of(interruption)
        except Exception as error:  # a bug: its traceback is for a report, not for the user
            kept = log.record_exception(error)
            if verbose:
                raise
            rerun = args.command not in QUIET_COMMANDS
            if kept:
                where = f"traceback: {log.path}; please report it with that file"
                where += ", or rerun with --verbose to see it here" if rerun else ""
            else:
                where = f"its traceback could not be written to {log.path}: {log.lost}"
                where += "; rerun with --verbose to see it, and report it" if rerun else ""
            print(
                f"dlsched {args.command}: internal error (a bug of dlsched, not of your input): "
                f"{type(error).__name__}: {error}\n({where})",
                file=sys.stderr,
            )
            return 1


if __name__ == "__main__":
    sys.exit(main())
