"""RolloutBatch: construction, validation messages, derived fields."""

import pytest
import torch

from dataflex_callbacks import BatchError, RolloutBatch


def test_minimal_batch_counts_responses_as_length_one():
    batch = RolloutBatch(torch.tensor([1.0, 0.0, 0.5]))
    assert batch.n == 3
    assert batch.valid_mask is None
    assert batch.num_tokens is None
    assert torch.equal(batch.lengths, torch.ones(3))
    assert batch.device == torch.device("cpu")


def test_lengths_and_valid_mask_from_float_mask():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    batch = RolloutBatch(torch.zeros(2), completion_mask=mask)
    assert batch.valid_mask.dtype == torch.bool
    assert torch.equal(batch.lengths, torch.tensor([2.0, 0.0]))
    assert batch.num_tokens == 3


def test_valid_mask_derived_from_token_field_without_mask():
    batch = RolloutBatch(torch.zeros(2), logprobs=torch.zeros(2, 4))
    assert batch.valid_mask.all() and batch.valid_mask.shape == (2, 4)
    assert batch.has("completion_mask")


def test_empty_batch():
    batch = RolloutBatch(torch.zeros(0), group_ids=torch.zeros(0, dtype=torch.long), completion_mask=torch.zeros(0, 5))
    assert batch.n == 0 and batch.lengths.shape == (0,)


def test_bf16_fields_accepted():
    batch = RolloutBatch(torch.ones(2, dtype=torch.bfloat16), advantages=torch.ones(2, 3, dtype=torch.bfloat16),
                         completion_mask=torch.ones(2, 3, dtype=torch.bfloat16))
    assert batch.lengths.tolist() == [3.0, 3.0]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(rewards=[1.0, 2.0]), "torch.Tensor"),
        (dict(rewards=torch.zeros(2, 2)), "shape (N,)"),
        (dict(rewards=torch.zeros(2, dtype=torch.long)), "float"),
        (dict(rewards=torch.zeros(2), group_ids=torch.zeros(2)), "group_ids must be an integer"),
        (dict(rewards=torch.zeros(2), group_ids=torch.zeros(3, dtype=torch.long)), "group_ids must have shape"),
        (dict(rewards=torch.zeros(2), completion_mask=torch.ones(2)), "completion_mask must have shape (N, L)"),
        (dict(rewards=torch.zeros(2), completion_mask=torch.ones(2, 3), logprobs=torch.zeros(2, 4)), "L=4"),
        (dict(rewards=torch.zeros(2), advantages=torch.zeros(2, dtype=torch.long)), "advantages must be a float"),
        (dict(rewards=torch.zeros(2), domains=["a"]), "domains has 1 items"),
        (dict(rewards=torch.zeros(2), domains="ab"), "domains must be a sequence"),
        (dict(rewards=torch.zeros(2), domains=["a", 3]), "must hold strings"),
        (dict(rewards=torch.zeros(2), prompt_keys=[1, 2, 3]), "prompt_keys has 3"),
        (dict(rewards=torch.zeros(2), group_ids=torch.zeros(2, dtype=torch.long, device="meta")), "move every field"),
    ],
)
def test_invalid_batches_say_what_is_wrong(kwargs, fragment):
    with pytest.raises(BatchError, match=None) as info:
        RolloutBatch(**kwargs)
    assert fragment in str(info.value)


def test_replace_validates_and_rejects_unknown_fields():
    batch = RolloutBatch(torch.zeros(2), group_ids=torch.tensor([0, 0]))
    new = batch.replace(rewards=torch.ones(2))
    assert torch.equal(new.rewards, torch.ones(2)) and torch.equal(new.group_ids, batch.group_ids)
    with pytest.raises(BatchError, match="no field"):
        batch.replace(reward=torch.ones(2))
    with pytest.raises(BatchError):
        batch.replace(rewards=torch.ones(3))
