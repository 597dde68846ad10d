"""The ``argparse`` pieces every ``dlsched`` command shares: one parser class and two actions.

- :class:`Parser` refuses a command line in one line that says what is wrong, first, then
  where its usage is (``(see dlsched evaluate --help)``); it suggests the closest name for a
  misspelt option (``unrecognized --epsiodes; did you mean --episodes?``), also where the
  misspelling leaves a required option missing, or choice (``--backend dockr``), and prints its
  help texts as plain text: a docstring's reST literals (````dlsched train````) lose their
  backquotes.
- :class:`ListOption` is the one convention for lists: an option given several times, or once
  with comma-separated values (``--policy default,dqoes`` is ``--policy default --policy
  dqoes``).
- :func:`deprecated_alias` keeps an old option's name working, with a warning that names the new
  one, so that a user's scripts do not break when an option is renamed.
- :func:`option_defaults` and :func:`given_options` tell which options of a group were given,
  for a command whose groups apply only with another option (``dlsched train``'s
  ``--engine``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

_UNRECOGNIZED = "unrecognized arguments: "
_REQUIRED = "the following arguments are required: "
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)")
_REST_LITERAL = re.compile(r"``([^`]+)``")


def closest(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate closest to a misspelt ``word``, if one is close enough to be meant."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def plain(text: str) -> str:
    """``text`` without reST literal markup (double backquotes around a command or a name)."""
    return _REST_LITERAL.sub(r"\1", text)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors say what is wrong in one line, first, with the option
    or choice meant where a name is misspelt, and whose help is plain text. Its subcommands'
    parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._words: list[str] = []  # the words of the last parse

    def format_help(self) -> str:
        return plain(super().format_help())

    def parse_known_args(  # type: ignore[override]  # typeshed overloads the namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # kept for error(): argparse says a required option is missing before it says which
        # words it did not recognise, and the missing one is often a misspelt word's
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """Exit 2 with one line that says what is wrong, then where the usage is (not the
        usage itself, which would bury that line)."""
        self.exit(
            2, f"{self.prog}: error: {self.with_suggestion(message)}\n(see {self.prog} --help)\n"
        )

    def with_suggestion(self, message: str) -> str:
        """``message`` with the closest valid name first, where it names a misspelt one; a
        missing required option is said as the misspelt word given for it, if one was."""
        if message.startswith(_REQUIRED):
            unknown = [word for word in self._words if self._unknown_option(word)]
            if unknown:
                return self._unrecognized(unknown)
            return message
        if message.startswith(_UNRECOGNIZED):
            return self._unrecognized(message[len(_UNRECOGNIZED) :].split())
        choice = _INVALID_CHOICE.search(message)
        if choice is not None:
            names = re.findall(r"'([^']*)'", choice["choices"])
            match = closest(choice["value"], names)
            if match is not None:
                return (
                    f"{message[: choice.start()]}invalid choice {choice['value']!r}; did you "
                    f"mean {match!r}? (choose from {choice['choices']})"
                )
        return message

    def _unknown_option(self, word: str) -> bool:
        """Whether ``word`` is a long option this parser does not take (nor abbreviates)."""
        name = word.split("=")[0]
        return (
            name.startswith("--")
            and name != "--"
            and not any(option.startswith(name) for option in self._option_string_actions)
        )

    def _unrecognized(self, words: Sequence[str]) -> str:
        """What is wrong with ``words`` this parser does not take: each unknown option with the
        one meant (the words after one are taken as its value), else the words as they are."""
        options = [word for word in words if word.startswith("-")]
        if not options:
            return _UNRECOGNIZED + " ".join(words)
        known = [name for name in self._option_string_actions if name.startswith("--")]
        meant = {word: closest(word.split("=")[0], known) for word in options}
        if len(options) == 1 and meant[options[0]] is not None:
            return f"unrecognized {options[0]}; did you mean {meant[options[0]]}?"
        return "unrecognized " + ", ".join(
            f"{word} (did you mean {match}?)" if match else word for word, match in meant.items()
        )


def unrecognized(parser: argparse.ArgumentParser, words: Sequence[str]) -> NoReturn:
    """Exit 2 through ``parser`` (a command's) naming ``words`` it does not take."""
    parser.error(_UNRECOGNIZED + " ".join(words))


class ListOption(argparse.Action):
    """Collect a list from an option given several times, each value comma-separated or not.

    The parsed value is a list of the non-empty items in order (``[]`` if never given, unless
    the option has a default).
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        # the default is replaced, not extended, by the first value given
        items = [] if current is None or current is self.default else list(current)
        text = values if isinstance(values, str) else ",".join(map(str, values or ()))
        items += [item.strip() for item in text.split(",") if item.strip()]
        setattr(namespace, self.dest, items)


def deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, **settings: Any) -> None:
    """Accept option ``old`` as ``new`` (same destination), warning on stderr when it is used.

    Args:
        parser: the command's parser; ``new`` must already be one of its options.
        old: the old spelling (``--seeds``).
        new: the option that replaces it (``--episodes``).
        settings: ``add_argument`` settings of the old option (``type``, ...) if they differ
            from ``new``'s.
    """
    target = parser._option_string_actions[new]  # argparse has no public lookup
    prog = parser.prog

    class _Deprecated(argparse.Action):
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            print(
                f"{prog}: warning: {old} is deprecated and will be removed; use {new}",
                file=sys.stderr,
            )
            target(parser, namespace, values, option_string)

    parser.add_argument(
        old,
        dest=target.dest,
        type=settings.pop("type", target.type),
        nargs=settings.pop("nargs", target.nargs),
        metavar=target.metavar,
        action=_Deprecated,
        help=argparse.SUPPRESS,
        **settings,
    )


def option_defaults(*groups: argparse._ArgumentGroup) -> dict[str, tuple[str, object]]:
    """The options of ``groups``, in the order added, as ``{destination: (flag, default)}``
    (the flag an option was added with first)."""
    return {
        action.dest: (action.option_strings[0], action.default)
        for group in groups
        for action in group._group_actions
    }


def given_options(args: argparse.Namespace, options: Mapping[str, tuple[str, object]]) -> list[str]:
    """The flags of ``options`` (:func:`option_defaults`) whose value in ``args`` is not their
    default, in their order: the options a command line gave."""
    return [flag for dest, (flag, default) in options.items() if getattr(args, dest) != default]


def same_named(args: argparse.Namespace, config_type: type, **given: Any) -> dict[str, Any]:
    """The arguments of the dataclass ``config_type`` a command line asks for, by name: each
    field ``args`` holds under the same name as it was parsed, unless ``given`` names it (the
    fields a command reads or renames on the way), then ``given``."""
    parsed = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(config_type)
        if hasattr(args, field.name) and field.name not in given
    }
    return parsed | given
