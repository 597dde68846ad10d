"""Options that several subcommands share, each added by one function with one help text.

A command adds a shared option through the function here instead of spelling it again, so that
``--tracking-uri``, ``--episodes``/``--seed`` or ``--policy``/``--set`` take the same values and
read the same in every command's help. Each function adds its options in the order the help
lists them.
"""

from __future__ import annotations

import argparse
from typing import Any, TypeAlias

from dlsched.runs.commands.argument_types import output_folder, positive_int, seed, tracking_uri
from dlsched.runs.parser import ListOption

#: The action ``add_subparsers`` returns: a command's parser, or a subcommand's, is added to it.
#: (A string: argparse's class takes no subscript at run time.)
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: The help of ``--tracking-uri`` in the commands that track in MLflow.
TRACKING_URI_HELP = (
    "MLflow tracking URI, used when MLFLOW_TRACKING_URI is unset "
    "(default sqlite:///mlflow.db, a file in the working directory)"
)


def add_command_as_written(
    subparsers: Subcommands, name: str, help: str, description: str
) -> argparse.ArgumentParser:
    """Add command ``name`` whose help shows ``description`` as written, its line breaks and
    paragraphs kept (a module's text of several paragraphs); the parser to add its options to.

    Args:
        subparsers: where the command is added.
        name: the command's name.
        help: its line in the listing of the commands.
        description: what its own help says first.
    """
    return subparsers.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_command_with_actions(
    subparsers: Subcommands,
    name: str,
    help: str,
    description: str,
    *,
    dest: str = "action",
    metavar: str = "ACTION",
    formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter,
) -> Subcommands:
    """Add command ``name`` made of subcommands, one of which must be named (``dlsched docker
    cleanup``); the action to add them to.

    Args:
        subparsers: where the command is added.
        name: the command's name.
        help: its line in the listing of its parent's commands.
        description: what its own help says first.
        dest: the attribute of the parsed arguments that names the subcommand given.
        metavar: how the usage line names the subcommand.
        formatter_class: how its help is laid out (``argparse.RawDescriptionHelpFormatter``
            keeps the description's lines).
    """
    parser = subparsers.add_parser(
        name, help=help, description=description, formatter_class=formatter_class
    )
    return parser.add_subparsers(dest=dest, required=True, metavar=metavar)


def add_tracking_uri(parser: argparse.ArgumentParser, help: str = TRACKING_URI_HELP) -> None:
    """Add ``--tracking-uri``: the MLflow store, a non-empty URI (default: none given)."""
    parser.add_argument("--tracking-uri", type=tracking_uri, help=help)


def add_evaluation_outputs(
    parser: argparse.ArgumentParser, *, records_help: str, no_tracking_help: str
) -> None:
    """Add the options of what a command that evaluates policies prints and where it keeps the
    episodes: ``--json``, ``--tracking-uri``, ``--experiment`` (default: the scenario's name),
    ``--out`` (the folder of the local records, ``records_help``) and ``--no-tracking``
    (``no_tracking_help``). :func:`~dlsched.runs.commands.argument_types.local_records_folder`
    reads the last two."""
    parser.add_argument("--json", action="store_true", help="print only JSON on stdout")
    add_tracking_uri(parser)
    parser.add_argument(
        "--experiment", help="MLflow experiment name (default: the scenario's name)"
    )
    parser.add_argument("--out", type=output_folder, help=records_help)
    parser.add_argument("--no-tracking", action="store_true", help=no_tracking_help)


def add_policies(parser: argparse.ArgumentParser, *, policy_help: str, set_example: str) -> None:
    """Add the required ``--policy`` (a list, ``policy_help``) and the repeatable ``--set
    POLICY.PARAM=VALUE`` that sets their parameters (``set_example`` one of them), which
    :func:`~dlsched.runs.commands.evaluate.parse_settings` reads."""
    parser.add_argument(
        "--policy", required=True, action=ListOption, metavar="P[,P...]", help=policy_help
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="POLICY.PARAM=VALUE",
        help=f"set a policy parameter (repeatable), e.g. --set {set_example}",
    )


def add_episodes(
    parser: argparse.ArgumentParser, *, default: int | None, episodes_help: str
) -> None:
    """Add ``--episodes`` (how many, ``default``; ``episodes_help``) and ``--seed`` (the first,
    0): the episodes run on seeds ``seed`` to ``seed + episodes - 1``."""
    parser.add_argument("--episodes", type=positive_int, default=default, help=episodes_help)
    parser.add_argument("--seed", type=seed, default=0, help="seed of the first episode (0)")


def add_config_option(
    parser: argparse._ActionsContainer, config: object, flag: str, help: str, **settings: Any
) -> None:
    """Add ``flag`` (``settings``: its other ``add_argument`` settings), which sets ``config``'s
    field of the same name (``--eval-every``: ``eval_every``): its default is the field's value
    there (an enum's value), said in brackets after ``help``."""
    default = getattr(config, flag.removeprefix("--").replace("-", "_"))
    parser.add_argument(
        flag, default=getattr(default, "value", default), help=f"{help} (%(default)s)", **settings
    )


def add_settings_option(
    parser: argparse._ActionsContainer, flag: str, what: str, example: str
) -> None:
    """Add ``flag KEY=VALUE``, repeatable: an argument of ``what`` (``example`` one), the
    strings as given (:func:`~dlsched.runs.training.settings_text.parse_settings` reads them)."""
    parser.add_argument(
        flag,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"an argument of {what} (repeatable), e.g. {flag} {example}",
    )
