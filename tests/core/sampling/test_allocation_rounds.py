"""`AllocationRounds` (sampling/allocation_rounds.py): a row outside the step's prompts is a `HostError` naming it."""

import pytest
import torch

from dataflex_callbacks.components.allocation import ScreenAllocator
from dataflex_callbacks.components.allocation_rounds import AllocationRounds
from dataflex_callbacks.errors import HostError


@pytest.mark.parametrize("bad", [-1, 3, 10**6])
def test_a_prompt_index_outside_the_steps_prompts_names_the_field_and_the_range(bad):
    """Issue 46: a negative index was a raw torch RuntimeError from bincount."""
    rounds = AllocationRounds(ScreenAllocator(pilot=2, group_size=4), ["a", "b", "c"])
    rounds.start()
    index = torch.tensor([0, 0, 1, 1, 2, bad])
    with pytest.raises(HostError) as error:
        rounds.add(torch.zeros(6), index)
    message = str(error.value)
    assert "'prompt_index'" in message and "[0, 3)" in message and f"got {bad} at row 5" in message
    # the rounds are unchanged: the right round still goes through
    assert rounds.add(torch.zeros(6), torch.tensor([0, 0, 1, 1, 2, 2])).tolist() == [0, 0, 0]
