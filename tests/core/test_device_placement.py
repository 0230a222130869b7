"""Every component's output stays on the batch's device (``DATAFLEX_TEST_DEVICE=cuda``: on CUDA).

On the CPU these pass trivially; scripts/gpu_check.sh runs them with the tests' tensors on a GPU.
The last test checks the harness itself on any machine: device_tensors.py moves the tests' tensors,
never the package's own.
"""

import pytest
import torch
from device_tensors import TensorsOnDevice

from dataflex_callbacks import DomainTracker, RolloutBatch, build_component, build_strategy, list_presets
from dataflex_callbacks.registry import list_components
from dataflex_callbacks.rollout.groups import dense_groups, segment_mean, segment_variance, sort_within_groups

DOMAINS = ["math", "code", "logic"]


def device_batch(n_groups=6, group=4, length=8, seed=0):
    """A batch with every field a component reads, built where the tests build (the test device)."""
    gen = torch.Generator().manual_seed(seed)
    n = n_groups * group
    gids = torch.arange(n) // group * 3 + 5
    mask = torch.rand(n, length, generator=gen) > 0.2
    mask[:, 0] = True
    return RolloutBatch(
        (torch.rand(n, generator=gen) > 0.5).float(),
        group_ids=gids,
        completion_mask=mask,
        advantages=torch.randn(n, generator=gen),
        logprobs=-torch.rand(n, length, generator=gen) * 3,
        entropies=torch.rand(n, length, generator=gen),
        completion_ids=torch.randint(0, 50, (n, length), generator=gen),
        policy_versions=torch.randint(0, 3, (n,), generator=gen),
        trainer_version=3,
        domains=[DOMAINS[int(g) % 3] for g in gids],
        prompt_keys=[f"p{int(g)}" for g in gids],
    )


def test_batch_is_built_on_the_test_device(tensor_device):
    assert device_batch().device.type == tensor_device.type


@pytest.mark.parametrize("name", list_components("scorer"))
def test_scores_stay_on_the_batch_device(tensor_device, name):
    batch = device_batch()
    scorer = build_component("scorer", name)
    assert scorer.score(batch).device.type == tensor_device.type


def test_selectors_and_reweighters_stay_on_the_batch_device(tensor_device):
    batch = device_batch()
    solve = build_component("scorer", "group_solve_rate").score(batch)
    for name in list_components("selector"):
        selector = build_component("selector", name)
        scores = batch.entropies if name == "entropy_top_tokens" else solve
        assert selector.select(scores, batch).device.type == tensor_device.type, name
    for name in list_components("reweighter"):
        reweighter = build_component("reweighter", name)
        scores = batch.logprobs.exp() if name == "advantage_reweight" else solve
        assert reweighter.weights(scores, batch).device.type == tensor_device.type, name


def test_group_reductions_stay_on_the_values_device(tensor_device):
    values = torch.tensor([0.5, 1.0, 0.0, 2.0, 1.5])
    index, count = dense_groups(torch.tensor([7, 3, 7, 3, 9]))
    for out in (
        index,
        segment_mean(values, index, count),
        segment_variance(values, index, count),
        sort_within_groups(values, index),
    ):
        assert out.device.type == tensor_device.type


def test_mixers_read_a_tracker_fed_device_batches(tensor_device):
    tracker = DomainTracker(DOMAINS)
    for step in range(3):
        tracker.update(device_batch(seed=step), step=step)
    for name in list_components("mixer"):
        proportions = build_component("mixer", name, domains=DOMAINS).proportions(tracker)
        assert sum(proportions.values()) == pytest.approx(1.0), name


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_decides_on_the_batch_device(tensor_device, preset):
    strategy = build_strategy(preset)
    if strategy.mix_enabled:
        strategy.bind_domains(DOMAINS)
    for step in range(3):
        decision = strategy.apply(device_batch(seed=step), step)
        assert decision.keep.device.type == tensor_device.type
        assert decision.weights.device.type == tensor_device.type


def test_the_harness_moves_test_tensors_and_leaves_the_package_alone():
    # "meta" stands in for a GPU: a machine without one still checks which constructors move.
    with TensorsOnDevice(torch.device("meta")):
        seeded = torch.rand(3, generator=torch.Generator().manual_seed(0))
        assert torch.zeros(2).device.type == "meta" and seeded.device.type == "meta"
        assert torch.tensor([1.0], device="cpu").device.type == "cpu"  # an explicit device is kept
        tracker = DomainTracker(DOMAINS)  # the package builds its CPU state as in production
        assert tracker.total_count.device.type == "cpu"


def test_cpu_fast_paths_are_taken_on_the_cpu_only():
    # The blocked CPU kernels build CPU buffers; any other device (MPS, XPU; "meta" here) takes the plain
    # tensor expressions and keeps its device.
    from dataflex_callbacks.rollout.batch import masked_abs_row_reduce, row_counts

    mask = torch.ones(4, 8, dtype=torch.bool, device="meta")
    values = torch.ones(4, 8, device="meta")
    assert row_counts(mask).device.type == "meta"
    assert all(out.device.type == "meta" for out in masked_abs_row_reduce(values, mask, "sum"))
