"""Resuming from a Lightning checkpoint continues exactly: same decisions, same sampler stream, same strategy state.

Checkpoints load with Lightning's default, safe loading (``weights_only``): the callback's state holds only
tensors and Python scalars, for every preset family.
"""

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer

from dataflex_callbacks.integrations.lightning import DataFlexCallback

pytestmark = pytest.mark.slow

TOTAL_STEPS = 9  # 24 prompts / 4 per step: 6 steps per epoch, so the runs cross an epoch boundary


def run(tmp_path, max_steps, strategy=STRATEGY, save_every=None, ckpt_path=None):
    callback = DataFlexCallback(strategy)
    callbacks = [callback]
    if save_every is not None:
        callbacks.append(
            ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=save_every, save_top_k=-1)
        )
    module = ToyGRPO(toy_rows())
    trainer = toy_trainer(
        callbacks, max_steps=max_steps, tmp_path=tmp_path, enable_checkpointing=save_every is not None
    )
    trainer.fit(module, ckpt_path=ckpt_path)  # default loading: weights_only
    return module.records, callback


def assert_same_steps(full, resumed, resume_step):
    assert [r["step"] for r in resumed] == list(range(resume_step, TOTAL_STEPS))
    for want, got in zip(full[resume_step:], resumed, strict=True):
        assert got["rows"] == want["rows"], f"sampler stream differs at step {want['step']}"
        assert got["keep"] == want["keep"]
        torch.testing.assert_close(torch.tensor(got["weights"]), torch.tensor(want["weights"]))
        assert got["target"] == pytest.approx(want["target"])
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("resume_step", [4, 6], ids=["mid-epoch", "epoch-end"])
def test_resume_gives_the_uninterrupted_decisions_and_stream(tmp_path, resume_step):
    full, full_callback = run(tmp_path / "full", TOTAL_STEPS)
    run(tmp_path / "first", resume_step, save_every=resume_step)
    resumed, resumed_callback = run(
        tmp_path / "second", TOTAL_STEPS, ckpt_path=str(tmp_path / "first" / f"step={resume_step}.ckpt")
    )
    assert_same_steps(full, resumed, resume_step)
    want_state, got_state = full_callback.strategy.state_dict(), resumed_callback.strategy.state_dict()
    assert got_state["mixing"]["target"] == pytest.approx(want_state["mixing"]["target"])
    for name, history in want_state["mixing"]["tracker"]["windows"].items():
        torch.testing.assert_close(got_state["mixing"]["tracker"]["windows"][name], history)


# One preset per family: pre-rollout skip (both filters), selection, reweighting, mixing, and skip with mixing.
FAMILIES = ["skip", "greso", "difffilter", "softmax", "reward_gap", "skip+reward_gap"]


@pytest.mark.parametrize("preset", FAMILIES)
def test_every_preset_family_resumes_with_default_checkpoint_loading(tmp_path, preset):
    full, full_callback = run(tmp_path / "full", TOTAL_STEPS, strategy=preset)
    run(tmp_path / "first", 4, strategy=preset, save_every=4)
    checkpoint = tmp_path / "first" / "step=4.ckpt"
    torch.load(checkpoint, weights_only=True)  # what Lightning does by default; raises on numpy or other globals
    resumed, resumed_callback = run(tmp_path / "second", TOTAL_STEPS, strategy=preset, ckpt_path=str(checkpoint))
    assert_same_steps(full, resumed, 4)
    pre_select = full_callback.strategy.pre_select
    if pre_select is not None:
        assert pre_select.history.size > 0
        want, got = pre_select.state_dict(), resumed_callback.strategy.pre_select.state_dict()
        assert got["history"]["keys"] == want["history"]["keys"]
        for name in ("streak", "seen", "solve_rate", "last_step"):
            torch.testing.assert_close(got["history"][name], want["history"][name], equal_nan=True)
        assert got.keys() == want.keys()
        for key in got.keys() - {"history"}:  # counters, and skip_predicted's per-state count tables
            if isinstance(want[key], torch.Tensor):
                torch.testing.assert_close(got[key], want[key], rtol=0, atol=0)
            else:
                assert got[key] == want[key] or (got[key] != got[key] and want[key] != want[key]), key


def test_a_changed_strategy_config_is_refused_on_resume_unless_strict_is_off():
    from dataflex_callbacks import ConfigError

    saved = DataFlexCallback({"mix": {"mixer": "reward_gap", "domains": ["easy", "hard"], "update_every": 1}})
    state = saved.state_dict()
    changed = {"mix": {"mixer": "reward_gap", "domains": ["easy", "hard"], "update_every": 2}}
    with pytest.raises(
        ConfigError,
        match=r"cannot resume from the Lightning checkpoint.*changed: mix.*"
        r"DataFlexCallback\(\.\.\., strict=False\)",
    ):
        DataFlexCallback(changed).load_state_dict(state)
    relaxed = DataFlexCallback(changed, strict=False)
    relaxed.load_state_dict(state)
    assert relaxed.batches_this_epoch == 0 and relaxed.strategy.mixing is not None
