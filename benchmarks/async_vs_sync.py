"""Dynamic sampling (the ``dapo`` preset) under TRL's AsyncGRPOTrainer and its synchronous GRPOTrainer, side by side.

For each seed, the same built-in task suite, the same initial weights of the built-in tiny model
and the same settings train twice, ``--steps`` optimizer steps of B = ``--prompts-per-step``
signal groups each:

- *sync*: `DataFlexGRPOTrainer(strategy="dapo")` (TRL's ``GRPOTrainer``, as ``dataflex run`` sets it
  up): each step generates B groups and further rounds of B until it holds B that carry signal.
- *async*: `DataFlexAsyncGRPOTrainer(strategy="dapo")` (TRL 1.16's ``AsyncGRPOTrainer``) with the
  CPU worker `InProcessRolloutWorker`: generation in waves of ``--wave-groups`` groups, taken from
  the queue until a step holds B signal groups; no round is generated for the strategy.

Reported per run: completions generated per trained signal group (every completion the engine
made, the ones left in a queue or a carry-over buffer at the end included), trainer idle time
(time the trainer waited for samples) and greedy held-out accuracy on the suite's test split.

Idle time, and what it means here:

- sync: wall time inside the trainer's ``_generate_and_score_completions`` (timestamps around the
  call; every dynamic-sampling round, the reward and TRL's batch preparation included): the trainer
  computes nothing while it runs.
- async: TRL's own ``perf/rollout_wait_s`` (timestamps around the blocking ``get`` on the rollout
  queue in ``RolloutQueueDataset``), summed over the steps, plus what was still unflushed at the end.
  The CPU worker generates *inside* that ``get`` when the queue is empty (pull-driven waves, in the
  trainer's thread: docs/trl.md, "Asynchronous training"), so generation never overlaps training
  and this wait is the wave's generation time. The comparison therefore measures how much each
  trainer *generates* per trained signal group and what that costs in trainer time, not the
  overlap a GPU deployment with TRL's own worker would add (there, this wait is what is left of
  generation after the overlap).

    python benchmarks/async_vs_sync.py [--seeds 0,1,2] [--steps 150]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, set_seed  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOConfig  # noqa: E402

from dataflex_callbacks.integrations.trl import DataFlexAsyncGRPOTrainer, DataFlexGRPOTrainer  # noqa: E402
from dataflex_callbacks.integrations.trl.async_rollout import (  # noqa: E402
    EngineWeightTransfer,
    InProcessRolloutWorker,
    TransformersEngine,
    cpu_device_name,
    use_cpu_tree_attention,
)
from dataflex_callbacks.recipes import tasks  # noqa: E402
from dataflex_callbacks.recipes.completion_accounting import dynamic_buffer, metrics_callback  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer, save_tiny  # noqa: E402

STRATEGY = "dapo"
EVAL_TOKENS = 8  # dataflex run's greedy tokens per held-out prompt for the tiny model


class TimedGRPOTrainer(DataFlexGRPOTrainer):
    """`DataFlexGRPOTrainer` adding up the wall time of each step's generation (every dynamic-sampling round)."""

    def __init__(self, *args, **kwargs):
        self.generation_s = 0.0
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self.generation_s += time.perf_counter() - start


def held_out_accuracy(model_path: str, trained, tokenizer, test, seed: int) -> float:
    """Greedy held-out accuracy (`tasks.evaluate`, overall) of ``trained``'s weights in a fresh copy of the model.

    A fresh copy: the async trainer's model attends with TRL's packed tree attention, which ``generate`` cannot use.
    """
    model = AutoModelForCausalLM.from_pretrained(model_path)
    model.load_state_dict(trained.state_dict())
    return tasks.evaluate(
        model, tokenizer, test, max_new_tokens=EVAL_TOKENS, seed=seed, verifier="exact", builtin_domains=True
    )["overall"]


def common_settings(options, seed: int, output_dir: str) -> dict:
    """The settings both trainers share: B groups of G per step, one optimizer step per batch, fp32, no KL."""
    return dict(
        output_dir=output_dir,
        max_steps=options.steps,
        num_generations=options.num_generations,
        per_device_train_batch_size=options.prompts_per_step * options.num_generations,
        gradient_accumulation_steps=1,
        max_completion_length=options.max_completion_length,
        temperature=1.0,
        learning_rate=options.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        bf16=False,
        use_cpu=True,
        disable_tqdm=True,
    )


def run_sync(options, seed: int, model_path: str, suite, output_dir: str) -> dict:
    tokenizer = build_tiny_tokenizer()
    set_seed(seed)
    args = GRPOConfig(**common_settings(options, seed, output_dir), beta=0.0, data_seed=seed, dataloader_num_workers=0)
    reward = tasks.make_reward_fn(seed=seed)
    records: list[dict] = []
    counter = metrics_callback(records, sorted(set(suite["train"]["domain"])), options.steps, progress=False)
    trainer = TimedGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_path),
        reward_funcs=reward,
        args=args,
        train_dataset=suite["train"],
        processing_class=tokenizer,
        callbacks=[counter],
        strategy=STRATEGY,
    )
    counter.buffer = dynamic_buffer(trainer)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    return dict(
        trainer="sync",
        seed=seed,
        steps=trainer.state.global_step,
        signal_groups=counter.signal_groups,
        generated=counter.completions,
        zero_signal_groups=counter.zero_signal_completions // options.num_generations,
        stale_groups=0,
        staleness=0.0,
        idle_s=trainer.generation_s,
        wall_s=wall,
        accuracy=held_out_accuracy(model_path, trainer.model, tokenizer, suite["test"], seed),
    )


def run_async(options, seed: int, model_path: str, suite, output_dir: str) -> dict:
    tokenizer = build_tiny_tokenizer()
    set_seed(seed)
    generations = options.num_generations
    engine = TransformersEngine(
        AutoModelForCausalLM.from_pretrained(model_path), tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=seed
    )
    reward = tasks.make_reward_fn(seed=seed)
    worker = InProcessRolloutWorker(
        engine,
        suite["train"],
        [reward],
        tokenizer,
        num_generations=generations,
        max_tokens=options.max_completion_length,
        wave_groups=options.wave_groups,
    )
    args = AsyncGRPOConfig(
        **common_settings(options, seed, output_dir), token_budget=0, max_staleness=options.max_staleness
    )
    with cpu_device_name():
        trainer = DataFlexAsyncGRPOTrainer(
            model=model_path,
            reward_funcs=[reward],
            args=args,
            train_dataset=suite["train"],
            processing_class=tokenizer,
            rollout_worker=worker,
            weight_transfer=EngineWeightTransfer(engine),
            strategy=STRATEGY,
            record_decisions=True,
        )
    use_cpu_tree_attention()
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    waited = sum(log.get("perf/rollout_wait_s") or 0.0 for log in trainer.state.log_history)
    waited += trainer._rollout_dataset.wait_s  # the wait since the last step's flush (the batch fetched ahead)
    # Every step trains a full batch (the batcher fills dropped places from the queue) of signal-group samples only;
    # TRL's own batch/groups_per_step counts the groups collated, the batch fetched ahead of the last step included.
    trained = trainer.state.global_step * args.per_device_train_batch_size // generations
    return dict(
        trainer="async",
        seed=seed,
        steps=trainer.state.global_step,
        signal_groups=trained,
        generated=len(worker.fed_rows) * generations,
        zero_signal_groups=trainer.dataflex.groups_spent,
        stale_groups=int(trainer.dataflex.staleness.dropped_stale.sum()) // generations,
        staleness=statistics.fmean(trainer.dataflex.consumed_staleness),
        idle_s=waited,
        wall_s=wall,
        accuracy=held_out_accuracy(model_path, trainer.model, tokenizer, suite["test"], seed),
    )


def figures(run: dict, generations: int) -> dict[str, float]:
    """One run's figures, by table column."""
    groups = run["generated"] // generations
    return {
        "steps": run["steps"],
        "signal groups trained": run["signal_groups"],
        "completions generated": run["generated"],
        "per signal group": run["generated"] / max(run["signal_groups"], 1),
        "zero-signal groups": run["zero_signal_groups"],
        "mean staleness": run["staleness"],
        "stale groups": run["stale_groups"],
        # generated but neither trained, judged zero-signal nor dropped as stale: queued or carried at the end
        "unused at end": groups - run["signal_groups"] - run["zero_signal_groups"] - run["stale_groups"],
        "idle s": run["idle_s"],
        "idle ms / completion": 1000 * run["idle_s"] / run["generated"],
        "train wall s": run["wall_s"],
        "idle share": run["idle_s"] / run["wall_s"],
        "held-out acc": run["accuracy"],
    }


DECIMALS = {
    "per signal group": 2,
    "mean staleness": 2,
    "idle s": 1,
    "idle ms / completion": 2,
    "train wall s": 1,
    "idle share": 2,
    "held-out acc": 3,
}
"""Decimals of each column; the others are counts (a whole number per run, one decimal in a mean)."""
HEADLINE = ("per signal group", "idle s", "held-out acc")


def markdown_table(runs: list[dict], before: dict[int, float], generations: int) -> str:
    """Per-seed rows, then each trainer's mean over the seeds (headline figures in bold)."""
    columns = list(figures(runs[0], generations))
    lines = ["| trainer | seed | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for run in runs:
        values = figures(run, generations)
        cells = [f"{values[c]:.{DECIMALS.get(c, 0)}f}" for c in columns]
        lines.append(f"| {run['trainer']} | {run['seed']} | " + " | ".join(cells) + " |")
    for trainer in ("sync", "async"):
        rows = [figures(r, generations) for r in runs if r["trainer"] == trainer]
        cells = []
        for column in columns:
            text = f"{statistics.fmean(r[column] for r in rows):.{DECIMALS.get(column, 1)}f}"
            cells.append(f"**{text}**" if column in HEADLINE else text)
        lines.append(f"| **{trainer}, mean** | | " + " | ".join(cells) + " |")
    seeds = ", ".join(f"seed {s}: {a:.3f}" for s, a in before.items())
    return "\n".join(lines) + f"\n\nHeld-out accuracy before training (same for both): {seeds}."


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (suite, model init, sampling, reward)")
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per run")
    parser.add_argument(
        "--prompts-per-step", type=int, default=8, help="B: signal groups per step (dataflex run's default)"
    )
    parser.add_argument("--num-generations", type=int, default=8, help="G: completions per prompt")
    parser.add_argument(
        "--max-completion-length", type=int, default=4, help="tokens per completion (the tiny model's default)"
    )
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--n-train", type=int, default=200, help="training prompts per built-in domain")
    parser.add_argument("--n-test", type=int, default=50, help="held-out prompts per built-in domain")
    parser.add_argument("--wave-groups", type=int, default=16, help="async: groups the CPU worker generates per wave")
    parser.add_argument("--max-staleness", type=int, default=4, help="async: TRL's max_staleness (its default)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    options = parse_args(argv)
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renamed gradient_checkpointing
    seeds = [int(s) for s in options.seeds.split(",")]
    runs, before = [], {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds:
            suite = tasks.load_task_suite(seed=seed, n_train=options.n_train, n_test=options.n_test)
            model_path = save_tiny(os.path.join(scratch, f"model-{seed}"), seed=seed)
            tokenizer = build_tiny_tokenizer()
            before[seed] = tasks.evaluate(
                AutoModelForCausalLM.from_pretrained(model_path),
                tokenizer,
                suite["test"],
                max_new_tokens=EVAL_TOKENS,
                seed=seed,
            )["overall"]
            for run in (run_sync, run_async):
                with contextlib.redirect_stdout(io.StringIO()):  # the adapters' strategy lines and TRL's step logs
                    result = run(options, seed, model_path, suite, os.path.join(scratch, f"{run.__name__}-{seed}"))
                runs.append(result)
                print(f"seed {seed} {result['trainer']}: {result['wall_s']:.1f} s", flush=True)
    print(
        f"\n{len(seeds)} seed(s), {options.steps} steps, B={options.prompts_per_step}, G={options.num_generations}, "
        f"{options.max_completion_length} tokens, async wave {options.wave_groups} groups, max_staleness "
        f"{options.max_staleness}; {time.perf_counter() - started:.0f} s in all\n"
    )
    print(markdown_table(runs, before, options.num_generations))


if __name__ == "__main__":
    main()
