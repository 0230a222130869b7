"""What the callback logs: one value per optimizer step aggregated over gradient-accumulation micro-batches,
epoch aggregates, and pre-rollout savings counted in completions."""

import csv

import pytest
from lightning.pytorch.loggers import CSVLogger
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer

from dataflex_callbacks.integrations.lightning import DataFlexCallback

pytestmark = pytest.mark.slow

SELECT = {"select": STRATEGY["select"]}


def logged(tmp_path, name):
    """Non-empty values of column ``name`` of the CSV logger's metrics file, in logging order."""
    with open(tmp_path / "lightning_logs" / "version_0" / "metrics.csv") as handle:
        return [float(row[name]) for row in csv.DictReader(handle) if row.get(name)]


def runs(values):
    """``values`` with consecutive repeats collapsed."""
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


@pytest.mark.parametrize("optimisation", ["automatic", "manual"])
def test_accumulated_micro_batches_are_logged_as_one_aggregated_step(tmp_path, optimisation):
    # 24 prompts, 4 per micro-batch, 2 micro-batches per optimizer step: 3 steps make one epoch.
    manual = optimisation == "manual"
    module = ToyGRPO(toy_rows(), manual_every=2 if manual else None)
    flags = {} if manual else {"accumulate_grad_batches": 2}
    trainer = toy_trainer(
        [DataFlexCallback(SELECT)],
        max_steps=3,
        logger=CSVLogger(tmp_path),
        log_every_n_steps=1,
        default_root_dir=str(tmp_path),
        **flags,
    )
    trainer.fit(module)
    assert len(module.records) == 6

    kept = [sum(r["keep"]) for r in module.records]
    responses = len(module.records[0]["keep"])
    windows = [(kept[2 * s] + kept[2 * s + 1]) / (2 * responses) for s in range(3)]
    assert any(kept[2 * s] != kept[2 * s + 1] for s in range(3)), (
        "the case must tell the last micro-batch from the mean"
    )
    # Under manual optimisation Lightning writes a step value again at the next batch, where nothing stepped.
    assert runs(logged(tmp_path, "dataflex/kept_frac_step")) == pytest.approx(runs(windows))
    assert logged(tmp_path, "dataflex/kept_frac_epoch") == pytest.approx([sum(kept) / (6 * responses)])


def test_completions_redirected_counts_each_skipped_prompts_group():
    group = 4
    callback = DataFlexCallback("skip")
    trainer = toy_trainer([callback], max_steps=12)
    trainer.fit(ToyGRPO(toy_rows(), group_size=group))
    skipped = trainer.callback_metrics["dataflex/pre_select/skipped_prompts"].item()
    assert skipped > 0 and skipped == callback.strategy.pre_select.skipped
    assert trainer.callback_metrics["dataflex/pre_select/completions_redirected"].item() == group * skipped
