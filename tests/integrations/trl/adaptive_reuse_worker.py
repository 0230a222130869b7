"""Worker for test_adaptive_reuse.py: one rank of a 2-process CPU (gloo) GRPO run of ``adaptive`` with reuse.

Run as ``torchrun --nproc_per_node 2 adaptive_reuse_worker.py OUT_DIR [two|one]``; each rank writes its decisions, its
``alloc/*`` counts and a checksum of the parameters to ``OUT_DIR/rank<r>.json``. Four prompts, 8 rows per rank (TRL's
generation batch: the four prompts of ``num_generations=4``), stages of 2 up to 4. The reward pays every completion
in the first step and, after it, every completion but those of two prompts (``two``; ``one``: of one prompt): they
end all wrong at the cap and take back the rows the first step stored (two rows, one per process; one row cannot be
split over two processes, so that reuse is skipped).
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

from cpu_settings import CPU_RUN_SETTINGS  # noqa: E402
from datasets import Dataset  # noqa: E402
from ddp_worker import write_record_and_leave  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402

PROMPTS = ["3+1=", "5+2=", "7+3=", "9+4="]
UNPAID = {"two": {"5+2=", "9+4="}, "one": {"5+2="}}
STRATEGY = {"allocation": {"name": "adaptive", "params": {"stage": 2, "cap": 4, "reuse": True}}}


def main(out_dir: str, unpaid: str = "two") -> None:
    def first_step_pays_all(prompts, completions, trainer_state, **kwargs):
        """1 for every completion in the first step; afterwards 1 except for the ``unpaid`` prompts."""
        return [float(trainer_state.global_step == 0 or prompt not in UNPAID[unpaid]) for prompt in prompts]

    tokenizer = build_tiny_tokenizer()
    args = GRPOConfig(
        output_dir=os.path.join(out_dir, "run"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        max_steps=3,
        learning_rate=1e-3,
        seed=0,
        loss_type="dapo",
        **CPU_RUN_SETTINGS,
    )
    trainer = DataFlexGRPOTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=first_step_pays_all,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        processing_class=tokenizer,
        strategy=STRATEGY,
        record_decisions=True,
    )
    trainer.train()
    history = [
        {
            "step": h["step"],
            "keep": h["keep"].tolist(),
            "prompt_keys": h["prompt_keys"],
            "rewards": h["rewards"].tolist(),
            "alloc": h["dynamic"],
        }
        for h in trainer.dataflex.decisions
    ]
    record = {
        "world_size": trainer.accelerator.num_processes,
        "history": history,
        "parameters": [float(p.detach().double().sum()) for p in trainer.model.parameters()],
    }
    write_record_and_leave(trainer, out_dir, record)


if __name__ == "__main__":
    main(*sys.argv[1:])
