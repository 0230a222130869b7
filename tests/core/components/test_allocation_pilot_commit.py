"""Pilot-Commit's decisions as options of the `screen` allocator: the pass-rate band, a pilot as a fraction of the
group, eviction of solved prompts, and the `pilot_commit` preset (components/allocation.py, allocation_memory.py)."""

import copy
import math

import pytest
import torch
from allocation_two_ranks import run_steps, run_two_ranks

from dataflex_callbacks import build_strategy
from dataflex_callbacks.components.allocation import ScreenAllocator, band_commits, tally_groups
from dataflex_callbacks.components.allocation_memory import EvictedPrompts
from dataflex_callbacks.components.allocation_rounds import AllocationRounds
from dataflex_callbacks.errors import ParamError, PilotEvidenceWarning, StateError
from dataflex_callbacks.registry import build_component

# Pilot-Commit's band, at G = 64 with pilots of G/4 = 16: 2/16 and 12/16 sit exactly on its edges.
BAND = {"rule": "band", "lower": 0.125, "upper": 0.75}
BAND_EVICT = {"allocation": {"name": "screen", "params": {"pilot": 0.5, **BAND, "evict": True}}}


def plain_parts(state):
    """A `ScreenAllocator` state without its tensors (the posterior history, the prior skips' generator): counts,
    share and evicted prompts."""
    return {key: value for key, value in state.items() if key not in ("history", "prior_skips")}


def tally_of(groups):
    """The `GroupTally` of a list of reward lists, one per prompt."""
    rewards = torch.tensor([v for g in groups for v in g], dtype=torch.float64)
    index = torch.repeat_interleave(torch.arange(len(groups)), torch.tensor([len(g) for g in groups], dtype=torch.long))
    return tally_groups(rewards, index, len(groups), 0.5)


# ------------------------------------------------------------------ (a) the pass-rate band


@pytest.mark.parametrize("lower, upper", [(0.125, 0.75), (0.0, 0.5), (0.3, 1.0), (0.0, 1.0)])
def test_band_commits_against_a_reference_loop(lower, upper):
    generator = torch.Generator().manual_seed(11)
    sizes = torch.randint(1, 17, (300,), generator=generator).tolist()
    groups = [
        (torch.rand(n, generator=generator) < torch.rand(1, generator=generator)).double().tolist() for n in sizes
    ]
    groups.append([])  # a prompt without completions never commits
    got = band_commits(tally_of(groups), lower, upper).tolist()
    expected = [bool(g) and lower <= sum(v > 0.5 for v in g) / len(g) <= upper for g in groups]
    assert got == expected and any(expected) and not all(expected)


def test_the_band_rule_commits_the_pilots_whose_pass_rate_is_in_the_band_edges_included():
    screen = ScreenAllocator(pilot=16, group_size=64, **BAND)
    pilots = [[1] * p + [0] * (16 - p) for p in (0, 1, 2, 8, 12, 13, 16)]
    assert screen.next_round(tally_of(pilots)).tolist() == [0, 0, 48, 48, 48, 0, 0]


@pytest.mark.parametrize(
    "params, named, fix",
    [
        ({"lower": -0.1}, "lower", ">= 0.0"),
        ({"lower": 1.0}, "lower", "< 1.0"),
        ({"upper": 1.5}, "upper", "<= 1.0"),
        ({"upper": math.nan}, "upper", "number"),
        ({"lower": math.inf}, "lower", "< 1.0"),
        ({"lower": 0.5, "upper": 0.5}, "upper", "upper in (0.5, 1]"),
        ({"lower": 0.75, "upper": 0.125}, "upper", "upper in (0.75, 1]"),
        ({"rule": "bands"}, "rule", "'band'"),
    ],
)
def test_bad_band_parameters_name_the_value_and_the_fix(params, named, fix):
    with pytest.raises(ParamError) as error:
        build_component("allocation", "screen", **params)
    assert error.value.param == named and fix in str(error.value)


# ------------------------------------------------------------------ (b) a pilot as a fraction of the group


@pytest.mark.parametrize("size, pilot", [(8, 2), (32, 8), (64, 16), (128, 32), (6, 1), (10, 2)])
def test_a_fractional_pilot_is_a_quarter_of_the_bound_group(size, pilot):
    screen = ScreenAllocator(pilot=0.25)
    screen.bind_group_size(size)
    assert screen.pilot == pilot == screen.first_round()
    assert ScreenAllocator(pilot=0.25, group_size=size).pilot == pilot
    assert ScreenAllocator(pilot=0.3).pilot_for(10) == 3  # 0.3 * 10 is 2.9999999999999996 in floats


def test_a_fractional_pilot_that_gives_no_completion_or_the_whole_group_is_refused_with_the_fix():
    with pytest.raises(ParamError, match=r"0.25 of a group of 2 = 0.5, floored to 0.*fraction >= 0.5") as error:
        ScreenAllocator(pilot=0.25).bind_group_size(2)
    assert error.value.param == "pilot"
    with pytest.raises(ParamError, match=r"below the group size \(4\).*pilot 1\.\.3"):
        ScreenAllocator(pilot=0.9999999999).bind_group_size(4)
    with pytest.raises(ParamError, match="bind_group_size"):
        ScreenAllocator(pilot=0.25).pilot  # noqa: B018 - unknown until the group size is bound


@pytest.mark.parametrize("pilot", [0.0, 1.0, 1.5, -0.25, math.nan, math.inf, True, "0.25"])
def test_a_pilot_that_is_neither_a_count_nor_a_fraction_is_refused(pilot):
    with pytest.raises(ParamError) as error:
        ScreenAllocator(pilot=pilot)
    assert error.value.param == "pilot" and repr(pilot) in str(error.value)


# ------------------------------------------------------------------ (c) eviction of solved prompts


def one_step(allocator, keys, pilots):
    """One step's rounds: the pilot rewards of each prompt given (``pilots[i]``), commits all passing; the decisions."""
    rounds = AllocationRounds(allocator, keys)
    counts = rounds.start()
    index = torch.repeat_interleave(torch.arange(len(keys)), counts)
    rewards = torch.tensor([v for i, g in enumerate(pilots) for v in g[: int(counts[i])]], dtype=torch.float64)
    counts = rounds.add(rewards, index)
    if rounds.generating:
        rounds.add(torch.ones(int(counts.sum())), torch.repeat_interleave(torch.arange(len(keys)), counts))
    return counts, rounds.finish()


@pytest.mark.parametrize("evict", [True, False])
def test_a_prompt_whose_pilot_was_all_correct_is_never_piloted_again(evict):
    screen = ScreenAllocator(pilot=2, group_size=4, evict=evict)
    first = [[1, 1], [1, 0], [0, 0]]
    one_step(screen, ["a", "b", "c"], first)
    assert screen.skips_pilot(["c", "a", "b", "z"]).tolist() == [False, evict, False, False]
    rounds = AllocationRounds(screen, ["b", "a", "c"])
    assert rounds.start().tolist() == ([2, 0, 2] if evict else [2, 2, 2])
    assert ("alloc/evicted_prompts" in screen.metrics()) == evict
    if evict:
        assert screen.metrics()["alloc/evicted_prompts"] == 1.0


@pytest.mark.parametrize(
    ("params", "group_size", "warns"),
    [
        ({"pilot": 0.25, "evict": True}, 8, True),  # a pilot of 2: the testbed's regression
        ({"pilot": 0.25, "evict": True}, 32, False),  # Pilot-Commit's own setting: a pilot of 8
        ({"pilot": 7, "evict": True}, 16, True),
        ({"pilot": 0.25, "evict": False}, 8, False),
    ],
)
def test_eviction_on_a_pilot_of_fewer_than_8_warns_once_naming_the_fix(params, group_size, warns, recwarn):
    screen = ScreenAllocator(**BAND, **params)
    screen.bind_group_size(group_size)
    screen.bind_group_size(group_size)
    found = [w for w in recwarn if issubclass(w.category, PilotEvidenceWarning)]
    assert len(found) == (1 if warns else 0)
    if warns:
        text = str(found[0].message)
        assert f"pilot of {screen.pilot} completion(s)" in text and "evict: false" in text
        assert f"probability {0.7**screen.pilot:.2f}" in text


def test_eviction_is_decided_from_the_pilot_not_the_committed_group():
    screen = ScreenAllocator(pilot=2, group_size=4, evict=True)
    one_step(screen, ["a", "b"], [[1, 0], [1, 1]])  # a's commit rows all pass (one_step): its pilot was mixed
    assert screen.skips_pilot(["a", "b"]).tolist() == [False, True]


def test_the_evicted_prompts_are_saved_and_restored_exactly():
    screen = ScreenAllocator(pilot=2, group_size=4, evict=True)
    for step in range(3):
        keys = [f"p{(i + step) % 7}" for i in range(5)]
        one_step(screen, keys, [[1, 1] if (i + step) % 2 else [1, 0] for i in range(5)])
    state = screen.state_dict()
    assert state["evicted"]["keys"] == list(screen.evictions.keys) and len(screen.evictions) > 1
    restored = ScreenAllocator(pilot=2, group_size=4, evict=True)
    restored.load_state_dict(copy.deepcopy(state))
    assert plain_parts(restored.state_dict()) == plain_parts(state)
    keys = [f"p{i}" for i in range(8)]
    assert torch.equal(restored.skips_pilot(keys), screen.skips_pilot(keys))


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (lambda s: s.pop("evicted"), "lacks key(s) ['evicted']"),
        (lambda s: s["evicted"].pop("keys"), "EvictedPrompts"),
        (lambda s: s["evicted"].update(keys=3), "'keys' must be a list"),
    ],
)
def test_a_damaged_eviction_state_names_its_field(damage, fragment):
    screen = ScreenAllocator(pilot=2, group_size=4, evict=True)
    one_step(screen, ["a"], [[1, 1]])
    state = copy.deepcopy(screen.state_dict())
    damage(state)
    with pytest.raises(StateError) as error:
        ScreenAllocator(pilot=2, group_size=4, evict=True).load_state_dict(state)
    assert fragment in str(error.value)
    assert EvictedPrompts().state_dict() == {"keys": []}


# ------------------------------------------------------------------ the preset, resume, ranks


def test_the_pilot_commit_preset_is_pilot_commits_decisions():
    allocator = build_strategy("pilot_commit").allocation
    assert (allocator.rule, allocator.lower, allocator.upper) == ("band", 0.125, 0.75)
    assert allocator.pilot_fraction == 0.25 and allocator.evict
    allocator.bind_group_size(64)
    assert allocator.pilot == 16


@pytest.mark.parametrize("spec", ["pilot_commit", BAND_EVICT])
def test_resume_is_exact(spec):
    straight = build_strategy(spec)
    decisions = run_steps(straight, range(6))
    first = build_strategy(spec)
    run_steps(first, range(3))
    resumed = build_strategy(spec)
    resumed.load_state_dict(first.state_dict())
    assert run_steps(resumed, range(3, 6)) == decisions[3:]
    assert plain_parts(resumed.allocation.state_dict()) == plain_parts(straight.allocation.state_dict())
    if spec == BAND_EVICT:  # a pilot of 3 in groups of 6: some prompts commit, some are evicted and get no pilot
        assert any(0 in step["asked"][0] for step in decisions) and any(any(step["trains"]) for step in decisions)


def test_two_processes_take_identical_decisions_and_evictions(tmp_path):
    ranks = run_two_ranks(tmp_path, BAND_EVICT)
    alone = run_steps(build_strategy(BAND_EVICT), range(3))
    assert ranks[0]["decisions"] == ranks[1]["decisions"] == alone
    assert ranks[0]["shapes"] == ranks[1]["shapes"]
    assert alone[-1]["metrics"]["alloc/evicted_prompts"] > 0
