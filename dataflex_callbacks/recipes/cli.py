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

EXIT_BAD_INPUT = 2


def _fail(message: str) -> int:
    text = " ".join(str(message).split())  # one line, whatever the message held
    print(f"dataflex: error: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line on stderr (no usage block) and exit code 2."""

    def error(self, message: str):
        _fail(f"{message} (see `{self.prog} --help`)")
        sys.exit(EXIT_BAD_INPUT)


def _quiet_environment(args: argparse.Namespace) -> None:
    # The built-in default needs no network, so it never touches it; a hub --model or --dataset
    # given by the user is downloaded as usual. An explicit user setting wins either way.
    if getattr(args, "model", None) is None and getattr(args, "dataset", None) is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # errors stay one line on stderr


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """Model, data and training options shared by `dataflex run` and `dataflex compare`."""
    parser.add_argument("--model", default=None, help="hub id or local path (default: built-in tiny model)")
    parser.add_argument("--dataset", default=None, help="datasets name or local jsonl/json/parquet/csv (default: built-in suite)")
    parser.add_argument("--prompt-column", default="prompt")
    parser.add_argument("--answer-column", default="answer")
    parser.add_argument("--domain-column", default=None)
    parser.add_argument("--split", default="train", help="split of a hub --dataset (default: train)")
    parser.add_argument("--verifier", default="auto", choices=("auto", "numeric", "exact"))
    parser.add_argument("--domains", default=None, help="comma-separated built-in domains (default: all)")
    parser.add_argument("--n-train", type=int, default=200, help="training prompts per built-in domain (default: 200)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--max-completion-length", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def training_options(args: argparse.Namespace) -> dict:
    """`RunOptions` fields from the arguments added by `add_training_arguments`."""
    return dict(
        model=args.model, dataset=args.dataset, prompt_column=args.prompt_column, answer_column=args.answer_column,
        domain_column=args.domain_column, split=args.split, verifier=args.verifier,
        domains=[d.strip() for d in args.domains.split(",") if d.strip()] if args.domains is not None else None, n_train=args.n_train,
        num_generations=args.num_generations, prompts_per_step=args.prompts_per_step,
        learning_rate=args.learning_rate, max_completion_length=args.max_completion_length,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="dataflex", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="GRPO-train a model with a data strategy and write a run folder")
    run.add_argument("--strategy", default="diffband", help="preset name, YAML/JSON file, or 'none' (default: diffband)")
    run.add_argument("--steps", type=int, default=150, help="optimizer steps (default: 150)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--output-dir", default=None, help="run folder (default: runs/<strategy>-<timestamp>)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run in --output-dir")
    add_training_arguments(run)

    commands.add_parser("list", help="print every strategy component and preset with a one-line description")

    validate = commands.add_parser("validate", help="check a strategy config file and print the resolved config")
    validate.add_argument("file")

    from dataflex_callbacks.recipes.compare.cli import add_compare_parser

    add_compare_parser(commands)
    return parser


def _command_run(args) -> int:
    from dataflex_callbacks.recipes.runner import RunInputError, RunOptions, check_run_options, run_training

    options = RunOptions(
        strategy=args.strategy, steps=args.steps, seed=args.seed, output_dir=args.output_dir,
        overwrite=args.overwrite, progress=not args.no_progress, **training_options(args),
    )
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
    print("held-out accuracy   before  after")
    for domain in result.eval_after:
        print(f"  {domain:<16} {result.eval_before.get(domain, float('nan')):6.2f} {result.eval_after[domain]:6.2f}")
    return 0


def _command_list(args) -> int:
    from dataflex_callbacks import list_components, list_presets
    from dataflex_callbacks.registry import KINDS, describe

    for kind in KINDS:
        print(f"{kind}s:")
        for name in list_components(kind):
            print(f"  {name:<24} {describe(kind, name)}")
    print("presets:")
    for name, description in list_presets().items():
        print(f"  {name:<24} {description}")
    return 0


def _command_validate(args) -> int:
    if not os.path.isfile(args.file):
        return _fail(f"strategy file {args.file!r} does not exist")
    try:
        from dataflex_callbacks import build_strategy
    except ImportError as error:
        return _fail(f"the strategy library is not available in this install ({error})")
    try:
        strategy = build_strategy(args.file)
    except Exception as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _fail(f"invalid strategy {args.file!r}: {message}")
    print(json.dumps(strategy.config, indent=2, sort_keys=True, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `dataflex` console script; returns the exit code (2 for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_environment(args)
    if args.command == "compare":
        from dataflex_callbacks.recipes.compare.cli import command_compare

        return command_compare(args, argv)
    handlers = {"run": _command_run, "list": _command_list, "validate": _command_validate}
    try:
        return handlers[args.command](args)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
