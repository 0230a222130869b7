"""Command-line pieces shared by `dataflex run` and `dataflex compare`: one-line errors, and flags generated from `RunOptions`.

Each `RunOptions` field becomes one flag (`learning_rate` -> `--learning-rate`) whose type,
default, choices and help come from the field, so the flags never repeat a default. A bool field
that defaults to False is a switch (`--overwrite`); one that defaults to True is turned off with
`--no-<name>` (`--no-progress`).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import fields
from typing import Iterable

from .options import RunOptions, option_flag

EXIT_BAD_INPUT = 2
EARLIER_FLAGS = {"domain_key": "--domain-column"}  # a field's earlier flag, accepted for one release


def fail(message: str) -> int:
    """Print `message` as one `dataflex: error: ...` line on stderr; return the bad-input exit code."""
    text = " ".join(str(message).split())  # one line, whatever the message held
    print(f"dataflex: error: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


class SpelledFlag(argparse.Action):
    """A flag of a field that has two spellings (the flag and its earlier name): giving both, with different values, is an error.

    Either spelling sets the same field, so argparse alone would let the last one win silently.
    """

    def __call__(self, parser, namespace, values, option_string=None):
        given = f"_spelled_{self.dest}"
        earlier = getattr(namespace, given, None)
        if earlier is not None and earlier[0] != option_string and earlier[1] != values:
            flag = option_flag(self.dest)
            parser.error(f"{earlier[0]} {earlier[1]} and {option_string} {values} set the same setting: "
                         f"{EARLIER_FLAGS[self.dest]} is the deprecated spelling of {flag}; give only {flag}")
        setattr(namespace, given, (option_string, values))
        setattr(namespace, self.dest, values)


class EarlierFlag(SpelledFlag):
    """An option's earlier flag: sets the same field, and warns (on stderr too) naming the flag to use."""

    def __init__(self, *args, new_flag: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        message = f"{option_string} is deprecated; use {self.new_flag}"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        print(f"dataflex: warning: {message}", file=sys.stderr)


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str):
        fail(f"{message} (see `{self.prog} --help`)")
        sys.exit(EXIT_BAD_INPUT)


def _shown(option) -> str:
    if "shown_default" in option.metadata:
        return option.metadata["shown_default"]
    return str(option.default)


def option_help(option) -> str:
    """The ``--help`` text of a `RunOptions` field: its help, its default and its paper (argparse-escaped).

    An option that is on by default has a ``--no-<name>`` flag, whose help is the field's ``off_help``.
    """""
    text = option.metadata["help"]
    if option.default is True:
        text = option.metadata["off_help"]  # the flag is --no-<name>: its help says what turning it off does
    elif option.default is not False:
        text += f" (default: {_shown(option)})"
    if "paper" in option.metadata:
        text += f"; see {option.metadata['paper']}"
    return text.replace("%", "%%")


def add_option_arguments(parser, names: Iterable[str]) -> None:
    """Add one flag per named `RunOptions` field to `parser` (or an argument group)."""
    by_name = {option.name: option for option in fields(RunOptions)}
    for name in names:
        option = by_name[name]
        meta = option.metadata
        flag = option_flag(name)
        if isinstance(option.default, bool):
            if option.default:
                parser.add_argument("--no-" + flag[2:], dest=name, action="store_false", help=option_help(option))
            else:
                parser.add_argument(flag, dest=name, action="store_true", help=option_help(option))
            continue
        if "from_text" in meta:
            kind = meta["from_text"]
        elif "rule" in meta:
            kind = int if meta["rule"].integer else float
        else:
            kind = str
        spelled = {"action": SpelledFlag} if name in EARLIER_FLAGS else {}
        parser.add_argument(flag, dest=name, type=kind, default=option.default, choices=meta.get("choices"),
                            help=option_help(option), **spelled)
        if name in EARLIER_FLAGS:
            parser.add_argument(EARLIER_FLAGS[name], dest=name, type=kind, action=EarlierFlag, new_flag=flag,
                                default=argparse.SUPPRESS, help=f"deprecated: use {flag}")


def run_option_names() -> list[str]:
    """Every `RunOptions` field: the flags of `dataflex run`."""
    return [option.name for option in fields(RunOptions)]


def shared_option_names() -> list[str]:
    """The `RunOptions` fields every run of a `dataflex compare` shares (not the per-run ones): its run flags."""
    return [option.name for option in fields(RunOptions) if not option.metadata["per_run"]]


def options_from_args(args: argparse.Namespace, names: Iterable[str]) -> dict:
    """The named `RunOptions` fields read from parsed arguments (added by `add_option_arguments`)."""
    return {name: getattr(args, name) for name in names}
