"""A run's inputs, checked before the model loads: its strategy, its data, and whether they can train the model.

`resolve_strategy` builds the strategy, `load_data` the prompts (the built-in suite, the testbed or a user
dataset with its verifier), `check_trainable` that the data fills one optimizer step and `check_context` that its
prompts fit the model's positions. Each raises `RunInputError` naming the input and the fix (`runner.run_training`
calls them in that order; `dataflex compare` checks a grid's runs with them).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from dataflex_callbacks.host.context_length import check_context_length

from .options import RunInputError, RunOptions, completion_tokens, eval_tokens, with_suite_defaults

NO_STRATEGY = ("none",)


def resolve_strategy(spec: str):
    """Build the strategy named by `spec` (preset, YAML/JSON file) or return None for `none` (plain GRPO)."""
    if spec is None or str(spec).lower() in NO_STRATEGY:
        return None
    try:
        from dataflex_callbacks import build_strategy
    except ImportError:
        raise RunInputError(
            "the strategy library (dataflex_callbacks.build_strategy) is not available in this install; "
            "use --strategy none"
        ) from None
    try:
        return build_strategy(spec)
    except Exception as error:  # the library raises ValueError/KeyError/FileNotFoundError with the valid choices
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RunInputError(f"invalid strategy {spec!r}: {message}") from error


def first_line(error: BaseException) -> str:
    """One line for the user: the message of the innermost cause (libraries often wrap the real reason)."""
    seen = set()
    while (error.__cause__ or error.__context__) is not None and id(error) not in seen:
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


class RunData(NamedTuple):
    """A run's prompts: `train` and `test` (datasets with prompt, answer, domain, prompt_key), the keyword
    arguments of its reward (`reward_settings`), and the column domains were read from (None: one domain)."""

    train: Any
    test: Any
    reward_settings: dict
    domain_key: str | None


def load_data(options: RunOptions) -> RunData:
    """The built-in suite, or the user dataset split for evaluation, as `RunData(train, test, reward_settings,
    domain_key)`."""
    from dataflex_callbacks.recipes import tasks
    from dataflex_callbacks.recipes.tasks.loading import DatasetError, load_prompt_table

    options = with_suite_defaults(options)
    if options.dataset is None and options.suite == "testbed":
        return testbed_data(options)
    if options.dataset is None:
        try:
            suite = tasks.load_task_suite(
                seed=options.seed, n_train=options.n_train, n_test=options.n_test, domains=options.domains
            )
        except ValueError as error:
            raise RunInputError(str(error)) from error
        return RunData(suite["train"], suite["test"], {"verifier": "exact", "builtin_domains": True}, None)

    def load(name):
        try:
            dataset, column = load_prompt_table(
                name,
                prompt_column=options.prompt_column,
                answer_column=options.answer_column,
                domain_key=options.domain_key,
                split=options.split,
            )
            columns_used[name] = column
            return dataset
        except DatasetError as error:  # empty or malformed file, bad prompt or domain values, missing column
            raise RunInputError(str(error)) from error
        except FileNotFoundError as error:
            raise RunInputError(f"cannot load dataset {name!r}: {error}; check the path") from error
        except Exception as error:  # unreadable file, hub name absent from the offline cache
            raise RunInputError(f"cannot load dataset {name!r}: {first_line(error)}") from error

    columns_used: dict = {}
    data = load(options.dataset)
    held_out = None if options.eval_dataset is None else load(options.eval_dataset)
    if len(data) < 2 and held_out is None:
        raise RunInputError(f"dataset {options.dataset!r} has {len(data)} row(s); need at least 2")

    def split(reward_settings: dict):
        if held_out is not None:
            return RunData(data, held_out, reward_settings, columns_used[options.dataset])
        n_test = min(options.n_test, max(1, len(data) // 5))
        parts = data.train_test_split(test_size=n_test, seed=options.seed, shuffle=True)
        return RunData(parts["train"], parts["test"], reward_settings, columns_used[options.dataset])

    if options.reward is not None:  # the user's reward scores the rows: no verifier reads the answers
        return split({"verifier": "reward", "builtin_domains": False})
    sources = [(options.dataset, list(data["answer"]))]
    if held_out is not None:
        sources.append((options.eval_dataset, list(held_out["answer"])))
    verifier = options.verifier
    if verifier == "auto":
        verifier = (
            "numeric" if all(tasks.answer_is_readable(a, "numeric") for _, rows in sources for a in rows) else "exact"
        )
    for name, answers in sources:
        unreadable = [i for i, a in enumerate(answers) if not tasks.answer_is_readable(a, verifier)]
        if unreadable:
            first = unreadable[0]
            raise RunInputError(
                f"answer column {options.answer_column!r} of {name!r} has {len(unreadable)} value(s) the {verifier} "
                f"verifier cannot read (first: row {first}, {answers[first]!r}); fix the data or choose --verifier"
            )
    return split({"verifier": verifier, "builtin_domains": False})


def testbed_data(options: RunOptions) -> RunData:
    """The testbed's `train` split (its mix per level, or `n_train` rows per level) and `eval` split (its held-out
    rows per level, or `n_test`), levels as domains, answers checked exactly (docs/testbed.md).

    Without `--domains` the levels are those of the train mix (`testbed.TRAIN_ROWS`); a level outside it gets
    `testbed.OTHER_LEVEL_ROWS` rows of each split, or all its split holds when that is fewer."""
    from datasets import Dataset

    from dataflex_callbacks.recipes import testbed
    from dataflex_callbacks.recipes.tasks.suite import prompt_key

    levels = list(testbed.TRAIN_ROWS) if options.domains is None else list(options.domains)
    unknown = [name for name in levels if name not in testbed.LEVELS]
    if unknown:
        raise RunInputError(
            f"unknown testbed level(s) {unknown} in --domains; the levels are "
            f"{', '.join(testbed.LEVELS)} (--suite toy has the domains echo, digit, code, coin)"
        )
    per_level = testbed.default_rows("train", levels) if options.n_train is None else options.n_train
    held_out = testbed.default_rows("eval", levels) if options.n_test is None else options.n_test

    def table(rows):
        return Dataset.from_dict(
            {
                "prompt": [r["prompt"] for r in rows],
                "answer": [r["answer"] for r in rows],
                "domain": [r["domain"] for r in rows],
                "prompt_key": [prompt_key(r["domain"], r["prompt"]) for r in rows],
            }
        )

    train = testbed.testbed_dataset(options.seed, "train", per_level, levels=levels)
    test = testbed.testbed_dataset(options.seed, "eval", held_out, levels=levels)
    return RunData(table(train), table(test), {"verifier": "exact", "builtin_domains": False}, "domain")


def check_trainable(options: RunOptions, strategy, train, error: type = None) -> None:
    """Refuse training data that cannot fill one optimizer step, and a mix config naming domains the data lacks.

    Without this a run with fewer rows than `prompts_per_step` performs 0 optimizer steps and
    reports an untouched model as trained.
    """
    error = error or RunInputError
    row_domains = [str(d) for d in train["domain"]]
    present = sorted(set(row_domains))
    usable = len(row_domains)
    mixed = None if strategy is None else getattr(strategy, "domains", None)
    if mixed is not None:
        missing = [d for d in mixed if d not in present]
        if missing:
            raise error(
                f"strategy {options.strategy!r} mixes domain(s) {missing} that the training data does not have "
                f"(its domains: {', '.join(present)}); list only those in mix.domains, or leave mix.domains out "
                "to take them from the data"
            )
        usable = sum(1 for d in row_domains if d in set(mixed))
    if usable < options.prompts_per_step:
        more = (
            "raise --n-train (prompts per built-in domain)"
            if options.dataset is None
            else f"add rows to the dataset ({options.dataset!r}; some rows are held out for evaluation: --n-test)"
        )
        raise error(
            f"the training data has {usable} usable row(s) but one optimizer step needs {options.prompts_per_step} "
            f"distinct prompts (--prompts-per-step), so the run would train nothing; {more}, "
            "or lower --prompts-per-step"
        )


def check_context(options: RunOptions, train, test, error: type = None) -> None:
    """Refuse prompts (a `--dataset`'s or the built-in suite's) whose longest plus the tokens generated exceeds the
    model's positions, naming the flag that sets those tokens; and a `--model` that cannot be read.

    Past `max_position_embeddings` generation runs on positions the model never learned, and every
    completion scores as wrong; only the config and tokenizer are read, not the weights.
    """
    error = error or RunInputError
    if options.model is None and options.suite == "toy":
        from dataflex_callbacks.recipes.tiny_model import DEFAULT_MODEL_CONFIG, build_tiny_tokenizer

        tokenizer, positions = build_tiny_tokenizer(), DEFAULT_MODEL_CONFIG["max_position_embeddings"]
    else:
        from transformers import AutoConfig, AutoTokenizer

        path = model_path(options, error)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            positions = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
        except Exception as problem:
            raise error(f"cannot load model {path!r}: {first_line(problem)}") from problem
    if not positions:
        return
    prompts = [str(p) for rows in (train, test) for p in rows["prompt"]]
    longest = max((len(tokenizer(p)["input_ids"]) for p in prompts), default=0)
    generated, flag = completion_tokens(options), "--max-completion-length"
    if eval_tokens(options) > generated:  # the held-out pass generates more than training does
        generated, flag = eval_tokens(options), "--eval-max-new-tokens"
    where = repr(options.dataset) if options.dataset is not None else f"the built-in {options.suite} suite"
    if longest >= positions:  # no completion length fits: lowering the flag is no fix
        model = options.model or f"the {options.suite} suite's model"
        raise error(
            f"the longest prompt of {where} is {longest} tokens and {model} holds {positions} positions "
            f"(max_position_embeddings in its config.json): the prompt alone does not fit, whatever {flag}; shorten "
            f"the prompts to under {positions} tokens (leaving room for the completion), or pass a --model with "
            "more positions"
        )
    check_context_length(longest, generated, positions, prompts=where, setting=flag, error=error)


def model_path(options: RunOptions, error: type = None) -> str:
    """The folder or hub id `from_pretrained` loads: `--model`, else the testbed's shipped model.

    A `--model` written as a path (``./m``, ``/data/m``, ``~/m``, ``a/b/c``) that does not exist is refused as no
    such folder, instead of the hub's complaint about a malformed repository id.
    """
    if options.model is None:
        from dataflex_callbacks.recipes.testbed import load_testbed_model_path

        return load_testbed_model_path()
    import os

    path = str(options.model)
    hub_id = re.fullmatch(r"[A-Za-z0-9_][\w.-]*(/[A-Za-z0-9_][\w.-]*)?", path) is not None
    if not os.path.exists(os.path.expanduser(path)) and (not hub_id or path.startswith((".", "~"))):
        raise (error or RunInputError)(
            f"--model {path!r}: no such folder ({os.path.abspath(os.path.expanduser(path))} does not exist); pass the "
            "folder that holds the model (its config.json and weights), or a hub id such as Qwen/Qwen2.5-0.5B-Instruct"
        )
    return os.path.expanduser(path)


def adapter_refusal(strategy, options: RunOptions) -> str | None:
    """Why the TRL adapter would refuse ``strategy`` for a run with ``options`` (`RunOptions`), in one line; None if
    it would not.

    The check is the adapter's own (`DataFlexCallback.check_strategy`), on the settings every run trains with:
    ``num_generations`` completions per prompt, one process, TRL's defaults for the rest.
    """
    if strategy is None:  # plain GRPO: no adapter
        return None
    from dataflex_callbacks.errors import DataFlexError

    try:
        from dataflex_callbacks.integrations.trl.callback import DataFlexCallback
        from dataflex_callbacks.integrations.trl.trainer_settings import TrainerSettings
    except ImportError:  # no TRL: every run says so itself (runner.make_trainer)
        return None
    try:
        DataFlexCallback.check_strategy(strategy, TrainerSettings(num_generations=int(options.num_generations)))
    except DataFlexError as error:
        text = " ".join(str(error).split())
        return text.removeprefix("dataflex: ")
    return None
