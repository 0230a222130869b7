"""The `dataflex compare` subcommand: its arguments and its handler."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import fields

from ..arguments import add_option_arguments, fail, options_from_args, shared_option_names
from .grid import CompareSettings

DEFAULT_STRATEGIES = "baseline,difffilter,ar,dump_ucb"
DEFAULT_SEEDS = "3"
# Sized so the default grid (4 strategies x 3 seeds) finishes well under 10 minutes on a 2-core CPU: the
# testbed's main-job length (60 steps), and 100 steps of the toy suite's randomly initialised model.
# The testbed's: 400 steps of plain GRPO (16 prompts x 8 completions), 3 passes through its 2,100 training prompts.
DEFAULT_BUDGETS = {"testbed": "completions:51200", "toy": "steps:100"}
_SETTINGS = {f.name: f for f in fields(CompareSettings)}
DEFAULT_OUTPUT_DIR = _SETTINGS["output_dir"].default


def _help(name: str, default: str | None = None) -> str:
    """The help of `CompareSettings` field `name`, with the flag's default."""
    shown = _SETTINGS[name].default if default is None else default
    return f"{_SETTINGS[name].metadata['help']} (default: {shown})".replace("%", "%%")


def add_compare_parser(commands) -> None:
    """Add `compare` to the `dataflex` subcommands: its own flags, then one per `RunOptions` field every run shares."""
    compare = commands.add_parser(
        "compare",
        help="train every strategy with every seed under one budget and report paired intervals",
        description="Train every strategy with every seed (same initial weights and data per seed, same budget) and "
        "write report.md, results.csv and figures. Re-running the same command resumes: finished runs "
        "are kept.",
    )
    compare.add_argument(
        "--strategies", default=DEFAULT_STRATEGIES, help=_help("strategies", DEFAULT_STRATEGIES) + "; comma-separated"
    )
    compare.add_argument(
        "--seeds",
        default=DEFAULT_SEEDS,
        help=_help("seeds", DEFAULT_SEEDS) + "; a count (3: seeds 0,1,2) or a list (0,5,7)",
    )
    compare.add_argument(
        "--budget",
        default=None,
        help=_help("budget", f"{DEFAULT_BUDGETS['testbed']} on the testbed, {DEFAULT_BUDGETS['toy']} with --suite toy"),
    )
    compare.add_argument("--baseline", default=None, help=_help("baseline", "the first strategy"))
    compare.add_argument("--jobs", type=int, default=None, help=_help("jobs", "2, at most the CPU count"))
    compare.add_argument(
        "--runs-per-gpu", type=int, default=_SETTINGS["runs_per_gpu"].default, help=_help("runs_per_gpu")
    )
    compare.add_argument("--executor", default=_SETTINGS["executor"].default, help=_help("executor"))
    compare.add_argument("--address", dest="ray_address", default=None, help=_help("ray_address", "none"))
    compare.add_argument("--eval-points", type=int, default=_SETTINGS["eval_points"].default, help=_help("eval_points"))
    compare.add_argument("--target", type=float, default=None, help=_help("target", "none"))
    compare.add_argument("--cost-model", default=None, help=_help("cost_model", "none"))
    compare.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, help=_help("output_dir"))
    compare.add_argument(
        "--overwrite", action="store_true", help="discard the finished runs in --output-dir and start over"
    )
    compare.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help=_SETTINGS["progress"].metadata["help"] + " (default: on; this flag turns it off)",
    )
    add_option_arguments(
        compare.add_argument_group("options every run shares (RunOptions fields)"), shared_option_names()
    )


def settings_from_args(args, argv: list[str] | None = None):
    """Build `CompareSettings` from parsed arguments (raises `CompareInputError` on a bad value)."""
    from ..options import RunOptions
    from .budget import Budget
    from .grid import CompareInputError, parse_seeds, parse_strategies

    try:
        budget = Budget.parse(args.budget if args.budget is not None else DEFAULT_BUDGETS.get(args.suite, "steps:60"))
    except ValueError as error:
        raise CompareInputError(str(error)) from None
    base = RunOptions(**options_from_args(args, shared_option_names()))
    jobs = args.jobs if args.jobs is not None else max(1, min(2, os.cpu_count() or 1))
    command = "dataflex " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    return CompareSettings(
        strategies=parse_strategies(args.strategies),
        seeds=parse_seeds(args.seeds),
        budget=budget,
        base=base,
        output_dir=args.output_dir,
        baseline=args.baseline,
        jobs=jobs,
        eval_points=args.eval_points,
        runs_per_gpu=args.runs_per_gpu,
        executor=args.executor,
        ray_address=args.ray_address,
        progress=args.progress,
        command=command,
        target=args.target,
        cost_model=args.cost_model,
    )


def summary_lines(settings, outcome) -> list[str]:
    """The lines `dataflex compare` prints: what the headline measures, the compute each strategy needs to reach
    the baseline's final headline (and `settings.target`), then the paired difference of each strategy's headline to
    the baseline with its paired standard error (the comparison's resolution).

    With one seed there is a difference but no interval and no test: the line says so instead of
    printing NaN bounds.
    """
    from .reach import headline_console, headline_description
    from .report import comparison_warnings, paired_difference, verdict

    degenerate, cautions = comparison_warnings(settings, outcome.records)
    if degenerate:  # a "+0.000 ... not significant" line would read as a result
        return [f"warning: {text}" for text in [degenerate, *cautions]]
    lines = [f"warning: {text}" for text in cautions]
    lines.append(f"headline: {headline_description(outcome.records)}")
    lines += headline_console(outcome.records, settings.strategies, settings.baseline, settings.target)
    lines.append(f"headline after training, strategy - {settings.baseline} paired by seed [95% interval], paired SE:")
    for strategy in settings.strategies:
        if strategy == settings.baseline:
            continue
        paired = paired_difference(outcome.records, strategy, settings.baseline)
        interval = paired["interval"]
        head = f"  {strategy:<16} - {settings.baseline}: {interval.mean:+.3f}"
        if interval.n < 2:
            lines.append(f"{head} (interval and p-value n/a: needs >= 2 seeds, got {interval.n})")
            continue
        lines.append(
            f"{head} [{interval.low:+.3f}, {interval.high:+.3f}] SE {paired['standard_error']:.4f} "
            f"p={paired['p_value']:.3f} " + verdict(paired).replace("**", "")
        )
    return lines


def command_compare(args, argv: list[str] | None = None) -> int:
    """Handler of `dataflex compare`: run the grid (resuming), write the report, print the summary table.

    Bad input exits with code 2 and one line on stderr, before any folder is written.
    """
    from dataflex_callbacks.recipes.runner import RunInputError

    from .api import run_comparison
    from .cost_model import CostModelError
    from .grid import CompareInputError
    from .workers import WorkerDiedError

    def warn(message: str) -> None:
        print(f"dataflex: warning: {' '.join(str(message).split())}", file=sys.stderr)

    try:
        settings = settings_from_args(args, argv)  # numbers and names first: a typo costs no torch import
    except (CompareInputError, CostModelError, RunInputError) as error:
        return fail(str(error))
    import torch

    torch.set_num_threads(1)  # one core per run; --jobs sets how many run at once
    try:
        results = run_comparison(settings, overwrite=args.overwrite, on_warning=warn)
    except (CompareInputError, RunInputError) as error:
        return fail(str(error))
    except WorkerDiedError as error:
        print(f"dataflex: error: {error}", file=sys.stderr)
        return 1
    outcome, paths = results.outcome, results.files
    print(
        f"comparison folder: {settings.output_dir} ({outcome.wall_seconds:.0f}s; "
        f"{len(outcome.computed)} runs computed, {len(outcome.reused)} reused)"
    )
    from .report import held_out_sizes

    print(f"held-out set: {held_out_sizes(outcome.records)}")
    for line in summary_lines(settings, outcome):
        print(line)
    print(f"report: {paths['report']}")
    return 0
