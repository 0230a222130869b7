"""Worker for test_distributed.py: one rank of a 2-process CPU (gloo) GRPO run with a strategy.

Run as ``torchrun --nproc_per_node 2 ddp_worker.py OUT_DIR [MODE]``; each rank writes its decisions to
``OUT_DIR/rank<r>.json``. ``MODE`` ``select`` (default) runs selection + reweighting; ``mixing`` runs
domain mixing with pre-rollout selection through the DomainMixingSampler and also records the
sampler's index stream and final state; ``rloo`` runs all four parts at once in TRL's RLOOTrainer
(for test_rloo.py) and also records a checksum of the parameters; ``dynamic`` runs dynamic sampling
(diffband + ``dynamic_sampling``) with a reward that is constant on rank 0, so rank 0's own groups
never carry signal, and records the dynamic metrics and a checksum of the parameters.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

from cpu_settings import CPU_RUN_SETTINGS  # noqa: E402
from datasets import Dataset  # noqa: E402
from mixing_runs import record_train_sampler  # noqa: E402
from trl import GRPOConfig, RLOOConfig  # noqa: E402

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, DataFlexRLOOTrainer  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402

STRATEGIES = {
    "select": {
        "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
        "reweight": {"scorer": "response_length", "reweighter": {"name": "softmax", "temperature": 2.0}},
    },
    "mixing": {
        "pre_select": "skip_zero_variance",
        "mix": {"mixer": "learnability", "warmup_steps": 1, "update_every": 1},
    },
}
STRATEGIES["rloo"] = {**STRATEGIES["select"], **STRATEGIES["mixing"]}  # every decision the adapter makes
STRATEGIES["dynamic"] = {
    "select": {
        "scorer": "group_reward_variance",
        "selector": {"name": "threshold_band", "low": 0.0, "high": float("inf")},
    },
    "dynamic_sampling": {"max_rounds": 4},
}
STRATEGIES["allocation"] = {"allocation": {"name": "screen", "params": {"pilot": 2}}}


def parity_reward(completions, **kwargs):
    return [float(len(c) % 2 == 0) for c in completions]


def rank_zero_constant_reward(completions, **kwargs):
    """1 on rank 0 (its groups never carry signal); the characters' code-sum parity on the other ranks."""
    if torch.distributed.get_rank() == 0:
        return [1.0 for _ in completions]
    return [float(sum(map(ord, c)) % 2) for c in completions]


def main(out_dir: str, mode: str = "select") -> None:
    tokenizer = build_tiny_tokenizer()
    rloo = mode == "rloo"
    prompts = 12 if rloo else 24
    dataset = Dataset.from_dict(
        {"prompt": [f"{i}*{i % 5}=" for i in range(prompts)], "domain": ["a", "b"] * (prompts // 2)}
    )
    config_class, trainer_class = (RLOOConfig, DataFlexRLOOTrainer) if rloo else (GRPOConfig, DataFlexGRPOTrainer)
    # select: 3 steps; mixing: 1.5 epochs, rloo: two epochs, so prompts come back and can be skipped.
    loss = {"beta": 0.0} if rloo else {"loss_type": "dapo"}
    args = config_class(
        output_dir=os.path.join(out_dir, "run"),
        # 3 rows per rank, 2 generations per prompt: the global batch is 6 rows in 3 groups and
        # group 1 holds the last row of rank 0 and the first row of rank 1.
        per_device_train_batch_size=4 if mode == "allocation" else 3,
        num_generations=4 if mode == "allocation" else 2,
        max_completion_length=6,
        max_steps={"select": 3, "mixing": 12, "rloo": 8, "dynamic": 4, "allocation": 3}[mode],
        learning_rate=1e-3,
        seed=0,
        **loss,
        **CPU_RUN_SETTINGS,
    )
    trainer = trainer_class(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=rank_zero_constant_reward if mode == "dynamic" else parity_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        strategy=STRATEGIES[mode],
        record_decisions=True,
    )
    if mode in ("mixing", "rloo"):
        record_train_sampler(trainer)
    engine_rows = []
    if mode == "allocation":  # the completions this rank's generation returned, to compare with the counts
        generate = trainer._generate_single_turn

        def counting(*args, **kwargs):
            result = generate(*args, **kwargs)
            engine_rows.append(len(result[0]))
            return result

        trainer._generate_single_turn = counting
    trainer.train()
    history = [
        {
            "step": h["step"],
            "keep": h["keep"].tolist(),
            "weights": h["weights"].tolist(),
            "prompt_keys": h["prompt_keys"],
            "metrics": h["metrics"],
        }
        for h in trainer.dataflex.decisions
    ]
    record = {"world_size": trainer.accelerator.num_processes, "history": history}
    if mode in ("mixing", "rloo"):
        record["stream"] = trainer.recorder.indices
        record["sampler_state"] = json.loads(json.dumps(trainer.dataflex.sampler.state_dict(), default=str))
        record["strategy_state"] = json.loads(json.dumps(trainer.dataflex.strategy.state_dict(), default=str))
    if mode == "dynamic":
        for entry, decision in zip(history, trainer.dataflex.decisions, strict=True):
            entry["dynamic"] = decision["dynamic"]
        record["totals"] = trainer.dataflex.dynamic.buffer.totals
    if mode == "allocation":
        for entry, decision in zip(history, trainer.dataflex.decisions, strict=True):
            entry["alloc"] = decision["dynamic"]
        record["engine_rows"] = sum(engine_rows)
        record["strategy_state"] = json.loads(json.dumps(trainer.dataflex.strategy.state_dict(), default=str))
    if rloo or mode in ("dynamic", "allocation"):
        record["parameters"] = [float(p.detach().double().sum()) for p in trainer.model.parameters()]
    write_record_and_leave(trainer, out_dir, record)


def write_record_and_leave(trainer, out_dir: str, record: dict) -> None:
    """Write this rank's ``rank<i>.json`` and leave once every rank has written its own.

    Both records are written once every rank passes the barrier. Then leave at once, without running the
    interpreter's or gloo's destructors: a gloo group torn down while its peer is already gone aborted a rank now
    and then ("terminate called without an active exception", SIGABRT, once in a CI run of the TRL floor), after the
    run had finished.
    """
    with open(os.path.join(out_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as handle:
        json.dump(record, handle)
    trainer.accelerator.wait_for_everyone()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
