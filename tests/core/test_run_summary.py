"""`RunSummary`: the train-end accounting every host feeds (steps, steps that kept nothing, mean kept fraction,
signal groups), checked against a plain-Python reference."""

import math

import pytest
import torch

from dataflex_callbacks import Decision, RolloutBatch
from dataflex_callbacks.metrics import RunSummary


def step_batch(seed: int, groups: int = 5, size: int = 4, nan_rows: int = 1):
    """A batch of ``groups`` groups with 0/1 rewards (some groups all equal, a few NaN rows) and a random keep."""
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (groups * size,), generator=gen).float()
    rewards[:size] = 1.0  # one group solved by every response: no signal
    rewards[torch.randperm(groups * size, generator=gen)[:nan_rows]] = float("nan")
    group_ids = torch.arange(groups).repeat_interleave(size) * 7 + 3
    keep = torch.rand(groups * size, generator=gen) < 0.6
    if (seed // 10) % 3 == 0:  # every third step keeps nothing
        keep[:] = False
    batch = RolloutBatch(rewards, group_ids=group_ids)
    return batch, Decision(keep=keep, weights=keep.float(), metrics={"dropped_all": float(not keep.any())})


def reference(steps):
    """The summary by loops: ``steps`` is a list of steps, each a list of (batch, decision)."""
    kept_fracs, empty, signal, groups = [], 0, 0, 0
    for parts in steps:
        rows = sum(batch.n for batch, _ in parts)
        kept = sum(int(decision.keep.sum()) for _, decision in parts)
        kept_fracs.append(kept / rows)
        empty += kept == 0
        for batch, decision in parts:
            for gid in batch.group_ids.unique().tolist():
                members = (batch.group_ids == gid).nonzero().flatten().tolist()
                groups += 1
                finite = {batch.rewards[i].item() for i in members if math.isfinite(batch.rewards[i].item())}
                signal += len(finite) > 1 and any(bool(decision.keep[i]) for i in members)
    return len(steps), empty, sum(kept_fracs) / len(kept_fracs), signal, groups


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_the_summary_matches_a_loop_reference(micro_batches):
    steps = [[step_batch(10 * step + part) for part in range(micro_batches)] for step in range(7)]
    summary = RunSummary()
    for parts in steps:
        for batch, decision in parts:
            summary.update(batch, decision)
        summary.end_step()
    expected_steps, empty, mean_kept, signal, groups = reference(steps)
    assert summary.steps == expected_steps and summary.empty_steps == empty > 0
    assert summary.mean_kept_frac == pytest.approx(mean_kept)
    assert summary.signal_groups == signal and summary.groups == groups


def test_a_step_whose_rows_are_kept_but_no_token_is_counts_as_kept_nothing():
    batch, decision = step_batch(1)
    decision = Decision(keep=decision.keep, weights=decision.weights, metrics={"dropped_all": 1.0})
    summary = RunSummary()
    summary.update(batch, decision)
    summary.end_step()
    assert summary.empty_steps == 1


def test_the_line_names_every_count_and_says_when_nothing_trained():
    summary = RunSummary()
    for step in range(3):
        batch = RolloutBatch(torch.ones(8), group_ids=torch.arange(2).repeat_interleave(4))
        summary.update(batch, Decision(keep=torch.zeros(8, dtype=torch.bool), weights=torch.zeros(8)))
        summary.end_step()
    line = summary.line("diffband")
    assert line.startswith(
        "dataflex: train end: strategy 'diffband': 3 steps, 3 kept nothing, mean kept fraction 0.00, "
        "0 signal groups trained (of 6 groups)"
    ), line
    assert "no step trained anything" in line and "DroppedAllWarning" in line


def test_without_group_ids_the_signal_groups_are_not_claimed():
    summary = RunSummary()
    summary.update(
        RolloutBatch(torch.tensor([0.0, 1.0])), Decision(keep=torch.tensor([True, False]), weights=torch.ones(2))
    )
    summary.end_step()
    line = summary.line("s")
    assert "1 steps" not in line and "1 step, 0 kept nothing, mean kept fraction 0.50" in line
    assert "signal groups: not known" in line


def test_no_step_and_reset():
    summary = RunSummary()
    assert summary.line("baseline") == "dataflex: train end: strategy 'baseline': no step was decided"
    batch, decision = step_batch(1)
    summary.update(batch, decision)
    summary.end_step()
    summary.end_step()  # nothing fed since the last step: not a step
    assert summary.steps == 1
    summary.reset()
    assert (summary.steps, summary.empty_steps, summary.signal_groups, summary.groups) == (0, 0, 0, 0)
