"""RolloutBatch: construction, validation messages, derived fields."""

import pytest
import torch

from dataflex_callbacks import BatchError, RolloutBatch
from dataflex_callbacks.rollout.batch import masked_abs_row_reduce, row_counts


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
    batch = RolloutBatch(
        torch.ones(2, dtype=torch.bfloat16),
        advantages=torch.ones(2, 3, dtype=torch.bfloat16),
        completion_mask=torch.ones(2, 3, dtype=torch.bfloat16),
    )
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


def test_row_counts_of_full_long_rows():
    # the packed path adds 8 tokens per int64 word: a full row of 4096 must not carry between bytes
    for shape in [(4, 4096), (3, 8), (2, 16384)]:
        assert row_counts(torch.ones(*shape, dtype=torch.bool)).tolist() == [float(shape[1])] * shape[0]
    assert row_counts(torch.ones(6, 16, dtype=torch.bool)[:, ::2]).tolist() == [8.0] * 6  # not contiguous


@pytest.mark.parametrize("shape", [(3, 5), (300, 700), (300, 1024), (1, 200000), (0, 4), (4, 0)])
def test_masked_row_reductions_equal_the_plain_expressions(shape):
    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(*shape, generator=gen) > 0.5
    values = torch.randn(*shape, generator=gen)
    assert torch.equal(row_counts(mask), mask.float().sum(1))
    for reduce in ("sum", "max"):
        total, counts = masked_abs_row_reduce(values, mask, reduce)
        weighted = values.abs() * mask.float()
        expected = weighted.amax(1) if reduce == "max" and shape[1] else weighted.sum(1)
        assert torch.equal(total, expected) and torch.equal(counts, mask.float().sum(1))


def test_replace_keeps_derived_values_whose_sources_did_not_change():
    mask = torch.tensor([[True, False], [True, True]])
    batch = RolloutBatch(torch.zeros(2), completion_mask=mask, advantages=torch.ones(2, 2))
    lengths = batch.lengths
    assert batch.replace(advantages=torch.zeros(2, 2)).lengths is lengths
    assert batch.replace(rewards=torch.ones(2)).lengths is lengths
    changed = batch.replace(completion_mask=torch.ones(2, 2, dtype=torch.bool))
    assert changed.lengths.tolist() == [2.0, 2.0]
