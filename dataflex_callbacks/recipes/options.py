"""`RunOptions`: the settings of one `dataflex run`, each field with its help, default and accepted values.

A field's metadata holds everything about it, written once: its help text, the rule its number
must obey (`NumberRule`), its choices, and how the command line spells it. The flags of
`dataflex run` and `dataflex compare` are generated from these fields (`recipes/arguments.py`),
and `check_run_options` checks every option against the rule kept in its field.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from dataflex_callbacks.errors import InputError

MAX_SEED = 2**32 - 1  # numpy's legacy seeding (used by TRL/transformers `set_seed`) refuses anything larger
TINY_COMPLETION_TOKENS = 4  # the built-in tiny model answers in a few tokens
TESTBED_COMPLETION_TOKENS = 9  # the testbed's longest answer (7 characters) and end-of-sequence, one to spare
SUITES = ("testbed", "toy")
SUITE_DEFAULTS = {
    # docs/benchmarks.md "Plain GRPO's learning-rate sweep": over 3 seeds at 16 prompts a step, 1e-4 reaches every
    # headline level in the fewest completions (1e-5 and 3e-5 slower, 2e-4 and 3e-4 slower and unstable, 1e-3
    # collapses), with no level regressing; benchmarks/learning_rate_sweep.py.
    "testbed": {"steps": 120, "learning_rate": 1e-4, "n_train": None, "n_test": None, "prompts_per_step": 16},
    "toy": {"steps": 150, "learning_rate": 3e-3, "n_train": 200, "n_test": 50, "prompts_per_step": 8},
}
PRETRAINED_LEARNING_RATE = 1e-6
"""The default rate for a user's `--model`: TRL's own (`GRPOConfig.learning_rate`), the rate of DeepSeekMath's GRPO
(arXiv 2402.03300). A pretrained model moved at the toy model's 3e-3 is wrecked within a few steps."""
MODEL_COMPLETION_TOKENS = 64
MIN_EVAL_TOKENS = 8


class RunInputError(InputError):
    """A user input that makes the run impossible (bad strategy, dataset, column, answer or output folder)."""


@dataclass(frozen=True)
class NumberRule:
    """What a numeric option accepts: an integer or a finite float within `[low, high]` (or `> low` when `open_low`)."""

    integer: bool
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    optional: bool = False

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        low, high = (None if b is None else (int(b) if self.integer else b) for b in (self.low, self.high))
        if low is not None and high is not None:
            return f"{kind} from {low} to {high}"
        if low is not None:
            return f"{kind} {'>' if self.open_low else '>='} {low}"
        return kind


def split_commas(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``: a list option as the command line writes it."""
    return [part.strip() for part in str(text).split(",") if part.strip()]


def split_numbers(text: str) -> list[float]:
    """``"1, 0.5"`` -> ``[1.0, 0.5]``: a list of numbers as the command line writes it."""
    return [float(part) for part in split_commas(text)]


def run_option(
    default: Any,
    *,
    help: str,
    rule: NumberRule | None = None,
    choices: tuple[str, ...] | None = None,
    shown_default: str | None = None,
    paper: str | None = None,
    per_run: bool = False,
    from_text: Callable[[str], Any] | None = None,
    off_help: str | None = None,
) -> Any:
    """A `RunOptions` field with everything about it in ``metadata``.

    Args:
        default: the one default of the option.
        help: what the option does (shown by ``--help`` with the default).
        rule: the numbers the option accepts (checked by `check_run_options`).
        choices: the values a text option accepts.
        shown_default: how ``--help`` states a default of None (what None means).
        paper: the paper the setting comes from, where one applies.
        per_run: `dataflex compare` sets this option per run (strategy, seed, ...), so it has no
            compare flag of this name.
        from_text: turns the command-line text into the field's value (default: by the rule's type).
        off_help: for an option that is on by default, what its ``--no-<name>`` flag does (``--help``
            shows it, since the flag turns the option off).
    """
    metadata: dict[str, Any] = {"help": help, "per_run": per_run}
    for key, value in (
        ("rule", rule),
        ("choices", choices),
        ("shown_default", shown_default),
        ("paper", paper),
        ("from_text", from_text),
        ("off_help", off_help),
    ):
        if value is not None:
            metadata[key] = value
    return field(default=default, metadata=metadata)


def _positive_int(optional: bool = False) -> NumberRule:
    return NumberRule(integer=True, low=1, optional=optional)


@dataclass
class RunOptions:
    """Settings of one `dataflex run`; every field has a CPU-friendly default for the built-in tiny model.

    The default strategy is `diffband` rather than `difffilter`: the 0.2-0.8 solve-rate band drops nearly
    every group of a hard domain early on (about 1 of 8 answers right) and keeps the noisy `coin`
    groups, while a zero-variance filter keeps every group that carries a learning signal.
    """

    strategy: str = run_option(
        "diffband",
        per_run=True,
        help="the data strategy: a preset name (`dataflex list` shows them), a YAML/JSON strategy file, or 'none' "
        "for plain GRPO",
    )
    steps: int | None = run_option(
        None,
        rule=_positive_int(optional=True),
        per_run=True,
        shown_default=f"{SUITE_DEFAULTS['testbed']['steps']} on the testbed, "
        f"{SUITE_DEFAULTS['toy']['steps']} with --suite toy, --model or "
        "--dataset",
        help="optimizer steps, one generation batch each",
    )
    seed: int = run_option(
        0,
        rule=NumberRule(integer=True, low=0, high=MAX_SEED),
        per_run=True,
        help="seeds the task suite, model init, sampling and the noisy reward; same seed, same metrics",
    )
    output_dir: str | None = run_option(
        None, per_run=True, shown_default="runs/<strategy>-<timestamp>", help="run folder"
    )
    overwrite: bool = run_option(False, per_run=True, help="replace the run files of an existing run folder")
    suite: str = run_option(
        "testbed",
        choices=SUITES,
        help="the built-in model (trained unless --model is given, also on --dataset) and task suite (trained unless "
        "--dataset is given): testbed (a pretrained 1M-parameter Qwen2 on graded arithmetic and sorting levels, "
        "docs/testbed.md) or toy (a random-initialised 86k-parameter model on four toy domains, docs/main_job.md)",
    )
    model: str | None = run_option(
        None,
        shown_default="the suite's built-in model",
        help="hub id or local path of the model, loaded with from_pretrained",
    )
    dataset: str | None = run_option(
        None,
        shown_default="the built-in task suite",
        help="datasets hub name or local jsonl/json/parquet/csv file of prompts",
    )
    eval_dataset: str | None = run_option(
        None,
        shown_default="--n-test rows held out of --dataset",
        help="file or hub name of the held-out prompts (same columns as --dataset); then every --dataset row trains",
    )
    prompt_column: str = run_option("prompt", help="column of the dataset holding the prompt")
    answer_column: str = run_option("answer", help="column of the dataset holding the reference answer")
    domain_key: str | None = run_option(
        None,
        shown_default="the 'domain' column if the data has one, else all rows in one domain",
        help="column of the dataset holding each row's domain label",
    )
    split: str = run_option("train", help="split of a hub dataset to read")
    verifier: str = run_option(
        "auto",
        choices=("auto", "numeric", "exact", "numeric_free_text"),
        help="how an answer is checked: auto (numeric when every answer is a number, else exact), numeric (one value "
        "in the answer slot: \\boxed{}, #### N, <answer>, or the bare answer), exact, numeric_free_text (also "
        "prose such as 'the answer is 6': gameable, opt in knowingly)",
    )
    reward: list | None = run_option(
        None,
        from_text=split_commas,
        shown_default="the built-in verifier (--verifier)",
        help="your TRL reward functions as import paths module:function (comma-separated), each called as "
        "f(prompts, completions, **columns) -> list[float | None] like GRPOTrainer's reward_funcs; they train "
        "the model and score the held-out rows (see --reward-threshold). A module is found on sys.path or in "
        "the current directory",
    )
    reward_weights: list[float] | None = run_option(
        None,
        from_text=split_numbers,
        shown_default="1 each",
        help="one weight per --reward function (comma-separated), as GRPOConfig.reward_weights",
    )
    reward_threshold: float | None = run_option(
        None,
        rule=NumberRule(integer=False, optional=True),
        shown_default="1",
        help="with --reward (only): a held-out completion, greedy or sampled, counts as correct when the first reward "
        "function gives it at least this value (None counts as wrong)",
    )
    domains: list[str] | None = run_option(
        None,
        from_text=split_commas,
        shown_default="all built-in domains",
        help="built-in task domains to train on, comma-separated on the command line",
    )
    n_train: int | None = run_option(
        None,
        rule=_positive_int(optional=True),
        shown_default="the testbed's calibrated mix per level (docs/testbed.md); "
        f"{SUITE_DEFAULTS['toy']['n_train']} per domain with --suite toy",
        help="training prompts per built-in domain",
    )
    n_test: int | None = run_option(
        None,
        rule=_positive_int(optional=True),
        shown_default="the testbed's held-out rows (400 per headline level, 100 per other level); "
        f"{SUITE_DEFAULTS['toy']['n_test']} per domain with --suite toy, "
        f"{SUITE_DEFAULTS['toy']['n_test']} rows of --dataset",
        help="held-out prompts per built-in domain; with a dataset, rows held out for evaluation",
    )
    prompts_per_step: int | None = run_option(
        None,
        rule=_positive_int(optional=True),
        shown_default=f"{SUITE_DEFAULTS['testbed']['prompts_per_step']} on the testbed, "
        f"{SUITE_DEFAULTS['toy']['prompts_per_step']} otherwise",
        help="distinct prompts per optimizer step",
    )
    num_generations: int = run_option(
        8,
        rule=NumberRule(integer=True, low=2),
        paper="GRPO, DeepSeekMath arXiv 2402.03300",
        help="completions per prompt, the GRPO group size (at least 2: GRPO compares the responses of one prompt)",
    )
    max_completion_length: int | None = run_option(
        None,
        rule=_positive_int(optional=True),
        shown_default=f"{TINY_COMPLETION_TOKENS} for the built-in tiny model, {MODEL_COMPLETION_TOKENS} otherwise",
        help="tokens generated per completion",
    )
    learning_rate: float | None = run_option(
        None,
        rule=NumberRule(integer=False, low=0, open_low=True, optional=True),
        shown_default=f"the trained model's: {SUITE_DEFAULTS['testbed']['learning_rate']:g} for the testbed's "
        f"pretrained model (also on --dataset), {PRETRAINED_LEARNING_RATE:g} for a --model (TRL's default, for a "
        f"pretrained model), {SUITE_DEFAULTS['toy']['learning_rate']:g} for the random-initialised model of --suite "
        "toy (also on --dataset)",
        help="AdamW learning rate (constant schedule)",
    )
    temperature: float = run_option(
        1.0, rule=NumberRule(integer=False, low=0, open_low=True), help="sampling temperature during training"
    )
    beta: float = run_option(
        0.0,
        rule=NumberRule(integer=False, low=0),
        paper="DAPO arXiv 2503.14476 (no KL term)",
        help="KL coefficient; 0 drops the reference model, as recent GRPO recipes do",
    )
    eval_max_new_tokens: int | None = run_option(
        None,
        rule=_positive_int(optional=True),
        shown_default=f"max_completion_length, at least {MIN_EVAL_TOKENS}",
        help="tokens generated per held-out completion, greedy and sampled (--eval-samples)",
    )
    eval_samples: int = run_option(
        4,
        rule=NumberRule(integer=True, low=0),
        help="samples per held-out prompt at --temperature for the held-out sampled pass@1 (the mean pass rate of "
        "the samples; with --reward a sample passes at --reward-threshold), the headline, reported beside the greedy "
        "accuracy; 0 turns it off and the headline falls back to greedy accuracy, with a warning",
    )
    use_vllm: bool = run_option(
        False,
        help="generate with vLLM inside the training process (TRL's use_vllm=True, vllm_mode='colocate'); "
        "needs vLLM installed (scripts/setup_vllm_env.sh builds a CPU environment)",
    )
    progress: bool = run_option(
        True,
        per_run=True,
        help="show a progress bar, and the start-up lines naming the model, learning rate and data",
        off_help="hide the progress bar and the start-up lines naming the model, learning rate and data (shown when "
        "this flag is not given)",
    )


OPTION_RULES: dict[str, NumberRule] = {f.name: f.metadata["rule"] for f in fields(RunOptions) if "rule" in f.metadata}
# Fields that `dataflex compare` sets per run, or that only change how a run is displayed, not its numbers.
PER_RUN_FIELDS = tuple(f.name for f in fields(RunOptions) if f.metadata["per_run"])


def option_flag(name: str) -> str:
    """The command-line flag of a `RunOptions` field: `learning_rate` -> `--learning-rate`."""
    return "--" + name.replace("_", "-")


def check_option_number(flag: str, value, rule: NumberRule, error: type = None):
    """Return `value` as int/float if `rule` accepts it, else raise `error` (default `RunInputError`) naming `flag`.

    Integers may be Python, numpy or torch integer scalars; floats any real scalar. Text, bools, NaN
    and infinities are refused.
    """
    error = error or RunInputError
    if value is None and rule.optional:
        return None
    number = None
    if not isinstance(value, (bool, str, bytes)):
        try:
            number = operator.index(value) if rule.integer else float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
    ok = number is not None and math.isfinite(number)
    if ok and rule.low is not None:
        ok = number > rule.low if rule.open_low else number >= rule.low
    if ok and rule.high is not None:
        ok = number <= rule.high
    if not ok:
        raise error(f"{flag} must be {rule.describe()}, got {value!r}")
    return number


def check_option_text(flag: str, value, rule: NumberRule, error: type = None):
    """`check_option_number` for a value that may be text as a command line gives it (``"1e-5"``, ``"32"``), read as
    `rule`'s kind of number first; text that is no number is refused naming it."""
    if isinstance(value, str):
        try:
            value = int(value) if rule.integer else float(value)
        except ValueError:
            pass  # check_option_number names the text
    return check_option_number(flag, value, rule, error)


def check_run_options(options: RunOptions, error: type = None) -> None:
    """Check every user-facing option of `options` (numbers, choices, names) before any expensive work.

    Raises `error` (default `RunInputError`) with one line naming the option, the bad value and what is accepted.
    """
    error = error or RunInputError
    for name, rule in OPTION_RULES.items():
        check_option_number(option_flag(name), getattr(options, name), rule, error)
    for option in fields(RunOptions):
        choices = option.metadata.get("choices")
        value = getattr(options, option.name)
        if choices is not None and value not in choices:
            raise error(
                f"unknown {option_flag(option.name)} {value!r}; choose {', '.join(choices[:-1])} or {choices[-1]}"
            )
    for name in ("prompt_column", "answer_column", "split"):
        value = getattr(options, name)
        if not isinstance(value, str) or not value.strip():
            raise error(f"{option_flag(name)} must be a non-empty name, got {value!r}")
    if options.domain_key is not None and (not isinstance(options.domain_key, str) or not options.domain_key.strip()):
        raise error(f"--domain-key must be a non-empty column name, got {options.domain_key!r}")
    if options.domains is not None:
        if options.dataset is not None:
            raise error(
                "--domains picks built-in task domains and does nothing with --dataset; leave it out "
                "(the data's --domain-key gives the domains)"
            )
        bad = [d for d in options.domains if not isinstance(d, str) or not d.strip()]
        if bad or not options.domains:
            raise error(f"--domains must list domain names separated by commas, got {options.domains!r}")
        twice = sorted({d for d in options.domains if options.domains.count(d) > 1})
        if twice:
            raise error(
                f"--domains names {', '.join(map(repr, twice))} twice; name each domain once (refused, not "
                "deduplicated: a domain named twice would train its rows twice and score its held-out prompts twice)"
            )
    if options.dataset is None and options.suite == "testbed":
        check_testbed_sizes(options, error)
    check_reward_specs(options, error)
    if options.eval_dataset is not None and options.dataset is None:
        raise error(
            "--eval-dataset holds the held-out prompts of --dataset, and no --dataset is given; pass "
            "--dataset too, or leave --eval-dataset out for the built-in suite's held-out prompts"
        )
    if options.output_dir is not None and not str(options.output_dir).strip():
        raise error("--output-dir must be a folder path, got an empty string")
    if options.use_vllm:
        from .vllm_colocate import check_vllm_importable

        check_vllm_importable(error)


def check_testbed_sizes(options: RunOptions, error: type) -> None:
    """Refuse `--n-train` / `--n-test` above what a chosen testbed level holds, naming the most it can supply.

    Each level's split holds a fixed number of distinct prompts (`testbed.split_capacity`); asking for
    more would sample for minutes and then fail.
    """
    from dataflex_callbacks.recipes.testbed import LEVELS, levels_short_of

    levels = [d for d in options.domains or LEVELS if d in LEVELS]
    for flag, split, count in (("--n-train", "train", options.n_train), ("--n-test", "eval", options.n_test)):
        if not levels or not isinstance(count, int) or isinstance(count, bool):
            continue  # unknown levels and bad numbers have their own messages
        short = levels_short_of(split, count, levels)
        if short:
            most = min(short.values())
            held = ", ".join(f"{name} {rows:,}" for name, rows in short.items())
            raise error(
                f"{flag} {count} asks each testbed level for {count:,} distinct {split} prompts, and level(s) "
                f"{', '.join(map(repr, short))} hold fewer ({held}); pass {flag} {most} or less, "
                "or leave those levels out of --domains"
            )


def completion_tokens(options: RunOptions) -> int:
    """Tokens generated per completion: `max_completion_length`, else the default for the model."""
    if options.max_completion_length:
        return options.max_completion_length
    if options.model is not None:
        return MODEL_COMPLETION_TOKENS
    return TESTBED_COMPLETION_TOKENS if options.suite == "testbed" else TINY_COMPLETION_TOKENS


def with_suite_defaults(options: RunOptions) -> RunOptions:
    """`options` with the settings left unset (None) filled in: the testbed's when it trains the testbed's own
    model on the testbed's tasks, else those of `--suite toy` (also a user's --model or --dataset).

    The steps and prompts per step follow the data: the testbed's on its own tasks, the toy suite's on anything
    else. The learning rate follows the model trained (`default_learning_rate`), also on a `--dataset`.
    ``n_train`` and ``n_test`` stay None on the testbed's tasks (its mix and held-out rows per level). With
    `--reward`, `reward_threshold` defaults to 1.
    """
    testbed = options.suite == "testbed" and options.model is None and options.dataset is None
    defaults = SUITE_DEFAULTS["testbed" if testbed else "toy"]
    changes = {}
    if options.steps is None:
        changes["steps"] = defaults["steps"]
    if options.learning_rate is None:
        changes["learning_rate"] = default_learning_rate(options)
    if options.reward_threshold is None and options.reward is not None:
        changes["reward_threshold"] = 1.0
    if options.n_train is None and options.suite == "toy":
        changes["n_train"] = SUITE_DEFAULTS["toy"]["n_train"]
    if options.n_test is None and not (options.suite == "testbed" and options.dataset is None):
        changes["n_test"] = SUITE_DEFAULTS["toy"]["n_test"]
    if options.prompts_per_step is None:
        changes["prompts_per_step"] = defaults["prompts_per_step"]
    return replace(options, **changes) if changes else options


def default_learning_rate(options: RunOptions) -> float:
    """The learning rate of the model a run trains, also on a user's `--dataset`: `PRETRAINED_LEARNING_RATE` for a
    `--model`, else the built-in model of `--suite` (the testbed's pretrained model: 1e-5; the toy suite's
    random-initialised one: 3e-3, which would wreck a pretrained model within a few steps)."""
    if options.model is not None:
        return PRETRAINED_LEARNING_RATE
    return SUITE_DEFAULTS["toy" if options.suite == "toy" else "testbed"]["learning_rate"]


def model_description(options: RunOptions) -> str:
    """The model a run trains, as the console and the report name it: `--model`, else the suite's built-in model."""
    if options.model is not None:
        return str(options.model)
    if options.suite == "toy":
        return "the toy suite's random-initialised tiny model (--suite toy)"
    return "the testbed's pretrained model (--suite testbed)"


def eval_tokens(options: RunOptions) -> int:
    """Greedy tokens per held-out prompt: `eval_max_new_tokens`, else the completion length (at least 8)."""
    return options.eval_max_new_tokens or max(MIN_EVAL_TOKENS, completion_tokens(options))


REWARD_FORM = "module:function (e.g. my_rewards:correctness, my_rewards.py next to where you run)"


def reward_name(reward) -> str:
    """How a reward is named in errors, config.json and a comparison's settings: its spec, or its import path.

    A function is `module:qualname`. An instance (a callable object) is named by the module-level name that holds
    it (`module:exact` for ``exact = Exact()``), since its class's path imports the class, not the instance; one
    that no module-level name holds is `module:<Class instance>`, which names no import path.
    """
    if isinstance(reward, str):
        return reward
    module = getattr(reward, "__module__", None) or type(reward).__module__
    qualname = getattr(reward, "__qualname__", None)
    if isinstance(qualname, str):
        return f"{module}:{qualname}"
    import sys

    namespace = vars(sys.modules[module]) if module in sys.modules else {}
    holders = sorted(name for name, value in namespace.items() if value is reward and not name.startswith("_"))
    if holders:
        return f"{module}:{holders[0]}"
    return f"{module}:<{type(reward).__qualname__} instance>"


def import_reward(spec: str, error: type = None) -> Callable:
    """The callable at `spec` (``module:function``), imported from sys.path or the current directory.

    Raises `error` (default `RunInputError`) naming the spec, the form it must take and the fix.
    """
    from dataflex_callbacks.registry import import_object

    error = error or RunInputError
    found = import_object(
        str(spec).strip(),
        what=f"--reward {spec!r}",
        error=error,
        form=REWARD_FORM,
        missing="run from the folder that holds it or put that folder on PYTHONPATH",
        allow_dot=False,
    )
    if not callable(found):
        raise error(
            f"--reward {spec!r} is {type(found).__name__!r}, not a function; name a reward function "
            f"f(prompts, completions, **columns) -> list[float | None] as {REWARD_FORM}"
        )
    return check_reward_callable(found, str(spec).strip(), error)


def check_reward_callable(reward: Callable, name: str, error: type) -> Callable:
    """Refuse a reward TRL cannot call as ``reward(prompts=..., completions=..., **columns, trainer_state=...)``:
    a class (not an instance), or a function without ``**kwargs``."""
    import inspect

    if inspect.isclass(reward):
        raise error(
            f"--reward {name!r} is the class {reward.__name__}, not an instance; TRL calls a reward once per "
            f"batch, so pass an instance ({reward.__name__}(...)) from Python, or name a module-level instance "
            "or function"
        )
    try:
        parameters = inspect.signature(reward).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: TRL's call decides
        return reward
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        raise error(
            f"--reward {name!r} takes no **kwargs; TRL passes every dataset column and trainer_state as keywords: "
            "define it as f(prompts, completions, **kwargs) -> list[float | None]"
        )
    return reward


def resolve_rewards(options: RunOptions, error: type = None) -> list[Callable] | None:
    """The reward functions of `options.reward` (paths imported, callables as given); None: the built-in verifier."""
    if options.reward is None:
        return None
    error = error or RunInputError
    rewards = []
    for reward in options.reward:
        if isinstance(reward, str):
            rewards.append(import_reward(reward, error))
        elif callable(reward):
            rewards.append(check_reward_callable(reward, reward_name(reward), error))
        else:
            raise error(
                f"--reward entry {reward!r} is neither an import path nor a callable; give {REWARD_FORM} "
                "or, from Python, the function itself"
            )
    return rewards


def check_reward_specs(options: RunOptions, error: type = None) -> None:
    """Refuse an empty reward list, an unimportable or uncallable reward, and weights that do not match them."""
    error = error or RunInputError
    if options.reward is not None and not isinstance(options.reward, (list, tuple)):
        raise error(f"--reward must list reward functions, got {options.reward!r}; give {REWARD_FORM}")
    if options.reward is not None and not options.reward:
        raise error(f"--reward lists no reward function; give {REWARD_FORM}, or leave it out for the built-in verifier")
    rewards = resolve_rewards(options, error) if options.reward is not None else None
    if rewards is None and options.reward_threshold is not None:
        raise error(
            f"--reward-threshold {options.reward_threshold!r} sets when the --reward functions count a held-out "
            "completion as correct, and none is given; pass --reward, or leave the threshold out"
        )
    if options.reward_weights is None:
        return
    if rewards is None:
        raise error(
            "--reward-weights weighs --reward functions, and none is given; pass --reward or leave the weights out"
        )
    if len(options.reward_weights) != len(rewards):
        raise error(
            f"--reward-weights has {len(options.reward_weights)} weight(s) for {len(rewards)} --reward "
            f"function(s) ({', '.join(reward_name(r) for r in options.reward)}); give one weight per function"
        )
    for weight in options.reward_weights:
        check_option_number("--reward-weights", weight, NumberRule(integer=False), error)
