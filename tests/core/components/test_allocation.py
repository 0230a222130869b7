"""Rollout allocation (components/allocation.py, sampling/allocation_rounds.py): decisions, config, state, ranks."""

import copy
import math
import warnings

import pytest
import torch
from allocation_two_ranks import PASS_RATES, run_steps, run_two_ranks

from dataflex_callbacks import RolloutBatch, build_strategy
from dataflex_callbacks.components.allocation import (
    ScreenAllocator,
    adaptive_more,
    last_passing_rows,
    posterior_signal_probability,
    screen_commits,
    tally_groups,
)
from dataflex_callbacks.components.allocation_adaptive import AdaptiveAllocator
from dataflex_callbacks.components.allocation_memory import PassHistory
from dataflex_callbacks.components.allocation_rounds import AllocationRounds
from dataflex_callbacks.errors import ConfigError, DataFlexError, HostError, ParamError, StateError
from dataflex_callbacks.registry import build_component, describe, list_components


def tally_of(groups):
    """The `GroupTally` of a list of reward lists, one per prompt."""
    rewards = torch.tensor([v for g in groups for v in g], dtype=torch.float64)
    index = torch.repeat_interleave(torch.arange(len(groups)), torch.tensor([len(g) for g in groups]))
    return tally_groups(rewards, index, len(groups), 0.5)


# ------------------------------------------------------------------ the pure decisions


def test_a_unanimous_pilot_gets_no_commit():
    tally = tally_of([[1, 1], [0, 0], [1, 0], [0, 1]])
    assert screen_commits(tally).tolist() == [False, False, True, True]
    screen = ScreenAllocator(pilot=2, group_size=8)
    assert screen.next_round(tally).tolist() == [0, 0, 6, 6]
    # Once committed (8 completions), nothing more; only full groups train.
    full = tally_of([[1, 1], [0, 0], [1, 0, 0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1, 1]])
    assert screen.next_round(full).tolist() == [0, 0, 0, 0]
    assert screen.trains(full).tolist() == [False, False, True, True]


def test_intermediate_means_rewards_not_all_equal_for_continuous_rewards():
    assert screen_commits(tally_of([[0.2, 0.2], [0.2, 0.3], [0.7, 0.9]])).tolist() == [False, True, True]


def beta_moment(a, b, m):
    """E[p^m] for p ~ Beta(a, b), by the product formula (an independent reference)."""
    return math.prod((a + i) / (a + b + i) for i in range(m))


@pytest.mark.parametrize("pilot", [[1, 1], [0, 0], [1, 0], [0, 0, 0], [1]])
def test_posterior_signal_probability_matches_the_beta_moments(pilot):
    tally = tally_of([pilot])
    prior_a, prior_b, size = 1.5, 3.0, 8
    got = float(posterior_signal_probability(tally, torch.tensor([prior_a]), torch.tensor([prior_b]), size)[0])
    s, n = sum(pilot), len(pilot)
    a, b, m = prior_a + s, prior_b + n - s, size - n
    if 0 < s < n:
        expected = 1.0
    elif s == n:
        expected = 1 - beta_moment(a, b, m)
    else:
        expected = 1 - beta_moment(b, a, m)
    assert got == pytest.approx(expected, rel=1e-9)


def test_posterior_rule_commits_an_unanimous_pilot_only_where_signal_is_likely():
    screen = ScreenAllocator(pilot=2, group_size=8, rule="posterior", min_signal=0.5, prior_strength=2.0)
    # A fresh run: prior rate 0.5; two passes leave P(six more all pass) small, so the group likely has signal.
    tally = tally_of([[1, 1], [0, 0]])
    assert screen.next_round(tally, ["a", "b"], ["d", "d"]).tolist() == [6, 6]
    # A prompt that failed 40 times before: its all-fail pilot predicts no signal.
    screen.history.record(["b"], ["d"], torch.tensor([0.0]), torch.tensor([40.0]))
    assert screen.next_round(tally, ["a", "b"], ["d", "d"]).tolist()[1] == 0


def test_adaptive_stages_until_a_pass_up_to_the_cap():
    tally = tally_of([[1, 0, 0, 0], [0, 0, 0, 0], [0] * 12, [0] * 16])
    assert adaptive_more(tally, stage=4, cap=14).tolist() == [0, 4, 2, 0]
    allocator = AdaptiveAllocator(stage=4, cap=16)
    assert allocator.first_round() == 4 and allocator.trains(tally).all()


def test_last_passing_rows_against_a_loop():
    generator = torch.Generator().manual_seed(3)
    rewards = (torch.rand(40, generator=generator) > 0.7).double()
    index = torch.randint(0, 9, (40,), generator=generator)
    got = last_passing_rows(rewards, index, 9, 0.5).tolist()
    expected = [max([i for i in range(40) if index[i] == g and rewards[i] > 0.5], default=-1) for g in range(9)]
    assert got == expected


# ------------------------------------------------------------------ parameters, config, composition


@pytest.mark.parametrize(
    "params, named",
    [
        ({"pilot": 0}, "pilot"),
        ({"rule": "median"}, "rule"),
        ({"min_signal": 0.0}, "min_signal"),
        ({"prior_strength": -1}, "prior_strength"),
    ],
)
def test_bad_screen_parameters_name_the_value(params, named):
    with pytest.raises(ParamError) as error:
        build_component("allocation", "screen", **params)
    assert error.value.param == named and named in str(error.value)
    if named == "rule":
        assert "'intermediate', 'posterior'" in str(error.value) and "'median'" in str(error.value)


def test_a_pilot_as_large_as_the_group_is_refused_with_the_fix():
    with pytest.raises(ParamError, match=r"pilot 1\.\.3"):
        ScreenAllocator(pilot=4).bind_group_size(4)
    with pytest.raises(ParamError, match="group_size: 8"):
        ScreenAllocator(group_size=4).bind_group_size(8)
    with pytest.raises(ParamError, match="cap"):
        AdaptiveAllocator(stage=8, cap=4)
    with pytest.raises(DataFlexError, match="bind_group_size"):
        ScreenAllocator().first_round()


def test_list_shows_the_allocators_with_their_papers():
    assert list_components("allocation") == ["adaptive", "knapsack", "screen"]
    assert "2509.25849" in describe("allocation", "knapsack")
    assert "2506.09016" in describe("allocation", "screen") and "2605.26606" in describe("allocation", "screen")
    assert "2509.25808" in describe("allocation", "adaptive")


def test_presets_and_yaml_build_the_allocation_part(tmp_path):
    assert build_strategy("screen").allocation.pilot == 2
    assert build_strategy("screen_posterior").allocation.rule == "posterior"
    assert build_strategy("adaptive").allocation.cap == 16
    path = tmp_path / "s.yaml"
    path.write_text("allocation: {name: screen, params: {pilot: 3, group_size: 8}}\n")
    strategy = build_strategy(str(path))
    assert strategy.allocation.pilot == 3 and strategy.allocation.group_size == 8
    assert "allocation screen(pilot=3, group_size=8)" in strategy.summary_line([])


def test_allocation_and_dynamic_sampling_are_refused_in_one_line():
    with pytest.raises(ConfigError) as error:
        build_strategy("screen+dapo")
    assert "cannot compose" in str(error.value) and "dynamic_sampling" in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.filterwarnings("ignore::dataflex_callbacks.PilotEvidenceWarning")
def test_selection_reweighting_mixing_and_skipping_compose():
    strategy = build_strategy(
        {
            "allocation": {"name": "screen", "params": {"group_size": 4}},
            "select": {"scorer": "group_reward_variance", "selector": {"name": "threshold_band", "low": 0.0}},
            "reweight": {"scorer": "advantage_magnitude", "reweighter": "softmax"},
            "mix": {"mixer": "static", "domains": ["a", "b"]},
            "pre_select": "skip_predicted",
        }
    )
    keys, domains = [f"p{i}" for i in range(6)], ["a", "b"] * 3
    rounds = strategy.allocation_rounds(keys, domains)
    counts, generator = rounds.start(), torch.Generator().manual_seed(0)
    rows_rewards, rows_index = [], []
    while rounds.generating:
        index = torch.repeat_interleave(torch.arange(6), counts)
        rewards = (torch.rand(index.shape[0], generator=generator) < torch.tensor(PASS_RATES[:6])[index]).double()
        rows_rewards.append(rewards)
        rows_index.append(index)
        counts = rounds.add(rewards, index)
    done = rounds.finish()
    rewards, index = torch.cat(rows_rewards), torch.cat(rows_index)
    trained = done.trains[index]
    batch = RolloutBatch(
        rewards[trained].float(),
        group_ids=index[trained],
        advantages=rewards[trained].float() - 0.5,
        prompt_keys=[keys[i] for i in index[trained].tolist()],
        domains=[domains[i] for i in index[trained].tolist()],
    )
    decision = strategy.apply(batch, step=0)
    assert decision.keep.all()  # every committed group carries signal, so diffband keeps it
    assert strategy.pre_select.history.size == int(done.trains.sum())
    assert decision.metrics["mix/target/a"] == decision.metrics["mix/target/b"] == 0.5
    assert decision.weights.shape == (batch.n,) and decision.metrics["weight_mean"] == pytest.approx(1.0)


# ------------------------------------------------------------------ the rounds, counts, resume, ranks


def test_rounds_count_every_completion_and_refuse_a_wrong_round():
    allocator = ScreenAllocator(pilot=2, group_size=6)
    rounds = AllocationRounds(allocator, ["a", "b", "c"])
    assert rounds.start().tolist() == [2, 2, 2]
    with pytest.raises(HostError, match="asked"):
        rounds.add(torch.zeros(5), torch.tensor([0, 0, 1, 1, 2]))
    counts = rounds.add(torch.tensor([1.0, 0, 1, 1, 0, 0]), torch.tensor([0, 0, 1, 1, 2, 2]))
    assert counts.tolist() == [4, 0, 0]
    assert rounds.add(torch.tensor([1.0, 1, 1, 1]), torch.zeros(4, dtype=torch.long)).tolist() == [0, 0, 0]
    done = rounds.finish()
    assert done.trains.tolist() == [True, False, False]
    assert done.metrics["alloc/pilot_completions"] == 6 and done.metrics["alloc/commit_completions"] == 4
    assert done.metrics["alloc/generated"] == 10 and done.metrics["alloc/pilot_completions/all"] == 6
    assert done.passing_rows.tolist() == [9, 3, -1]


def damaged(state, path, value):
    """A deep copy of `state` with the entry at `path` (keys, outermost first) set to `value`, or removed (...)."""
    state = copy.deepcopy(state)
    holder = state
    for key in path[:-1]:
        holder = holder[key]
    if value is ...:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return state


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        (("totals",), ..., "lacks key(s) ['totals']"),  # was a raw KeyError: 'totals'
        (("totals",), [1.0, 2.0], "'totals' must map each of"),
        (("totals", "prompts"), ..., "'totals' must map each of"),
        (("totals", "prompts"), "many", "'totals' must be 6 finite numbers"),
        (("totals", "prompts"), math.nan, "'totals' must be 6 finite numbers"),
        (("per_domain",), None, "'per_domain' must be a dict"),
        (("per_domain", "all"), {"prompts": 1.0}, "'per_domain['all']' must map each of"),
        (("share",), [1.0], "'share' must be 2 finite numbers"),
        (("history",), ..., "lacks key(s) ['history']"),
        (("history", "counts"), torch.zeros(5, 2), "'counts' must be a tensor of shape (3, 2)"),
        (("history", "domains"), {"all": [1.0]}, "'domains['all']' must be 4 finite numbers"),
        (("history", "keys"), 7, "'keys' must be a list"),
    ],
)
def test_a_damaged_allocator_state_names_its_field(path, value, fragment):
    allocator = ScreenAllocator(pilot=2, group_size=4, rule="posterior")
    rounds = AllocationRounds(allocator, ["a", "b", "c"])
    rounds.start()
    rounds.add(torch.tensor([1.0, 0, 1, 1, 0, 0]), torch.tensor([0, 0, 1, 1, 2, 2]))
    rounds.finish()
    state = allocator.state_dict()
    with pytest.raises(StateError) as error:
        ScreenAllocator(pilot=2, group_size=4, rule="posterior").load_state_dict(damaged(state, path, value))
    assert fragment in str(error.value)
    fresh = ScreenAllocator(pilot=2, group_size=4, rule="posterior")
    fresh.load_state_dict(state)  # the undamaged state still loads
    assert fresh.state_dict()["totals"] == state["totals"]


@pytest.mark.parametrize("state", [None, [], {"totals": {}}])
def test_a_state_that_is_no_allocator_state_is_a_state_error(state):
    with pytest.raises(StateError, match="AdaptiveAllocator"):
        AdaptiveAllocator().load_state_dict(state)


@pytest.mark.parametrize("preset", ["screen_posterior", "adaptive"])
def test_resume_is_exact(preset):
    straight = build_strategy(preset)
    decisions = run_steps(straight, range(6))
    first = build_strategy(preset)
    run_steps(first, range(3))
    state = first.state_dict()
    resumed = build_strategy(preset)
    resumed.load_state_dict(state)
    assert run_steps(resumed, range(3, 6)) == decisions[3:]
    assert resumed.allocation.state_dict()["totals"] == straight.allocation.state_dict()["totals"]


@pytest.mark.parametrize(
    "spec",
    ["screen_posterior", {"allocation": {"name": "knapsack", "params": {"explore": 0.5}}}],  # explore: draws
)
def test_two_processes_take_identical_decisions(tmp_path, spec):
    ranks = run_two_ranks(tmp_path, spec)
    alone = run_steps(build_strategy(spec), range(3))
    assert ranks[0]["decisions"] == ranks[1]["decisions"] == alone
    assert ranks[0]["shapes"] == ranks[1]["shapes"]


def test_reuse_takes_the_banked_response_for_an_all_wrong_group():
    allocator = AdaptiveAllocator(stage=2, cap=4, reuse=True)
    allocator.bank.store(["b"], [torch.tensor([5, 6])], [1.0])
    tally = tally_of([[0, 0, 0, 0], [0, 0, 0, 0], [1, 0]])
    assert allocator.reuses(tally, ["a", "b", "c"]).tolist() == [False, True, False]
    restored = AdaptiveAllocator(stage=2, cap=4, reuse=True)
    restored.load_state_dict(allocator.state_dict())
    assert torch.equal(restored.bank.get("b")[0], torch.tensor([5, 6]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
def test_the_decisions_on_cuda_equal_the_cpu_ones():
    tally = tally_of([[1, 1], [0, 0], [1, 0]])
    cuda = type(tally)(*(t.cuda() for t in tally))
    assert torch.equal(screen_commits(cuda).cpu(), screen_commits(tally))
    assert torch.equal(adaptive_more(cuda, 2, 6).cpu(), adaptive_more(tally, 2, 6))


def test_the_fitted_prior_tells_extreme_prompts_from_coin_flips():
    """A domain of prompts that always or never pass vs a domain of 50% prompts: same mean, opposite decisions."""
    screen = ScreenAllocator(pilot=2, group_size=8, rule="posterior", min_signal=0.5)
    generator = torch.Generator().manual_seed(0)
    extremes = (torch.rand(400, generator=generator) < 0.5).double().repeat_interleave(2)
    coins = (torch.rand(800, generator=generator) < 0.5).double()
    index = torch.arange(800) // 2
    for domain, rewards in (("extremes", extremes), ("coins", coins)):
        tally = tally_groups(rewards, index, 400, 0.5)
        screen.history.record([f"{domain}{i}" for i in range(400)], [domain] * 400, tally.passes, tally.trials)
    unanimous = tally_of([[1, 1], [1, 1]])
    assert screen.next_round(unanimous, ["new1", "new2"], ["extremes", "coins"]).tolist() == [0, 6]
    passes, fails = screen.history.prior(["x"], ["coins"], None, 1.0)
    assert float(passes + fails) == PassHistory.MAX_STRENGTH and float(passes / (passes + fails)) == pytest.approx(
        0.5, abs=0.05
    )


# ------------------------------------------------------------------ sizing a screening round


def test_a_round_pilots_need_over_the_commit_share_between_need_and_a_plain_groups_cost():
    screen = ScreenAllocator(pilot=2, group_size=8)
    assert screen.commit_share() is None
    assert screen.candidates_for(16) == 64  # no share yet: as many completions as 16 plain groups
    screen.note_screen(64, 26)
    assert screen.commit_share() == pytest.approx(26 / 64)
    assert screen.candidates_for(16) == math.ceil(16 / (26 / 64))  # 40, not 64
    assert screen.candidates_for(16, last=True) == 64  # the step's last round must fill the batch
    every = ScreenAllocator(pilot=2, group_size=8)
    every.note_screen(40, 40)  # a rule that commits everything: never fewer than need
    assert every.candidates_for(16) == 16
    rare = ScreenAllocator(pilot=2, group_size=8)
    rare.note_screen(100, 1)
    assert rare.candidates_for(16) == 64  # a rare commit: never more than need * G / k


def test_the_commit_share_follows_recent_rounds_and_resumes_exactly():
    screen = ScreenAllocator(pilot=2, group_size=8)
    for _ in range(30):
        screen.note_screen(40, 4)
    for _ in range(30):
        screen.note_screen(40, 36)
    assert screen.commit_share() > 0.85  # the old rounds have faded (a plain running share would say 0.5)
    resumed = ScreenAllocator(pilot=2, group_size=8)
    resumed.load_state_dict(screen.state_dict())
    assert resumed.commit_share() == screen.commit_share()
    assert resumed.candidates_for(11) == screen.candidates_for(11)
    with pytest.raises(DataFlexError, match="kept <= screened"):
        screen.note_screen(4, 5)


def test_skip_predicted_beside_an_allocation_warns_that_it_learns_from_pilots():
    from dataflex_callbacks import PilotEvidenceWarning

    with pytest.warns(PilotEvidenceWarning, match="min_prior_signal"):
        build_strategy({"allocation": {"name": "screen", "params": {"group_size": 4}}, "pre_select": "skip_predicted"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", PilotEvidenceWarning)
        build_strategy("screen_greso")  # greso's streak rule beside screening is not warned about
        build_strategy("skip")  # nor skip_predicted without an allocation


@pytest.mark.parametrize("name", ["screen", "adaptive", "knapsack"])
def test_a_host_group_size_other_than_the_configured_one_is_refused(name):
    allocator = build_component("allocation", name, **({"group_size": 4} if name != "adaptive" else {}))
    allocator.bind_group_size(4)
    allocator.bind_group_size(4)  # the same size again is fine
    with pytest.raises(ParamError, match=f"allocation '{name}' was configured with group_size=4.*set group_size: 6"):
        allocator.bind_group_size(6)


def test_a_rule_that_reads_the_group_size_before_a_host_binds_one_says_why():
    from dataflex_callbacks.components.allocation_knapsack import KnapsackAllocator

    with pytest.raises(ParamError, match="allocation 'knapsack' has no group size: its budget is a share of P prompts"):
        KnapsackAllocator().first_counts(["a", "b"])
    with pytest.raises(ParamError, match="allocation 'screen' has no group size: .*bind_group_size"):
        ScreenAllocator().trains(tally_of([[1, 0]]))
    with pytest.raises(ParamError, match="'screen' has no group size: its pilot of 0.25 is a fraction of the group"):
        _ = ScreenAllocator(pilot=0.25).pilot
