"""Worker for test_rloo.py: one rank of a 2-process CPU (gloo) RLOO run with a strategy.

Run as ``torchrun --nproc_per_node 2 rloo_ddp_worker.py OUT_DIR``; each rank writes its decisions, the
mixing sampler's index stream and state, and a checksum of its parameters to ``OUT_DIR/rank<r>.json``.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

from datasets import Dataset  # noqa: E402
from trl import RLOOConfig  # noqa: E402

from cpu_settings import CPU_RUN_SETTINGS  # noqa: E402
from dataflex_callbacks.integrations.trl import DataFlexRLOOTrainer  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402
from mixing_runs import record_train_sampler  # noqa: E402

# Selection, reweighting, domain mixing and pre-rollout skipping at once: every decision the adapter makes.
STRATEGY = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
    "reweight": {"scorer": "response_length", "reweighter": {"name": "softmax", "temperature": 2.0}},
    "pre_select": "skip_zero_variance",
    "mix": {"mixer": "learnability", "warmup_steps": 1, "update_every": 1},
}


def parity_reward(completions, **kwargs):
    return [float(len(c) % 2 == 0) for c in completions]


def main(out_dir: str) -> None:
    tokenizer = build_tiny_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"{i}*{i % 5}=" for i in range(12)], "domain": ["a", "b"] * 6})
    args = RLOOConfig(
        output_dir=os.path.join(out_dir, "run"),
        # 3 rows per rank, 2 generations per prompt: the global batch is 6 rows in 3 groups and
        # group 1 holds the last row of rank 0 and the first row of rank 1.
        per_device_train_batch_size=3,
        num_generations=2,
        max_completion_length=6,
        max_steps=8,  # two epochs of 12 prompts: prompts come back and the pre-rollout filter can skip them
        beta=0.0,
        learning_rate=1e-3,
        seed=0,
        **CPU_RUN_SETTINGS,
    )
    trainer = DataFlexRLOOTrainer(
        model=build_tiny_model(tokenizer, seed=0), reward_funcs=parity_reward, args=args, train_dataset=dataset,
        processing_class=tokenizer, strategy=STRATEGY, record_decisions=True,
    )
    record_train_sampler(trainer)
    trainer.train()
    history = [
        {"step": h["step"], "keep": h["keep"].tolist(), "weights": h["weights"].tolist(),
         "prompt_keys": h["prompt_keys"], "metrics": h["metrics"]}
        for h in trainer.dataflex.decisions
    ]
    record = {
        "world_size": trainer.accelerator.num_processes,
        "history": history,
        "stream": trainer.recorder.indices,
        "sampler_state": json.loads(json.dumps(trainer.dataflex.sampler.state_dict(), default=str)),
        "strategy_state": json.loads(json.dumps(trainer.dataflex.strategy.state_dict(), default=str)),
        "parameters": [float(p.detach().double().sum()) for p in trainer.model.parameters()],
    }
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as handle:
        json.dump(record, handle)
    # Tear the gloo group down before interpreter exit; leaving it to the destructors can abort the process.
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
