"""`Strategy.allocation_response_bank`: the door through which a host stores and puts back reused responses."""

import pytest
import torch

from dataflex_callbacks import build_strategy
from dataflex_callbacks.errors import ConfigError

REUSE = {"allocation": {"name": "adaptive", "params": {"stage": 2, "cap": 2, "reuse": True}}}


def test_a_stored_response_is_the_one_the_allocator_marks_for_reuse():
    strategy = build_strategy(REUSE)
    strategy.allocation_response_bank.store(["b"], [torch.tensor([5, 6])], [1.0])
    rounds = strategy.allocation_rounds(["a", "b"])
    assert rounds.start().tolist() == [2, 2]
    rounds.add(torch.zeros(4), torch.tensor([0, 0, 1, 1]))  # both groups all wrong at the cap
    done = rounds.finish()
    assert done.reuses.tolist() == [False, True]  # only "b" has a stored response
    completion, reward = strategy.allocation_response_bank.get("b")
    assert completion.tolist() == [5, 6] and reward == 1.0


def test_an_allocator_that_reuses_nothing_has_no_bank_and_no_part_is_named():
    assert build_strategy("screen").allocation_response_bank is None
    with pytest.raises(ConfigError, match=r"Strategy.allocation_response_bank: strategy .* has no allocation part"):
        build_strategy("diffband").allocation_response_bank  # noqa: B018
