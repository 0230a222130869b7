"""The `dataflex` command: `run` (train with a strategy), `compare` (strategies x seeds), `list`, `validate FILE`.

Bad input of any kind (an argument argparse cannot read, a number out of range, a path that
cannot be a folder, unusable data) prints exactly one line on stderr, `dataflex: error: ...`,
exits with code 2, loads no model and leaves no output folder behind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap

from .arguments import OneLineParser, add_option_arguments, options_from_args, run_option_names
from .arguments import fail as _fail
from .compare.cli import add_compare_parser, command_compare
from .validate import CORE_RULES_NOTE, HOSTS


def _quiet_environment(args: argparse.Namespace) -> None:
    # The built-in default needs no network, so it never touches it; a hub --model or --dataset
    # given by the user is downloaded as usual. An explicit user setting wins either way.
    if getattr(args, "model", None) is None and getattr(args, "dataset", None) is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # errors stay one line on stderr


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="dataflex", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run",
        help="GRPO-train a model with a data strategy and write a run folder",
        description="GRPO-train a model with a data strategy and write a run folder "
        "(config.json, metrics.jsonl, eval.json, plot.png). Every flag is a "
        "RunOptions field (dataflex_callbacks/recipes/options.py).",
    )
    add_option_arguments(run, run_option_names())

    listing = commands.add_parser("list", help="print every strategy component and preset with a one-line description")
    listing.add_argument(
        "--params",
        action="store_true",
        help="also print, under each component, the parameters a config's params: may set, "
        "with their defaults and meaning",
    )

    validate = commands.add_parser(
        "validate",
        help="check a strategy config file (or a verl config) for the host that runs it and print the resolved config",
    )
    validate.add_argument("file")
    validate.add_argument(
        "--host",
        choices=HOSTS,
        default=None,
        help="check with this host's adapter too, as it builds the strategy (default: verl for a "
        "verl config, i.e. a file with trainer:/actor_rollout_ref:/... sections; else the "
        "core rules every host applies)",
    )

    add_compare_parser(commands)
    return parser


def _command_run(args) -> int:
    from dataflex_callbacks.recipes.runner import RunInputError, RunOptions, check_run_options, run_training

    options = RunOptions(**options_from_args(args, run_option_names()))
    try:
        check_run_options(options)  # numbers first: a typo costs no torch import
    except RunInputError as error:
        return _fail(str(error))
    import torch

    # Tiny models gain nothing from intra-op threads, and fixed threads keep CPU runs reproducible.
    torch.set_num_threads(1)
    try:
        import datasets

        datasets.disable_progress_bars()  # a bad-input error stays one line on stderr
    except ImportError:
        pass
    try:
        result = run_training(options)
    except RunInputError as error:
        return _fail(str(error))
    print(f"run folder: {result.output_dir} ({result.wall_seconds:.0f}s)")
    from .held_out import fallback_warning, headline_line

    sampled = result.sampled  # sampled pass@1 columns beside the greedy ones, when it was computed
    heading = "" if sampled is None else f"   sampled pass@1 (k={sampled['k']}, T={sampled['temperature']:g})"
    print(f"held-out greedy     before  after{heading}")
    for domain in result.eval_after:
        line = f"  {domain:<16} {result.eval_before.get(domain, float('nan')):6.2f} {result.eval_after[domain]:6.2f}"
        if sampled is not None:
            line += f"   {sampled['before'].get(domain, float('nan')):6.2f} {sampled['after'][domain]:6.2f}"
        print(line)
    print(headline_line(result.headline))
    fallback = fallback_warning(result.headline)  # --eval-samples 0: said, not switched silently
    if fallback is not None:
        print(f"dataflex run: warning: {fallback}", file=sys.stderr)
    return 0


def _command_list(args) -> int:
    from dataflex_callbacks import list_components, list_presets
    from dataflex_callbacks.registry import KINDS, component_params, describe

    for kind in KINDS:
        print(f"{kind}s:")
        for name in list_components(kind):
            print(f"  {name:<24} {describe(kind, name)}")
            if args.params:
                for param in component_params(kind, name):
                    default = "(required)" if param.required else f"= {param.default!r}"
                    print(
                        textwrap.fill(
                            f"{param.name} {default}: {param.help or '(undocumented)'}",
                            width=100,
                            initial_indent=" " * 6,
                            subsequent_indent=" " * 10,
                        )
                    )
    print("presets:")
    for name, description in list_presets().items():
        print(f"  {name:<24} {description}")
    return 0


def _command_validate(args) -> int:
    if not os.path.isfile(args.file):
        return _fail(f"strategy file {args.file!r} does not exist")
    try:
        from .validate import build_for_host, read_for_host
    except ImportError as error:
        return _fail(f"the strategy library is not available in this install ({error})")
    host = args.host
    try:
        config, host = read_for_host(args.file, args.host)
        strategy = build_for_host(args.file, config, host)
    except Exception as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _fail(f"invalid strategy {args.file!r}{f' for {host}' if host else ''}: {message}")
    print(json.dumps(None if strategy is None else strategy.config.to_dict(), indent=2, sort_keys=True, default=str))
    if host is None:
        print(CORE_RULES_NOTE, file=sys.stderr)
    elif strategy is None:
        print(f"valid for {host}: its dataflex block is disabled (enable: false)", file=sys.stderr)
    else:
        print(f"valid for {host}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `dataflex` console script; returns the exit code (2 for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_environment(args)
    if args.command == "compare":
        return command_compare(args, argv)
    handlers = {"run": _command_run, "list": _command_list, "validate": _command_validate}
    try:
        return handlers[args.command](args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
