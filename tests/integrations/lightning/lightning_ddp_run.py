"""Two-process DDP runs of the toy GRPO module on CPU (gloo); each rank writes its records to OUT/rank<r>.json.

Usage: python lightning_ddp_run.py OUT MODE   (Lightning starts the second process itself)

MODE ``mix``: mixing, selection, reweighting and pre-rollout skipping through ``self.dataflex.sampler``.
MODE ``plain``: a plain DataLoader (no DataFlex sampler) with difffilter.
Both use the Trainer's default ``use_distributed_sampler``; ``unsafe`` is ``plain`` with
``use_distributed_sampler=False``, which the callback must refuse.
"""

import json
import os
import sys

import torch

torch.set_num_threads(1)

import lightning.pytorch as pl  # noqa: E402
from lightning_toy import STRATEGY, ToyGRPO, toy_rows  # noqa: E402

from dataflex_callbacks.integrations.lightning import DataFlexCallback  # noqa: E402

SKIP_AND_MIX = {**STRATEGY, "pre_select": {"name": "skip_zero_variance", "params": {}}}


class LoggedValues(pl.Callback):
    """After each batch, this rank's ``dataflex/`` values in ``trainer.callback_metrics`` (a domain absent
    from a step keeps its last value there)."""

    def __init__(self):
        self.values: list[dict] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.values.append(
            {name: float(value) for name, value in trainer.callback_metrics.items() if name.startswith("dataflex/")}
        )


def main(out: str, mode: str) -> None:
    mixing = mode == "mix"
    module = ToyGRPO(toy_rows(24), use_sampler=mixing, same_answers=mixing)
    callback = DataFlexCallback(SKIP_AND_MIX if mixing else "difffilter")
    logged = LoggedValues()  # after the DataFlexCallback: sees what it logged for the batch
    flags = {"use_distributed_sampler": False} if mode == "unsafe" else {}
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=4,
        callbacks=[callback, logged],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **flags,
    )
    trainer.fit(module)
    result = {"records": module.records, "logged": logged.values}
    if mixing:
        pre_select = callback.strategy.pre_select
        result.update(
            samples_tracked=callback.strategy.mixing.tracker.total_count.tolist(),
            history_keys=pre_select.history.keys,
            streaks=pre_select.history.streak.tolist(),
            domain_noise=pre_select.history.domain_noise,
            sampler_type=type(trainer.train_dataloader.sampler).__name__,
        )
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
