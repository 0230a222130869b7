"""Pre-rollout selection in TRL: zero-variance prompts are skipped before generation, and the history
survives resume.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from datasets import Dataset
from mixing_runs import logged, suite_trainer

from dataflex_callbacks import build_strategy
from dataflex_callbacks.integrations.trl.lifecycle import STATE_FILE
from dataflex_callbacks.integrations.trl.sampling import grpo_mixing_sampler, row_key
from dataflex_callbacks.rollout.batch import NO_DOMAIN

SETTINGS = dict(steps=16, n_train=6, save_strategy="steps", save_steps=8)  # 24 prompts: each drawn ~3 times


def streaks_by_domain(pre_select):
    history = pre_select.history
    out: dict = {}
    for key, streak, seen in zip(
        history.keys, history.streak[: history.size], history.seen[: history.size], strict=True
    ):
        out.setdefault(key.split("-")[0], []).append((int(streak), int(seen)))
    return out


@pytest.mark.parametrize("preset", ["skip", "skip+diffband", "greso"])
def test_zero_variance_prompts_are_skipped_and_the_history_resumes(tmp_path, preset):
    # Measured (preset `greso`, seeds 0-2, 16-24 steps): 200-500 candidate prompts skipped; every
    # `code` prompt (never solved) keeps an unbroken streak; `coin` (fair coin reward) only breaks
    # the noise check when a group repeats an answer. `skip` (skip_predicted) has no noise check.
    full = suite_trainer(tmp_path / "full", preset, **SETTINGS)
    full.train()
    pre_select = full.dataflex.strategy.pre_select
    skipped = logged(full, "dataflex/pre_select/skipped_prompts")
    assert len(skipped) == 16 and skipped[-1] > 0
    saved = logged(full, "dataflex/pre_select/completions_redirected")
    assert saved[-1] == skipped[-1] * full.num_generations
    for name in ("zero_variance_share", "recheck_rate"):
        assert all(0.0 <= v <= 1.0 for v in logged(full, f"dataflex/pre_select/{name}"))
    by_domain = streaks_by_domain(pre_select)
    assert all(streak == seen for streak, seen in by_domain["code"])  # never solved: always zero variance
    # Per observation, not raw streak means: a skipped prompt is seen less often, which caps its streak.
    streak_share = {d: np.mean([s / n for s, n in by_domain[d]]) for d in ("code", "coin")}
    assert streak_share["code"] == 1.0 > streak_share["coin"], streak_share
    # The noise check (completion ids gathered from TRL): only the fair-coin reward scores one answer both ways.
    noise = pre_select.history.domain_noise
    if pre_select.noise_check:
        assert noise["coin"] > 0.2 and all(noise.get(d, 0.0) == 0.0 for d in ("echo", "digit", "code")), noise
    else:
        assert noise == {}
    assert pre_select.history.domain_prior["code"] == pytest.approx(1.0)

    # The RolloutBatch keys are the sampler's keys of the rows it drew.
    sampler, rows, size = full.dataflex.sampler, full.recorder.indices, full.args.generation_batch_size
    for step, entry in enumerate(full.dataflex.decisions):
        assert entry["prompt_keys"] == [sampler._keys[r] for r in rows[step * size : (step + 1) * size]]

    checkpoint = tmp_path / "full" / "checkpoint-8"
    state = torch.load(checkpoint / STATE_FILE, weights_only=True)
    assert len(state["strategy"]["pre_select"]["history"]["keys"]) > 0 and "sampler" in state

    resumed = suite_trainer(tmp_path / "resumed", preset, **SETTINGS)
    resumed.reward_funcs[0].calls = 8  # the coin reward's call count is not in the checkpoint
    resumed.train(resume_from_checkpoint=str(checkpoint))
    # 24 prompts / 4 per step: 6 steps an epoch; the resumed trainer starts iterating at epoch 1 (step 6).
    assert resumed.recorder.indices[2 * size : 10 * size] == rows[8 * size : 16 * size]
    for a, b in zip(full.dataflex.decisions[8:], resumed.dataflex.decisions, strict=True):
        assert a["prompt_keys"] == b["prompt_keys"] and a["metrics"] == b["metrics"]
    after = resumed.dataflex.strategy.pre_select.state_dict()
    before = pre_select.state_dict()
    assert after["history"]["keys"] == before["history"]["keys"]
    for name in ("streak", "seen", "solve_rate", "last_step"):
        np.testing.assert_array_equal(after["history"][name], before["history"][name])
    counters = ("skipped", "drawn", "rechecked") + (("explore",) if "explore" in before else ())
    assert {k: after[k] for k in counters} == {k: before[k] for k in counters}
    for name in ("groups", "no_signal", "solved"):  # skip_predicted's per-state counts
        if name in before:
            torch.testing.assert_close(after[name], before[name], rtol=0, atol=0)


def test_pre_select_sampler_without_a_domain_column_uses_one_domain_and_the_key_column():
    data = Dataset.from_dict({"prompt": [f"p{i}" for i in range(8)], "uid": [f"id{i}" for i in range(8)]})
    trainer = SimpleNamespace(
        args=SimpleNamespace(generation_batch_size=4, steps_per_generation=1, seed=3),
        num_generations=2,
        num_iterations=1,
    )
    sampler = grpo_mixing_sampler(trainer, data, build_strategy("skip"), "domain", "uid")
    assert sampler.domains == [NO_DOMAIN]
    assert sampler._keys == [row_key(data[i], "uid") for i in range(8)] == data["uid"]
    stream = list(sampler)
    assert len(stream) == 16 and stream[0::2] == stream[1::2]  # 8 prompts x 2 generations
    default = grpo_mixing_sampler(trainer, data, build_strategy("skip"), "domain", None)
    assert default._keys == [row_key(data[i], None) for i in range(8)] == data["prompt"]
