"""Command-line pieces shared by `dataflex run` and `dataflex compare`:
one-line errors, and flags generated from `RunOptions`.

Each `RunOptions` field becomes one flag (`learning_rate` -> `--learning-rate`) whose type,
default, choices and help come from the field, so the flags never repeat a default. A bool field
that defaults to False is a switch (`--overwrite`); one that defaults to True is turned off with
`--no-<name>` (`--no-progress`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import fields

from .options import RunOptions, option_flag

EXIT_BAD_INPUT = 2


def fail(message: str) -> int:
    """Print `message` as a `dataflex: error: ...` line on stderr; return the bad-input exit code.

    Each line of `message` stays a line (a list of refused strategies, one each); the spaces inside a line are
    folded (its indent kept), so a message that wraps in the source prints as one line.
    """
    lines = [line[: len(line) - len(line.lstrip())] + " ".join(line.split()) for line in str(message).splitlines()]
    text = "\n".join(line for line in lines if line)
    print(f"dataflex: error: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


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
    (
        """The ``--help`` text of a `RunOptions` field: its help, its default and its paper (argparse-escaped).

    An option that is on by default has a ``--no-<name>`` flag, whose help is the field's ``off_help``.
    """
        ""
    )
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
        parser.add_argument(
            flag, dest=name, type=kind, default=option.default, choices=meta.get("choices"), help=option_help(option)
        )


def run_option_names() -> list[str]:
    """Every `RunOptions` field: the flags of `dataflex run`."""
    return [option.name for option in fields(RunOptions)]


def shared_option_names() -> list[str]:
    """The `RunOptions` fields every run of a `dataflex compare` shares (not the per-run ones): its run flags."""
    return [option.name for option in fields(RunOptions) if not option.metadata["per_run"]]


def options_from_args(args: argparse.Namespace, names: Iterable[str]) -> dict:
    """The named `RunOptions` fields read from parsed arguments (added by `add_option_arguments`)."""
    return {name: getattr(args, name) for name in names}
