"""Worker for test_zero_rewards.py: one rank of a 2-process CPU (gloo) GRPO run whose reward pays only on rank 1,
from the second step on.

Run as ``torchrun --nproc_per_node 2 zero_rewards_worker.py OUT_DIR``; each rank writes its watch's verdict and
the `ZeroRewardWarning`s it showed to ``OUT_DIR/rank<r>.json``. Rank 0's own completions never pay, so a watch
reading only its rank's rewards would warn there; read on the gathered rewards, no rank warns.
"""

import json
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

from cpu_settings import CPU_RUN_SETTINGS  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from dataflex_callbacks.errors import ZeroRewardWarning  # noqa: E402
from dataflex_callbacks.host.zero_rewards import ZeroRewardWatch  # noqa: E402
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402

STEPS = 2


def rank_one_pays_later(completions, trainer_state, **kwargs):
    """0 on rank 0 always; on rank 1, 0 in the first step and 1 from the second."""
    pays = torch.distributed.get_rank() == 1 and trainer_state.global_step >= 1
    return [float(pays) for _ in completions]


def main(out_dir: str) -> None:
    tokenizer = build_tiny_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"{i}*{i % 5}=" for i in range(16)]})
    args = GRPOConfig(
        output_dir=os.path.join(out_dir, "run"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=4,
        max_steps=STEPS,
        learning_rate=1e-3,
        seed=0,
        **CPU_RUN_SETTINGS,
    )
    trainer = DataFlexGRPOTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=[rank_one_pays_later],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        strategy="baseline",
    )
    watch = trainer.dataflex.zero_rewards = ZeroRewardWatch(steps=STEPS)  # the verdict within the run's steps
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        trainer.train()
    rank = torch.distributed.get_rank()
    record = {
        "done": watch.done,
        "completions": watch.completions,
        "warned": sum(isinstance(w.message, ZeroRewardWarning) for w in shown),
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
        json.dump(record, handle)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1])
