"""DomainRewardStats and HeldOutAccuracy: plain-loop references, non-finite rows, reset, two-process reduction;
`RunSummary`: the train-end accounting every host feeds (steps, steps that kept nothing, mean kept fraction,
signal groups), checked against a plain-Python reference."""

import json
import math
import os

import pytest
import torch
from processes import run_ranks

from dataflex_callbacks import BatchError, ConfigError, Decision, DomainTracker, RolloutBatch, build_strategy
from dataflex_callbacks.metrics import DomainRewardStats, HeldOutAccuracy, RunSummary, domain_reward_sums

DOMAINS = ["math", "code", "logic"]


def random_batch(generator, n, nonfinite=0.15, domains=DOMAINS):
    """``n`` rows: rewards in {0, 0.25, ..., 1} or uniform, some NaN/inf, labels, a keep mask and weights."""
    rewards = torch.rand(n, generator=generator, dtype=torch.float64)
    coarse = torch.rand(n, generator=generator) < 0.5
    rewards = torch.where(coarse, (rewards * 4).round() / 4, rewards)
    bad = torch.rand(n, generator=generator) < nonfinite
    infinite = torch.rand(n, generator=generator) < 0.3
    rewards[bad & infinite] = float("inf")
    rewards[bad & ~infinite] = float("nan")
    labels = [domains[i] for i in torch.randint(len(domains), (n,), generator=generator).tolist()]
    keep = torch.rand(n, generator=generator) < 0.6
    weights = torch.randint(1, 9, (n,), generator=generator).to(torch.float64)
    return rewards, labels, keep, weights


def reference_stats(batches, domains=DOMAINS, threshold=0.5, use_keep=True, use_weights=True):
    """What `DomainRewardStats.compute` should return, from per-domain Python loops over the rows."""
    expected = {}
    for domain in domains:
        responses = reward = solved = kept = nonfinite = 0.0
        for rewards, labels, keep, weights in batches:
            for value, label, kept_row, weight in zip(
                rewards.tolist(), labels, keep.tolist(), weights.tolist(), strict=True
            ):
                if label != domain:
                    continue
                weight = weight if use_weights else 1.0
                if not math.isfinite(value):
                    nonfinite += weight
                    continue
                responses += weight
                reward += weight * value
                solved += weight * (value > threshold)
                kept += weight * (kept_row or not use_keep)
        if responses:
            expected[f"selection_reward/{domain}"] = reward / responses
            expected[f"solve_rate/{domain}"] = solved / responses
            expected[f"kept_frac/{domain}"] = kept / responses
        expected[f"responses/{domain}"] = responses
        expected[f"nonfinite_rewards/{domain}"] = nonfinite
    return expected


def reference_accuracy(scores, labels, domains=DOMAINS):
    """Held-out accuracy per domain (in the metric's domain order) and overall, with plain loops over the
    finite scores.
    """
    result = {}
    for domain in domains:
        values = [s for s, d in zip(scores, labels, strict=True) if d == domain and math.isfinite(s)]
        if values:
            result[domain] = sum(values) / len(values)
    finite = [s for s in scores if math.isfinite(s)]
    result["overall"] = sum(finite) / len(finite) if finite else 0.0
    return result


def assert_same(got, expected):
    assert list(got) == list(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("use_keep", [True, False])
@pytest.mark.parametrize("use_weights", [True, False])
def test_domain_reward_stats_equal_a_loop_over_the_rows(seed, use_keep, use_weights):
    generator = torch.Generator().manual_seed(seed)
    batches = [random_batch(generator, n) for n in (0, 1, 17, 64, 5)]
    metric = DomainRewardStats(DOMAINS, threshold=0.5)
    for rewards, labels, keep, weights in batches:
        metric.update(rewards, labels, keep=keep if use_keep else None, weights=weights if use_weights else None)
    assert_same(metric.compute(), reference_stats(batches, use_keep=use_keep, use_weights=use_weights))


def test_domain_indices_and_labels_give_the_same_sums():
    generator = torch.Generator().manual_seed(3)
    rewards, labels, keep, _ = random_batch(generator, 50)
    index = torch.tensor([DOMAINS.index(label) for label in labels])
    by_label, by_index = DomainRewardStats(DOMAINS), DomainRewardStats(DOMAINS)
    by_label.update(rewards, labels, keep=keep)
    by_index.update(rewards, index, keep=keep)
    assert by_label.compute() == by_index.compute()
    sums = domain_reward_sums(rewards, index, len(DOMAINS), keep=keep)
    assert sums.shape == (3, 5) and sums.dtype == torch.float64
    assert sums[:, 0].sum() + sums[:, 4].sum() == 50  # every row is either a response or non-finite


def test_threshold_decides_what_is_solved():
    metric = DomainRewardStats(["a"], threshold=0.7)
    metric.update(torch.tensor([0.5, 0.7, 0.9, 1.0]), ["a"] * 4)
    assert metric.compute()["solve_rate/a"] == 0.5  # above the threshold, strictly


def test_non_finite_rewards_are_no_observation_as_in_the_strategy_and_the_tracker():
    """The rule chosen: a NaN or infinite reward enters no mean and no share; it is counted apart."""
    rewards = torch.tensor([1.0, float("nan"), 0.0, 1.0, float("inf"), 0.25, float("-inf")])
    labels = ["a", "a", "b", "b", "b", "a", "c"]
    metric = DomainRewardStats(["a", "b", "c"])
    metric.update(rewards, labels)
    got = metric.compute()
    assert (
        got["selection_reward/a"] == pytest.approx(0.625)
        and got["responses/a"] == 2
        and got["nonfinite_rewards/a"] == 1
    )
    assert got["selection_reward/b"] == 0.5 and got["nonfinite_rewards/b"] == 1
    assert "selection_reward/c" not in got and got["responses/c"] == 0 and got["nonfinite_rewards/c"] == 1

    decision = build_strategy({"name": "drop", "nan_policy": "drop"}).apply(RolloutBatch(rewards, domains=labels), 0)
    for domain in ("a", "b"):
        assert got[f"selection_reward/{domain}"] == pytest.approx(
            decision.metrics[f"selection_reward/{domain}"], rel=1e-6
        )
    tracker = DomainTracker(["a", "b", "c"], window_unit="rows")
    tracker.update(RolloutBatch(rewards, domains=labels), sync=False)
    assert tracker.total_count.tolist() == [got["responses/a"], got["responses/b"], got["responses/c"]]
    assert float(tracker.mean_reward()[0]) == pytest.approx(got["selection_reward/a"])


def test_reset_starts_empty_and_counts_again():
    generator = torch.Generator().manual_seed(1)
    first, second = random_batch(generator, 40), random_batch(generator, 40)
    metric = DomainRewardStats(DOMAINS)
    metric.update(first[0], first[1], keep=first[2])
    metric.reset()
    assert all(value == 0.0 for value in metric.compute().values())
    assert not any(name.startswith("selection_reward/") for name in metric.compute())
    metric.update(second[0], second[1], keep=second[2])
    assert_same(metric.compute(), reference_stats([second], use_weights=False))


@pytest.mark.parametrize("seed", range(4))
def test_held_out_accuracy_equals_a_loop(seed):
    generator = torch.Generator().manual_seed(seed)
    metric = HeldOutAccuracy(DOMAINS)
    scores, labels = [], []
    for n in (10, 0, 31):
        batch_scores, batch_labels, _, _ = random_batch(generator, n, nonfinite=0.1 * (seed % 2))
        batch_scores = (batch_scores > 0.5).to(torch.float64).where(batch_scores.isfinite(), batch_scores)
        metric.update(batch_scores, batch_labels)
        scores += batch_scores.tolist()
        labels += batch_labels
    assert_same(metric.compute(), reference_accuracy(scores, labels))
    metric.reset()
    assert metric.compute() == {"overall": 0.0}


def test_errors_name_the_fix():
    with pytest.raises(BatchError, match=r"'art'.*known domains: \['math', 'code', 'logic'\]"):
        DomainRewardStats(DOMAINS).update(torch.ones(2), ["math", "art"])
    with pytest.raises(BatchError, match="one label per reward"):
        DomainRewardStats(DOMAINS).update(torch.ones(3), ["math", "code"])
    with pytest.raises(BatchError, match="weights must have one value per reward"):
        DomainRewardStats(DOMAINS).update(torch.ones(2), ["math", "code"], weights=torch.ones(3))
    with pytest.raises(BatchError, match="keep must have one value per reward"):
        DomainRewardStats(DOMAINS).update(torch.ones(2), ["math", "code"], keep=torch.ones(1, dtype=torch.bool))
    with pytest.raises(ConfigError, match="unique"):
        HeldOutAccuracy(["a", "a"])


TWO_RANK_WORKER = r"""
import json, sys
import torch
import torch.distributed as dist
sys.path.insert(0, sys.argv[4])
from test_metrics import DOMAINS, random_batch
from dataflex_callbacks.metrics import DomainRewardStats, HeldOutAccuracy

rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
generator = torch.Generator().manual_seed(0)
stats, accuracy = DomainRewardStats(DOMAINS), HeldOutAccuracy(DOMAINS)
for n in (30, 12, 0, 25):
    rewards, labels, keep, weights = random_batch(generator, n)
    mine = slice(0, n // 3) if rank == 0 else slice(n // 3, n)  # unequal halves
    stats.update(rewards[mine], labels[mine], keep=keep[mine], weights=weights[mine])
    accuracy.update(rewards[mine], labels[mine])
json.dump({"stats": stats.compute(), "accuracy": accuracy.compute(),
           "local": float(stats.responses.sum())}, open(f"{out}/rank{rank}.json", "w"))
dist.barrier()
dist.destroy_process_group()
"""


def test_two_processes_reduce_to_the_result_of_one_process_over_all_rows(tmp_path):
    init = tmp_path / "init"
    here = os.path.dirname(os.path.abspath(__file__))
    run_ranks([["-c", TWO_RANK_WORKER, str(r), str(init), str(tmp_path), here] for r in range(2)])

    generator = torch.Generator().manual_seed(0)
    stats, accuracy = DomainRewardStats(DOMAINS), HeldOutAccuracy(DOMAINS)
    for n in (30, 12, 0, 25):
        rewards, labels, keep, weights = random_batch(generator, n)
        stats.update(rewards, labels, keep=keep, weights=weights)
        accuracy.update(rewards, labels)
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for got in results:
        assert_same(got["stats"], stats.compute())
        assert_same(got["accuracy"], accuracy.compute())
    # Each rank kept only its own rows: the reduction happened in compute(), not in update().
    assert sum(got["local"] for got in results) == pytest.approx(float(stats.responses.sum()))
    assert results[0]["local"] != results[1]["local"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_states_give_the_cpu_result():
    generator = torch.Generator().manual_seed(5)
    batches = [random_batch(generator, n) for n in (40, 7)]
    cpu, cuda = DomainRewardStats(DOMAINS), DomainRewardStats(DOMAINS).to("cuda")
    for rewards, labels, keep, weights in batches:
        cpu.update(rewards, labels, keep=keep, weights=weights)
        cuda.update(rewards.cuda(), labels, keep=keep.cuda(), weights=weights.cuda())
    assert cuda.responses.device.type == "cuda"
    assert_same(cuda.compute(), cpu.compute())


# ------------------------------------------------------------------ RunSummary


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


def reference_summary(steps):
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
    expected_steps, empty, mean_kept, signal, groups = reference_summary(steps)
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
    for _ in range(3):
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
