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
import datetime as _datetime
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from .options import RunInputError, RunOptions, check_run_options, completion_tokens, eval_tokens  # noqa: F401

RUN_FILES = ("config.json", "metrics.jsonl", "eval.json", "plot.png")
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
    files: dict[str, str] = field(default_factory=dict)


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


def resolve_output_dir(options: RunOptions) -> str:
    """Return the run folder, refusing a path that cannot be a folder, or one that holds a run unless `overwrite`."""
    if options.output_dir:
        path = os.fspath(options.output_dir)
    else:
        stamp = _datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = os.path.splitext(os.path.basename(str(options.strategy)))[0] or "run"
        path = os.path.join("runs", f"{name}-{stamp}")
    check_folder_path(path)
    existing = [name for name in RUN_FILES if os.path.exists(os.path.join(path, name))]
    if existing and not options.overwrite:
        raise RunInputError(f"{path!r} already holds a run ({', '.join(existing)}); pass --overwrite or another --output-dir")
    return path


def check_folder_path(path: str, flag: str = "--output-dir", error: type = None) -> None:
    """Refuse a folder path that is a file or lies under a file (one line naming the blocking file)."""
    error = error or RunInputError
    if os.path.exists(path) and not os.path.isdir(path):
        raise error(f"{flag} {path!r} is a file, not a folder; choose a folder path with {flag}")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise error(f"{flag} {path!r} cannot be created: {parent!r} is a file; choose a path under a folder with {flag}")


class OutputFolder:
    """The folder a job writes into: created (with its missing parents) and write-tested up front, and
    removed again, with everything in it, when the job fails before finishing, if this job created it.

    A folder that existed before is never removed; only `leftovers` (e.g. the trainer's scratch
    folder) are removed from it.
    """

    def __init__(self, path: str, flag: str = "--output-dir", error: type = None, leftovers: tuple = ()):
        self.path = path
        self.flag = flag
        self.error = error or RunInputError
        self.leftovers = tuple(leftovers)
        self.created: str | None = None  # topmost folder this job created

    def create(self) -> "OutputFolder":
        """Make the folder and check a file can be written in it; raises the job's input error if not."""
        check_folder_path(self.path, self.flag, self.error)
        absolute = os.path.abspath(self.path)
        top = None
        probe = absolute
        while not os.path.exists(probe):
            top = probe
            probe = os.path.dirname(probe)
        try:
            os.makedirs(absolute, exist_ok=True)
            self.created = top
            test_file = os.path.join(absolute, f".dataflex-write-test.{os.getpid()}")
            with open(test_file, "w") as handle:
                handle.write("ok")
            os.remove(test_file)
        except OSError as failure:
            self.created = top if top is not None and os.path.isdir(top) else None
            self.discard()
            reason = failure.strerror or type(failure).__name__
            raise self.error(f"cannot write to {self.flag} {self.path!r} ({reason}); choose a folder you can write to "
                             f"with {self.flag}") from None
        return self

    def discard(self) -> None:
        """Remove what this job created (the whole folder if it made it, else only the leftovers)."""
        if self.created is not None:
            shutil.rmtree(self.created, ignore_errors=True)
            self.created = None
            return
        for name in self.leftovers:
            target = os.path.join(self.path, name)
            if os.path.isdir(target):
                shutil.rmtree(target, ignore_errors=True)
            elif os.path.exists(target):
                os.remove(target)


def first_line(error: BaseException) -> str:
    """One line for the user: the message of the innermost cause (libraries often wrap the real reason)."""
    seen = set()
    while (error.__cause__ or error.__context__) is not None and id(error) not in seen:
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def load_data(options: RunOptions):
    """Return `(train, test, reward_settings)`: the built-in suite, or the user dataset split for evaluation."""
    from dataflex_callbacks.recipes import tasks
    from dataflex_callbacks.recipes.tasks.loading import DatasetError

    if options.dataset is None:
        try:
            suite = tasks.load_task_suite(seed=options.seed, n_train=options.n_train, n_test=options.n_test,
                                          domains=options.domains)
        except ValueError as error:
            raise RunInputError(str(error)) from error
        return suite["train"], suite["test"], {"verifier": "exact", "builtin_domains": True}

    try:
        data = tasks.load_prompt_dataset(
            options.dataset, prompt_column=options.prompt_column, answer_column=options.answer_column,
            domain_column=options.domain_column, split=options.split,
        )
    except DatasetError as error:  # empty or malformed file, bad prompt or domain values, missing column
        raise RunInputError(str(error)) from error
    except FileNotFoundError as error:
        raise RunInputError(f"cannot load dataset {options.dataset!r}: {error}; check the path") from error
    except Exception as error:  # unreadable file, hub name absent from the offline cache
        raise RunInputError(f"cannot load dataset {options.dataset!r}: {first_line(error)}") from error
    if len(data) < 2:
        raise RunInputError(f"dataset {options.dataset!r} has {len(data)} row(s); need at least 2")

    answers = list(data["answer"])
    verifier = options.verifier
    if verifier == "auto":
        verifier = "numeric" if all(tasks.answer_is_readable(a, "numeric") for a in answers) else "exact"
    unreadable = [i for i, a in enumerate(answers) if not tasks.answer_is_readable(a, verifier)]
    if unreadable:
        first = unreadable[0]
        raise RunInputError(
            f"answer column {options.answer_column!r} has {len(unreadable)} value(s) the {verifier} verifier "
            f"cannot read (first: row {first}, {answers[first]!r}); fix the data or choose --verifier"
        )
    n_test = min(options.n_test, max(1, len(data) // 5))
    split = data.train_test_split(test_size=n_test, seed=options.seed, shuffle=True)
    return split["train"], split["test"], {"verifier": verifier, "builtin_domains": False}


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
        more = ("raise --n-train (prompts per built-in domain)" if options.dataset is None
                else f"add rows to the dataset ({options.dataset!r}; some rows are held out for evaluation: --n-test)")
        raise error(
            f"the training data has {usable} usable row(s) but one optimizer step needs {options.prompts_per_step} "
            f"distinct prompts (--prompts-per-step), so the run would train nothing; {more}, "
            "or lower --prompts-per-step"
        )


def load_model(options: RunOptions):
    """Return `(model, tokenizer, description)`: the built-in tiny model, or `from_pretrained(options.model)`."""
    if options.model is None:
        from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        return build_tiny_model(tokenizer, seed=options.seed), tokenizer, "tiny"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(options.model)
        model = AutoModelForCausalLM.from_pretrained(options.model)
    except Exception as error:
        raise RunInputError(f"cannot load model {options.model!r}: {first_line(error)}") from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer, options.model


# --------------------------------------------------------------------------- trainer


def make_trainer(model, tokenizer, reward_fn, train_dataset, args, strategy, callbacks):
    """Build the GRPO trainer; with a strategy, the DataFlex TRL adapter applies it inside the loss."""
    if strategy is None:
        from trl import GRPOTrainer

        return GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=train_dataset,
                           processing_class=tokenizer, callbacks=callbacks)
    try:
        from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
    except ImportError:
        raise RunInputError(
            "the TRL adapter (dataflex_callbacks.integrations.trl.DataFlexGRPOTrainer) is not available; "
            "use --strategy none"
        ) from None
    from dataflex_callbacks.errors import DataFlexError

    try:
        return DataFlexGRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=train_dataset,
                                   processing_class=tokenizer, callbacks=callbacks, strategy=strategy)
    except DataFlexError as error:  # the strategy does not fit this data (a domain column, a mix domain, ...)
        raise RunInputError(str(error).strip().splitlines()[0]) from error


def _step_record(step: int, logs: dict, domains: list[str]) -> dict:
    """Flatten one step's trainer logs into the metrics.jsonl schema (plus every raw numeric log)."""
    record: dict[str, Any] = {"step": step}
    raw = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    record["loss"] = raw.get("loss")
    record["reward"] = raw.get("reward")
    for domain in domains:
        record[f"reward/{domain}"] = raw.get(f"tasks/reward/{domain}")
        record[f"share/{domain}"] = raw.get(f"tasks/share/{domain}", 0.0)
    kept = [v for k, v in raw.items() if k.endswith("kept_frac")]
    record["kept_frac"] = kept[0] if kept else 1.0
    for key, value in raw.items():
        # Strategy metrics (mix targets, weights, ...) keep the adapter's names; wall-clock
        # timings are left out so a fixed seed gives byte-identical metrics.
        if key in record or key.startswith("tasks/") or "time" in key or key.endswith("_per_second"):
            continue
        record[key] = value
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


GENERATED_KEY = "dataflex/dynamic/generated"
"""The step's generated completions (all rounds), logged by a strategy with a ``dynamic_sampling`` part."""
SIGNAL_GROUPS_KEY = "dataflex/dynamic/signal_groups"
"""The signal groups a dynamic-sampling step trained on, logged by a strategy with a ``dynamic_sampling`` part."""
ZERO_STD_KEY = "frac_reward_zero_std"
"""TRL's logged fraction of the generation batch's groups whose rewards are all equal (all processes)."""


def scheduled_completions(args, global_step: int) -> int:
    """Completions TRL's generation schedule makes in optimizer step `global_step` (1-based), all processes.

    TRL generates ``generation_batch_size`` completions at micro-steps 0, G, 2G, ... with
    G = ``steps_per_generation * num_iterations``. Pre-rollout selection changes which prompts are
    generated, never how many; dynamic sampling generates more (its logged `GENERATED_KEY` counts them).
    """
    micro = int(args.gradient_accumulation_steps)
    every = int(args.steps_per_generation) * int(getattr(args, "num_iterations", 1) or 1)
    before, after = (global_step - 1) * micro, global_step * micro
    return (-(-after // every) - -(-before // every)) * int(args.generation_batch_size)


def dynamic_buffer(trainer):
    """The `SignalGroupBuffer` the TRL adapter drives for a ``dynamic_sampling`` strategy, or None."""
    dynamic = getattr(getattr(trainer, "dataflex", None), "dynamic", None)
    return None if dynamic is None else dynamic.buffer


def signal_accounting(logs: dict, generated: int, num_generations: int, zero_signal_total: int | None,
                      zero_signal_before: int) -> tuple[int | None, int | None]:
    """``(trained signal groups, completions in zero-signal groups)`` of one step, from its logs.

    Dynamic sampling (`SIGNAL_GROUPS_KEY` logged): the signal groups it trained, and the step's
    growth of its buffer's ``totals["zero_signal_completions"]`` (`zero_signal_total`, read after the
    step; the buffer judges every generated group, trained or not, with the strategy's select part).
    Otherwise every generated group is trained, and a group carries signal when its rewards are not
    all equal: TRL's `ZERO_STD_KEY` (reward std close to 0) gives the share that are. None when the
    step's logs (or a missing buffer) cannot tell.
    """
    if logs.get(SIGNAL_GROUPS_KEY) is not None:
        zero_signal = None if zero_signal_total is None else int(zero_signal_total - zero_signal_before)
        return int(round(logs[SIGNAL_GROUPS_KEY])), zero_signal
    if generated == 0:
        return 0, 0
    if logs.get(ZERO_STD_KEY) is None:
        return None, None
    groups = generated // num_generations
    zero_groups = int(round(float(logs[ZERO_STD_KEY]) * groups))
    return groups - zero_groups, zero_groups * num_generations


def _metrics_callback(records: list[dict], domains: list[str], steps: int, progress: bool):
    from transformers import TrainerCallback

    class RecordMetrics(TrainerCallback):
        """Keep one record per optimizer step, count generated completions and signal groups, drive the progress bar.

        Each record holds the step's ``generated`` completions, the cumulative ``completions``, the
        step's trained ``signal_groups`` and ``zero_signal_completions`` (`signal_accounting`).
        ``buffer`` is the adapter's dynamic-sampling buffer, set once the trainer exists (None without one).
        """

        def __init__(self):
            self.bar = None
            self.completions = 0
            self.signal_groups = 0
            self.zero_signal_completions = 0
            self.signal_counted = True  # False once a step's logs could not tell its signal groups
            self.buffer = None
            self._scheduled = 0  # this step's completions by TRL's schedule, until its logs say otherwise
            self._zero_signal_seen = 0

        def on_step_end(self, args, state, control, **kwargs):
            self._scheduled = scheduled_completions(args, state.global_step)
            self.completions += self._scheduled

        def on_train_begin(self, args, state, control, **kwargs):
            if progress:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=steps, desc="dataflex run", unit="step", dynamic_ncols=True)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return  # the end-of-training summary has no per-step metrics
            generated = self._scheduled
            if logs.get(GENERATED_KEY) is not None:  # dynamic sampling generated every round it needed
                generated = int(round(logs[GENERATED_KEY]))
                self.completions += generated - self._scheduled
            self._scheduled = 0
            zero_total = None if self.buffer is None else int(self.buffer.totals["zero_signal_completions"])
            signal_groups, zero_signal = signal_accounting(logs, generated, int(args.num_generations), zero_total,
                                                           self._zero_signal_seen)
            if zero_total is not None:
                self._zero_signal_seen = zero_total
            if signal_groups is None or zero_signal is None:
                self.signal_counted = False
            else:
                self.signal_groups += signal_groups
                self.zero_signal_completions += zero_signal
            record = _step_record(state.global_step, logs, domains)
            record.update(completions=self.completions, generated=generated, signal_groups=signal_groups,
                          zero_signal_completions=zero_signal)
            records.append(record)
            if self.bar is not None:
                self.bar.update(record["step"] - self.bar.n)
                shown = {"reward": record["reward"], "kept": record["kept_frac"]}
                self.bar.set_postfix({k: f"{v:.2f}" for k, v in shown.items() if v is not None})

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()

    return RecordMetrics()


# --------------------------------------------------------------------------- outputs


def write_plot(path: str, metrics: list[dict], domains: list[str]) -> None:
    """Plot reward per domain, kept fraction and domain proportions over steps into `path` (PNG).

    With a mixing strategy the proportions panel shows each domain's target and actual share.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in metrics]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    for domain in domains:
        values = [m.get(f"reward/{domain}") for m in metrics]
        axes[0].plot(steps, [float("nan") if v is None else v for v in values], label=domain)
    axes[0].set(title="reward per domain", xlabel="step", ylim=(-0.05, 1.05))
    axes[0].legend(fontsize="small")
    axes[1].plot(steps, [m.get("kept_frac", 1.0) for m in metrics], color="black")
    axes[1].set(title="kept fraction", xlabel="step", ylim=(-0.05, 1.05))
    mixing = any(f"dataflex/mix/target/{d}" in m for m in metrics for d in domains)
    if mixing:
        # Target (dashed) against actual (solid: share of the last sampler batches) per domain.
        for index, domain in enumerate(domains):
            color = f"C{index}"
            target = [m.get(f"dataflex/mix/target/{domain}") for m in metrics]
            actual = [m.get(f"dataflex/mix/actual/{domain}", m.get(f"share/{domain}")) for m in metrics]
            axes[2].plot(steps, [float("nan") if v is None else v for v in actual], color=color, label=f"{domain} actual")
            axes[2].plot(steps, [float("nan") if v is None else v for v in target], color=color, linestyle="--",
                         label=f"{domain} target")
        axes[2].set(title="domain proportions: target (--) and actual", xlabel="step", ylim=(0, 1))
    else:
        shares = [[m.get(f"share/{d}") or 0.0 for m in metrics] for d in domains]
        if steps:
            axes[2].stackplot(steps, shares, labels=domains)
        axes[2].set(title="domain proportions (sampled)", xlabel="step", ylim=(0, 1))
    axes[2].legend(fontsize="small", loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


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
    output_dir = resolve_output_dir(options)
    strategy = resolve_strategy(options.strategy)
    train, test, reward_settings = load_data(options)
    check_trainable(options, strategy, train)
    folder = OutputFolder(output_dir, leftovers=(TRAINER_FOLDER,)).create()
    try:
        return _train_and_record(options, callbacks, started, output_dir, strategy, train, test, reward_settings)
    except BaseException:
        folder.discard()
        raise


TRAINER_FOLDER = "trainer"


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
        **_vllm_config(options, model, tokenizer, trainer_dir),
    )
    records: list[dict] = []
    reward_fn = tasks.make_reward_fn(seed=options.seed, **reward_settings)
    callback = _metrics_callback(records, domains, options.steps, options.progress)
    with _vllm_engine(options):
        trainer = make_trainer(model, tokenizer, reward_fn, train, args, strategy, [callback, *callbacks])
    callback.buffer = dynamic_buffer(trainer)
    for extra in callbacks:  # a compare budget stops a dynamic-sampling step's rounds at the budget
        if hasattr(extra, "bind_trainer"):
            extra.bind_trainer(trainer)
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for noisy_callback in (PrinterCallback, ProgressCallback):  # our callback prints the progress instead
        trainer.remove_callback(noisy_callback)

    # Before and after are the same computation on the same device (the trainer has placed the model):
    # `tasks.evaluate` holds dtype, cache, padding and batching fixed.
    eval_settings = dict(max_new_tokens=eval_length, seed=options.seed, **reward_settings)
    eval_before = tasks.evaluate(trainer.model, tokenizer, test, **eval_settings)
    trainer.train()
    if trainer.state.global_step == 0:
        raise RunInputError(
            f"training performed 0 optimizer steps ({len(train)} training rows, {options.prompts_per_step} prompts "
            "per step): nothing was trained; add training rows or lower --prompts-per-step"
        )
    eval_after = tasks.evaluate(trainer.model, tokenizer, test, **eval_settings)
    shutil.rmtree(trainer_dir, ignore_errors=True)

    config = {
        "options": dataclasses.asdict(options),
        "output_dir": output_dir,
        "strategy": None if strategy is None else strategy.config,
        "model": model_description,
        "dataset": options.dataset or "builtin:tasks",
        "domains": domains,
        "n_train_rows": len(train),
        "n_test_rows": len(test),
        "completions_generated": callback.completions,
        "signal_groups_trained": callback.signal_groups if callback.signal_counted else None,
        "zero_signal_completions": callback.zero_signal_completions if callback.signal_counted else None,
        "verifier": reward_settings["verifier"],
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
    files = {name: os.path.join(output_dir, name) for name in RUN_FILES}
    with open(files["config.json"], "w") as handle:
        json.dump(config, handle, indent=2, sort_keys=True, default=str)
    with open(files["metrics.jsonl"], "w") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    with open(files["eval.json"], "w") as handle:
        json.dump({"before": eval_before, "after": eval_after}, handle, indent=2, sort_keys=True)
    write_plot(files["plot.png"], records, domains)
    return RunResult(output_dir=output_dir, config=config, metrics=records, eval_before=eval_before,
                     eval_after=eval_after, wall_seconds=time.perf_counter() - started, files=files)
