"""The main job: GRPO-train a model on a prompt dataset with a data strategy, and record the run.

`run_training(RunOptions(...))` is what `dataflex run` calls; it is a plain function so other
commands (a later `dataflex compare`) can run several strategies or seeds and read the
returned `RunResult`. With the defaults it trains the built-in tiny model on the built-in task
suite on a CPU in a couple of minutes, with no network access.

Its settings are `RunOptions` (recipes/options.py: every field with its help, default and rule).
Every input is checked before the model is loaded and before anything is written: a bad number
(the field's `NumberRule`), output folder, strategy, dataset, column, answer, or too few rows for one step
raises `RunInputError` (the CLI turns it into a one-line error and exit code 2), and a run that
fails removes the folder it created. The checks of the strategy and the data are in `run_inputs`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

from dataflex_callbacks.host import DEFAULT_DOMAIN_KEY
from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .completion_accounting import dynamic_buffer, metrics_callback
from .held_out import SAMPLED, HeldOutEvaluation
from .options import (
    RunInputError,
    RunOptions,
    check_run_options,
    completion_tokens,
    default_learning_rate,
    eval_tokens,
    model_description,
    resolve_rewards,
    reward_name,
    with_suite_defaults,
)
from .run_folder import TRAINER_FOLDER, OutputFolder, resolve_output_dir, write_run_files
from .run_inputs import (
    RunData,
    adapter_refusal,
    check_context,
    check_trainable,
    first_line,
    load_data,
    model_path,
    resolve_strategy,
)
from .user_reward import ScoredRewards

# The job and its console lines (its inputs: `run_inputs`; its options: `options`).
__all__ = [
    "RunInputError",
    "RunOptions",
    "RunResult",
    "check_run_options",
    "data_line",
    "learning_rate_line",
    "load_model",
    "make_trainer",
    "run_training",
    "unscored_line",
]


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


# --------------------------------------------------------------------------- console lines


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
    """The console line naming the model a run trains and its learning rate, and where the rate comes from.

    The rate follows the model (`options.default_learning_rate`): a pretrained one trains slowly, the toy suite's
    random-initialised one fast; a rate other than the model's default is the user's `--learning-rate`.
    """
    options = with_suite_defaults(options)
    rate = f"{command}: model: {model_description(options)}; learning rate {options.learning_rate:g}"
    if options.learning_rate != default_learning_rate(options):
        return f"{rate} (set by --learning-rate)"
    if options.model is not None:
        return f"{rate} (the default for a pretrained --model: TRL's; set --learning-rate to change it)"
    return f"{rate} (this model's default; set --learning-rate to change it)"


def unscored_line(reward_names: list[str], unscored: int, completions: int) -> str | None:
    """A warning when the reward scored none of the run's training completions (None or NaN for each), else None."""
    if not completions or unscored < completions:
        return None
    return (
        f"the reward ({', '.join(reward_names)}) scored none of the {completions} training completions (it returned "
        "None or NaN for every one): no group carried a learning signal, so nothing was learnt from the reward; "
        "call it on a few completions and check it returns numbers for them"
    )


# --------------------------------------------------------------------------- model and trainer


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
    refusal = adapter_refusal(strategy, options)
    if refusal is not None:  # before the data, the model and the folder: the adapter would refuse it at build
        raise RunInputError(f"strategy {options.strategy!r} cannot train with these settings: {refusal}")
    data = load_data(options)
    train, test, reward_settings = data.train, data.test, data.reward_settings
    check_trainable(options, strategy, train)
    check_context(options, train, test)
    if options.progress:  # the model and its rate first: a wrong pair is the costliest mistake to notice late
        print(learning_rate_line(options), flush=True)
        print(data_line(options, data), flush=True)
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


def _seeded_grpo_config(options: RunOptions, model, tokenizer, trainer_dir: str):
    """Seed the run (`transformers.set_seed`), then the `GRPOConfig` it trains with."""
    import torch
    from transformers import set_seed
    from trl import GRPOConfig

    set_seed(options.seed)
    return GRPOConfig(
        output_dir=trainer_dir,
        max_steps=options.steps,
        per_device_train_batch_size=options.prompts_per_step * options.num_generations,
        # Recomputing activations saves memory a 1M-parameter model does not need and costs a quarter of each step.
        **({} if options.model is not None else {"gradient_checkpointing": False}),
        num_generations=options.num_generations,
        max_completion_length=completion_tokens(options),
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


def _train_and_record(options, callbacks, started, output_dir, strategy, train, test, reward_settings) -> RunResult:
    model, tokenizer, model_description = load_model(options)
    from dataflex_callbacks.recipes import tasks

    domains = sorted(set(train["domain"]) | set(test["domain"]))
    trainer_dir = os.path.join(output_dir, TRAINER_FOLDER)
    args = _seeded_grpo_config(options, model, tokenizer, trainer_dir)
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

    config = _run_config(
        options,
        output_dir=output_dir,
        strategy=strategy,
        model_description=model_description,
        domains=domains,
        train=train,
        test=test,
        callback=callback,
        scoring=scoring,
        reward_settings=reward_settings,
        trainer=trainer,
        args=args,
    )
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


def _run_config(
    options: RunOptions,
    *,
    output_dir: str,
    strategy,
    model_description: str,
    domains: list,
    train,
    test,
    callback,
    scoring,
    reward_settings: dict,
    trainer,
    args,
) -> dict:
    """config.json: the options, the data, what the run generated and trained (``callback`` counted it), the reward
    (``scoring``: the user's rewards, None with the built-in verifier), the trainer and its `GRPOConfig` ``args``,
    and the package versions."""
    return {
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
        if scoring is None
        else {
            "functions": [reward_name(r) for r in options.reward],
            "weights": options.reward_weights,
            "held_out_rule": f"first reward >= {options.reward_threshold}",
        },
        "trainer": {
            "class": type(trainer).__name__,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "num_generations": args.num_generations,
            "max_completion_length": completion_tokens(options),
            "eval_max_new_tokens": eval_tokens(options),
            "learning_rate": args.learning_rate,
            "temperature": args.temperature,
            "beta": args.beta,
            "loss_type": args.loss_type,
            "scale_rewards": args.scale_rewards,
            "use_vllm": args.use_vllm,
        },
        "versions": _versions(),
    }
