"""The Lightning callback warns once when every reward of the first steps is 0 (`ZeroRewardWarning`)."""

import warnings

import torch
from lightning_toy import ToyGRPO, toy_rows, toy_trainer

from dataflex_callbacks.errors import ZeroRewardWarning
from dataflex_callbacks.host.zero_rewards import DEFAULT_WATCH_STEPS
from dataflex_callbacks.integrations.lightning import DataFlexCallback


class ZeroRewardGRPO(ToyGRPO):
    """The toy module with a reward that never pays."""

    def rollout(self, batch):
        per_token_loss, rollout = super().rollout(batch)
        return per_token_loss, rollout.replace(rewards=torch.zeros_like(rollout.rewards))


def fit(module) -> list:
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        toy_trainer([DataFlexCallback("diffband")], max_steps=DEFAULT_WATCH_STEPS + 1).fit(module)
    return [w.message for w in shown if isinstance(w.message, ZeroRewardWarning)]


def test_a_reward_that_never_pays_warns_once():
    shown = fit(ZeroRewardGRPO(toy_rows()))
    assert len(shown) == 1 and shown[0].steps == DEFAULT_WATCH_STEPS and shown[0].completions == 5 * 16


def test_a_reward_that_pays_does_not_warn():
    assert fit(ToyGRPO(toy_rows())) == []
