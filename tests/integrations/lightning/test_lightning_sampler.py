"""The Lightning prompt sampler in a real Trainer: one pool without a mix part, the config's domain column,
prompt keys that must match the sampler's, strategies that need it, and LightningDataModules."""

import math

import lightning.pytorch as pl
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer
from torch.utils.data import DataLoader

from dataflex_callbacks import ConfigError, DataFlexError, build_strategy
from dataflex_callbacks.integrations.lightning import DataFlexCallback, ShardedSampler, build_sampler
from dataflex_callbacks.integrations.lightning.sampling import make_sampler

pytestmark = pytest.mark.slow


def skewed_rows(n=40):
    """80% easy, 10% mid, 10% hard."""
    rows = toy_rows(n)
    for i, row in enumerate(rows):
        row["domain"] = "easy" if i < 0.8 * n else ("mid" if i < 0.9 * n else "hard")
    return rows


NO_SKIP = {"pre_select": {"name": "skip_zero_variance", "params": {"min_keep": 1.0}}}  # the filter path, keeping all


@pytest.mark.parametrize("strategy", ["difffilter", "softmax", NO_SKIP], ids=["selection", "reweighting", "pre_select"])
def test_without_a_mix_part_the_sampler_keeps_the_datas_domain_distribution(strategy):
    rows = skewed_rows()
    module = ToyGRPO(rows)
    callback = DataFlexCallback(strategy)
    toy_trainer([callback], max_steps=24).fit(module)
    assert callback.sampler.pooled
    drawn = [module.rows[i]["domain"] for r in module.records for i in r["rows"]]
    share = drawn.count("easy") / len(drawn)
    # 96 draws: within three binomial standard errors of the data's 80% (per-domain balancing gives about 33%).
    assert abs(share - 0.8) < 3 * math.sqrt(0.8 * 0.2 / len(drawn)), share


def test_the_domain_column_is_the_configs_domain_key():
    rows = [dict(row, topic="t-" + row["domain"]) for row in toy_rows()]
    mixing = build_strategy({**STRATEGY, "domain_key": "topic"})
    sampler = make_sampler(mixing, rows, batch_size=4, seed=0, world_size=1, rank=0, options={})
    assert isinstance(sampler, ShardedSampler) and sampler.domains == ["t-easy", "t-hard", "t-mid"]
    with pytest.raises(ConfigError, match=r"domain_key='domain' contradicts the strategy config's domain_key='topic'"):
        make_sampler(mixing, rows, batch_size=4, seed=0, world_size=1, rank=0, options={"domain_key": "domain"})
    # Without a mix part: one pool; the config's column only labels prompts for the pre-rollout prior.
    skipping = build_strategy({"pre_select": {"name": "skip_zero_variance", "params": {}}, "domain_key": "topic"})
    sampler = make_sampler(skipping, rows, batch_size=4, seed=0, world_size=2, rank=1, options={})
    assert sampler.pooled and sampler.prompt_labels[:3] == ["t-easy", "t-mid", "t-hard"]
    assert (sampler.num_replicas, sampler.rank) == (2, 1)
    # Explicit proportions ask for a draw by domain even without a mix part.
    sampler = make_sampler(
        build_strategy("difffilter"),
        rows,
        batch_size=4,
        seed=0,
        world_size=1,
        rank=0,
        options={"proportions": {"easy": 0.5, "mid": 0.25, "hard": 0.25}},
    )
    assert not sampler.pooled and sampler.domains == ["easy", "hard", "mid"]
    with pytest.raises(ConfigError, match="sets layout"):
        make_sampler(skipping, rows, batch_size=4, seed=0, world_size=1, rank=0, options={"layout": "grpo"})


def test_prompt_keys_the_sampler_never_issued_are_an_error_naming_its_key_rule():
    module = ToyGRPO(toy_rows(), key_field="idx")  # the row index column, while the sampler keys rows by "prompt_key"
    with pytest.raises(DataFlexError, match=r"not keys the prompt sampler issues.*'prompt_key' field, else"):
        toy_trainer([DataFlexCallback("skip")], max_steps=2).fit(module)
    assert module.records == []
    assert not module.dataflex.bound

    # The same keys are fine once the sampler names rows by that field.
    module = ToyGRPO(toy_rows(), key_field="idx", sampler_options={"prompt_key_column": "idx"})
    callback = DataFlexCallback("skip")
    toy_trainer([callback], max_steps=8).fit(module)
    history = callback.strategy.pre_select.history
    assert history.size > 0 and set(history.keys) <= set(range(24))


@pytest.mark.parametrize("preset", ["reward_gap", "skip", "skip+reward_gap"])
def test_a_strategy_that_acts_through_the_sampler_without_one_fails_at_fit_start(preset):
    module = ToyGRPO(toy_rows(), use_sampler=False)
    with pytest.raises(ConfigError, match=r"acts through the prompt sampler.*self\.dataflex\.sampler\(dataset"):
        toy_trainer([DataFlexCallback(preset)], max_steps=2).fit(module)
    assert module.records == [], "refused before the first step"


class ToyData(pl.LightningDataModule):
    """Rows and a DataLoader whose sampler comes from the Trainer's DataFlexCallback."""

    def __init__(self, rows, batch_size=4):
        super().__init__()
        self.rows, self.batch_size, self.sampler = rows, batch_size, None

    def train_dataloader(self):
        self.sampler = build_sampler(self.trainer, self.rows, batch_size=self.batch_size)
        return DataLoader(self.rows, batch_size=self.batch_size, sampler=self.sampler, collate_fn=list)


def fit_with_data_module(tmp_path, max_steps, save_every=None, ckpt_path=None):
    module, data, callback = ToyGRPO(toy_rows(), use_sampler=False), ToyData(toy_rows()), DataFlexCallback(STRATEGY)
    callbacks = [callback]
    if save_every:
        callbacks.append(
            ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=save_every, save_top_k=-1)
        )
    toy_trainer(callbacks, max_steps=max_steps, tmp_path=tmp_path, enable_checkpointing=bool(save_every)).fit(
        module, datamodule=data, ckpt_path=ckpt_path
    )
    return module, data, callback


def test_a_lightning_data_module_builds_the_sampler_from_the_trainer_and_resumes_it(tmp_path):
    module, data, callback = fit_with_data_module(tmp_path / "full", 9)
    assert callback.sampler is data.sampler
    late = [row for r in module.records[4:] for row in r["rows"]]
    assert sum(module.rows[i]["domain"] == "hard" for i in late) / len(late) > 0.5, "the mixer steers the data module"

    fit_with_data_module(tmp_path / "first", 4, save_every=4)
    resumed, _, _ = fit_with_data_module(tmp_path / "second", 9, ckpt_path=str(tmp_path / "first" / "step=4.ckpt"))
    assert [r["rows"] for r in resumed.records] == [r["rows"] for r in module.records[4:]]


def test_build_sampler_outside_a_fit_names_the_fix():
    with pytest.raises(ConfigError, match=r"Trainer\(callbacks=\[DataFlexCallback"):
        build_sampler(pl.Trainer(logger=False), toy_rows(), batch_size=4)
