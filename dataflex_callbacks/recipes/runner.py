"""The main job: GRPO-train a model on a prompt dataset with a data strategy, and record the run.

`run_training(RunOptions(...))` is what `dataflex run` calls; it is a plain function so other
commands (a later `dataflex compare`) can run several strategies or seeds and read the
returned `RunResult`. With the defaults it trains the built-in tiny model on the built-in task
suite on a CPU in a couple of minutes, with no network access.

Its settings are `RunOptions` (recipes/options.py: every field with its help, default and rule).
Every input is checked before the model is loaded and before anything is written: a bad number
(the field's `NumberRule`), output folder, strategy, dataset, column, answer, or too few rows for one step
raises `RunInputError` (the CLI turns it into a one-line error and exit code 2), and a run that
fails removes the folder it created.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dataflex_callbacks.rollout.batch import NO_DOMAIN
from dataflex_callbacks.host import DEFAULT_DOMAIN_KEY
from dataflex_callbacks.host.context_length import check_context_length

from .completion_accounting import (
    dynamic_buffer,  # noqa: F401
    metrics_callback,
)
from .options import (
    RunInputError,
    RunOptions,
    check_run_options,
    completion_tokens,
    eval_tokens,  # noqa: F401
    resolve_rewards,
    reward_name,
    with_suite_defaults,
)
from .held_out import SAMPLED, HeldOutEvaluation
from .user_reward import ScoredRewards
from .run_folder import (
    TRAINER_FOLDER,
    OutputFolder,
    check_folder_path,  # noqa: F401
    resolve_output_dir,
    write_run_files,
)

NO_STRATEGY = ("none",)


@dataclass
class RunResult:
    """What a run produced: the run folder and the numbers written into it."""

    output_dir: str
    config: dict
    metrics: list[dict]
    eval_before: dict[str, float]
    eval_after: dict[str, float]
    wall_seconds: float
    headline: dict  # eval.json's `headline`: metric, levels, rows, before, after (held_out.Headline.record)
    files: dict[str, str] = field(default_factory=dict)
    sampled: dict | None = None  # eval.json's `sampled_pass_at_1`: k, temperature, before, after; None when off


# --------------------------------------------------------------------------- input checks


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


def data_line(options: RunOptions, data: RunData, command: str = "dataflex run") -> str:
    """The console line saying which data a run trains on and where its domains come from.

    Domains are read from `--domain-key`, else from a `domain` column when the data has one (the one
    default of every host: docs/guarantees.md "Domains"), else every row is in one domain.
    """
    domains = ", ".join(sorted({str(d) for d in data.train["domain"]} | {str(d) for d in data.test["domain"]}))
    sizes = f"{len(data.train)} training rows, {len(data.test)} held out"
    if options.dataset is None:
        return f"{command}: data: the built-in {options.suite} suite ({sizes}); domains: {domains}"
    column = data.domain_key
    if column is None:
        where = (
            f"domains: one ({NO_DOMAIN!r}): {options.dataset} has no {DEFAULT_DOMAIN_KEY!r} column "
            "(--domain-key names the column holding each row's domain)"
        )
    else:
        where = f"domains (column {column!r}): {domains}"
    return f"{command}: data: {options.dataset} ({sizes}); {where}"


def learning_rate_line(options: RunOptions, command: str = "dataflex run") -> str:
    """The console line naming the learning rate a run trains at, and where it comes from."""
    from .options import PRETRAINED_LEARNING_RATE

    options = with_suite_defaults(options)
    if options.learning_rate is None:
        return f"{command}: learning rate: unset"
    rate = f"{command}: learning rate {options.learning_rate:g}"
    if options.learning_rate == PRETRAINED_LEARNING_RATE and options.model is not None:
        return f"{rate} (the default for a --model: TRL's; set --learning-rate to change it)"
    return f"{rate} (set --learning-rate to change it)"


def unscored_line(reward_names: list[str], unscored: int, completions: int) -> str | None:
    """A warning when the reward scored none of the run's training completions (None or NaN for each), else None."""
    if not completions or unscored < completions:
        return None
    return (
        f"the reward ({', '.join(reward_names)}) scored none of the {completions} training completions (it returned "
        "None or NaN for every one): no group carried a learning signal, so nothing was learnt from the reward; "
        "call it on a few completions and check it returns numbers for them"
    )


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
    """Refuse a --dataset whose longest prompt plus the completion length exceeds the model's positions.

    Past `max_position_embeddings` generation runs on positions the model never learned, and every
    completion scores as wrong; only the config and tokenizer are read, not the weights.
    """
    error = error or RunInputError
    if options.dataset is None:
        return
    if options.model is None and options.suite == "toy":
        from dataflex_callbacks.recipes.tiny_model import DEFAULT_MODEL_CONFIG, build_tiny_tokenizer

        tokenizer, positions = build_tiny_tokenizer(), DEFAULT_MODEL_CONFIG["max_position_embeddings"]
    else:
        from transformers import AutoConfig, AutoTokenizer

        path = model_path(options)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            positions = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
        except Exception as problem:
            raise error(f"cannot load model {path!r}: {first_line(problem)}") from problem
    if not positions:
        return
    prompts = [str(p) for rows in (train, test) for p in rows["prompt"]]
    longest = max((len(tokenizer(p)["input_ids"]) for p in prompts), default=0)
    generated = max(completion_tokens(options), eval_tokens(options))
    check_context_length(
        longest, generated, positions, prompts=repr(options.dataset), setting="--max-completion-length", error=error
    )


def load_model(options: RunOptions):
    """Return `(model, tokenizer, description)`: the built-in tiny model, or `from_pretrained(options.model)`."""
    if options.model is None and options.suite == "toy":
        from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        return build_tiny_model(tokenizer, seed=options.seed), tokenizer, "tiny"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_path(options)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
    except Exception as error:
        raise RunInputError(f"cannot load model {path!r}: {first_line(error)}") from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer, options.model or "testbed"


def model_path(options: RunOptions) -> str:
    """The folder or hub id `from_pretrained` loads: `--model`, else the testbed's shipped model."""
    if options.model is not None:
        return options.model
    from dataflex_callbacks.recipes.testbed import load_testbed_model_path

    return load_testbed_model_path()


# --------------------------------------------------------------------------- trainer


def make_trainer(model, tokenizer, reward_fn, train_dataset, args, strategy, callbacks):
    """Build the GRPO trainer; with a strategy, the DataFlex TRL adapter applies it inside the loss."""
    if strategy is None:
        from trl import GRPOTrainer

        return GRPOTrainer(
            model=model,
            reward_funcs=reward_fn,
            args=args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            callbacks=callbacks,
        )
    try:
        from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
    except ImportError:
        raise RunInputError(
            "the TRL adapter (dataflex_callbacks.integrations.trl.DataFlexGRPOTrainer) is not available; "
            "use --strategy none"
        ) from None
    from dataflex_callbacks.errors import DataFlexError

    try:
        return DataFlexGRPOTrainer(
            model=model,
            reward_funcs=reward_fn,
            args=args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            callbacks=callbacks,
            strategy=strategy,
        )
    except DataFlexError as error:  # the strategy does not fit this data (a domain column, a mix domain, ...)
        raise RunInputError(str(error).strip().splitlines()[0]) from error


def _versions() -> dict:
    import importlib.metadata as metadata

    versions = {}
    for package in ("dataflex-callbacks", "torch", "transformers", "trl", "datasets"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


# --------------------------------------------------------------------------- the job


def run_training(options: RunOptions, callbacks=()) -> RunResult:
    """Train with GRPO and a data strategy, evaluate before/after, and write the run folder.

    `callbacks`: extra `transformers.TrainerCallback`s added to the trainer (`dataflex compare` uses one to
    count generated completions, stop at a completions budget and evaluate during training); one with a
    ``bind_trainer(trainer)`` method is given the trainer once it is built.

    Raises `RunInputError` before loading the model when an input is unusable (numbers, output
    folder, strategy, data, too few rows for one step), and when training performed no optimizer
    step. A run that fails removes the run folder if it created it (else only its scratch folder).
    """
    started = time.perf_counter()
    check_run_options(options)
    options = with_suite_defaults(options)
    output_dir = resolve_output_dir(options)
    strategy = resolve_strategy(options.strategy)
    data = load_data(options)
    train, test, reward_settings = data.train, data.test, data.reward_settings
    check_trainable(options, strategy, train)
    check_context(options, train, test)
    if options.progress:
        print(data_line(options, data), flush=True)
        print(learning_rate_line(options), flush=True)
    folder = OutputFolder(output_dir, leftovers=(TRAINER_FOLDER,)).create()
    try:
        return _train_and_record(options, callbacks, started, output_dir, strategy, train, test, reward_settings)
    except BaseException:
        folder.discard()
        raise


def _vllm_config(options: RunOptions, model, tokenizer, trainer_dir: str) -> dict:
    """`GRPOConfig` fields for ``--use-vllm`` (colocate); the built-in model is saved where vLLM can load it."""
    if not options.use_vllm:
        return {}
    import torch

    from dataflex_callbacks.recipes import vllm_colocate

    vllm_colocate.in_process_engine()
    max_length = None
    if options.model is None:  # built in memory: vLLM starts from a saved copy (TRL then pushes the weights)
        vllm_colocate.save_for_engine(model, tokenizer, os.path.join(trainer_dir, "vllm_model"))
        max_length = model.config.max_position_embeddings
    return vllm_colocate.colocate_config(on_cpu=not torch.cuda.is_available(), max_model_length=max_length)


def _vllm_engine(options: RunOptions):
    """Where the trainer is built: CPU-ready engine settings for ``--use-vllm`` without a GPU, else nothing."""
    import contextlib

    import torch

    if not options.use_vllm or torch.cuda.is_available():
        return contextlib.nullcontext()
    from dataflex_callbacks.recipes.vllm_colocate import cpu_engine

    return cpu_engine()


def _train_and_record(options, callbacks, started, output_dir, strategy, train, test, reward_settings) -> RunResult:
    model, tokenizer, model_description = load_model(options)

    import torch
    from transformers import set_seed
    from trl import GRPOConfig

    from dataflex_callbacks.recipes import tasks

    completion_length, eval_length = completion_tokens(options), eval_tokens(options)
    domains = sorted(set(train["domain"]) | set(test["domain"]))

    set_seed(options.seed)
    trainer_dir = os.path.join(output_dir, TRAINER_FOLDER)
    args = GRPOConfig(
        output_dir=trainer_dir,
        max_steps=options.steps,
        per_device_train_batch_size=options.prompts_per_step * options.num_generations,
        # Recomputing activations saves memory a 1M-parameter model does not need and costs a quarter of each step.
        **({} if options.model is not None else {"gradient_checkpointing": False}),
        num_generations=options.num_generations,
        max_completion_length=completion_length,
        temperature=options.temperature,
        learning_rate=options.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=options.beta,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=options.seed,
        data_seed=options.seed,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
        dataloader_num_workers=0,
        **({} if options.reward_weights is None else {"reward_weights": list(options.reward_weights)}),
        **_vllm_config(options, model, tokenizer, trainer_dir),
    )
    records: list[dict] = []
    user_rewards = resolve_rewards(options)
    scoring = None
    if user_rewards is not None:
        scoring = ScoredRewards(user_rewards, options.reward_weights, options.num_generations)
        reward_fn = scoring.functions()
    else:
        reward_fn = tasks.make_reward_fn(seed=options.seed, **reward_settings)
    callback = metrics_callback(records, domains, options.steps, options.progress, scoring)
    with _vllm_engine(options):
        trainer = make_trainer(model, tokenizer, reward_fn, train, args, strategy, [callback, *callbacks])
    callback.buffer = dynamic_buffer(trainer)
    for extra in callbacks:  # a compare budget stops a dynamic-sampling step's rounds at the budget
        if hasattr(extra, "bind_trainer"):
            extra.bind_trainer(trainer)
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for noisy_callback in (PrinterCallback, ProgressCallback):  # our callback prints the progress instead
        trainer.remove_callback(noisy_callback)

    # Before and after: one fixed computation on the device the trainer placed the model on (tasks/evaluation.py).
    evaluation = HeldOutEvaluation(options, test, reward_settings)
    before = evaluation(trainer.model, tokenizer)
    trainer.train()
    if trainer.state.global_step == 0:
        raise RunInputError(
            f"training performed 0 optimizer steps ({len(train)} training rows, {options.prompts_per_step} prompts "
            "per step): nothing was trained; add training rows or lower --prompts-per-step"
        )
    held_out = evaluation.record(before, evaluation(trainer.model, tokenizer))
    shutil.rmtree(trainer_dir, ignore_errors=True)

    config = {
        "options": {
            **dataclasses.asdict(options),
            "reward": None if options.reward is None else [reward_name(r) for r in options.reward],
        },
        "output_dir": output_dir,
        "strategy": None if strategy is None else strategy.config.to_dict(),
        "model": model_description,
        "dataset": options.dataset or "builtin:tasks",
        "domains": domains,
        "n_train_rows": len(train),
        "n_test_rows": len(test),
        "n_test_rows_per_domain": {d: sum(1 for x in test["domain"] if x == d) for d in sorted(set(test["domain"]))},
        "completions_generated": callback.completions,
        "generated_tokens": callback.generated_tokens,
        # Earlier correct responses an allocation part reused: trained, not generated (docs/allocation.md).
        "reused_responses": callback.reused_responses,
        "signal_groups_trained": callback.signal_groups if callback.signal_counted else None,
        "zero_signal_completions": callback.zero_signal_completions if callback.signal_counted else None,
        # Training completions to which no reward function gave a number (None or NaN from every one); None
        # with the built-in verifier, which scores every completion.
        "unscored_completions": None if scoring is None else scoring.unscored_completions,
        "verifier": reward_settings["verifier"],
        "reward": None
        if user_rewards is None
        else {
            "functions": [reward_name(r) for r in options.reward],
            "weights": options.reward_weights,
            "held_out_rule": f"first reward >= {options.reward_threshold}",
        },
        "trainer": {
            "class": type(trainer).__name__,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "num_generations": args.num_generations,
            "max_completion_length": completion_length,
            "eval_max_new_tokens": eval_length,
            "learning_rate": args.learning_rate,
            "temperature": args.temperature,
            "beta": args.beta,
            "loss_type": args.loss_type,
            "scale_rewards": args.scale_rewards,
            "use_vllm": args.use_vllm,
        },
        "versions": _versions(),
    }
    files = write_run_files(output_dir, config, records, held_out, domains)
    unscored = (
        None
        if scoring is None
        else unscored_line(config["reward"]["functions"], scoring.unscored_completions, scoring.completions)
    )
    if unscored is not None and options.progress:
        print(f"dataflex run: warning: {unscored}", file=sys.stderr, flush=True)
    return RunResult(
        output_dir=output_dir,
        config=config,
        metrics=records,
        eval_before=held_out["before"],
        eval_after=held_out["after"],
        sampled=held_out.get(SAMPLED),
        headline=held_out["headline"],
        wall_seconds=time.perf_counter() - started,
        files=files,
    )
