"""Dynamic sampling in TRL's GRPOTrainer: B signal groups per step, carry-over, short steps, resume.

Runs are real tiny GRPO trainings on the toy dataset, ``num_generations=2`` and 8 rows per
generation batch, so B = 4 groups and zero-signal groups (both completions scored alike) are common.
"""

import pytest
import torch
from toy_rewards import checksum_reward
from transformers import TrainerCallback

from dataflex_callbacks.components.scorers import group_reward_variance
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer

DIFFBAND_SELECT = {
    "scorer": "group_reward_variance",
    "selector": {"name": "threshold_band", "low": 0.0, "high": float("inf")},
}
B, GENERATIONS = 4, 2
SETTINGS = dict(per_device_train_batch_size=B * GENERATIONS, num_generations=GENERATIONS)


class GradientRecorder(TrainerCallback):
    """Keeps the flattened gradient of every optimizer step."""

    def __init__(self):
        self.grads = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.grads.append(torch.cat([p.grad.flatten().clone() for p in model.parameters() if p.grad is not None]))


def run(make_trainer, strategy, steps=3, **config):
    """A trained DataFlexGRPOTrainer (decisions recorded) with a `GradientRecorder` as ``trainer.recorder``."""
    recorder = GradientRecorder()
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[checksum_reward],
        max_steps=steps,
        trainer_kwargs={"strategy": strategy, "record_decisions": True, "callbacks": [recorder]},
        **{**SETTINGS, **config},
    )
    trainer.recorder = recorder
    takes = []
    generate = trainer.dataflex.dynamic.generate if trainer.dataflex.dynamic is not None else None
    if generate is not None:

        def recording(*args, **kwargs):
            result = generate(*args, **kwargs)
            carried = [
                row["input"]["prompt"] for chunk in trainer.dataflex.dynamic.buffer._carried for row in chunk.payload
            ]
            takes.append(
                {
                    "inputs": [row["prompt"] for row in result[0]],
                    "taken": result[4],
                    "signal": result[3],
                    "carried_after": carried,
                }
            )
            return result

        trainer.dataflex.dynamic.generate = recording
    trainer.takes = takes
    trainer.train()
    return trainer


def losses(trainer):
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_one_round_without_carry_over_equals_zero_variance_selection(make_trainer, loss_type):
    dynamic = run(
        make_trainer,
        {"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 1, "carry_over": False}},
        loss_type=loss_type,
    )
    plain = run(make_trainer, "diffband", loss_type=loss_type)
    assert any(not bool(d["keep"].all()) for d in plain.dataflex.decisions), "no zero-signal group: the test is void"
    assert len(dynamic.recorder.grads) == len(plain.recorder.grads) == 3
    for a, b in zip(dynamic.recorder.grads, plain.recorder.grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    assert losses(dynamic) == pytest.approx(losses(plain), abs=1e-6)
    for a, b in zip(dynamic.dataflex.decisions, plain.dataflex.decisions, strict=True):
        assert torch.equal(a["keep"], b["keep"])
        assert a["dynamic"]["dynamic/short"] == float(not bool(b["keep"].all()))
    for a, b in zip(dynamic.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "strategy",
    [{"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 8}}, {"dynamic_sampling": {"max_rounds": 8}}],
    ids=["diffband", "reward_spread"],
)
def test_every_full_step_trains_exactly_B_signal_groups(make_trainer, strategy):
    trainer = run(make_trainer, strategy, steps=4)
    full = 0
    for decision, take in zip(trainer.dataflex.decisions, trainer.takes, strict=True):
        metrics, taken = decision["dynamic"], take["taken"]
        assert decision["keep"].shape == (B * GENERATIONS,)
        if metrics["dynamic/short"]:
            continue
        full += 1
        assert metrics["dynamic/signal_groups"] == B and taken.num_groups == B
        assert bool(decision["keep"].all())  # every trained group carries signal
        spread = group_reward_variance(taken.rewards, taken.group_index)
        assert bool((spread > 0).all())
        assert metrics["dynamic/generated"] == metrics["dynamic/rounds"] * B * GENERATIONS
    assert full >= 3
    logged = [
        entry["dataflex/dynamic/signal_groups"]
        for entry in trainer.state.log_history
        if "dataflex/dynamic/signal_groups" in entry
    ]
    assert len(logged) == 4


def test_carried_groups_are_trained_first_on_the_next_step(make_trainer):
    trainer = run(make_trainer, {"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 8}}, steps=5)
    used = 0
    for previous, take, decision in zip(trainer.takes, trainer.takes[1:], trainer.dataflex.decisions[1:], strict=False):
        carried = int(decision["dynamic"]["dynamic/carried"])
        if not previous["carried_after"]:
            assert carried == 0
            continue
        used += 1
        assert carried == len(previous["carried_after"]) // GENERATIONS or carried == B
        rows = carried * GENERATIONS
        assert take["inputs"][:rows] == previous["carried_after"][:rows]
        assert bool((take["taken"].source_round[:rows] == -1).all())
        assert decision["dynamic"]["dynamic/carried_age_mean"] >= 1
    assert used >= 1, "no step left groups over: the test is void"


def test_without_carry_over_extra_groups_are_dropped(make_trainer):
    trainer = run(
        make_trainer, {"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 8, "carry_over": False}}, steps=4
    )
    assert all(d["dynamic"]["dynamic/carried"] == 0 for d in trainer.dataflex.decisions)
    totals = trainer.dataflex.dynamic.buffer.totals
    assert totals["carried"] == 0 and totals["steps"] == 4


def test_a_short_step_masks_its_zero_signal_groups(make_trainer):
    # One round and the reward-spread rule (no select part): the masking is the adapter's own.
    trainer = run(make_trainer, {"dynamic_sampling": {"max_rounds": 1, "carry_over": False}}, steps=3)
    shorts = 0
    for decision, take in zip(trainer.dataflex.decisions, trainer.takes, strict=True):
        signal = take["signal"]
        assert signal.shape == (B * GENERATIONS,)
        if decision["dynamic"]["dynamic/short"]:
            shorts += 1
            assert torch.equal(decision["keep"], signal)
            assert int(signal.sum()) == decision["dynamic"]["dynamic/signal_groups"] * GENERATIONS
        else:
            assert bool(decision["keep"].all())
    assert shorts >= 1, "no short step: the test is void"


def test_generated_rounds_are_all_counted_in_the_buffer_totals(make_trainer):
    trainer = run(make_trainer, {"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 8}}, steps=3)
    totals = trainer.dataflex.dynamic.buffer.totals
    generated = sum(d["dynamic"]["dynamic/generated"] for d in trainer.dataflex.decisions)
    assert totals["generated"] == generated
    assert totals["trained_groups"] == sum(d["dynamic"]["dynamic/signal_groups"] for d in trainer.dataflex.decisions)


VARIANTS = {
    "beta_peft": dict(beta=0.04, loss_type="dapo"),
    "steps_per_generation": dict(steps_per_generation=2, per_device_train_batch_size=4),
    "num_iterations": dict(num_iterations=2, gradient_accumulation_steps=2, per_device_train_batch_size=4),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_trains_with_kl_reused_and_split_generation_batches(make_trainer, variant):
    config = dict(VARIANTS[variant])
    if variant == "beta_peft":  # the tiny model has no hub id to load a reference copy from; PEFT's base serves
        peft = pytest.importorskip("peft")
        config["peft_config"] = peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        )
    trainer = run(make_trainer, {"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 8}}, steps=4, **config)
    generation_rows = trainer.args.generation_batch_size
    wanted = generation_rows // GENERATIONS
    assert trainer.dataflex.decisions
    for decision, take in zip(trainer.dataflex.decisions, trainer.takes, strict=True):
        assert decision["keep"].shape == (generation_rows,)
        if not decision["dynamic"]["dynamic/short"]:
            assert take["taken"].num_groups == wanted and bool(decision["keep"].all())
    assert all(torch.isfinite(torch.tensor(losses(trainer))))


def test_resume_equals_the_uninterrupted_run(make_trainer, tmp_path):
    strategy = {"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 8}}
    # Saved after step 3: on the tiny model (seed 0) the buffer then holds carried groups.
    checkpoints = dict(save_strategy="steps", save_steps=3, output_dir=str(tmp_path / "full"))
    full = run(make_trainer, strategy, steps=4, **checkpoints)
    saved = torch.load(tmp_path / "full" / "checkpoint-3" / "dataflex_strategy.pt", weights_only=True)
    assert saved["dynamic"]["stream"]["position"] > 0 or saved["dynamic"]["stream"]["epoch"] > 0
    assert saved["dynamic"]["buffer"]["carried"], "no group carried over the checkpoint: the test is void"

    resumed = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[checksum_reward],
        max_steps=4,
        trainer_kwargs={"strategy": strategy, "record_decisions": True},
        **{**SETTINGS, **checkpoints, "output_dir": str(tmp_path / "resumed")},
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-3"))
    assert len(resumed.dataflex.decisions) == 1 and resumed.dataflex.decisions[0]["dynamic"]["dynamic/carried"] > 0
    for a, b in zip(full.dataflex.decisions[3:], resumed.dataflex.decisions, strict=True):
        assert a["step"] == b["step"] and a["prompt_keys"] == b["prompt_keys"]
        assert torch.equal(a["keep"], b["keep"]) and a["dynamic"] == b["dynamic"]
    assert losses(resumed)[-1:] == pytest.approx(losses(full)[-1:], abs=1e-6)
    assert full.dataflex.dynamic.state_dict()["stream"] == resumed.dataflex.dynamic.state_dict()["stream"]
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_the_step_state_lives_in_the_checkpoint(make_trainer, tmp_path):
    trainer = run(make_trainer, {"select": DIFFBAND_SELECT, "dynamic_sampling": {"max_rounds": 8}}, steps=2)
    path = trainer.dataflex.save_state(str(tmp_path))
    saved = torch.load(path, weights_only=True)
    assert saved["dynamic"]["buffer"]["totals"] == trainer.dataflex.dynamic.buffer.totals
    assert saved["dynamic"]["stream"] == trainer.dataflex.dynamic.stream.state_dict()


def test_pre_select_filters_every_round_and_sees_every_generated_group(make_trainer):
    trainer = run(make_trainer, "dapo+skip", steps=4)
    pre_select = trainer.dataflex.strategy.pre_select
    generated = sum(d["dynamic"]["dynamic/generated"] for d in trainer.dataflex.decisions)
    rounds = sum(d["dynamic"]["dynamic/rounds"] for d in trainer.dataflex.decisions)
    assert rounds > len(trainer.dataflex.decisions), "no extra round: the test is void"
    # Round 0 is drawn by the mixing sampler, further rounds by the stream: the filter counts both.
    assert pre_select.drawn >= generated // GENERATIONS
    assert pre_select.history.state_dict()  # it observed the rounds
    last = trainer.state.log_history[-2]
    assert "dataflex/pre_select/skipped_prompts" in last and "dataflex/dynamic/rounds" in last
    for decision in trainer.dataflex.decisions:
        if not decision["dynamic"]["dynamic/short"]:
            assert decision["dynamic"]["dynamic/signal_groups"] == B and bool(decision["keep"].all())


# ---------------------------------------------------------------- streaming data (datasets.IterableDataset)
def zero_reward(completions, **kwargs):
    """0 for every completion: every group is zero-signal, so a pre-rollout filter learns to skip."""
    return [0.0] * len(completions)


def stream_of(dataset):
    """A real streaming dataset over ``dataset``'s rows (two shards, read in order)."""
    return dataset.to_iterable_dataset(num_shards=2)


def build_streamed(
    tiny_tokenizer, tmp_path, data, strategy, way_in="trainer", reward=checksum_reward, steps=3, **config
):
    """``(trainer, its DataFlexCallback)`` on ``data``: a DataFlexGRPOTrainer, or a stock GRPOTrainer + attach()."""
    from cpu_settings import CPU_RUN_SETTINGS
    from trl import GRPOConfig, GRPOTrainer

    from dataflex_callbacks.integrations.trl import attach
    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=steps,
        max_completion_length=6,
        learning_rate=1e-3,
        seed=0,
        **{**CPU_RUN_SETTINGS, **SETTINGS, **config},
    )
    common = dict(
        model=build_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=[reward],
        args=args,
        train_dataset=data,
        processing_class=tiny_tokenizer,
    )
    if way_in == "trainer":
        trainer = DataFlexGRPOTrainer(**common, strategy=strategy, record_decisions=True)
        return trainer, trainer.dataflex
    trainer = GRPOTrainer(**common)
    return trainer, attach(trainer, strategy, record_decisions=True)


@pytest.mark.parametrize("way_in", ["trainer", "attach"])
def test_dapo_trains_on_a_stream_drawing_further_rounds_from_it(tiny_tokenizer, toy_dataset, tmp_path, way_in):
    trainer, dataflex = build_streamed(tiny_tokenizer, tmp_path, stream_of(toy_dataset), "dapo", way_in, steps=4)
    trainer.train()
    decisions = dataflex.decisions
    assert len(decisions) == 4
    assert sum(d["dynamic"]["dynamic/rounds"] for d in decisions) > 4, "no further round: the test is void"
    prompts = set(toy_dataset["prompt"])
    for decision in decisions:
        assert set(decision["prompt_keys"]) <= prompts
        if not decision["dynamic"]["dynamic/short"]:
            assert decision["dynamic"]["dynamic/signal_groups"] == B and bool(decision["keep"].all())
    assert dataflex.dynamic.stream.state_dict()["size"] is None


def test_a_resumed_prompt_stream_over_a_stream_continues_exactly(toy_dataset):
    from dataflex_callbacks.integrations.trl.rounds import PromptStream

    stream = stream_of(toy_dataset)
    whole = PromptStream(stream, seed=3)
    first = [row["prompt"] for row in whole.draw(10)]
    state = whole.state_dict()
    rest = [row["prompt"] for _ in range(4) for row in whole.draw(7)]  # crosses into the next pass
    resumed = PromptStream(stream, seed=3)
    resumed.load_state_dict(state)
    assert [row["prompt"] for _ in range(4) for row in resumed.draw(7)] == rest
    passes = first + rest
    assert sorted(passes[:24]) == sorted(toy_dataset["prompt"])  # each pass holds every row once
    assert passes[24:] != passes[: len(passes) - 24], "the second pass was not reshuffled"
    with pytest.raises(ConfigError, match="over a stream, this train dataset is 24 rows; resume with the same"):
        PromptStream(toy_dataset, seed=3).load_state_dict(state)


@pytest.mark.parametrize("strategy", ["skip", "greso", "dapo+skip"])
def test_a_pre_rollout_filter_skips_prompts_of_a_stream(tiny_tokenizer, tmp_path, strategy):
    from datasets import Dataset

    data = Dataset.from_dict({"prompt": [f"{i}*2=" for i in range(8)], "domain": ["math"] * 8})
    trainer, dataflex = build_streamed(
        tiny_tokenizer, tmp_path, stream_of(data), strategy, reward=zero_reward, steps=14
    )
    trainer.train()
    pre_select = dataflex.strategy.pre_select
    logged = [
        entry["dataflex/pre_select/skipped_prompts"]
        for entry in trainer.state.log_history
        if "dataflex/pre_select/skipped_prompts" in entry
    ]
    assert pre_select.skipped > 0 and logged and logged[-1] > 0
    # Every generated prompt passed the filter, and skipped ones were replaced: every step was a full batch.
    assert trainer.state.global_step == 14 and pre_select.drawn >= 14 * B
    assert all(set(d["prompt_keys"]) <= set(data["prompt"]) for d in dataflex.decisions)


def test_a_mix_part_on_a_stream_is_refused_in_one_line_naming_it(tiny_tokenizer, toy_dataset, tmp_path):
    with pytest.raises(ConfigError) as caught:
        build_streamed(tiny_tokenizer, tmp_path, stream_of(toy_dataset), "static")
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert "mix part, which needs random access" in message and "IterableDataset" in message
