"""``dlsched models convert``: convert a model saved by dlsched 0.1.0 into files that are data.

A model folder of dlsched 0.1.0 holds pickles (its statistics, ``vec_normalize.pkl``, and the
entries SB3 pickles into ``model.zip`` that its card does not record); dlsched no longer loads
it, since unpickling a file runs any code it names. This command unpickles it once, only with
``--trust-pickle``, and writes the statistics as JSON and a card that records the rest
(:mod:`dlsched.runs.model_conversion`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlsched.runs.commands.options import Subcommands, add_command_with_actions, add_tracking_uri


def register(subparsers: Subcommands) -> None:
    """Add ``dlsched models`` (with its ``convert`` subcommand) to the CLI."""
    actions = add_command_with_actions(
        subparsers,
        "models",
        "convert models saved by an earlier dlsched into files that are data",
        "Manage the files of trained models.",
    )
    command = actions.add_parser(
        "convert",
        help="convert a model saved by dlsched 0.1.0 (this UNPICKLES it: --trust-pickle)",
        description=(
            "Convert a model saved by dlsched 0.1.0 (vec_normalize.pkl beside model.zip, card "
            "format 3 or earlier), which dlsched no longer loads, into a model folder that "
            "loads without unpickling anything: its statistics as JSON (normalizer.json) and a "
            "card that records what SB3 pickled into model.zip, which is kept as it is. "
            "Converting UNPICKLES the model's files, as dlsched 0.1.0 loaded them, and "
            "unpickling a file runs any code it names: convert only a model whose origin you "
            "trust, and say so with --trust-pickle. The converted model must act exactly as "
            "the original on probe observations, or nothing is written. A folder is converted "
            "in place unless --output is given; a model in an MLflow store needs --output."
        ),
    )
    command.add_argument(
        "model",
        metavar="MODEL",
        help="the model: its folder or model.zip, runs:/<run_id>/model or models:/<name>/<version>",
    )
    command.add_argument(
        "--trust-pickle",
        action="store_true",
        help="unpickle the model's files to convert them; this runs any code they name, so "
        "give it only for a model whose origin you trust (required)",
    )
    command.add_argument(
        "--output",
        type=Path,
        metavar="DIR",
        help="write the converted model to this new folder (default: convert the folder in "
        "place, removing vec_normalize.pkl)",
    )
    add_tracking_uri(command, help="the MLflow store of a runs:/ or models:/ MODEL")
    command.set_defaults(handler=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    """Convert ``args.model``; print what was unpickled and where the result is. Exit code 0."""
    # imported here: it loads SB3 and torch, which the command line's parser does not need
    from dlsched.policies.learned import CARD_FORMAT
    from dlsched.runs.model_conversion import convert

    conversion = convert(args.model, args.output, args.trust_pickle, args.tracking_uri)
    if not conversion.converted:
        print(
            f"{args.model}: saved as data already (card format {conversion.card_format}); "
            "nothing to convert"
        )
        return 0
    print(
        f"unpickled {', '.join(conversion.unpickled)} of {args.model} (trusted with "
        "--trust-pickle: unpickling runs any code a file names)"
    )
    print(
        f"converted into {conversion.destination}: statistics as JSON, card format "
        f"{conversion.card_format} -> {CARD_FORMAT}, model.zip unchanged; it acts as the "
        f"original on {conversion.probes} probe observations, bit for bit"
    )
    return 0
