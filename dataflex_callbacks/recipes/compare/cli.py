"""The `dataflex compare` subcommand: its arguments and its handler."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import fields

from ..arguments import add_option_arguments, fail, options_from_args, shared_option_names
from .grid import CompareSettings
from .settings import EVAL_POINTS_DEFAULT

DEFAULT_STRATEGIES = "baseline,difffilter,ar,dump_ucb"
DEFAULT_NUM_SEEDS = 3  # neither --seeds nor --num-seeds: seeds 0, 1, 2
# Sized so the default grid (4 strategies x 3 seeds) finishes well under 10 minutes on a 2-core CPU: the
# testbed's main-job length (60 steps), and 100 steps of the toy suite's randomly initialised model.
# The testbed's: 200 steps of plain GRPO at its tuned recipe (16 prompts x 8 completions, lr 1e-4), 1.5 passes through
# its 2,100 training prompts: plain GRPO is still rising in the last third (docs/benchmarks.md, the sweep).
DEFAULT_BUDGETS = {"testbed": "completions:25600", "toy": "steps:100"}
DEFAULT_TRAIN_BUDGET = "steps:100"  # with --train, as compare(train=...) defaults
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
        default=None,
        help=_help("seeds", f"0 to {DEFAULT_NUM_SEEDS - 1}") + "; seeds only: one seed (11), a list (0,5,7) or an "
        "inclusive range (11-13); --num-seeds gives a count",
    )
    compare.add_argument(
        "--num-seeds",
        type=int,
        default=None,
        help=f"run seeds 0 to N-1 (default: {DEFAULT_NUM_SEEDS}); give this or --seeds, not both",
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
    compare.add_argument(
        "--eval-points", type=int, default=None, help=_help("eval_points", f"{EVAL_POINTS_DEFAULT} for TRL runs")
    )
    compare.add_argument("--train", default=None, help=_help("train", "none: TRL runs built by dataflex"))
    compare.add_argument("--target", type=float, default=None, help=_help("target", "none"))
    compare.add_argument("--cost-model", default=None, help=_help("cost_model", "none"))
    compare.add_argument(
        "--tune-learning-rates", default=None, help=_help("tune_learning_rates", "none") + "; comma-separated"
    )
    compare.add_argument(
        "--strategy-recipe",
        dest="strategy_recipes",
        action="append",
        default=None,
        help=_help("strategy_recipes", "none: every run at the shared recipe") + "; once per strategy",
    )
    compare.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, help=_help("output_dir"))
    compare.add_argument(
        "--overwrite", action="store_true", help="discard the finished runs in --output-dir and start over"
    )
    compare.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="hide the progress bar over the whole grid and the start-up lines naming the seeds, model, learning "
        "rate and data (shown when this flag is not given)",
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
        default = DEFAULT_TRAIN_BUDGET if args.train is not None else DEFAULT_BUDGETS.get(args.suite, "steps:60")
        budget = Budget.parse(args.budget if args.budget is not None else default)
    except ValueError as error:
        raise CompareInputError(str(error)) from None
    base = RunOptions(**options_from_args(args, shared_option_names()))
    jobs = args.jobs if args.jobs is not None else max(1, min(2, os.cpu_count() or 1))
    command = "dataflex " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if args.seeds is not None and args.num_seeds is not None:
        raise CompareInputError(
            f"--seeds {args.seeds} and --num-seeds {args.num_seeds} both choose the seeds; give --seeds for the seeds "
            f"themselves (0,5,7 or 11-13) or --num-seeds for a count (seeds 0 to N-1), not both"
        )
    if args.seeds is not None:
        seeds = parse_seeds(args.seeds)
    else:
        seeds = parse_seeds(DEFAULT_NUM_SEEDS if args.num_seeds is None else args.num_seeds, flag="--num-seeds")
    return CompareSettings(
        strategies=parse_strategies(args.strategies),
        seeds=seeds,
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
        tune_learning_rates=args.tune_learning_rates,
        strategy_recipes=args.strategy_recipes,
        train=args.train,
    )


def verdict_console(settings, records: list[dict], unavailable: str | None, tuned: list[dict] = ()) -> list[str]:
    """The verdict that ends the console summary: report.md's (`verdict.verdict_lines`), without markdown."""
    from .report import paired_differences
    from .verdict import verdict_lines

    lines = verdict_lines(settings, records, paired_differences(settings, records), unavailable, tuned)
    return ["verdict:", *(f"  {line.replace('`', '')}" for line in lines)]


def grid_line(settings) -> str:
    """The first console line of `dataflex compare`: the strategies and the seeds every one of them runs with."""
    seeds = ", ".join(map(str, settings.seeds))
    runs = len(settings.strategies) * len(settings.seeds)
    return (
        f"dataflex compare: {len(settings.strategies)} strategies ({', '.join(map(str, settings.strategies))}) x "
        f"{len(settings.seeds)} seed(s) ({seeds}) = {runs} runs" + _sweep_text(settings)
    )


def _sweep_text(settings) -> str:
    """What `--tune-learning-rates` adds to the grid's console line: the plain-GRPO runs at the other rates."""
    extra = settings.tuning_runs()
    if not extra:
        return ""
    rates = sorted({run.learning_rate for run in extra})
    return f", plus {len(extra)} of {settings.baseline} at learning rate{'s' if len(rates) > 1 else ''} " + ", ".join(
        f"{rate:g}" for rate in rates
    )


def summary_lines(settings, outcome) -> list[str]:
    """The lines `dataflex compare` prints: what the headline measures, the compute each strategy needs to reach
    the baseline's final headline (and `settings.target`), the paired difference of each strategy's headline to
    the baseline with its paired standard error (the comparison's resolution), then the verdict.

    With one seed there is a difference but no interval and no test: the line says so instead of
    printing NaN bounds.
    """
    from .decomposition import decomposition_console
    from .reach import headline_console, headline_description
    from .report import comparison_warnings, paired_difference, significance_text
    from .tuning import tuning_console

    degenerate, cautions = comparison_warnings(settings, outcome.records)
    if degenerate:  # a "+0.000 ... not significant" line would read as a result
        unavailable = "all held-out accuracies are equal (see the warning above)"
        warnings = [f"warning: {text}" for text in [degenerate, *cautions]]
        return warnings + verdict_console(settings, outcome.records, unavailable)
    lines = [f"warning: {text}" for text in cautions]
    lines.append(f"headline: {headline_description(outcome.records)}")
    lines += headline_console(outcome.records, settings.strategies, settings.baseline, settings.target)
    lines += decomposition_console(outcome.records, settings.strategies, settings.baseline, settings.target)
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
            f"p={paired['p_value']:.3f} " + significance_text(paired).replace("**", "")
        )
    tuned = getattr(outcome, "tuned", [])  # an outcome made without the sweep (a stand-in) has none
    lines += tuning_console(settings, outcome.records, tuned)
    return lines + verdict_console(settings, outcome.records, None, tuned)


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
    if settings.progress:
        print(grid_line(settings.as_read()), flush=True)
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
    print(f"report: {paths['report']}")  # before the summary, so the console ends with the verdict
    for line in summary_lines(results.settings, outcome):  # as the report reads them: strategies by their labels
        print(line)
    return 0
