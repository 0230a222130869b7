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
    python examples/lightning_grpo.py --dynamic-sampling    # DAPO dynamic sampling: B signal groups per step

With ``--dynamic-sampling`` the strategy gets a ``dynamic_sampling`` part and ``training_step``
drives the core's `SignalGroupBuffer` (docs/dynamic_sampling.md): it generates further rounds of
prompts until B groups carry signal (at most ``max_rounds``), trains on exactly those, and carries
the extra ones to the next step. Every round reaches the buffer with its prompt keys and domains,
so a ``pre_select`` filter (``--strategy skip``) learns from every generated group, trained or not.
Further rounds draw from a second prompt sampler of the strategy (it skips prompts too); its
position, the buffer and the reward's call counter go into the checkpoint, and sampling is seeded
by (seed, step, round), so a resumed run generates what the uninterrupted one does. This example
runs one process; under DDP, feed the buffer the batch gathered from every rank so all ranks take
the same groups.
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from dataflex_callbacks import DomainMixingSampler, RolloutBatch
from dataflex_callbacks.config import load_config
from dataflex_callbacks.integrations.lightning import DataFlexCallback, build_sampler
from dataflex_callbacks.recipes.tasks import evaluate, load_task_suite, make_reward_fn
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer
from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer

# Drop groups that all agree (no learning signal), weight the rest by |advantage|, and sample
# more prompts from the domains whose reward lags.
STRATEGY = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.0, "high": 1.0}},
    "reweight": {"scorer": "advantage_magnitude", "reweighter": {"name": "softmax", "temperature": 1.0}},
    "mix": {"mixer": "reward_gap", "warmup_steps": 5, "update_every": 5},
}


class GRPOModule(pl.LightningModule):
    """Group Relative Policy Optimization with one policy update per generated batch."""

    def __init__(
        self,
        dataset,
        prompts_per_step: int = 8,
        group_size: int = 4,
        max_new_tokens: int = 6,
        clip: float = 0.2,
        lr: float = 1e-3,
        loss_type: str = "sequence_mean",
        dynamic_sampling: bool = False,
        seed: int = 0,
    ):
        super().__init__()
        self.dataset = dataset
        self.prompts_per_step, self.group_size = prompts_per_step, group_size
        self.max_new_tokens, self.clip, self.lr, self.loss_type = max_new_tokens, clip, lr, loss_type
        self.seed = seed
        self.tokenizer = build_tiny_tokenizer()
        self.model = build_tiny_model(self.tokenizer, seed=0)
        self.reward_fn = make_reward_fn(seed=0)
        # Dynamic sampling: the buffer of signal groups (built from the strategy at the first step),
        # the sampler of further rounds' prompts, and one prompt width so rows of different rounds stack.
        self.dynamic_sampling = dynamic_sampling
        self.signal_groups: SignalGroupBuffer | None = None
        self.round_sampler: DomainMixingSampler | None = None
        self._round_rows = None  # iterator over the round sampler's current epoch
        self._saved: dict = {}  # dynamic-sampling state read from a checkpoint, applied when the parts are built
        self.round = 0  # generation round within the step (0: Lightning's batch)
        self.prompt_width = (
            max(len(ids) for ids in self.tokenizer([row["prompt"] for row in dataset])["input_ids"])
            if dynamic_sampling
            else None
        )

    def train_dataloader(self):
        # The strategy's prompt sampler: mixes domains, skips prompts, shards ranks; a plain shuffle otherwise.
        sampler = self.dataflex.sampler(self.dataset, batch_size=self.prompts_per_step)
        return DataLoader(self.dataset, batch_size=self.prompts_per_step, sampler=sampler, collate_fn=list)

    @torch.no_grad()
    def generate(self, prompts: list[str]):
        """``group_size`` sampled completions per prompt: token ids ``(N, P + C)`` and the prompt length ``P``.

        Sampling is seeded by (seed, step, round), leaving the global random state alone, so a run
        resumed from a checkpoint samples what the uninterrupted run sampled.
        """
        padding = dict(padding="max_length", max_length=self.prompt_width) if self.prompt_width else dict(padding=True)
        encoded = self.tokenizer(prompts, return_tensors="pt", **padding).to(self.device)
        self.model.eval()
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(self.seed * 1_000_003 + self.global_step * 101 + self.round)
            sequences = self.model.generate(
                **encoded,
                do_sample=True,
                max_new_tokens=self.max_new_tokens,
                num_return_sequences=self.group_size,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        self.model.train()
        if self.prompt_width:  # generation stops early when every answer has ended: pad to one width
            width = encoded["input_ids"].shape[1] + self.max_new_tokens
            sequences = F.pad(sequences, (0, width - sequences.shape[1]), value=self.tokenizer.pad_token_id)
        return sequences, encoded["attention_mask"].repeat_interleave(self.group_size, dim=0)

    def token_logprobs(self, sequences, prompt_mask, completion_mask):
        """Log-probability ``(N, C)`` of each completion token under the current policy."""
        attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)  # left padding: count real tokens only
        logits = self.model(sequences, attention_mask=attention, position_ids=positions).logits
        prompt_length = prompt_mask.shape[1]
        logits = logits[:, prompt_length - 1 : -1]
        completion = sequences[:, prompt_length:]
        return torch.gather(F.log_softmax(logits.float(), dim=-1), 2, completion.unsqueeze(-1)).squeeze(-1)

    def rollout(self, rows) -> dict:
        """Generate and score ``group_size`` completions per prompt: per-row tensors ``(N, ...)`` and lists of N."""
        group = self.group_size
        prompts = [row["prompt"] for row in rows]
        sequences, prompt_mask = self.generate(prompts)
        completion = sequences[:, prompt_mask.shape[1] :]
        is_eos = completion == self.tokenizer.eos_token_id
        completion_mask = (is_eos.int().cumsum(dim=1) - is_eos.int()) == 0  # up to and including the first <eos>

        repeat = lambda values: [v for v in values for _ in range(group)]  # noqa: E731
        texts = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        rewards = torch.tensor(
            self.reward_fn(
                repeat(prompts),
                texts,
                answer=repeat([r["answer"] for r in rows]),
                domain=repeat([r["domain"] for r in rows]),
            ),
            device=self.device,
        )
        return {
            "sequences": sequences,
            "prompt_mask": prompt_mask,
            "completion": completion,
            "completion_mask": completion_mask,
            "rewards": rewards,
            "domains": repeat([r["domain"] for r in rows]),
            "prompt_keys": repeat([r["prompt_key"] for r in rows]),
        }

    def grpo_loss(self, rollout: dict) -> torch.Tensor:
        """The strategy's loss of whole groups of ``group_size`` consecutive rows (a `rollout` or taken groups)."""
        group, rewards = self.group_size, rollout["rewards"]
        grouped = rewards.view(-1, group)
        advantages = ((grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std(dim=1, keepdim=True) + 1e-4)).view(
            -1
        )

        sequences, prompt_mask, completion_mask = (
            rollout["sequences"],
            rollout["prompt_mask"],
            rollout["completion_mask"],
        )
        logprobs = self.token_logprobs(sequences, prompt_mask, completion_mask)
        ratio = torch.exp(logprobs - logprobs.detach())  # one update per generation: old policy = current
        clipped = torch.clamp(ratio, 1 - self.clip, 1 + self.clip)
        per_token_loss = -torch.min(ratio * advantages.unsqueeze(1), clipped * advantages.unsqueeze(1))

        # prompt_keys follow the sampler's rule (the row's "prompt_key" field); completion_ids let the
        # pre-rollout filter spot reward noise (identical answers scored differently).
        groups = rewards.shape[0] // group
        batch = RolloutBatch(
            rewards,
            group_ids=torch.arange(groups, device=self.device).repeat_interleave(group),
            completion_mask=completion_mask,
            advantages=advantages,
            logprobs=logprobs.detach(),
            domains=rollout["domains"],
            prompt_keys=rollout["prompt_keys"],
            completion_ids=rollout["completion"],
        )
        loss = self.dataflex.loss(per_token_loss, batch, loss_type=self.loss_type)
        self.log("train/reward", rewards.mean(), prog_bar=True, batch_size=groups)
        self.log("train/loss", loss, batch_size=groups)
        return loss

    def training_step(self, rows, batch_idx):
        if self.dynamic_sampling:
            return self.dynamic_training_step(rows)
        return self.grpo_loss(self.rollout(rows))

    # ------------------------------------------------------------ dynamic sampling

    def dynamic_training_step(self, rows):
        """Generate rounds until B = ``len(rows)`` groups carry signal (at most ``max_rounds``);
        train on exactly those.
        """
        buffer = self.signal_buffer()
        buffer.start_step(num_groups=len(rows), step=self.global_step)
        self.round = 0
        while buffer.should_generate_more():
            rollout = self.rollout(rows)
            group_ids = torch.arange(len(rows), device=self.device).repeat_interleave(self.group_size)
            # Keys and domains as the sampler names them: a pre_select filter observes every round here.
            buffer.add(
                RolloutBatch(
                    rollout["rewards"],
                    group_ids=group_ids,
                    completion_mask=rollout["completion_mask"],
                    domains=rollout["domains"],
                    prompt_keys=rollout["prompt_keys"],
                    completion_ids=rollout["completion"],
                ),
                payload=rollout,
            )
            if buffer.should_generate_more():
                self.round += 1
                rows = self.more_prompts(len(rows))
        taken = buffer.take()
        for name, value in taken.metrics.items():
            self.log(f"dataflex/{name}", value, batch_size=max(taken.num_groups, 1))
        if taken.num_groups == 0:
            return None  # no group carried signal in max_rounds rounds: Lightning skips this optimizer step
        return self.grpo_loss(taken.payload)

    def signal_buffer(self) -> SignalGroupBuffer:
        """The buffer of signal groups, built from the strategy's ``dynamic_sampling`` part at the first step."""
        if self.signal_groups is None:
            self.signal_groups = SignalGroupBuffer(self.dataflex.strategy)
            if "signal_groups" in self._saved:
                self.signal_groups.load_state_dict(self._saved["signal_groups"])
        return self.signal_groups

    def more_prompts(self, count: int) -> list:
        """The next ``count`` prompts of further rounds, from a second sampler of the strategy.

        The step's first round is Lightning's batch from the strategy's sampler; further rounds draw
        here, with the same rules (a ``pre_select`` part skips prompts, a ``mix`` part sets the domain
        proportions) and their own seed, so the first sampler's stream stays as without dynamic sampling.
        """
        if self.round_sampler is None:
            self.round_sampler = DomainMixingSampler(
                self.dataset,
                strategy=self.dataflex.strategy,
                batch_size=self.prompts_per_step,
                layout="shard",
                num_replicas=1,
                rank=0,
                seed=self.seed + 1,
                resume="continue",
            )
            if "round_sampler" in self._saved:
                self.round_sampler.load_state_dict(self._saved["round_sampler"])
        rows = []
        while len(rows) < count:
            if self._round_rows is None:
                self._round_rows = iter(self.round_sampler)
            index = next(self._round_rows, None)
            if index is None:  # the epoch ended: the next iterator starts a new one
                self._round_rows = None
            else:
                rows.append(self.dataset[index])
        return rows

    def on_save_checkpoint(self, checkpoint):
        if self.signal_groups is not None:
            checkpoint["signal_groups"] = self.signal_groups.state_dict()
        if self.round_sampler is not None:
            checkpoint["round_sampler"] = self.round_sampler.state_dict()
        checkpoint["reward_calls"] = self.reward_fn.calls  # the coin task's reward draws from its call counter

    def on_load_checkpoint(self, checkpoint):
        self._saved = {key: checkpoint[key] for key in ("signal_groups", "round_sampler") if key in checkpoint}
        self.reward_fn.calls = int(checkpoint.get("reward_calls", self.reward_fn.calls))

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
    parser.add_argument(
        "--dynamic-sampling",
        action="store_true",
        help="add a dynamic_sampling part: over-generate until B groups carry signal, train on those",
    )
    args = parser.parse_args()

    torch.set_num_threads(1)
    pl.seed_everything(args.seed, verbose=False)
    suite = load_task_suite(seed=args.seed, n_train=100, n_test=25)
    module = GRPOModule(suite["train"], dynamic_sampling=args.dynamic_sampling, seed=args.seed)
    strategy = args.strategy or STRATEGY
    if args.dynamic_sampling:
        strategy = {**load_config(strategy), "dynamic_sampling": load_config(strategy)["dynamic_sampling"] or True}
    callback = DataFlexCallback(strategy)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        callbacks=[callback],
        logger=CSVLogger(args.log_dir),
        log_every_n_steps=5,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    before = evaluate(module.model, module.tokenizer, suite["test"])
    trainer.fit(module, datamodule=TaskData(suite["train"]) if args.data_module else None)

    metrics = {name: round(float(value), 3) for name, value in trainer.callback_metrics.items()}
    shown = (
        "dataflex/kept",
        "dataflex/ess",
        "dataflex/mix/target",
        "dataflex/pre_select/skipped",
        "dataflex/pre_select/completions",
        "dataflex/dynamic/",
    )
    print(
        "last step:",
        {
            name: value
            for name, value in metrics.items()
            if name.startswith(shown) and not name.endswith(("_step", "_epoch"))
        },
    )
    after = evaluate(module.model, module.tokenizer, suite["test"])
    print("held-out accuracy before -> after:", {name: f"{before[name]:.2f} -> {after[name]:.2f}" for name in after})


if __name__ == "__main__":
    main()
