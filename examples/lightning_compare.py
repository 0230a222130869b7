"""Did the strategy help? An ordinary Lightning GRPO module compared through `dataflex compare`.

`train(run)` below is all a Lightning user writes: build their module, bind ``run.strategy`` with
``DataFlexCallback(run.strategy)``, log the held-out score before and after training, stop when
``run.budget_spent()``. `compare` calls it once per (strategy, seed), counts what the strategy was shown (the
completions, tokens, signal groups and steps), and writes the report: paired differences per seed, compute to
reach the baseline's accuracy in every unit, figures and a plain-words verdict.

    python examples/lightning_compare.py                   # baseline vs diffband, 2 seeds, ~2 minutes on a CPU
    dataflex compare --train examples.lightning_compare:train --strategies baseline,diffband --num-seeds 2 \\
        --budget completions:64 --output-dir runs/lightning_compare     # the same comparison from the shell

The module is plain GRPO on the testbed's shipped model (docs/testbed.md): a group of sampled answers per
prompt, the testbed's exact-answer reward, group-normalised advantages and a clipped policy-gradient loss,
reduced by ``self.dataflex.loss``. It counts its own generations in ``module.generated`` and writes them to
``generated.json`` in the run's folder, so you can check the comparison's counts against it.
"""

from __future__ import annotations

import argparse
import json
import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer

from dataflex_callbacks import RolloutBatch
from dataflex_callbacks.integrations.lightning import DataFlexCallback
from dataflex_callbacks.recipes.compare import compare, held_out_pass_rate
from dataflex_callbacks.recipes.testbed import (
    ANSWER_TOKENS,
    HEADLINE_LEVELS,
    load_testbed_model_path,
    testbed_dataset,
    testbed_reward,
)

PROMPTS_PER_STEP, GROUP_SIZE, LEARNING_RATE = 4, 4, 1e-4
HELD_OUT = dict(split="eval", per_level=6, levels=list(HEADLINE_LEVELS))  # 18 prompts of the headline levels
EVAL_SAMPLES = 2


class GRPOModule(pl.LightningModule):
    """GRPO with one policy update per generated batch; `generated` counts the completions it sampled."""

    def __init__(self, model, tokenizer, prompts: list[dict], seed: int = 0, clip: float = 0.2):
        super().__init__()
        self.model, self.tokenizer, self.prompts = model, tokenizer, prompts
        self.seed, self.clip = seed, clip
        self.generated = 0

    def train_dataloader(self):
        sampler = self.dataflex.sampler(self.prompts, batch_size=PROMPTS_PER_STEP, seed=self.seed)
        return DataLoader(self.prompts, batch_size=PROMPTS_PER_STEP, sampler=sampler, collate_fn=list)

    @torch.no_grad()
    def sample(self, prompts: list[str]):
        """``GROUP_SIZE`` answers per prompt: token ids ``(N, P + C)`` and the prompt's mask ``(N, P)``."""
        encoded = self.tokenizer(prompts, return_tensors="pt", padding=True).to(self.device)
        self.model.eval()
        with torch.random.fork_rng():
            torch.manual_seed(self.seed * 1_000_003 + self.global_step)
            sequences = self.model.generate(
                **encoded,
                do_sample=True,
                max_new_tokens=ANSWER_TOKENS,
                num_return_sequences=GROUP_SIZE,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        self.model.train()
        self.generated += sequences.shape[0]
        return sequences, encoded["attention_mask"].repeat_interleave(GROUP_SIZE, dim=0)

    def training_step(self, rows, batch_idx):
        sequences, prompt_mask = self.sample([row["prompt"] for row in rows])
        completion = sequences[:, prompt_mask.shape[1] :]
        is_eos = completion == self.tokenizer.eos_token_id
        completion_mask = (is_eos.int().cumsum(dim=1) - is_eos.int()) == 0  # up to and including the first <eos>
        texts = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        answers = [row["answer"] for row in rows for _ in range(GROUP_SIZE)]
        rewards = torch.tensor(testbed_reward(None, texts, answers), device=self.device)
        grouped = rewards.view(-1, GROUP_SIZE)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)

        attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        logits = self.model(sequences, attention_mask=attention, position_ids=positions).logits
        logits = logits[:, prompt_mask.shape[1] - 1 : -1].float()
        logprobs = torch.gather(F.log_softmax(logits, dim=-1), 2, completion.unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(logprobs - logprobs.detach())
        clipped = torch.clamp(ratio, 1 - self.clip, 1 + self.clip)
        per_token_loss = -torch.min(ratio * advantages.unsqueeze(1), clipped * advantages.unsqueeze(1))

        batch = RolloutBatch(
            rewards,
            group_ids=torch.arange(len(rows), device=self.device).repeat_interleave(GROUP_SIZE),
            completion_mask=completion_mask,
            advantages=advantages,
            domains=[row["domain"] for row in rows for _ in range(GROUP_SIZE)],
        )
        return self.dataflex.loss(per_token_loss, batch, loss_type="sequence_mean")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)


class StopAtBudget(pl.Callback):
    """End ``fit`` after the step that spent the comparison's budget."""

    def __init__(self, run):
        self.run = run

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.run.budget_spent():
            trainer.should_stop = True


def evaluate(module: GRPOModule, run, test: list[dict], step: int) -> None:
    """Log held-out sampled pass@1 (overall and per level) to the comparison."""
    scores = held_out_pass_rate(
        module, test, testbed_reward, k=EVAL_SAMPLES, max_new_tokens=ANSWER_TOKENS, seed=run.seed
    )
    run.log(accuracy=scores.pop("overall"), step=step, **scores)


def train(run, accumulate_grad_batches: int = 1) -> None:
    """One run of the comparison: the module trained with ``run.strategy`` until the budget is spent.

    ``accumulate_grad_batches`` is Lightning's: with 2, two generated batches make one optimizer step; the strategy
    still decides on (and the comparison counts) every batch. Give it as ``functools.partial(train,
    accumulate_grad_batches=2)``: the comparison's fingerprint records it.
    """
    torch.set_num_threads(1)
    pl.seed_everything(run.seed, verbose=False)
    path = load_testbed_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path)
    module = GRPOModule(model, tokenizer, testbed_dataset(seed=run.seed, split="train"), seed=run.seed)
    test = testbed_dataset(**HELD_OUT)

    evaluate(module, run, test, step=0)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=10_000,  # the budget stops it (StopAtBudget)
        accumulate_grad_batches=accumulate_grad_batches,
        callbacks=[DataFlexCallback(run.strategy), StopAtBudget(run)],
        default_root_dir=run.output_dir,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(module)
    evaluate(module, run, test, step=trainer.global_step)
    with open(os.path.join(run.output_dir, "generated.json"), "w") as handle:
        json.dump({"completions": module.generated, "steps": trainer.global_step}, handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategies", default="baseline,diffband")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--budget", default="completions:64")
    parser.add_argument("--output-dir", default="runs/lightning_compare")
    args = parser.parse_args()
    results = compare(
        args.strategies.split(","), seeds=args.seeds, budget=args.budget, train=train, output_dir=args.output_dir
    )
    for strategy, paired in results.differences.items():
        print(f"{strategy} - baseline, per seed: {paired['differences']}; mean {paired['interval'].mean:+.3f}")
    print(f"report: {results.files['report']}")


if __name__ == "__main__":
    main()
