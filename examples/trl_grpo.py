"""A complete TRL GRPO script: your own reward functions, your own data, one DataFlex strategy.

    python examples/trl_grpo.py                                  # diffband, 8 steps, about 15 s on a CPU
    python examples/trl_grpo.py --strategy difffilter --steps 20
    python examples/trl_grpo.py --report-to tensorboard --output-dir runs/trl_grpo   # then: tensorboard --logdir runs

`--report-to tensorboard` needs TensorBoard, which no extra of this package installs: `pip install tensorboard`.

Nothing is downloaded: the model is the library's tiny character-level model
(`dataflex_callbacks.recipes.tiny_model`), built from a seed. For your own model, replace
`build_model` with `AutoModelForCausalLM.from_pretrained(...)` and its tokenizer: the rest stays.

The strategy's metrics (`dataflex/kept_frac`, `dataflex/selection_reward/<domain>`, ...) go into TRL's own
logs, so wherever `report_to` sends TRL's logs (TensorBoard, W&B, ...) they go too.
"""

from __future__ import annotations

import argparse
import random

import torch
from datasets import Dataset
from trl import GRPOConfig

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer


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


def short_completion(completions: list[str], **kwargs) -> list[float]:
    """0.2 for a completion of at most 2 characters: a format reward, small next to the answer's."""
    return [0.2 if len(text.strip()) <= 2 else 0.0 for text in completions]


def build_model(seed: int):
    """The tiny model and its tokenizer, built locally."""
    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer, seed=seed), tokenizer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="diffband", help="preset, YAML path or 'preset+preset' (dataflex list)")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps")
    parser.add_argument("--report-to", default="none", help="where TRL sends its logs: none, tensorboard, wandb, ...")
    parser.add_argument("--output-dir", default="trl_grpo_output", help="TRL's output folder (and TensorBoard's logs)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    model, tokenizer = build_model(args.seed)
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=16,  # completions per step: 4 prompts x 4 generations
        num_generations=4,
        max_completion_length=4,
        learning_rate=3e-3,
        logging_steps=1,
        report_to=args.report_to,
        save_strategy="no",
        seed=args.seed,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        disable_tqdm=True,
    )
    trainer = DataFlexGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[correct_answer, short_completion],
        args=config,
        train_dataset=build_dataset(seed=args.seed),
        strategy=args.strategy,
        selection_reward="correct_answer",  # the strategy selects on this reward; TRL trains on the weighted sum
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "dataflex/kept_frac" in entry]
    last = logs[-1]
    print(
        f"trained {trainer.state.global_step} steps with strategy {args.strategy!r}: kept fraction "
        f"{last['dataflex/kept_frac']:.2f} at the last step; selection reward per domain "
        + ", ".join(
            f"{key.split('/')[-1]}={value:.2f}"
            for key, value in sorted(last.items())
            if key.startswith("dataflex/selection_reward/")
        )
    )
    return {"steps": trainer.state.global_step, "logs": logs}


if __name__ == "__main__":
    main()
