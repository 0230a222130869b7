"""The ``knapsack`` allocator (components/allocation_knapsack.py): `signal_values`, `spread_budget` against a
brute-force optimum, the budget, the explore share, its state, its parameters, and `AllocationRounds` driving it."""

import io
import itertools
import math

import pytest
import torch

from dataflex_callbacks import build_strategy
from dataflex_callbacks.components import KnapsackAllocator
from dataflex_callbacks.components.allocation_knapsack import signal_values, spread_budget
from dataflex_callbacks.components.allocation_rounds import AllocationRounds
from dataflex_callbacks.errors import ParamError, StateError


def moment(a, b, m):
    """E[p^m] for p ~ Beta(a, b), by the product formula (an independent reference)."""
    return math.prod((a + i) / (a + b + i) for i in range(m))


def test_signal_values_are_the_chance_a_group_is_neither_all_pass_nor_all_fail():
    a, b = torch.tensor([1.0, 0.5, 30.0]), torch.tensor([1.0, 2.0, 1.0])
    got = signal_values(a, b, torch.tensor([0, 2, 4, 8]))
    assert got.shape == (3, 4) and bool((got[:, 0] == 0).all())
    for i, j in itertools.product(range(3), range(1, 4)):
        n = [0, 2, 4, 8][j]
        expected = 1 - moment(float(a[i]), float(b[i]), n) - moment(float(b[i]), float(a[i]), n)
        assert float(got[i, j]) == pytest.approx(expected, rel=1e-9)


def brute_force(values, stage, slots, min_gain):
    """The best ``sum v_i(n_i) - min_gain * n_i / stage`` over every allocation within ``slots`` stages."""
    prompts, columns = values.shape
    best = -math.inf
    for stages in itertools.product(range(columns), repeat=prompts):
        if sum(stages) <= slots:
            best = max(best, sum(float(values[i, s]) - min_gain * s for i, s in enumerate(stages)))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_greedy_spread_equals_the_brute_force_optimum(seed):
    generator = torch.Generator().manual_seed(seed)
    prompts = int(torch.randint(1, 5, (1,), generator=generator))
    stages = int(torch.randint(1, 4, (1,), generator=generator))
    stage = int(torch.randint(2, 4, (1,), generator=generator))
    a = torch.rand(prompts, generator=generator, dtype=torch.float64) * 5 + 0.05
    b = torch.rand(prompts, generator=generator, dtype=torch.float64) * 5 + 0.05
    values = signal_values(a, b, torch.arange(stages + 1) * stage)
    slots = int(torch.randint(1, prompts * stages + 2, (1,), generator=generator))
    min_gain = [0.0, 0.02, 0.1][seed % 3]
    counts = spread_budget(values, stage, slots, min_gain)
    assert int(counts.sum()) <= slots * stage and bool((counts % stage == 0).all())
    taken = counts // stage
    got = sum(float(values[i, s]) - min_gain * int(s) for i, s in enumerate(taken))
    assert got == pytest.approx(brute_force(values, stage, slots, min_gain), abs=1e-12)


def allocator(**params):
    return KnapsackAllocator(group_size=4, **params)


def step(knapsack, keys, domains, reward):
    """One step through `AllocationRounds`: ``reward(prompt)`` for every completion; returns the counts asked."""
    rounds = AllocationRounds(knapsack, keys, domains)
    counts = rounds.start()
    index = torch.repeat_interleave(torch.arange(len(keys)), counts)
    rewards = torch.tensor([reward(int(i), j) for j, i in enumerate(index.tolist())], dtype=torch.float64)
    assert not bool(rounds.add(rewards, index).any())  # one round per step
    rounds.finish()
    return counts


def mixed_reward(prompt, row):
    return float(row % 2)


KEYS = [f"p{i}" for i in range(12)]


def test_the_budget_is_respected_and_an_unseen_domain_is_spread_evenly_first():
    knapsack = allocator(budget=0.5)
    counts = step(knapsack, KEYS, ["a"] * 12, mixed_reward)
    assert int(counts.sum()) == 24 == int(0.5 * 12 * 4) and set(counts.tolist()) == {2}  # a first stage each
    for budget in (0.1, 0.3, 0.75, 1.0):
        knapsack = allocator(budget=budget)
        for _ in range(3):
            counts = step(knapsack, KEYS, ["a"] * 6 + ["b"] * 6, mixed_reward)
            assert int(counts.sum()) <= math.floor(budget * 12 * 4)
            assert bool((counts % 2 == 0).all()) and int(counts.max()) <= 4


@pytest.mark.parametrize("outcome", [0.0, 1.0])
def test_a_domain_that_never_or_always_passes_gets_nothing_once_it_has_evidence(outcome):
    knapsack = allocator(budget=0.75, explore=0.0)
    domains = ["solid"] * 6 + ["mixed"] * 6
    reward = lambda prompt, row: outcome if prompt < 6 else float(row % 2)  # noqa: E731
    first = step(knapsack, KEYS, domains, reward)
    assert bool((first[:6] > 0).all())  # no evidence yet: it gets its share
    for _ in range(3):
        counts = step(knapsack, KEYS, domains, reward)
        assert not bool(counts[:6].any()) and bool((counts[6:] > 0).all()), counts


def test_explore_gives_a_stage_to_about_its_share_of_the_prompts_left_at_zero():
    knapsack = allocator(budget=1.0, explore=0.25)
    keys = [f"p{i}" for i in range(400)]
    domains = ["hard"] * 200 + ["mixed"] * 200
    reward = lambda prompt, row: 0.0 if prompt < 200 else float(row % 2)  # noqa: E731
    step(knapsack, keys, domains, reward)
    explored = []
    for _ in range(4):
        counts = step(knapsack, keys, domains, reward)
        assert set(counts[:200].tolist()) <= {0, 2}
        explored.append(int((counts[:200] > 0).sum()))
        assert knapsack.metrics()["alloc/step_explored"] == explored[-1]
    share = sum(explored) / (4 * 200)
    assert 0.19 < share < 0.31, share
    assert allocator(explore=0.0).explore == 0.0


def test_a_step_where_nothing_is_worth_a_stage_still_gives_one_prompt_a_stage():
    knapsack = allocator(explore=0.0)
    step(knapsack, KEYS, ["hard"] * 12, lambda prompt, row: 0.0)
    counts = step(knapsack, KEYS, ["hard"] * 12, lambda prompt, row: 0.0)
    assert counts.tolist() == [2] + [0] * 11


def fed(knapsack, steps, keys=KEYS):
    """``steps`` steps of domain ``a`` (never a pass: its prompts wait on the explore draw) and ``b`` (mixed)."""
    reward = lambda p, r: 0.0 if p < 6 else float((p + r) % 3 == 0)  # noqa: E731
    return [step(knapsack, keys, ["a"] * 6 + ["b"] * 6, reward) for _ in range(steps)]


def test_the_same_state_gives_the_same_counts_and_a_resumed_run_draws_as_the_uninterrupted_one():
    first, second = allocator(explore=0.5), allocator(explore=0.5)
    assert [c.tolist() for c in fed(first, 4)] == [c.tolist() for c in fed(second, 4)]
    uninterrupted = allocator(explore=0.5)
    whole = fed(uninterrupted, 6)
    before = allocator(explore=0.5)
    fed(before, 3)
    buffer = io.BytesIO()
    torch.save(before.state_dict(), buffer)
    buffer.seek(0)
    resumed = allocator(explore=0.5)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert [c.tolist() for c in fed(resumed, 3)] == [c.tolist() for c in whole[3:]]
    assert len({tuple(c[:6].tolist()) for c in whole[1:]}) > 1  # the draws decide: the comparison is not void
    assert resumed.metrics()["alloc/generated"] == uninterrupted.metrics()["alloc/generated"]


def test_damaged_state_is_refused():
    state = allocator().state_dict()
    with pytest.raises(StateError, match="generator"):
        allocator().load_state_dict({**state, "generator": [1, 2]})
    with pytest.raises(StateError, match="history"):
        allocator().load_state_dict({k: v for k, v in state.items() if k != "history"})
    with pytest.raises(StateError, match="PassHistory"):
        allocator().load_state_dict({**state, "history": {**state["history"], "counts": torch.zeros(3)}})


@pytest.mark.parametrize(
    "params, name",
    [
        ({"budget": 0.0}, "budget"),
        ({"budget": 1.5}, "budget"),
        ({"stage": 1}, "stage"),
        ({"stage": 2.5}, "stage"),
        ({"cap": 1}, "cap"),
        ({"stage": 4, "cap": 3}, "cap"),
        ({"min_gain": 1.0}, "min_gain"),
        ({"min_gain": -0.1}, "min_gain"),
        ({"explore": 1.1}, "explore"),
        ({"prior_strength": -1.0}, "prior_strength"),
        ({"history_weight": -1.0}, "history_weight"),
        ({"threshold": float("nan")}, "threshold"),
    ],
)
def test_each_bad_parameter_is_refused_naming_it(params, name):
    with pytest.raises(ParamError, match=name):
        KnapsackAllocator(**params)


def test_a_group_size_below_the_stage_or_a_budget_of_no_stage_is_refused():
    with pytest.raises(ParamError, match=r"stage. \(4\) is above the group size"):
        KnapsackAllocator(stage=4, group_size=2)
    with pytest.raises(ParamError, match="no group size"):
        KnapsackAllocator().first_counts(["a"], ["d"])
    with pytest.raises(ParamError, match="raise budget"):
        KnapsackAllocator(budget=0.1, stage=4, group_size=4).first_counts(["a", "b"], ["d", "d"])


def test_allocation_rounds_start_with_the_spread_then_ask_nothing_and_finish_records_and_observes():
    strategy = build_strategy({"allocation": {"name": "knapsack", "params": {"budget": 0.5, "explore": 0.0}}})
    strategy.bind_allocation_group_size(4)
    assert strategy.allocation_first_round() == 2 and strategy.allocation_needs.rounds_per_step == 1
    assert not strategy.allocation_needs.equal_groups and strategy.trains_fewer_groups
    keys, domains = ["x", "y", "z", "w"], ["a", "a", "b", "b"]
    rounds = strategy.allocation_rounds(keys, domains)
    counts = rounds.start()
    assert counts.tolist() == [2, 2, 2, 2]
    index = torch.repeat_interleave(torch.arange(4), counts)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    assert rounds.add(rewards, index).tolist() == [0, 0, 0, 0]
    done = rounds.finish()
    assert done.trains.tolist() == [True] * 4 and done.pilot.tolist() == [2] * 4 and not bool(done.commit.any())
    assert done.metrics["alloc/step_generated"] == 8 and done.metrics["alloc/step_budget"] == 8
    assert done.metrics["alloc/step_signal_groups"] == 2
    knapsack = allocator(budget=0.5, explore=0.0)
    step(knapsack, keys, domains, lambda prompt, row: float(prompt == 0 or (prompt == 1 and row == 2)))
    assert knapsack.history.domains == {"a": [3.0, 4.0, 2.0, 4.0], "b": [0.0, 4.0, 0.0, 4.0]}  # observed
    assert knapsack.metrics()["alloc/pilot_completions"] == 8  # recorded: every completion is first-round


def test_the_default_first_counts_are_the_first_round_less_the_skipped_pilots():
    from dataflex_callbacks.components import AdaptiveAllocator, ScreenAllocator

    assert AdaptiveAllocator(stage=3, cap=6).first_counts(["a", "b"]).tolist() == [3, 3]
    screen = ScreenAllocator(pilot=2, group_size=4, evict=True)
    screen.evictions.add(["b"], torch.tensor([True]))
    assert screen.first_counts(["a", "b", "c"]).tolist() == [2, 0, 2]


def test_fewer_groups_loss_batch_is_accepted_for_allocators_of_groups_of_different_sizes_only():
    from dataflex_callbacks.errors import ConfigError

    for name in ("adaptive", "knapsack"):
        strategy = build_strategy({"allocation": name, "fewer_groups_loss": "batch"})
        assert strategy.trains_fewer_groups and strategy.config.fewer_groups_loss == "batch"
    with pytest.raises(ConfigError, match="fills every step"):
        build_strategy({"allocation": "screen", "fewer_groups_loss": "batch"})
