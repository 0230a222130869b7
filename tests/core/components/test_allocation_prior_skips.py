"""The `screen` allocator's skips before the pilot (``min_prior_signal``, ``explore``): `prior_signal_probability`,
`PriorSkips`, `ScreenAllocator.skips_pilot` (components/allocation_signal.py, allocation.py)."""

import io
import math

import numpy as np
import pytest
import torch

from dataflex_callbacks.components.allocation import ScreenAllocator, prior_signal_probability, tally_groups
from dataflex_callbacks.components.allocation_rounds import AllocationRounds
from dataflex_callbacks.errors import ParamError, StateError


def moment(a, b, m):
    """E[p^m] for p ~ Beta(a, b), by the product formula (an independent reference)."""
    return math.prod((a + i) / (a + b + i) for i in range(m))


@pytest.mark.parametrize("a, b, size", [(1.0, 1.0, 2), (0.5, 2.0, 8), (3.0, 3.0, 4), (0.2, 0.3, 16), (40.0, 2.0, 8)])
def test_prior_signal_probability_matches_the_closed_form_and_a_monte_carlo_estimate(a, b, size):
    got = float(
        prior_signal_probability(torch.tensor([a], dtype=torch.float64), torch.tensor([b], dtype=torch.float64), size)[
            0
        ]
    )
    assert got == pytest.approx(1 - moment(a, b, size) - moment(b, a, size), rel=1e-9, abs=1e-12)
    rng = np.random.default_rng(0)
    passes = rng.binomial(size, rng.beta(a, b, size=400_000))
    assert got == pytest.approx(float(((passes > 0) & (passes < size)).mean()), abs=0.004)


def test_prior_signal_probability_is_vectorised_and_uniform_gives_a_third_at_two():
    got = prior_signal_probability(torch.tensor([1.0, 2.0, 0.5]), torch.tensor([1.0, 5.0, 0.5]), 2)
    assert got.shape == (3,)
    assert got.tolist() == pytest.approx([1 / 3, 1 - moment(2, 5, 2) - moment(5, 2, 2), 1 - 2 * moment(0.5, 0.5, 2)])


def screener(**params):
    """A `screen` allocator with the posterior rule, G = 8, pilots of 2."""
    return ScreenAllocator(pilot=2, group_size=8, rule="posterior", **params)


def pilot_step(allocator, keys, domains, pilots):
    """One step's pilots (``pilots[i]``, the rewards of prompt i's pilot), no commit; returns the pilot counts."""
    rounds = AllocationRounds(allocator, keys, domains)
    counts = rounds.start()
    rewards = torch.tensor([v for i, g in enumerate(pilots) for v in g[: int(counts[i])]], dtype=torch.float64)
    rounds.add(rewards, torch.repeat_interleave(torch.arange(len(keys)), counts))
    rounds.set_next(torch.zeros(len(keys), dtype=torch.long))
    rounds.finish()
    return counts


def observed(**params):
    """An allocator that has seen 30 pilots of domain ``hard`` (never a pass) and 30 of ``mixed`` (one pass in two)."""
    allocator = screener(**params)
    keys = [f"h{i}" for i in range(30)] + [f"m{i}" for i in range(30)]
    pilot_step(allocator, keys, ["hard"] * 30 + ["mixed"] * 30, [[0, 0]] * 30 + [[1, 0]] * 30)
    return allocator


def test_a_domain_whose_pilots_never_pass_is_skipped_but_for_the_explore_share():
    allocator = observed(min_prior_signal=0.2, explore=0.25)
    hard = allocator.skips_pilot([f"new-h{i}" for i in range(4000)], ["hard"] * 4000)
    assert float(hard.double().mean()) == pytest.approx(0.75, abs=0.03)
    assert not allocator.skips_pilot([f"new-m{i}" for i in range(500)], ["mixed"] * 500).any()
    assert not allocator.skips_pilot([f"x{i}" for i in range(500)], ["never-piloted"] * 500).any()
    assert allocator.metrics()["alloc/prior_skips"] == float(hard.sum())
    assert not observed(min_prior_signal=0.0).skips_pilot(["h0", "z"], ["hard", "hard"]).any()  # 0: off


def test_a_domain_with_no_pilot_yet_is_never_skipped():
    allocator = observed(min_prior_signal=0.9, explore=0.0)  # above a fresh domain's Beta(1, 1): 1 - 2/9 at G = 8
    fresh = prior_signal_probability(torch.tensor([1.0]), torch.tensor([1.0]), 8)
    assert float(fresh[0]) == pytest.approx(7 / 9) and float(fresh[0]) < 0.9
    assert not allocator.skips_pilot([f"x{i}" for i in range(50)], ["never-piloted"] * 50).any()
    assert allocator.skips_pilot([f"new-h{i}" for i in range(50)], ["hard"] * 50).all()


def test_explore_one_pilots_every_prompt_and_explore_zero_none_of_a_barren_domain():
    keys = [f"new-h{i}" for i in range(200)]
    assert not observed(min_prior_signal=0.2, explore=1.0).skips_pilot(keys, ["hard"] * 200).any()
    assert observed(min_prior_signal=0.2, explore=0.0).skips_pilot(keys, ["hard"] * 200).all()


def test_two_allocators_with_the_same_history_draw_the_same_skips():
    keys, domains = [f"new-h{i}" for i in range(300)], ["hard"] * 300
    first, second = observed(min_prior_signal=0.2, explore=0.5), observed(min_prior_signal=0.2, explore=0.5)
    for _ in range(3):
        drawn = first.skips_pilot(keys, domains)
        assert 0 < int(drawn.sum()) < len(keys)
        assert torch.equal(drawn, second.skips_pilot(keys, domains))


def test_a_restored_allocator_continues_the_same_draws():
    keys, domains = [f"new-h{i}" for i in range(300)], ["hard"] * 300
    allocator = observed(min_prior_signal=0.2, explore=0.5)
    allocator.skips_pilot(keys, domains)
    buffer = io.BytesIO()
    torch.save(allocator.state_dict(), buffer)
    buffer.seek(0)
    restored = screener(min_prior_signal=0.2, explore=0.5)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.metrics()["alloc/prior_skips"] == allocator.metrics()["alloc/prior_skips"]
    for _ in range(2):
        assert torch.equal(restored.skips_pilot(keys, domains), allocator.skips_pilot(keys, domains))


def test_a_prompt_let_through_keeps_its_pilot_when_the_rounds_ask_again():
    allocator = observed(min_prior_signal=0.2, explore=0.5)
    keys = [f"new-h{i}" for i in range(100)]
    kept = [k for k, skip in zip(keys, allocator.skips_pilot(keys, ["hard"] * 100).tolist(), strict=True) if not skip]
    counts = pilot_step(allocator, kept, ["hard"] * len(kept), [[0, 0]] * len(kept))
    assert counts.tolist() == [2] * len(kept)  # no second draw before their pilot
    assert allocator.skips_pilot(kept, ["hard"] * len(kept)).any()  # piloted: the next draw decides afresh


@pytest.mark.parametrize("rule", ["intermediate", "band"])
def test_min_prior_signal_is_refused_with_a_rule_other_than_posterior(rule):
    with pytest.raises(ParamError, match=r"min_prior_signal.*0\.3.*rule: posterior.*min_prior_signal: 0"):
        ScreenAllocator(rule=rule, min_prior_signal=0.3)
    ScreenAllocator(rule=rule, min_prior_signal=0.0)  # off: any rule


@pytest.mark.parametrize(
    "params, name",
    [
        ({"min_prior_signal": 1.0}, "min_prior_signal"),
        ({"min_prior_signal": -0.1}, "min_prior_signal"),
        ({"min_prior_signal": float("nan")}, "min_prior_signal"),
        ({"explore": 1.5}, "explore"),
        ({"explore": -0.1}, "explore"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_parameter(params, name):
    with pytest.raises(ParamError, match=name) as error:
        screener(**params)
    assert error.value.param == name


def test_a_damaged_prior_skips_state_is_refused():
    state = observed(min_prior_signal=0.2).state_dict()
    state["prior_skips"]["generator"] = [1, 2, 3]
    with pytest.raises(StateError, match="generator"):
        screener(min_prior_signal=0.2).load_state_dict(state)


def test_the_tally_of_a_skipped_prompt_is_empty_and_it_is_not_learnt_from():
    allocator = observed(min_prior_signal=0.2, explore=0.0)
    counts = pilot_step(allocator, ["h-late"], ["hard"], [[1, 1]])
    assert counts.tolist() == [0]
    assert allocator.history.domains["hard"][1] == 60.0  # 30 pilots of 2, none added
    assert tally_groups(torch.zeros(0), torch.zeros(0, dtype=torch.long), 1, 0.5).trials.tolist() == [0.0]
