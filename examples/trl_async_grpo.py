"""A complete asynchronous GRPO script (TRL's AsyncGRPOTrainer): your own reward, your own data, one DataFlex strategy.

    python examples/trl_async_grpo.py                        # diffband, 6 steps, about 20 s on a CPU
    python examples/trl_async_grpo.py --strategy dapo --steps 10

TRL's AsyncGRPOTrainer generates ahead of the trainer: by default a separate process sends requests
to a vLLM server on a GPU. This script runs anywhere, a CPU included, with the library's
in-process worker instead (`InProcessRolloutWorker`): the engine is the model's own ``generate``
(`TransformersEngine`; on a GPU, `VLLMEngine` wraps an in-process ``vllm.LLM``) and the trainer's
weight syncs load into it (`EngineWeightTransfer`). Two settings matter without a vLLM server:

- ``token_budget=0``: TRL's default (None) asks the vLLM server for its context length and waits
  up to ``vllm_server_timeout`` (240 s) for one; 0 packs a fixed count of samples per micro-batch.
  The adapter refuses None with this worker rather than wait.
- TRL packs micro-batches with a FlashAttention-3 kernel fetched from the Hub (GPU only). On a CPU,
  `DataFlexAsyncGRPOTrainer` registers the same attention computed with plain torch, and builds
  the trainer without asking CUDA for its device name. A stock ``AsyncGRPOTrainer`` built yourself
  needs ``with cpu_device_name():`` around it and ``use_cpu_tree_attention()`` after it
  (`dataflex_callbacks.integrations.trl.async_rollout`); ``attach(trainer, strategy)`` does the latter.

Nothing is downloaded: the model is the library's tiny character-level model, built from a seed and
saved to a folder (TRL's async trainer loads its model from a path). For your own model, pass its
folder or Hub id instead: the rest stays.
"""

from __future__ import annotations

import argparse
import os
import random

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL warns on every import of trl.experimental

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOConfig  # noqa: E402

from dataflex_callbacks.integrations.trl import DataFlexAsyncGRPOTrainer  # noqa: E402
from dataflex_callbacks.integrations.trl.async_rollout import (  # noqa: E402
    EngineWeightTransfer,
    InProcessRolloutWorker,
    TransformersEngine,
)
from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer, save_tiny  # noqa: E402

NUM_GENERATIONS = 4  # completions per prompt: the worker and the trainer must agree


def build_dataset(rows: int = 64, seed: int = 0) -> Dataset:
    """Prompts in two domains, each with the answer the reward checks: repeat the last digit, or add two digits."""
    rng = random.Random(seed)
    data = []
    for i in range(rows):
        a, b, c = (rng.randrange(10) for _ in range(3))
        if i % 2:
            data.append({"prompt": f"repeat {a} {b} {c}", "answer": str(c), "domain": "repeat"})
        else:
            data.append({"prompt": f"add {a} {b} =", "answer": str((a + b) % 10), "domain": "add"})
    return Dataset.from_list(data)


# Reward functions take TRL's keyword arguments: the completions, and every dataset column by name.
def correct_answer(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion starts with the answer (after spaces), else 0.0."""
    return [float(text.strip().startswith(expected)) for text, expected in zip(completions, answer, strict=True)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="diffband", help="preset, YAML path or 'preset+preset' (dataflex list)")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps")
    parser.add_argument("--output-dir", default="trl_async_grpo_output", help="TRL's output folder")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    model_path = save_tiny(os.path.join(args.output_dir, "model"), seed=args.seed)
    tokenizer = build_tiny_tokenizer()
    dataset = build_dataset(seed=args.seed)
    engine = TransformersEngine(
        AutoModelForCausalLM.from_pretrained(model_path),
        tokenizer.pad_token_id,
        [tokenizer.eos_token_id],
        seed=args.seed,
    )
    worker = InProcessRolloutWorker(
        engine,
        dataset,
        [correct_answer],
        tokenizer,
        num_generations=NUM_GENERATIONS,
        max_tokens=4,
        wave_groups=8,  # groups generated per engine call, all with the policy of that moment
    )
    config = AsyncGRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=8,  # samples per micro-batch
        gradient_accumulation_steps=2,  # a step: 16 samples, 4 groups of 4
        num_generations=NUM_GENERATIONS,
        max_completion_length=4,
        max_staleness=2,  # samples more than 2 policy versions old are dropped
        token_budget=0,  # no vLLM server to ask for a context length (see the docstring)
        learning_rate=3e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=args.seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        disable_tqdm=True,
    )
    trainer = DataFlexAsyncGRPOTrainer(
        model=model_path,
        processing_class=tokenizer,
        reward_funcs=[correct_answer],
        args=config,
        train_dataset=dataset,
        rollout_worker=worker,
        weight_transfer=EngineWeightTransfer(engine),
        strategy=args.strategy,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "dataflex/kept_frac" in entry]
    last = logs[-1]
    print(
        f"trained {trainer.state.global_step} steps with strategy {args.strategy!r} asynchronously: "
        f"{worker.next_group_id} groups generated in {engine.calls} engine calls; kept fraction "
        f"{last['dataflex/kept_frac']:.2f} in the last log"
    )
    return {"steps": trainer.state.global_step, "logs": logs, "groups_generated": worker.next_group_id}


if __name__ == "__main__":
    main()
