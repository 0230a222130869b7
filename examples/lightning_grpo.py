"""GRPO in plain Lightning with a DataFlex data strategy: the built-in task suite, the tiny local model, CPU.

The module below is an ordinary GRPO ``LightningModule`` (sample a group of answers per prompt,
score them, group-normalised advantages, clipped policy-gradient loss). The data strategy adds
two lines: ``DataFlexCallback(...)`` in the Trainer, and ``self.dataflex.loss(...)`` to reduce the
per-token loss; the prompt sampler (``self.dataflex.sampler(...)``, or ``build_sampler(self.trainer,
...)`` in a ``LightningDataModule``) lets mixing and pre-rollout skipping choose the prompts.

    python examples/lightning_grpo.py                       # ~1 minute on a laptop CPU
    python examples/lightning_grpo.py --strategy difffilter --steps 60
    python examples/lightning_grpo.py --strategy skip       # skip prompts that keep giving no signal
    python examples/lightning_grpo.py --data-module         # the data in a LightningDataModule
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from dataflex_callbacks import RolloutBatch
from dataflex_callbacks.integrations.lightning import DataFlexCallback, build_sampler
from dataflex_callbacks.recipes.tasks import evaluate, load_task_suite, make_reward_fn
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer

# Drop groups that all agree (no learning signal), weight the rest by |advantage|, and sample
# more prompts from the domains whose reward lags.
STRATEGY = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.0, "high": 1.0}},
    "reweight": {"scorer": "advantage_magnitude", "reweighter": {"name": "softmax", "temperature": 1.0}},
    "mix": {"mixer": "reward_gap", "warmup_steps": 5, "update_every": 5},
}


class GRPOModule(pl.LightningModule):
    """Group Relative Policy Optimization with one policy update per generated batch."""

    def __init__(self, dataset, prompts_per_step: int = 8, group_size: int = 4, max_new_tokens: int = 6,
                 clip: float = 0.2, lr: float = 1e-3, loss_type: str = "sequence_mean"):
        super().__init__()
        self.dataset = dataset
        self.prompts_per_step, self.group_size = prompts_per_step, group_size
        self.max_new_tokens, self.clip, self.lr, self.loss_type = max_new_tokens, clip, lr, loss_type
        self.tokenizer = build_tiny_tokenizer()
        self.model = build_tiny_model(self.tokenizer, seed=0)
        self.reward_fn = make_reward_fn(seed=0)

    def train_dataloader(self):
        # The strategy's prompt sampler: mixes domains, skips prompts, shards ranks; a plain shuffle otherwise.
        sampler = self.dataflex.sampler(self.dataset, batch_size=self.prompts_per_step)
        return DataLoader(self.dataset, batch_size=self.prompts_per_step, sampler=sampler, collate_fn=list)

    @torch.no_grad()
    def generate(self, prompts: list[str]):
        """``group_size`` sampled completions per prompt: token ids ``(N, P + C)`` and the prompt length ``P``."""
        encoded = self.tokenizer(prompts, return_tensors="pt", padding=True).to(self.device)
        self.model.eval()
        sequences = self.model.generate(**encoded, do_sample=True, max_new_tokens=self.max_new_tokens,
                                        num_return_sequences=self.group_size, pad_token_id=self.tokenizer.pad_token_id)
        self.model.train()
        return sequences, encoded["attention_mask"].repeat_interleave(self.group_size, dim=0)

    def token_logprobs(self, sequences, prompt_mask, completion_mask):
        """Log-probability ``(N, C)`` of each completion token under the current policy."""
        attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # left padding: count real tokens only
        logits = self.model(sequences, attention_mask=attention, position_ids=positions).logits
        prompt_length = prompt_mask.shape[1]
        logits = logits[:, prompt_length - 1:-1]
        completion = sequences[:, prompt_length:]
        return torch.gather(F.log_softmax(logits.float(), dim=-1), 2, completion.unsqueeze(-1)).squeeze(-1)

    def training_step(self, rows, batch_idx):
        group = self.group_size
        prompts = [row["prompt"] for row in rows]
        sequences, prompt_mask = self.generate(prompts)
        completion = sequences[:, prompt_mask.shape[1]:]
        is_eos = completion == self.tokenizer.eos_token_id
        completion_mask = (is_eos.int().cumsum(dim=1) - is_eos.int()) == 0  # up to and including the first <eos>

        repeat = lambda values: [v for v in values for _ in range(group)]  # noqa: E731
        texts = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        rewards = torch.tensor(self.reward_fn(repeat(prompts), texts, answer=repeat([r["answer"] for r in rows]),
                                              domain=repeat([r["domain"] for r in rows])), device=self.device)
        grouped = rewards.view(-1, group)
        advantages = ((grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std(dim=1, keepdim=True) + 1e-4)).view(-1)

        logprobs = self.token_logprobs(sequences, prompt_mask, completion_mask)
        ratio = torch.exp(logprobs - logprobs.detach())  # one update per generation: old policy = current
        clipped = torch.clamp(ratio, 1 - self.clip, 1 + self.clip)
        per_token_loss = -torch.min(ratio * advantages.unsqueeze(1), clipped * advantages.unsqueeze(1))

        # prompt_keys follow the sampler's rule (the row's "prompt_key" field); completion_ids let the
        # pre-rollout filter spot reward noise (identical answers scored differently).
        rollout = RolloutBatch(rewards, group_ids=torch.arange(len(rows), device=self.device).repeat_interleave(group),
                               completion_mask=completion_mask, advantages=advantages, logprobs=logprobs.detach(),
                               domains=repeat([r["domain"] for r in rows]), prompt_keys=repeat([r["prompt_key"] for r in rows]),
                               completion_ids=completion)
        loss = self.dataflex.loss(per_token_loss, rollout, loss_type=self.loss_type)
        self.log("train/reward", rewards.mean(), prog_bar=True, batch_size=len(rows))
        self.log("train/loss", loss, batch_size=len(rows))
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.lr)


class TaskData(pl.LightningDataModule):
    """The same prompts from a ``LightningDataModule``: ``build_sampler`` reaches the callback through the trainer."""

    def __init__(self, dataset, prompts_per_step: int = 8):
        super().__init__()
        self.dataset, self.prompts_per_step = dataset, prompts_per_step

    def train_dataloader(self):
        sampler = build_sampler(self.trainer, self.dataset, batch_size=self.prompts_per_step)
        return DataLoader(self.dataset, batch_size=self.prompts_per_step, sampler=sampler, collate_fn=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--strategy", default=None, help="preset name or YAML path (default: the composed STRATEGY)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default="runs/lightning_grpo")
    parser.add_argument("--data-module", action="store_true", help="serve the prompts from a LightningDataModule")
    args = parser.parse_args()

    torch.set_num_threads(1)
    pl.seed_everything(args.seed, verbose=False)
    suite = load_task_suite(seed=args.seed, n_train=100, n_test=25)
    module = GRPOModule(suite["train"])
    callback = DataFlexCallback(args.strategy or STRATEGY)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, callbacks=[callback],
                         logger=CSVLogger(args.log_dir), log_every_n_steps=5, enable_checkpointing=False,
                         enable_model_summary=False)
    before = evaluate(module.model, module.tokenizer, suite["test"])
    trainer.fit(module, datamodule=TaskData(suite["train"]) if args.data_module else None)

    metrics = {name: round(float(value), 3) for name, value in trainer.callback_metrics.items()}
    shown = ("dataflex/kept", "dataflex/ess", "dataflex/mix/target", "dataflex/pre_select/skipped",
             "dataflex/pre_select/completions")
    print("last step:", {name: value for name, value in metrics.items()
                         if name.startswith(shown) and not name.endswith(("_step", "_epoch"))})
    after = evaluate(module.model, module.tokenizer, suite["test"])
    print("held-out accuracy before -> after:", {name: f"{before[name]:.2f} -> {after[name]:.2f}" for name in after})


if __name__ == "__main__":
    main()
