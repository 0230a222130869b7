"""What one `dataflex compare` runs: its settings, checked when made, and the grid's cells (strategy x seed)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field

from dataflex_callbacks.errors import InputError

from ..options import (
    OPTION_RULES,
    PER_RUN_FIELDS,
    NumberRule,
    RunOptions,
    check_option_number,
    check_option_text,
    check_run_options,
    completion_tokens,
    eval_tokens,
    import_reward,
    reward_name,
    with_suite_defaults,
)
from ..run_folder import check_folder_path
from .budget import Budget, EvalPlan
from .cost_model import CostModel
from .strategy_recipes import RECIPE_FLAG, check_strategy_recipes, parse_strategy_recipes

RUNS_FOLDER = "runs"
EXECUTORS = ("processes", "ray")
RAY_INSTALL = "pip install 'ray[default]>=2.9' (the package's [ray] extra: pip install -e '.[ray]' in its checkout)"
RAY_MISSING = f"--executor ray needs Ray, which is not installed; run {RAY_INSTALL}, or use --executor processes"


SAMPLED_FILE_BYTES = 256 * 2**20
"""Files above this size (model weights) are fingerprinted by their size and three 4 MiB samples, not read whole."""
_SAMPLE_BYTES = 4 * 2**20


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        if size <= SAMPLED_FILE_BYTES:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
        else:  # start, middle and end: a retrained or re-saved checkpoint differs there
            digest.update(str(size).encode())
            for offset in (0, size // 2, size - _SAMPLE_BYTES):
                handle.seek(offset)
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()


def input_fingerprint(path: str | None) -> str | None:
    """What identifies an input a run reads: ``<path> sha256:<digest>`` of a local file, or of a folder's files
    (their relative paths and contents; hidden files left out), else the name itself (a hub id); None for None.

    Files over `SAMPLED_FILE_BYTES` are hashed from their size and three samples, so a large model folder
    costs seconds, not minutes.
    """
    if path is None:
        return None
    path = str(path)
    if os.path.isfile(path):
        return f"{path} sha256:{_file_digest(path)}"
    if not os.path.isdir(path):
        return path
    digest = hashlib.sha256()
    for folder, subfolders, files in sorted(os.walk(path)):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            full = os.path.join(folder, name)
            digest.update(f"{os.path.relpath(full, path)}\0{_file_digest(full)}\0".encode())
    return f"{path} sha256:{digest.hexdigest()}"


def reward_fingerprint(reward) -> str:
    """A reward's name and the sha256 of its source code (of its class for an instance), so an edited reward does
    not resume a comparison trained with the old one; the name alone where the source cannot be read."""
    import inspect

    from ..options import import_reward

    function = import_reward(reward, CompareInputError) if isinstance(reward, str) else reward
    try:
        source = inspect.getsource(function if inspect.isfunction(function) else type(function))
    except (OSError, TypeError):
        return reward_name(reward)
    return f"{reward_name(reward)} sha256:{hashlib.sha256(source.encode()).hexdigest()}"


class CompareInputError(InputError):
    """A comparison that cannot start
    (bad strategy list, seeds, budget, or an output folder holding another comparison)."""


LEARNING_RATES_FLAG = "--tune-learning-rates"


def check_learning_rates(rates) -> list[float] | None:
    """The learning rates of the sweep (`CompareSettings.tune_learning_rates`), each checked by `--learning-rate`'s
    own rule; text as the flag takes it (``"1e-5,3e-5"``) is read first. None stays None."""
    if rates is None:
        return None
    if isinstance(rates, str):
        rates = [part.strip() for part in rates.split(",") if part.strip()]
    if not isinstance(rates, (list, tuple)):
        raise CompareInputError(
            f"{LEARNING_RATES_FLAG} must be a list of learning rates, got {rates!r}; pass e.g. [1e-5, 3e-5, 1e-4] "
            f"(or {LEARNING_RATES_FLAG} 1e-5,3e-5,1e-4)"
        )
    rule = dataclasses.replace(OPTION_RULES["learning_rate"], optional=False)
    checked = [check_option_text(LEARNING_RATES_FLAG, rate, rule, CompareInputError) for rate in rates]
    if not checked or len(set(checked)) != len(checked):
        raise CompareInputError(
            f"{LEARNING_RATES_FLAG} must list distinct learning rates, at least one, got {list(rates)}; pass e.g. "
            f"{LEARNING_RATES_FLAG} 1e-5,3e-5,1e-4"
        )
    return checked


def rate_text(rate: float) -> str:
    """A learning rate as folder names and tables write it: `3e-05`, `0.0001`; every digit where `:g` would drop
    some, so two rates never share a folder."""
    short = f"{rate:g}"
    return short if float(short) == rate else repr(float(rate))


def strategy_label(spec: str) -> str:
    """The name a comparison shows a strategy by (console, report.md, results.csv, figures, run folders): a strategy
    file's ``name:``, or its file name without extension when it names none; a preset, a sum of presets or 'none'
    by itself."""
    from dataflex_callbacks.config import read_config

    from ..run_inputs import NO_STRATEGY

    if str(spec).lower() in NO_STRATEGY:
        return str(spec)
    try:
        return read_config(spec).name
    except Exception:  # an unusable spec: `grid.build_strategies` refuses it, naming why, before any run
        return os.path.splitext(os.path.basename(str(spec)))[0] or "strategy"


@dataclass(frozen=True)
class GridRun:
    """One cell of the grid: a strategy trained with a seed; `learning_rate` set only on a run of the
    learning-rate sweep (`CompareSettings.tune_learning_rates`), which trains at that rate instead of the shared one;
    `label` the strategy's name as the comparison shows it (`strategy_label`); `recipe` the strategy's own run options
    (`CompareSettings.strategy_recipes`)."""

    strategy: str
    seed: int
    learning_rate: float | None = None
    label: str | None = None
    recipe: tuple = ()
    """The strategy's own run options, ``((key, value), ...)`` (`strategy_recipes`); () trains at the shared ones."""

    @property
    def name(self) -> str:
        """Folder name `<label>-seed<k>`, or `<label>@lr<rate>-seed<k>` for a run of the learning-rate sweep (without
        a label: the strategy, a file by its file name without extension)."""
        stem = self.label or os.path.splitext(os.path.basename(str(self.strategy)))[0] or "strategy"
        rate = "" if self.learning_rate is None else f"@lr{rate_text(self.learning_rate)}"
        return f"{re.sub(r'[^A-Za-z0-9_.+-]', '_', stem)}{rate}-seed{self.seed}"


EVAL_POINTS_DEFAULT = 49
"""`eval_points` of TRL runs when it is not given (None): evaluations spaced at 2% of the budget."""


def _setting(default=dataclasses.MISSING, *, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class CompareSettings:
    """Settings of one `dataflex compare`; the `dataflex compare` flags take their help from these fields."""

    strategies: list[str] = _setting(help="strategy specs (preset names, YAML/JSON files, 'none'), in report order")
    seeds: list[int] = _setting(help="seeds; every strategy runs with every seed")
    budget: Budget = _setting(help="the compute every run gets: steps:N or completions:N")
    base: object = _setting(
        None,
        help="RunOptions shared by every run (model, dataset, batch shape, learning rate, "
        "...); its strategy, seed, steps and output folder are set per run",
    )
    output_dir: str = _setting(
        os.path.join("runs", "compare"), help="comparison folder (runs, report.md, results.csv, figures)"
    )
    baseline: str | None = _setting(None, help="the strategy the others are paired against")
    jobs: int = _setting(1, help="runs trained at once, in separate processes")
    runs_per_gpu: int = _setting(
        1,
        help="runs that share one GPU at once; with GPUs, --jobs is capped at GPUs x this, "
        "and each worker sees only its GPU (CUDA_VISIBLE_DEVICES)",
    )
    executor: str = _setting(
        "processes",
        help="where runs train: 'processes' (worker processes on this machine) or "
        "'ray' (Ray tasks, each retried once if its worker dies; needs " + RAY_INSTALL + ")",
    )
    ray_address: str | None = _setting(
        None,
        help="with executor 'ray': the address of a running Ray cluster "
        "(host:6379, ray://host:10001 or 'auto'); without it a local Ray "
        "is started with --jobs CPUs",
    )
    eval_points: int | None = _setting(
        None,
        help=f"held-out evaluations during each TRL run (greedy accuracy, sampled pass@1, the headline), besides "
        f"before and after, for the curves: compute to target and the accuracy figures; not given: "
        f"{EVAL_POINTS_DEFAULT}, which spaces them at 2% of the budget, so a crossing is placed to within 2% (about "
        "+16% time at the testbed's default budget; pass fewer for short budgets, where each evaluation weighs "
        "more); refused with a training function, which logs its own evaluations",
    )
    progress: bool = _setting(True, help="show a progress bar over the whole grid")
    command: str = _setting("", help="the command line that started the comparison (written into the report)")
    target: float | None = _setting(
        None,
        help="a headline value (0 < target <= 1: held-out sampled pass@1 on the headline's prompts) to report the "
        "compute each strategy needs to reach, besides the baseline's final headline",
    )
    tune_learning_rates: list[float] | None = _setting(
        None,
        help="learning rates at which plain GRPO (the baseline strategy) also trains, with every seed, to ask "
        "'better than tuning?': the report pairs every strategy with the rate that reaches the baseline's final "
        "headline in the fewest completions, e.g. 1e-5,3e-5,1e-4 (the shared rate is not trained twice)",
    )
    strategy_recipes: dict | None = _setting(
        None,
        help="run options a strategy trains with instead of the shared ones, LABEL:key=value[,key=value] with keys "
        "prompts_per_step, num_generations, learning_rate (e.g. knapsack_wide:prompts_per_step=32: Knapsack RL's "
        "candidates); the baseline keeps the shared recipe and pairs with the strategy by seed, in completions",
    )
    cost_model: object = _setting(
        None,
        help="relative cost per generated and per trained completion token, e.g. "
        "'gen_token=1.0,train_token=0.3' (a CostModel or that text): adds compute to target in "
        "'modelled cost' (linear in tokens, no fixed cost per step; docs/compare.md); report only",
    )
    train: object = _setting(
        None,
        help="your own training function train(run) as module:function (or, from Python, the function): it is "
        "called once per strategy and seed and trains run.strategy on any host (Lightning, verl, your loop); the "
        "library counts what the strategy is shown and reads the held-out accuracy it logs (run.log); the TRL "
        "run options do not apply (docs/compare.md, 'Your own training loop')",
    )

    def __post_init__(self):
        if self.base is None:
            self.base = RunOptions()
        if self.train is not None:
            self._check_train_settings()
        if not self.strategies:
            raise CompareInputError("no strategies to compare; pass e.g. --strategies baseline,difffilter")
        if len(set(self.strategies)) != len(self.strategies):
            raise CompareInputError(f"strategies are listed twice in {self.strategies}; list each once")
        self._labels = self._check_labels()
        if not isinstance(self.seeds, (list, tuple, range)):
            raise CompareInputError(
                f"seeds must be a list of seeds, got {self.seeds!r}; pass e.g. [0, 1, 2] (grid.parse_seeds reads a "
                "count or --seeds text)"
            )
        self.seeds = [
            check_option_number("--seeds", seed, OPTION_RULES["seed"], CompareInputError) for seed in self.seeds
        ]
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise CompareInputError(f"seeds must be distinct and at least one, got {self.seeds}")
        if self.baseline is None:
            self.baseline = self.strategies[0]
        if self.baseline not in self.strategies:
            raise CompareInputError(f"baseline {self.baseline!r} is not among the strategies {self.strategies}")
        self.jobs = check_option_number("--jobs", self.jobs, NumberRule(integer=True, low=1), CompareInputError)
        self.runs_per_gpu = check_option_number(
            "--runs-per-gpu", self.runs_per_gpu, NumberRule(integer=True, low=1), CompareInputError
        )
        if self.executor not in EXECUTORS:
            raise CompareInputError(
                f"--executor {self.executor!r} is not one of {', '.join(EXECUTORS)}; pass "
                "--executor processes (this machine) or --executor ray (a Ray cluster)"
            )
        if self.ray_address is not None and self.executor != "ray":
            raise CompareInputError(
                f"--address {self.ray_address!r} names a Ray cluster, but the executor is "
                f"{self.executor!r}; add --executor ray, or leave --address out"
            )
        if self.executor == "ray" and importlib.util.find_spec("ray") is None:
            raise CompareInputError(RAY_MISSING)
        if self.eval_points is not None:
            self.eval_points = check_option_number(
                "--eval-points", self.eval_points, NumberRule(integer=True, low=0), CompareInputError
            )
        if self.target is not None:  # only the report reads it: not among the settings a resumed comparison shares
            try:
                self.target = check_option_number(
                    "--target",
                    self.target,
                    NumberRule(integer=False, low=0.0, high=1.0, open_low=True),
                    CompareInputError,
                )
            except CompareInputError:
                raise CompareInputError(
                    f"--target must be a headline value above 0 and at most 1 (e.g. --target 0.6), got {self.target!r}"
                ) from None
        if self.cost_model is not None:  # only the report reads it: not among the settings a resumed comparison shares
            if not isinstance(self.cost_model, CostModel):
                self.cost_model = CostModel.parse(self.cost_model)
        if not isinstance(self.budget, Budget):
            raise CompareInputError(f"budget must be a Budget (e.g. Budget.parse('steps:100')), got {self.budget!r}")
        if not str(self.output_dir or "").strip():
            raise CompareInputError("--output-dir must be a folder path, got an empty string")
        check_folder_path(str(self.output_dir), error=CompareInputError)  # a file in the way: before any data loads
        if self.train is not None:
            from .train_function import train_for_workers

            self.train = train_for_workers(self.train, self.jobs, self.executor, CompareInputError)
            return  # the run options are TRL's: a training function's runs read none of them
        if self.eval_points is None:
            self.eval_points = EVAL_POINTS_DEFAULT
        check_run_options(self.base, CompareInputError)
        if self.base.reward is not None:
            self.base = dataclasses.replace(self.base, reward=[self._reward_for_workers(r) for r in self.base.reward])
        # Resolve the suite's defaults and the token lengths here, so every run and the evaluations along the way
        # use the same ones.
        self.base = with_suite_defaults(self.base)
        self.base = dataclasses.replace(
            self.base, max_completion_length=completion_tokens(self.base), eval_max_new_tokens=eval_tokens(self.base)
        )
        self._check_run_variants()

    def _check_run_variants(self) -> None:
        """The runs beside the shared recipe: the learning-rate sweep's rates and the strategies' own recipes."""
        self.tune_learning_rates = check_learning_rates(self.tune_learning_rates)
        recipes = parse_strategy_recipes(self.strategy_recipes, CompareInputError)
        self.strategy_recipes = check_strategy_recipes(self, recipes, CompareInputError)

    def _check_labels(self) -> dict[str, str]:
        """`spec -> strategy_label(spec)` for every strategy; a `CompareInputError` when two share a label, which
        would merge them in the report and in runs/."""
        labels = {spec: strategy_label(spec) for spec in self.strategies}
        shared: dict[str, list[str]] = {}
        for spec, label in labels.items():
            shared.setdefault(label, []).append(str(spec))
        clashes = [f"{' and '.join(specs)} are both named {label!r}" for label, specs in shared.items() if specs[1:]]
        if clashes:
            raise CompareInputError(
                f"strategies must have distinct names, which the report, results.csv and runs/ show: "
                f"{'; '.join(clashes)} (a strategy file is named by its `name:`, else its file name); give each "
                "file its own `name:`"
            )
        return labels

    def labels(self) -> dict[str, str]:
        """`spec -> label` of every strategy: the name the console, report.md, results.csv, figures and run folders
        show it by (`strategy_label`: a strategy file's `name:`)."""
        return dict(self._labels)

    def as_read(self) -> CompareSettings:
        """These settings as the user reads them: each strategy, the baseline included, by its label (`labels`).

        What the console, report.md, results.csv and figures are written from (with `GridOutcome.as_read`); not for
        running: a label need not name a strategy `build_strategy` can read.
        """
        view = copy.copy(self)
        view.strategies = [self._labels[spec] for spec in self.strategies]
        view.baseline = self._labels[self.baseline]
        view._labels = {label: label for label in view.strategies}
        return view

    def _check_train_settings(self) -> None:
        """Refuse, in one `CompareInputError` listing them, the settings only a TRL run reads, given with `train`."""
        from ..options import option_flag

        default = RunOptions()
        given = [
            option_flag(f.name)
            for f in dataclasses.fields(RunOptions)
            if f.name not in PER_RUN_FIELDS and getattr(self.base, f.name) != getattr(default, f.name)
        ]
        if self.tune_learning_rates is not None:
            given.append(LEARNING_RATES_FLAG)
        if self.strategy_recipes:
            given.append(RECIPE_FLAG)
        if self.eval_points is not None:  # any value, the default's included: the function logs its own
            given.append("--eval-points")
        if given:
            raise CompareInputError(
                f"--train runs your training function, which sets its own model, data, reward, batch shape and "
                f"evaluations, so these TRL run options would do nothing: {', '.join(given)}; drop them (set them "
                "inside your train(run)), or drop --train to compare TRL runs built by dataflex"
            )

    def _reward_for_workers(self, reward):
        """A reward callable as the import path that names it, so spawned workers (``jobs`` > 1) import it too.

        With ``jobs=1`` a callable that no path names (a lambda, a notebook's function) is kept as it is.
        """
        if isinstance(reward, str):
            return reward
        path = reward_name(reward)
        try:
            named = import_reward(path, CompareInputError) if "<" not in path and "__main__" not in path else None
        except CompareInputError:
            named = None
        if named is reward:
            return path
        if self.jobs > 1 or self.executor == "ray":
            workers = (
                "the Ray workers" if self.executor == "ray" else f"the {self.jobs} worker processes of jobs={self.jobs}"
            )
            raise CompareInputError(
                f"reward {path!r} cannot reach {workers}: workers are "
                "fresh interpreters that import rewards by path, and no import path names this one (a lambda, a "
                "nested function, one defined in a notebook or __main__, or an instance no module-level name "
                "holds); move it into a .py file and pass 'module:function' (or the function imported from there; "
                "an instance: hold it in a module-level name, exact = Exact(), and pass 'module:exact'), or pass "
                "jobs=1" + (" with executor='processes'" if self.executor == "ray" else "")
            )
        return reward

    @property
    def completions_per_step(self) -> int:
        return int(self.base.prompts_per_step) * int(self.base.num_generations)

    def grid(self) -> list[GridRun]:
        """Every (strategy, seed) pair, strategies outer."""
        return [
            GridRun(spec, seed, label=self._labels[spec], recipe=self.recipe_of(spec))
            for spec in self.strategies
            for seed in self.seeds
        ]

    def tuning_runs(self) -> list[GridRun]:
        """The learning-rate sweep's runs: the baseline strategy with every seed at each of `tune_learning_rates`
        but the shared rate, which the grid already trains it at; rates outer."""
        rates = [rate for rate in self.tune_learning_rates or [] if rate != self.base.learning_rate]
        label = self._labels[self.baseline]
        return [GridRun(self.baseline, seed, rate, label=label) for rate in rates for seed in self.seeds]

    def learning_rate_of(self, run: GridRun) -> float:
        """The rate `run` trains at: its own for a run of the learning-rate sweep or of a strategy whose own recipe
        sets one, else the shared one."""
        if run.learning_rate is not None:
            return run.learning_rate
        return dict(run.recipe).get("learning_rate", self.base.learning_rate)

    def eval_plan(self) -> EvalPlan:
        """When a TRL run is evaluated besides before and after: `eval_points` thresholds evenly spaced over the
        budget, in its unit (completions for a completions budget, whatever a step costs a strategy); none for a
        training function's runs, which log their own evaluations."""
        return EvalPlan(self.budget, self.eval_points or 0)

    def train_inputs(self) -> dict | None:
        """The training function's fingerprint (`train_function.train_fingerprint`), None without one; computed once
        (pickled with the settings to the workers)."""
        if self.train is None:
            return None
        if getattr(self, "_train_inputs", None) is None:
            from .train_function import train_fingerprint

            self._train_inputs = train_fingerprint(self.train, CompareInputError)
        return self._train_inputs

    def inputs(self) -> dict:
        """The fingerprints of what the runs read besides their options (`input_fingerprint`): the data files, the
        model folder, the reward functions' code. Computed once, on first use (pickled with the settings to the
        workers)."""
        if getattr(self, "_inputs", None) is None:
            base = self.base
            self._inputs = {
                "dataset": input_fingerprint(base.dataset),
                "eval_dataset": input_fingerprint(base.eval_dataset),
                "model": input_fingerprint(base.model),
                "reward": None if base.reward is None else [reward_fingerprint(r) for r in base.reward],
            }
        return self._inputs

    def shared(self) -> dict:
        """What every run of the comparison must share; a resumed comparison must match it exactly: the budget, the
        options, and the fingerprints of its inputs (`inputs`), so a changed data file, model or reward is not
        paired with runs trained on the old one. With a training function: the budget and the function's
        fingerprint (`train_inputs`: its name, source, bound arguments and file)."""
        if self.train is not None:
            return {"budget": str(self.budget), "train": self.train_inputs()}
        options = {k: v for k, v in dataclasses.asdict(self.base).items() if k not in PER_RUN_FIELDS}
        if self.base.reward is not None:  # a callable as its name: the same function resumes the same comparison
            options["reward"] = [reward_name(r) for r in self.base.reward]
        return {
            "budget": str(self.budget),
            "eval_points": self.eval_points,
            "run_options": options,
            "inputs": self.inputs(),
        }

    def shared_key(self) -> str:
        return hashlib.sha1(json.dumps(self.shared(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def run_dir(self, run: GridRun) -> str:
        return os.path.join(self.output_dir, RUNS_FOLDER, run.name)

    def recipe_of(self, spec: str) -> tuple:
        """Strategy `spec`'s own run options, ``((key, value), ...)`` (`strategy_recipes`); () for the shared ones."""
        return (self.strategy_recipes or {}).get(self._labels[spec], ())

    def recipe_options(self, recipe: tuple = ()):
        """The shared run options with a strategy's own `recipe` (`recipe_of`) in place."""
        return dataclasses.replace(self.base, **dict(recipe))

    def options_for(self, run: GridRun, fewer_per_step: bool = False):
        """The run options `run` trains with: the shared ones, its strategy's own recipe, and its seed, folder and
        step cap (the budget over its own completions per step)."""
        base = self.recipe_options(run.recipe)
        return dataclasses.replace(
            base,
            strategy=run.strategy,
            seed=run.seed,
            output_dir=self.run_dir(run),
            learning_rate=self.learning_rate_of(run),
            overwrite=True,
            progress=False,
            steps=self.budget.step_cap(int(base.prompts_per_step) * int(base.num_generations), fewer_per_step),
        )
