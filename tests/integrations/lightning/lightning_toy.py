"""A toy GRPO LightningModule: seconds per run, deterministic rollouts, rewards that depend on the policy.

Each prompt is a feature vector of one domain; its G "responses" succeed with probability
sigmoid(w.x + domain offset), so easy / mid / hard domains differ. Responses have 1..L tokens and
the per-token loss is a REINFORCE term on the policy's token log-probabilities.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from dataflex_callbacks import RolloutBatch

OFFSETS = {"easy": 2.0, "mid": 0.0, "hard": -2.0}

STRATEGY = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.0, "high": 1.0}},
    "reweight": {"scorer": "advantage_magnitude", "reweighter": {"name": "softmax", "temperature": 0.5}},
    "mix": {"mixer": {"name": "reward_gap", "params": {"temperature": 0.2}}, "warmup_steps": 2, "update_every": 1},
}


def toy_rows(n: int = 24, seed: int = 0) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(n, 4, generator=generator)
    domains = list(OFFSETS)
    return [{"idx": i, "x": features[i].tolist(), "domain": domains[i % 3], "prompt_key": f"p{i}"} for i in range(n)]


class ToyGRPO(pl.LightningModule):
    def __init__(
        self,
        rows,
        prompts_per_step: int = 4,
        group_size: int = 4,
        max_tokens: int = 5,
        loss_type: str = "sequence_mean",
        use_sampler: bool = True,
        with_groups: bool = True,
        key_field: str = "prompt_key",
        sampler_options: dict | None = None,
        manual_every: int | None = None,
        same_answers: bool = False,
    ):
        super().__init__()
        torch.manual_seed(0)
        self.rows = rows
        self.prompts_per_step = prompts_per_step
        self.group_size = group_size
        self.max_tokens = max_tokens
        self.loss_type = loss_type
        self.use_sampler = use_sampler
        self.with_groups = with_groups
        self.key_field = key_field  # the row field passed as prompt_keys (the sampler names rows by "prompt_key")
        self.sampler_options = sampler_options or {}
        # Manual optimisation stepping the optimizer every `manual_every` batches (gradient accumulation by hand).
        self.manual_every = manual_every
        self.automatic_optimization = manual_every is None
        # Every response the same token ids: a group with both rewards is then reward noise to the skip filter.
        self.same_answers = same_answers
        self.policy = torch.nn.Linear(4, 1)
        self.token_bias = torch.nn.Parameter(torch.zeros(max_tokens))
        self.records: list[dict] = []

    def train_dataloader(self):
        sampler = None
        if self.use_sampler:
            sampler = self.dataflex.sampler(self.rows, batch_size=self.prompts_per_step, **self.sampler_options)
        return DataLoader(self.rows, batch_size=self.prompts_per_step, sampler=sampler, collate_fn=list)

    def rollout(self, batch: list[dict]) -> tuple[torch.Tensor, RolloutBatch]:
        """Per-token loss ``(N, L)`` and the `RolloutBatch` of one step; a function of step, rank and weights."""
        step, rank, group = self.global_step, self.global_rank, self.group_size
        x = torch.tensor([row["x"] for row in batch])
        offsets = torch.tensor([OFFSETS[row["domain"]] for row in batch])
        logits = (self.policy(x).squeeze(1) + offsets).repeat_interleave(group)  # (N,)
        n = logits.shape[0]
        draws = torch.rand(n, generator=torch.Generator().manual_seed(1000 * step + 17 * rank + 1))
        rewards = (draws < torch.sigmoid(logits.detach())).float()
        width = self.max_tokens - rank  # ranks see different completion lengths
        position = torch.arange(n) // group if self.same_answers else torch.arange(n)  # same answers: same length
        lengths = 1 + (position + step) % width
        mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
        group_ids = torch.arange(len(batch)).repeat_interleave(group)
        grouped = rewards.view(-1, group)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
        token_logp = F.logsigmoid(logits.unsqueeze(1) + self.token_bias[:width].unsqueeze(0))  # (N, L)
        per_token_loss = -advantages.unsqueeze(1) * token_logp
        p = token_logp.detach().exp()
        entropies = -(p * p.clamp_min(1e-6).log() + (1 - p) * (1 - p).clamp_min(1e-6).log())
        rollout = RolloutBatch(
            rewards,
            group_ids=group_ids if self.with_groups else None,
            completion_mask=mask,
            advantages=advantages,
            logprobs=token_logp.detach(),
            entropies=entropies,
            domains=[row["domain"] for row in batch for _ in range(group)],
            prompt_keys=[row[self.key_field] for row in batch for _ in range(group)],
            completion_ids=torch.zeros(n, width, dtype=torch.long) if self.same_answers else None,
        )
        return per_token_loss, rollout

    def training_step(self, batch, batch_idx):
        per_token_loss, rollout = self.rollout(batch)
        decision = self.dataflex.decide(rollout)
        loss = self.dataflex.loss(per_token_loss, rollout, loss_type=self.loss_type, decision=decision)
        strategy = self.dataflex.strategy
        self.records.append(
            {
                "step": self.global_step,
                "rows": [row["idx"] for row in batch],
                "keep": decision.keep.tolist(),
                "weights": decision.weights.tolist(),
                "loss": loss.item(),
                "target": strategy.target_proportions,
                "rewards": rollout.rewards.tolist(),
                "group_ids": rollout.group_ids.tolist() if self.with_groups else None,
                "advantages": rollout.advantages.tolist(),
                "mask": rollout.completion_mask.tolist(),
                "per_token_loss": per_token_loss.detach().tolist(),
                "domains": list(rollout.domains),
            }
        )
        if self.manual_every is not None:
            optimizer = self.optimizers()
            self.manual_backward(loss / self.manual_every)
            if (batch_idx + 1) % self.manual_every == 0:
                optimizer.step()
                optimizer.zero_grad()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def toy_trainer(callbacks, max_steps: int, tmp_path=None, **kwargs) -> pl.Trainer:
    settings = dict(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    if tmp_path is not None:
        settings["default_root_dir"] = str(tmp_path)
    settings.update(kwargs)
    return pl.Trainer(callbacks=callbacks, **settings)
