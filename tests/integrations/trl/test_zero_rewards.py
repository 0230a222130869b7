"""A real tiny TRL training whose reward never pays warns once (`ZeroRewardWarning`); one that pays does not."""

import os
import warnings

import pytest
from toy_rewards import checksum_reward
from two_ranks import run_two_ranks

from dataflex_callbacks.errors import ZeroRewardWarning
from dataflex_callbacks.host.zero_rewards import DEFAULT_WATCH_STEPS
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, DataFlexRLOOTrainer

WORKER = os.path.join(os.path.dirname(__file__), "zero_rewards_worker.py")


def always_zero(completions, **kwargs):
    return [0.0 for _ in completions]


def always_none(completions, **kwargs):
    return [None for _ in completions]


def train(build, reward, steps=DEFAULT_WATCH_STEPS + 1, **config):
    """Train ``steps`` steps with ``reward``; the `ZeroRewardWarning`s shown."""
    trainer = build(reward_funcs=[reward], max_steps=steps, max_completion_length=3, trainer_kwargs=config)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        trainer.train()
    return [w.message for w in shown if isinstance(w.message, ZeroRewardWarning)]


@pytest.mark.parametrize("strategy", ["baseline", "difffilter"])
def test_a_reward_that_always_returns_zero_warns_once(make_trainer, strategy):
    shown = train(lambda **kw: make_trainer(cls=DataFlexGRPOTrainer, **kw), always_zero, strategy=strategy)
    assert len(shown) == 1
    message = str(shown[0])
    assert f"first {DEFAULT_WATCH_STEPS} steps" in message and "['always_zero']" in message
    assert "prompts' format" in message and "wrong slot" in message
    assert shown[0].completions == DEFAULT_WATCH_STEPS * 4 and shown[0].unscored == 0


def test_a_reward_that_always_returns_none_warns_that_nothing_was_scored(make_trainer):
    shown = train(lambda **kw: make_trainer(cls=DataFlexGRPOTrainer, **kw), always_none, strategy="baseline")
    assert len(shown) == 1 and "unscored" in str(shown[0]) and shown[0].unscored == shown[0].completions


def test_a_reward_that_pays_does_not_warn(make_trainer):
    assert train(lambda **kw: make_trainer(cls=DataFlexGRPOTrainer, **kw), checksum_reward, strategy="baseline") == []


def test_rloo_warns_too(make_rloo):
    shown = train(lambda **kw: make_rloo(cls=DataFlexRLOOTrainer, **kw), always_zero, strategy="baseline")
    assert len(shown) == 1 and shown[0].completions == DEFAULT_WATCH_STEPS * 8


def test_two_ranks_judge_the_gathered_rewards_alike(tmp_path):
    """Rank 0's completions never pay, rank 1's pay from step 2: neither rank warns, both saw the same."""
    ranks = run_two_ranks(tmp_path, worker=WORKER)  # a hang fails within its limit, every worker killed
    assert ranks[0] == ranks[1] == {"done": True, "completions": 8, "warned": 0}
