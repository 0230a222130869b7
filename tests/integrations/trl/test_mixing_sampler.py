"""Domain mixing in TRL: the installed sampler's layout, a real run that starves the unlearnable domain,
resume, keys.
"""

import pytest
import torch
from mixing_runs import logged, suite_trainer
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from dataflex_callbacks import DomainMixingSampler
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, attach
from dataflex_callbacks.integrations.trl.lifecycle import STATE_FILE
from dataflex_callbacks.rollout.prompt_keys import row_prompt_key

MIX = {"mix": {"mixer": "learnability", "warmup_steps": 1, "update_every": 1}}
DOMAINS = ("code", "coin", "digit", "echo")


def canonical(stream, chunk):
    """Each chunk of ``chunk`` indices with rows renamed 0, 1, ... by first appearance: the stream's shape."""
    out = []
    for start in range(0, len(stream), chunk):
        names: dict = {}
        out.append([names.setdefault(i, len(names)) for i in stream[start : start + chunk]])
    return out


@pytest.mark.parametrize("way_in", ["subclass", "attach"])
@pytest.mark.parametrize(
    "num_generations,per_device,accumulation,num_iterations", [(2, 4, 1, 1), (4, 4, 2, 1), (2, 6, 1, 2), (3, 6, 2, 3)]
)
def test_installed_sampler_has_repeat_samplers_layout(
    make_trainer, way_in, num_generations, per_device, accumulation, num_iterations
):
    config = dict(
        num_generations=num_generations,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        num_iterations=num_iterations,
    )
    if way_in == "subclass":
        trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": MIX}, **config)
    else:
        trainer = make_trainer(**config)
        attach(trainer, MIX)
    ours = trainer._get_train_sampler()
    theirs = GRPOTrainer._get_train_sampler(trainer)
    assert isinstance(ours, DomainMixingSampler) and isinstance(theirs, RepeatSampler)
    assert trainer.dataflex.sampler is ours if way_in == "subclass" else True
    args = trainer.args
    assert ours.batch_size == args.generation_batch_size // num_generations
    assert ours.repeat_count == num_iterations * args.steps_per_generation
    chunk = args.generation_batch_size * ours.repeat_count
    mine, reference = list(ours), list(theirs)
    assert len(mine) == len(ours) == len(reference) == len(theirs)
    assert canonical(mine, chunk) == canonical(reference, chunk)


def test_strategy_without_a_pre_select_part_keeps_trls_sampler(make_trainer):
    trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": "difffilter"})
    assert isinstance(trainer._get_train_sampler(), RepeatSampler)
    assert trainer.dataflex.sampler is None


def test_dump_ucb_starves_the_unlearnable_domain_and_logs_the_mix(tmp_path):
    # Measured over seeds 0-4 (30 steps, 4 prompts x 4 completions): final target share of `code`
    # 0.051-0.052, drawn share over the last 20 sampler batches 0.013-0.087; uniform is 0.25.
    strategy = {"mix": {"mixer": "dump_ucb", "warmup_steps": 5, "update_every": 5}}
    trainer = suite_trainer(tmp_path, strategy, steps=30)
    trainer.train()
    sampler = trainer.dataflex.sampler
    assert sampler.target_proportions["code"] < 0.1
    assert sampler.actual_proportions(recent=True)["code"] < 0.25
    assert logged(trainer, "dataflex/mix/target/code")[-1] < 0.1
    for domain in DOMAINS:
        for family in ("target", "actual", "signal"):
            assert len(logged(trainer, f"dataflex/mix/{family}/{domain}")) >= 20, (family, domain)
    assert any(logged(trainer, f"dataflex/selection_reward/{d}") for d in DOMAINS)

    # The RolloutBatch names each prompt by the key rule the sampler uses for the same row.
    rows = trainer.recorder.indices
    size = trainer.args.generation_batch_size
    for step, entry in enumerate(trainer.dataflex.decisions):
        drawn = rows[step * size : (step + 1) * size]
        assert entry["prompt_keys"] == [row_prompt_key(trainer.train_dataset[r], r) for r in drawn]
        assert entry["prompt_keys"] == [trainer.train_dataset[r]["prompt_key"] for r in drawn]


def test_resumed_run_continues_the_sampler_stream_and_decisions(tmp_path):
    settings = dict(steps=8, n_train=8, save_strategy="steps", save_steps=4)
    full = suite_trainer(tmp_path / "full", MIX, **settings)
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-4"
    saved = torch.load(checkpoint / STATE_FILE, weights_only=True)
    assert saved["sampler"]["position"] > 0 and saved["strategy"]["mixing"]["last_update_step"] is not None

    resumed = suite_trainer(tmp_path / "resumed", MIX, **settings)
    # The noisy `coin` reward is seeded by its call count, which no checkpoint holds: start it where it stood.
    resumed.reward_funcs[0].calls = 4
    resumed.train(resume_from_checkpoint=str(checkpoint))
    size = full.args.generation_batch_size
    # The resumed trainer re-iterates the epoch and skips 4 batches: from there on, the same rows.
    assert resumed.recorder.indices[4 * size : 8 * size] == full.recorder.indices[4 * size : 8 * size]
    assert len(resumed.dataflex.decisions) == 4
    for a, b in zip(full.dataflex.decisions[4:], resumed.dataflex.decisions, strict=True):
        assert a["step"] == b["step"] and a["prompt_keys"] == b["prompt_keys"]
        assert torch.equal(a["keep"], b["keep"]) and torch.equal(a["weights"], b["weights"])
        assert a["metrics"] == b["metrics"]
    assert full.dataflex.strategy.target_proportions == resumed.dataflex.strategy.target_proportions
    assert full.dataflex.sampler.state_dict() == resumed.dataflex.sampler.state_dict()


@pytest.mark.parametrize(
    "preset", ["static", "reward_gap", "dump_ucb", "tscl", "learnability", "skip", "skip+diffband"]
)
def test_dataflex_run_trains_with_pre_select_presets_and_counts_completions(tmp_path, preset):
    from dataflex_callbacks.recipes.runner import RunOptions, run_training

    options = RunOptions(
        strategy=preset,
        suite="toy",
        steps=12,
        n_train=6,
        n_test=1,
        prompts_per_step=4,
        num_generations=4,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_training(options)
    assert [m["completions"] for m in result.metrics] == [16 * (s + 1) for s in range(12)]
    assert result.config["completions_generated"] == 16 * 12
    last = result.metrics[-1]
    if "skip" in preset:
        assert last["dataflex/pre_select/skipped_prompts"] > 0
        assert last["dataflex/pre_select/completions_redirected"] == 4 * last["dataflex/pre_select/skipped_prompts"]
    else:  # mix domains bound from the suite; targets move after the default warm-up of 10 steps
        assert {f"dataflex/mix/{kind}/{d}" for kind in ("target", "actual") for d in DOMAINS} <= set(last)
    assert (tmp_path / "run" / "plot.png").stat().st_size > 0
