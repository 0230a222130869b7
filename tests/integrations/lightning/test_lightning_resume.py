"""Resuming from a Lightning checkpoint continues exactly: same decisions, same sampler stream, same strategy state."""

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from dataflex_callbacks.integrations.lightning import DataFlexCallback
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer

pytestmark = pytest.mark.slow

TOTAL_STEPS = 9  # 24 prompts / 4 per step: 6 steps per epoch, so the runs cross an epoch boundary


def run(tmp_path, max_steps, save_every=None, ckpt_path=None):
    callback = DataFlexCallback(STRATEGY)
    callbacks = [callback]
    if save_every is not None:
        callbacks.append(ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=save_every,
                                         save_top_k=-1))
    module = ToyGRPO(toy_rows())
    trainer = toy_trainer(callbacks, max_steps=max_steps, tmp_path=tmp_path,
                          enable_checkpointing=save_every is not None)
    trainer.fit(module, ckpt_path=ckpt_path)
    return module.records, callback


@pytest.mark.parametrize("resume_step", [4, 6], ids=["mid-epoch", "epoch-end"])
def test_resume_gives_the_uninterrupted_decisions_and_stream(tmp_path, resume_step):
    full, full_callback = run(tmp_path / "full", TOTAL_STEPS)
    run(tmp_path / "first", resume_step, save_every=resume_step)
    resumed, resumed_callback = run(tmp_path / "second", TOTAL_STEPS,
                                    ckpt_path=str(tmp_path / "first" / f"step={resume_step}.ckpt"))

    assert [r["step"] for r in resumed] == list(range(resume_step, TOTAL_STEPS))
    for want, got in zip(full[resume_step:], resumed):
        assert got["rows"] == want["rows"], f"sampler stream differs at step {want['step']}"
        assert got["keep"] == want["keep"]
        torch.testing.assert_close(torch.tensor(got["weights"]), torch.tensor(want["weights"]))
        assert got["target"] == pytest.approx(want["target"])
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5, abs=1e-7)
    want_state, got_state = full_callback.strategy.state_dict(), resumed_callback.strategy.state_dict()
    assert got_state["mixing"]["target"] == pytest.approx(want_state["mixing"]["target"])
    for name, history in want_state["mixing"]["tracker"]["history"].items():
        torch.testing.assert_close(got_state["mixing"]["tracker"]["history"][name], history)
