"""Two-process DDP run of the toy GRPO module on CPU (gloo); each rank writes its records and tracker counts to OUT/rank<r>.json.

Usage: python lightning_ddp_run.py OUT   (Lightning starts the second process itself)
"""

import json
import os
import sys

import torch

torch.set_num_threads(1)

import lightning.pytorch as pl  # noqa: E402

from dataflex_callbacks.integrations.lightning import DataFlexCallback  # noqa: E402
from lightning_toy import STRATEGY, ToyGRPO, toy_rows  # noqa: E402


def main(out: str) -> None:
    module = ToyGRPO(toy_rows(24))
    callback = DataFlexCallback(STRATEGY)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=4, use_distributed_sampler=False,
                         callbacks=[callback], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module)
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as handle:
        json.dump({"records": module.records, "samples_tracked": callback.strategy.mixing.tracker.total_count.tolist()},
                  handle)


if __name__ == "__main__":
    main(sys.argv[1])
