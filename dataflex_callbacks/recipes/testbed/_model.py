"""Build the testbed's pretrained model: a small Qwen2-shaped causal LM taught the graded tasks by worked examples.

The tokenizer is the character-level one of `recipes/tiny_model.py`; the model is a
`Qwen2ForCausalLM` with heads of 32 (what vLLM's CPU attention accepts). It is trained supervised,
with the loss on the answer tokens and the end-of-sequence token only, on prompts of the
`pretrain` split (never on a `train`, `calibration` or `eval` prompt), for a fixed number of
steps: the weights are a function of the seed and the settings (on one machine and thread count).
The worked examples of some levels drop each carry or borrow with a per-level probability
(`BuildSettings.slip`), a systematic error the model learns as a habit it sometimes has: it then
samples the right answer with a probability that falls with the prompt's carries while its greedy
answer is mostly right, the headroom RL turns from pass@k into pass@1 (docs/testbed.md).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field

from ._tasks import LEVELS

MODEL_CONFIG = dict(
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,  # heads of 32: vLLM runs it
    num_key_value_heads=4,
    max_position_embeddings=64,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    initializer_range=0.02,
)


# Worked examples per level, relative (docs/testbed.md): the levels with slips weigh most; add5, mul1x3,
# mul1x4 and sort8 are not taught, so the model never solves them.
TAUGHT_LEVELS = {"add2": 1.0, "add3": 2.0, "add4": 1.0, "sub3": 1.5, "sub4": 1.5, "mul1x2": 1.0, "sort5": 0.5}
# Per-carry (per-borrow) slip of the worked examples; add4 and sort5 are taught without slips.
SLIPS = {"add2": 0.6, "add3": 0.3, "sub3": 0.5, "sub4": 0.3, "mul1x2": 0.4}


@dataclass
class BuildSettings:
    """How the testbed model is pretrained; the defaults build the shipped model.

    Attributes:
        seed: seeds the initial weights and the order and content of the worked examples.
        steps: optimizer steps (AdamW, linear warm-up then cosine decay to 10% of `learning_rate`).
        batch_size: worked examples per step.
        learning_rate: peak learning rate.
        warmup_steps: steps of linear warm-up.
        weight_decay: AdamW weight decay.
        level_weights: sampling weight of each level's worked examples (levels left out are not taught: the
            model never solves them, the testbed's never-solved levels).
        slip: per level, the probability that a worked example drops each carry or borrow
            (`_tasks.slipped_answer`); levels left out are taught without slips.
        threads: torch CPU threads during the build (the weights can depend on it).
    """

    seed: int = 0
    steps: int = 3000
    batch_size: int = 64
    learning_rate: float = 2e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    level_weights: dict = field(default_factory=lambda: dict(TAUGHT_LEVELS))
    slip: dict = field(default_factory=lambda: dict(SLIPS))
    threads: int = 1


def build_tokenizer():
    """The character-level tokenizer of the testbed (`tiny_model.build_tiny_tokenizer`, 64 positions)."""
    from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer(model_max_length=MODEL_CONFIG["max_position_embeddings"])


def initial_model(tokenizer, seed: int):
    """The randomly initialised `Qwen2ForCausalLM` the build starts from (same seed, same weights)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        **MODEL_CONFIG,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = Qwen2ForCausalLM(config)
    for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
        setattr(model.generation_config, key, getattr(tokenizer, key))
    return model


# The build record keeps the loss of each of its first steps: a partial rebuild (a test) checks them.
FIRST_STEPS_RECORDED = 20


class WorkedExamples:
    """An endless, seeded stream of pretraining batches: `pretrain`-split prompts with worked answers.

    Arithmetic answers carry their level's systematic slip (`BuildSettings.slip`); sorting answers are right.

    `next_batch()` returns `(input_ids, labels)`, both `(batch_size, L)`, left-aligned and padded on the
    right; labels are -100 except on the answer and its end-of-sequence token.
    """

    def __init__(self, tokenizer, settings: BuildSettings):
        from ._tasks import slipped_answer, split_of

        self._slipped, self._split_of = slipped_answer, split_of
        self.tokenizer = tokenizer
        self.batch_size = settings.batch_size
        self.rng = random.Random(f"dataflex-testbed-pretrain:{settings.seed}")
        weights = {name: float(w) for name, w in settings.level_weights.items() if float(w) > 0}
        # In `LEVELS` order, whatever the dict's order (a build record's JSON sorts its keys): same draws.
        self.levels = [level for name, level in LEVELS.items() if name in weights]
        self.weights = [weights[level.name] for level in self.levels]
        self.slip = {name: float(p) for name, p in settings.slip.items()}

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def example(self) -> tuple[list[int], list[int]]:
        level = self.rng.choices(self.levels, self.weights)[0]
        while True:
            prompt, answer, _ = level.make_example(self.rng)
            if self._split_of(prompt) == "pretrain":
                break
        slip = self.slip.get(level.name, 0.0)
        if slip > 0:
            answer = self._slipped(prompt, self.rng, slip)
        prompt_ids, answer_ids = self._ids(prompt), self._ids(answer) + [self.tokenizer.eos_token_id]
        return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids

    def next_batch(self):
        import torch

        pairs = [self.example() for _ in range(self.batch_size)]
        length = max(len(ids) for ids, _ in pairs)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (length - len(ids)) for ids, _ in pairs])
        labels = torch.tensor([lab + [-100] * (length - len(lab)) for _, lab in pairs])
        return input_ids, labels


def pretrain(settings: BuildSettings, log_every: int = 250, log=print, stop_after: int | None = None, on_log=None):
    """Train the testbed model from scratch; returns `(model, tokenizer, record)`.

    `record` holds the settings, the wall time, the loss curve (mean loss over each `log_every` steps),
    the loss of each of the first `FIRST_STEPS_RECORDED` steps and the parameter count. `stop_after` ends early,
    after that many steps, on the same schedule (a partial rebuild: its first steps are the full build's).
    `on_log(step, model)`, when given, is called after each logged window (to measure the model along the way;
    it must leave the weights as they are).
    """
    import torch

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        tokenizer = build_tokenizer()
        model = initial_model(tokenizer, settings.seed)
        model.train()
        examples = WorkedExamples(tokenizer, settings)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=settings.learning_rate, betas=(0.9, 0.98), weight_decay=settings.weight_decay
        )

        def factor(step: int) -> float:
            if step < settings.warmup_steps:
                return (step + 1) / settings.warmup_steps
            progress = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        started = time.perf_counter()
        losses, window, first_losses = [], [], []
        steps = settings.steps if stop_after is None else min(stop_after, settings.steps)
        for step in range(steps):
            input_ids, labels = examples.next_batch()
            loss = model(input_ids=input_ids, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            window.append(loss.item())
            if step < FIRST_STEPS_RECORDED:
                first_losses.append(loss.item())
            if len(window) == log_every or step == steps - 1:
                losses.append({"step": step + 1, "loss": sum(window) / len(window)})
                window = []
                if log is not None:
                    log(
                        f"step {step + 1}/{steps}  loss {losses[-1]['loss']:.4f}  {time.perf_counter() - started:.0f} s"
                    )
                if on_log is not None:
                    on_log(step + 1, model)
                    model.train()
        model.eval()
        record = {
            "settings": asdict(settings),
            "steps_run": steps,
            "wall_seconds": time.perf_counter() - started,
            "losses": losses,
            "first_step_losses": first_losses,
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        return model, tokenizer, record
    finally:
        torch.set_num_threads(previous_threads)


def save_model(model, tokenizer, path: str | os.PathLike, record: dict | None = None) -> str:
    """Write the model (safetensors), tokenizer and, when given, `build.json` (the build record) to `path`."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path, safe_serialization=True)
    if record is not None:
        with open(os.path.join(path, "build.json"), "w") as handle:
            json.dump(record, handle, indent=2, sort_keys=True)
    return path
