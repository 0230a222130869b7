"""`compare(...)`: a comparison from Python, the same folder and figures as `dataflex compare`."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from .budget import Budget
from .grid import CompareInputError, GridOutcome, parse_seeds, run_grid
from .settings import CompareSettings


@dataclass
class ComparisonResults:
    """What a comparison produced: one row per run (as in results.csv, the learning-rate sweep's runs named
    `<baseline>@lr<rate>`), the paired differences, the files, and the settings and outcome as the report reads them
    (`CompareSettings.as_read`: every strategy by its label, a strategy file by its `name:`)."""

    runs: list[dict]
    differences: dict[str, dict]
    outcome: GridOutcome
    files: dict[str, str]
    settings: CompareSettings


def run_comparison(
    settings: CompareSettings, overwrite: bool = False, on_warning: Callable[[str], None] | None = None
) -> ComparisonResults:
    """Run the grid of `settings` (resuming finished runs), write report.md, results.csv and figures; return them."""
    from .report import paired_difference, write_report
    from .results_csv import result_row
    from .tuning import tuning_columns

    outcome = run_grid(settings, overwrite=overwrite, on_warning=on_warning)
    settings, outcome = settings.as_read(), outcome.as_read(settings)  # every strategy by its label from here on
    files = write_report(settings, outcome)
    differences = {
        strategy: paired_difference(outcome.records, strategy, settings.baseline)
        for strategy in settings.strategies
        if strategy != settings.baseline
    }
    return ComparisonResults(
        runs=[result_row(record) for record in tuning_columns(settings, outcome.records, outcome.tuned)[0]],
        differences=differences,
        outcome=outcome,
        files=files,
        settings=settings,
    )


PYTHON_EVAL_POINTS = 4
"""`compare`'s held-out evaluations along each TRL run when `eval_points` is not given (the command line's default,
`settings.EVAL_POINTS_DEFAULT`, is for full-length budgets)."""

TRL_ARGUMENTS = (
    "model",
    "train_dataset",
    "eval_dataset",
    "reward_funcs",
    "reward_weights",
    "reward_threshold",
    "eval_points",
    "tune_learning_rates",
    "strategy_recipes",
)
"""`compare`'s arguments only a TRL run reads: refused with a training function (`train=`), as is any run option."""


def _refuse_trl_arguments(arguments: dict) -> None:
    """One `CompareInputError` listing the TRL-only arguments of `compare` (its `arguments`: `TRL_ARGUMENTS` and the
    `run_options`) given with a training function."""
    given = [name for name in TRL_ARGUMENTS if arguments[name] is not None] + list(arguments["run_options"])
    if given:
        raise CompareInputError(
            f"compare(train=...) runs your training function, which sets its own model, data, reward, batch "
            f"shape and evaluations, so these TRL arguments would do nothing: {', '.join(sorted(given))}; drop them "
            "(set them inside your train(run)), or drop train= to compare TRL runs built by dataflex"
        )


def _check_option_names(run_options: dict) -> None:
    """Refuse `compare`'s keyword arguments that are no `RunOptions` field, naming the valid ones."""
    from ..options import RunOptions

    names = {f.name for f in dataclasses.fields(RunOptions)}
    unknown = sorted(set(run_options) - names)
    if unknown:
        raise CompareInputError(
            f"compare() got unknown option(s) {unknown}; valid RunOptions fields: {', '.join(sorted(names))}"
        )


def compare(
    strategies: list[str],
    *,
    model: str | None = None,
    train_dataset: str | None = None,
    eval_dataset: str | None = None,
    reward_funcs: list | None = None,
    reward_weights: list[float] | None = None,
    reward_threshold: float | None = None,
    seeds=3,
    budget="steps:100",
    output_dir: str = "runs/compare",
    executor: str = "processes",
    ray_address: str | None = None,
    runs_per_gpu: int = 1,
    baseline: str | None = None,
    jobs: int = 1,
    eval_points: int | None = None,
    target: float | None = None,
    cost_model=None,
    tune_learning_rates: list[float] | None = None,
    strategy_recipes: dict[str, dict] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    on_warning: Callable[[str], None] | None = None,
    train=None,
    **run_options,
) -> ComparisonResults:
    """Train every strategy with every seed under one budget and compare them, as `dataflex compare` does.

    Writes the same folder as the command (report.md, results.csv, figures, runs/) and returns its
    figures: `runs` (one dict per run, the results.csv row) and `differences` (per strategy, the
    per-seed difference of the headline to the baseline, its paired standard error, interval and p-value; the
    headline is held-out sampled pass@1 on the testbed's headline levels, or on every held-out prompt of your data).

    Args:
        strategies: preset names, strategy files or 'none' (one name alone is one strategy); the first is the
            baseline unless `baseline` is given.
        model: hub id or local folder (default: the built-in tiny model).
        train_dataset: a jsonl/json/parquet/csv file or hub name of prompts (default: the built-in suite);
            `n_test` rows of it are held out for evaluation unless `eval_dataset` is given.
        eval_dataset: a file or hub name of held-out prompts (the columns of `train_dataset`).
        reward_funcs: the TRL reward functions (``f(prompts, completions, **columns) -> list[float | None]``),
            as callables or ``"module:function"`` paths; they train the model, and a held-out row is correct
            when the first one gives at least `reward_threshold` (default 1; refused without `reward_funcs`).
            Default: the built-in verifier.
        reward_weights: one weight per reward function, as `GRPOConfig.reward_weights`.
        seeds: a count (3: seeds 0, 1, 2), a list or tuple of seeds, or text as ``--seeds`` takes it (``"11"``: seed
            11, ``"0,5,7"``, ``"11-13"``); anything else is a `CompareInputError`.
        budget: ``"steps:N"``, ``"completions:N"`` or a `Budget`.
        jobs: runs trained at once. With ``jobs > 1`` runs train in fresh worker processes, which import
            each reward by its path: a callable no import path names (a lambda, a notebook function) is
            refused with `CompareInputError`; use ``jobs=1`` or move it into a .py file. On a machine
            with GPUs each worker trains on its own GPU (``runs_per_gpu`` runs share one).
        executor: ``"processes"`` (worker processes on this machine) or ``"ray"`` (each run a Ray task,
            retried once if its worker dies; needs Ray: the ``[ray]`` extra).
        ray_address: with ``executor="ray"``, a running Ray cluster to join; default: a local Ray.
        target: a headline value in (0, 1] (held-out sampled pass@1 on the headline's prompts); the report also
            gives the compute each strategy needs to reach it (it always gives the compute to reach the
            baseline's final headline).
        cost_model: ``"gen_token=1.0,train_token=0.3"`` or a `CostModel`: relative cost per generated and per
            trained completion token; the report adds compute to target in that "modelled cost" (report only).
        tune_learning_rates: learning rates (``[1e-5, 3e-5, 1e-4]``) at which the baseline strategy also trains, with
            every seed: the report, results.csv and the verdict then pair every strategy with the rate that reaches
            the baseline's final headline (and `target`) in the fewest completions, "better than tuning?". The
            shared rate is not trained twice; a bad rate is a `CompareInputError`.
        strategy_recipes: run options a strategy trains with instead of the shared ones, by the name the report
            shows it by: ``{"knapsack_wide": {"prompts_per_step": 32}}`` (keys ``prompts_per_step``,
            ``num_generations``, ``learning_rate``); the baseline keeps the shared recipe and is paired with the
            strategy by seed. A batch shape of its own needs a completions budget.
        eval_points: held-out evaluations along each TRL run (not given: `PYTHON_EVAL_POINTS`, 4); refused with
            `train`, whose function logs its own.
        train: your own training function ``train(run)`` (or its ``"module:function"`` path) instead of the TRL runs
            dataflex builds: it is called once per (strategy, seed) with a `TrainingRun` (``run.strategy`` to bind
            to your host, ``run.seed``, ``run.budget_spent()``, ``run.log(accuracy=..., step=...)``); the library
            counts what the strategy is shown. The TRL arguments (`model`, the datasets, rewards, `eval_points`,
            `tune_learning_rates`, `run_options`) are refused with it. With ``jobs > 1`` or Ray it must be
            importable by path, as rewards are.
        run_options: any other `RunOptions` field (``prompts_per_step``, ``learning_rate``, ...).

    Raises `CompareInputError` (a `DataFlexError`; `CostModelError` for a bad `cost_model`) before anything is
    written when an input is unusable.

    Example::

        from dataflex_callbacks.recipes.compare import compare

        def correct(prompts, completions, answer, **columns):
            return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]

        results = compare(["baseline", "difffilter"], reward_funcs=[correct], seeds=2, budget="steps:20")
        for strategy, paired in results.differences.items():
            print(strategy, paired["interval"].mean, paired["p_value"])
    """
    from ..options import RunOptions

    try:
        parsed_budget = budget if isinstance(budget, Budget) else Budget.parse(budget)
    except ValueError as error:
        raise CompareInputError(str(error)) from None
    seed_list = parse_seeds(seeds, flag="seeds")
    if train is not None:
        _refuse_trl_arguments(locals())
    _check_option_names(run_options)
    if isinstance(reward_funcs, str) or callable(reward_funcs):  # one function, as GRPOTrainer also takes it
        reward_funcs = [reward_funcs]
    if isinstance(strategies, str):  # one strategy, not its letters
        strategies = [strategies]
    base = RunOptions(
        model=model,
        dataset=train_dataset,
        eval_dataset=eval_dataset,
        reward=None if reward_funcs is None else list(reward_funcs),
        reward_weights=None if reward_weights is None else list(reward_weights),
        reward_threshold=reward_threshold,
        **run_options,
    )
    settings = CompareSettings(
        strategies=list(strategies),
        seeds=seed_list,
        budget=parsed_budget,
        base=base,
        output_dir=output_dir,
        baseline=baseline,
        jobs=jobs,
        eval_points=PYTHON_EVAL_POINTS if eval_points is None and train is None else eval_points,
        executor=executor,
        ray_address=ray_address,
        runs_per_gpu=runs_per_gpu,
        progress=progress,
        command="compare(...) from Python",
        target=target,
        cost_model=cost_model,
        tune_learning_rates=tune_learning_rates,
        strategy_recipes=strategy_recipes,
        train=train,
    )
    if on_warning is None:

        def on_warning(message: str) -> None:
            warnings.warn(f"dataflex compare: {message}", stacklevel=3)

    return run_comparison(settings, overwrite=overwrite, on_warning=on_warning)
