"""verl allocation reads each completion's reward as the sum of its row of ``rm_scores`` (`fields.completion_rewards`),
whichever layout TransferQueue returns: a right-padded ``(N, L)`` tensor or a nested one of N rows.

Pure torch: it runs in the main suite (the verl adapter's own tests need .venv-verl, scripts/test_verl.sh)."""

import pytest
import torch

from dataflex_callbacks.integrations.verl.fields import completion_rewards

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")

LENGTHS = (3, 1, 5, 2, 4)


def _rows(dtype, scored_last: bool) -> list[torch.Tensor]:
    """One row per completion: its score on its last token and zeros before (verl's reward loop), or any values."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for length in LENGTHS:
        if scored_last:
            row = torch.zeros(length, dtype=dtype)
            row[-1] = torch.rand((), generator=generator).to(dtype) * 2 - 1
        else:
            row = (torch.rand(length, generator=generator) * 2 - 1).to(dtype)
        rows.append(row)
    return rows


def _layouts(rows: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    width = max(len(row) for row in rows)
    padded = torch.stack([torch.nn.functional.pad(row, (0, width - len(row))) for row in rows])
    return {
        "padded": padded,
        "nested": torch.nested.nested_tensor(rows),
        "jagged": torch.nested.nested_tensor(rows, layout=torch.jagged),
    }


def _one_by_one(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([float(row.sum()) for row in rows], dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_every_layout_gives_each_row_s_score(dtype):
    rows = _rows(dtype, scored_last=True)
    for layout, scores in _layouts(rows).items():
        rewards = completion_rewards(scores)
        assert rewards.dtype == torch.float64 and rewards.shape == (len(LENGTHS),), layout
        assert torch.equal(rewards, _one_by_one(rows)), layout


def test_rows_of_many_values_sum_as_one_row_at_a_time():
    rows = _rows(torch.float32, scored_last=False)
    sums = {layout: completion_rewards(scores) for layout, scores in _layouts(rows).items()}
    for layout, rewards in sums.items():
        torch.testing.assert_close(rewards, _one_by_one(rows), rtol=0, atol=1e-6, msg=layout)
    torch.testing.assert_close(sums["nested"], sums["padded"], rtol=0, atol=1e-6)
