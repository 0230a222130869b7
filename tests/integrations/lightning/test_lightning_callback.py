"""End to end with a real `lightning.Trainer` on CPU: selection, reweighting, mixing, logging, misuse errors."""

import pytest
import torch
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from lightning_loss_reference import reference_from_record
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer
from torch.utils.data import DataLoader

from dataflex_callbacks import ConfigError, DataFlexError, DomainMixingSampler, build_strategy
from dataflex_callbacks.integrations.lightning import BoundStrategy, DataFlexCallback
from dataflex_callbacks.integrations.lightning.sampler_checks import check_mixing_sampler, find_mixing_sampler

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("loss_type", ["sequence_mean", "token_mean"])
def test_selection_reweighting_and_mixing_in_a_real_trainer(loss_type):
    callback = DataFlexCallback(STRATEGY)
    module = ToyGRPO(toy_rows(), loss_type=loss_type)
    trainer = toy_trainer([callback], max_steps=8)
    trainer.fit(module)

    records = module.records
    assert [r["step"] for r in records] == list(range(8))
    assert any(0 < sum(r["keep"]) < len(r["keep"]) for r in records), "some step drops some groups"
    assert any(len({round(w, 6) for w, k in zip(r["weights"], r["keep"], strict=True) if k}) > 1 for r in records), (
        "reweighting"
    )
    for record in records:  # the handle's loss is the loss of the physically reduced batch
        assert record["loss"] == pytest.approx(reference_from_record(record, loss_type), rel=1e-5, abs=1e-7)
        for keep, weight in zip(record["keep"], record["weights"], strict=True):
            assert keep or weight == 0.0

    # Mixing: after warm-up the lagging (hard) domain gets most of the draws, and the sampler follows.
    target = records[-1]["target"]
    assert target["hard"] > 0.5 > target["easy"]
    late = [row for r in records[4:] for row in r["rows"]]
    hard_share = sum(module.rows[i]["domain"] == "hard" for i in late) / len(late)
    assert hard_share > 0.5

    metrics = trainer.callback_metrics
    for name in ("kept_frac", "dropped_all", "ess", "mix/target/hard", "mix/actual/hard"):
        assert f"dataflex/{name}" in metrics
    assert not module.dataflex.bound, "unbound after fit"


def test_missing_signal_for_the_scorer_names_the_field():
    module = ToyGRPO(toy_rows(), use_sampler=False, with_groups=False)
    with pytest.raises(ConfigError, match="group_ids"):
        toy_trainer([DataFlexCallback("difffilter")], max_steps=1).fit(module)


def test_a_dynamic_sampling_part_without_a_buffer_warns_once_naming_the_fix():
    module = ToyGRPO(toy_rows(), use_sampler=False)
    strategy = {
        "select": {
            "scorer": "group_reward_variance",
            "selector": {"name": "threshold_band", "low": 0.0, "high": float("inf")},
        },
        "dynamic_sampling": {"max_rounds": 2},
    }
    with pytest.warns(UserWarning, match="SignalGroupBuffer") as caught:
        toy_trainer([DataFlexCallback(strategy)], max_steps=3).fit(module)
    assert sum("dynamic_sampling" in str(w.message) for w in caught) == 1


def test_a_dynamic_sampling_part_driven_by_a_buffer_does_not_warn():
    import warnings

    from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer

    module = ToyGRPO(toy_rows(), use_sampler=False)
    callback = DataFlexCallback({"dynamic_sampling": True})
    SignalGroupBuffer(callback.strategy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        toy_trainer([callback], max_steps=2).fit(module)
    assert not [w for w in caught if "dynamic_sampling" in str(w.message)]


def test_helper_without_the_callback_is_a_clear_error():
    module = ToyGRPO(toy_rows(), use_sampler=False)
    module.dataflex = BoundStrategy()  # the optional declaration in __init__
    with pytest.raises(DataFlexError, match="DataFlexCallback"):
        toy_trainer([], max_steps=1).fit(module)

    # A module trained once with the callback and then without it gets the same error.
    module = ToyGRPO(toy_rows())
    toy_trainer([DataFlexCallback("difffilter")], max_steps=1).fit(module)
    module.use_sampler = False
    with pytest.raises(DataFlexError, match="DataFlexCallback"):
        toy_trainer([], max_steps=1).fit(module)


def test_attribute_clash_is_refused():
    module = ToyGRPO(toy_rows(), use_sampler=False)
    module.dataflex = "something else"
    with pytest.raises(ConfigError, match="attribute="):
        toy_trainer([DataFlexCallback("difffilter")], max_steps=1).fit(module)


def test_sampler_lightning_would_replace_is_refused():
    rows = toy_rows()
    strategy = build_strategy(STRATEGY)
    sampler = DomainMixingSampler(
        rows, batch_size=4, layout="shard", num_replicas=1, rank=0, strategy=strategy, resume="continue"
    )
    wrapped = DataLoader(rows, batch_size=4, sampler=DistributedSamplerWrapper(sampler, num_replicas=2, rank=0))
    with pytest.raises(ConfigError, match="use_distributed_sampler=False"):
        find_mixing_sampler(wrapped)
    found, loader = find_mixing_sampler([DataLoader(rows, batch_size=4, sampler=sampler)])
    assert found is sampler and loader.batch_size == 4


@pytest.mark.parametrize(
    "options, world, message",
    [
        (dict(layout="grpo", resume="continue"), 2, "layout='shard'"),
        (dict(layout="shard", num_replicas=1, rank=0, resume="continue"), 2, "num_replicas=1"),
        (dict(layout="shard", num_replicas=1, rank=0, resume="replay"), 1, "resume='continue'"),
    ],
)
def test_samplers_that_cannot_serve_the_run_are_refused(options, world, message):
    strategy = build_strategy(STRATEGY)
    sampler = DomainMixingSampler(toy_rows(), batch_size=4, strategy=strategy, **options)
    with pytest.raises(ConfigError, match=message):
        check_mixing_sampler(sampler, 4, strategy, world)


def test_sampler_batch_size_and_strategy_must_match():
    strategy = build_strategy(STRATEGY)
    sampler = DomainMixingSampler(toy_rows(), batch_size=4, layout="shard", num_replicas=1, rank=0, resume="continue")
    with pytest.raises(ConfigError, match="batch_size=8"):
        check_mixing_sampler(sampler, 8, build_strategy("difffilter"), 1)
    with pytest.raises(ConfigError, match="different strategy"):
        check_mixing_sampler(sampler, 4, strategy, 1)
    with pytest.raises(ConfigError, match="strategy"):
        DataFlexCallback(strategy, sampler=sampler)


def test_loss_outside_a_fit_is_a_clear_error():
    with pytest.raises(DataFlexError, match="not attached"):
        BoundStrategy().loss(torch.zeros(2, 3), None)


class FailingGRPO(ToyGRPO):
    def training_step(self, batch, batch_idx):
        if self.global_step == 1:
            raise RuntimeError("out of memory in generation")
        return super().training_step(batch, batch_idx)


def test_an_exception_in_training_step_unbinds_the_module():
    module, callback = FailingGRPO(toy_rows()), DataFlexCallback(STRATEGY)
    with pytest.raises(RuntimeError, match="out of memory"):
        toy_trainer([callback], max_steps=4).fit(module)
    assert not module.dataflex.bound and callback.trainer is None
    with pytest.raises(DataFlexError, match="not attached"):
        _ = module.dataflex.strategy


def test_the_callbacks_state_dict_changes_neither_the_callback_nor_its_sampler():
    """A checkpoint read between batches leaves the sampler's counts and stream as they were."""

    def run():
        sampler = DomainMixingSampler(
            labels=["a"] * 300 + ["b"] * 100,
            batch_size=2,
            seed=4,
            layout="shard",
            num_replicas=1,
            rank=0,
            resume="continue",
        )
        callback = DataFlexCallback("baseline", sampler=sampler)
        iterator = iter(sampler)
        drawn = [next(iterator) for _ in range(10)]
        callback.batches_this_epoch = 5
        return callback, sampler, iterator, drawn

    callback, sampler, iterator, _ = run()
    twin_callback, twin, twin_iterator, _ = run()

    def internals(s):
        return list(s._drawer._drawn_total), [list(c) for c in s._drawer._drawn_recent], dict(s._drawer._ahead)

    before = internals(sampler)
    state = callback.state_dict()
    assert internals(sampler) == before and callback.batches_this_epoch == 5
    assert state["sampler"]["drawn_total"] == twin.drawn_total.tolist()
    assert [next(iterator) for _ in range(20)] == [next(twin_iterator) for _ in range(20)]
    assert callback.state_dict()["sampler"] == twin_callback.state_dict()["sampler"]
