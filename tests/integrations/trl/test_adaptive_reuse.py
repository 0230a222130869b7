"""``adaptive`` with ``reuse`` (AR3PO) in TRL's GRPOTrainer: an all-wrong group at the cap takes its prompt's stored
earlier correct row, counted; the bank survives a checkpoint; two processes decide alike.

Real tiny GRPO trainings on four prompts (TRL's generation batch: 4 prompts of ``num_generations=4``, so every step
draws the same four), stages of 2 up to a cap of 4. The reward pays every completion in the first step and, after
it, every completion but those of the prompts in ``UNPAID``: those end all wrong at the cap and take back the row
the first step stored. Also: rows kept free in TRL's batch for the prompts that may reuse, a reuse without room
skipped and counted, and two processes (gloo, `adaptive_reuse_worker.py`) deciding alike.
"""

import sys
from pathlib import Path

import pytest
import torch
from cpu_settings import CPU_RUN_SETTINGS
from datasets import Dataset
from trl import GRPOConfig
from two_ranks import run_two_ranks

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.integrations.trl.allocation import grpo_advantages
from dataflex_callbacks.integrations.trl.callback import KEEP_KEY
from dataflex_callbacks.integrations.trl.lifecycle import STATE_FILE
from dataflex_callbacks.recipes.tiny_model import build_tiny_model

PROMPTS = ["3+1=", "5+2=", "7+3=", "9+4="]
UNPAID = {"5+2="}
REUSE = {"allocation": {"name": "adaptive", "params": {"stage": 2, "cap": 4, "reuse": True}}}


def first_step_pays_all(prompts, completions, trainer_state, **kwargs):
    """1 for every completion in the first step; afterwards 1 except for the prompts in ``UNPAID``."""
    return [float(trainer_state.global_step == 0 or prompt not in UNPAID) for prompt in prompts]


@pytest.fixture
def make_reuse_trainer(tiny_tokenizer, tmp_path):
    """A `DataFlexGRPOTrainer` on the four prompts; each generation batch's output is kept in ``trainer.outputs``."""

    def build(folder="run", strategy=REUSE, **config):
        settings = dict(
            output_dir=str(tmp_path / folder),
            per_device_train_batch_size=16,
            num_generations=4,
            max_completion_length=6,
            max_steps=2,
            learning_rate=1e-3,
            seed=0,
            **CPU_RUN_SETTINGS,
        )
        trainer = DataFlexGRPOTrainer(
            model=build_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=[first_step_pays_all],
            args=GRPOConfig(**{**settings, **config}),
            train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
            processing_class=tiny_tokenizer,
            strategy=strategy,
            record_decisions=True,
        )
        generate, trainer.outputs = trainer._generate_and_score_completions, []

        def keeping(inputs):
            output = generate(inputs)
            trainer.outputs.append(output)
            return output

        trainer._generate_and_score_completions = keeping
        return trainer

    return build


def reused_group(trainer, decision, output):
    """The rows of the unpaid prompt's group in a step (one process: real rows first, in the decision's order)."""
    rows = [i for i, key in enumerate(decision["prompt_keys"]) if key in UNPAID]
    return torch.tensor(rows), output["completion_ids"][rows], decision["rewards"][rows]


def found(state, name):
    """The first value saved under ``name`` in a nested state."""
    if isinstance(state, dict):
        if name in state:
            return state[name]
        state = list(state.values())
    if isinstance(state, (list, tuple)):
        return next((hit for hit in (found(value, name) for value in state) if hit is not None), None)
    return None


def test_an_all_wrong_group_at_the_cap_takes_its_earlier_correct_row(make_reuse_trainer):
    trainer = make_reuse_trainer()
    trainer.train()
    first, second = trainer.dataflex.decisions
    assert first["dynamic"]["alloc/step_reused_responses"] == 0
    bank = trainer.dataflex.strategy.allocation_response_bank
    stored = {key: bank.get(key)[0] for key in PROMPTS}  # each prompt passed in step 1: its last passing row

    metrics = second["dynamic"]
    assert metrics["alloc/step_reused_responses"] == metrics["alloc/reused_responses"] == 1
    assert metrics["alloc/step_reuses_skipped"] == 0
    assert metrics["alloc/reused_share"] == 1 / (metrics["alloc/generated"] + 1)
    output = trainer.outputs[1]
    rows, completions, rewards = reused_group(trainer, second, output)
    assert len(rows) == 5  # the cap's 4 generated rows, all wrong, and the reused one
    assert rewards.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    width = stored["5+2="]["completion_ids"].shape[0]
    assert torch.equal(completions[-1, :width], stored["5+2="]["completion_ids"])  # the first step's row, put back
    assert bool(output[KEEP_KEY][rows].all())  # trained, not a filler
    expected = grpo_advantages(trainer, rewards.unsqueeze(1), torch.zeros(5, dtype=torch.long), 1)
    assert expected[-1] > 0 and torch.allclose(output["advantages"][rows], expected)
    assert metrics["alloc/step_group_size_max"] == 5


def test_the_bank_survives_a_checkpoint_and_is_reused_after_resume(make_reuse_trainer):
    full = make_reuse_trainer("full", max_steps=3, save_strategy="steps", save_steps=1)
    full.train()
    path = full.args.output_dir + "/checkpoint-1"
    saved = torch.load(f"{path}/{STATE_FILE}", weights_only=True)  # plain tensors and containers only
    bank = found(saved, "bank")
    assert sorted(bank["keys"]) == sorted(PROMPTS) and all("completion_ids" in row for row in bank["responses"])

    resumed = make_reuse_trainer("resumed", max_steps=3, save_strategy="steps", save_steps=1)
    resumed.train(resume_from_checkpoint=path)
    assert [d["step"] for d in resumed.dataflex.decisions] == [1, 2]
    for step, (a, b) in enumerate(zip(full.dataflex.decisions[1:], resumed.dataflex.decisions, strict=True)):
        assert b["dynamic"]["alloc/step_reused_responses"] == 1
        assert a["dynamic"] == b["dynamic"]  # every count, cumulative ones included, as in the uninterrupted run
        reused = [
            reused_group(run, decision, run.outputs[-2 + step])[1][-1] for run, decision in ((full, a), (resumed, b))
        ]
        assert torch.equal(*reused)  # the row the first step stored, read back from the checkpoint


def test_a_reuse_without_room_in_trls_batch_is_skipped_and_counted(make_reuse_trainer):
    whole = {"allocation": {"name": "adaptive", "params": {"stage": 4, "cap": 4, "reuse": True}}}
    trainer = make_reuse_trainer(strategy=whole)  # the first stage fills TRL's 16 rows: no room for a reused row
    trainer.train()
    metrics = trainer.dataflex.decisions[1]["dynamic"]
    assert metrics["alloc/step_reuses_skipped"] == metrics["alloc/reuses_skipped"] == 1
    assert metrics["alloc/step_reused_responses"] == metrics["alloc/reused_responses"] == 0  # the rows trained
    assert metrics["alloc/reused_share"] == 0 and metrics["alloc/step_group_size_max"] == 4


def test_rows_are_kept_free_for_the_prompts_that_may_reuse(make_reuse_trainer, monkeypatch):
    """Every prompt all wrong after the first step: its 8 pilot rows leave 8 of TRL's 16; one row is kept free for
    each of the 4 prompts with a stored row, so the second stage fits 2 prompts, which reach the cap and reuse."""
    monkeypatch.setattr(sys.modules[__name__], "UNPAID", set(PROMPTS))
    trainer = make_reuse_trainer()
    trainer.train()
    metrics = trainer.dataflex.decisions[1]["dynamic"]
    assert metrics["alloc/step_reused_responses"] == 2 and metrics["alloc/step_reuses_skipped"] == 0
    assert metrics["alloc/step_unfinished_groups"] == 2 and metrics["alloc/step_filler_rows"] == 16 - 8 - 4 - 2
    assert (metrics["alloc/step_group_size_min"], metrics["alloc/step_group_size_max"]) == (2, 5)


@pytest.mark.parametrize("unpaid, reused, skipped", [("two", 2, 0), ("one", 0, 1)])
def test_two_processes_decide_the_same_groups_and_reuses(tmp_path, unpaid, reused, skipped):
    """Two unpaid prompts: a reused row on each process; one: no even split, the reuse is skipped on both."""
    ranks = run_two_ranks(tmp_path, unpaid, worker=str(Path(__file__).with_name("adaptive_reuse_worker.py")))
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["history"] == ranks[1]["history"]
    history = ranks[0]["history"]
    assert len(history) == 3
    for entry in history[1:]:
        assert entry["alloc"]["alloc/step_reused_responses"] == reused
        assert entry["alloc"]["alloc/step_reuses_skipped"] == skipped
        assert entry["alloc"]["alloc/step_group_size_max"] == 4 + (reused > 0)
    assert ranks[0]["parameters"] == ranks[1]["parameters"]
