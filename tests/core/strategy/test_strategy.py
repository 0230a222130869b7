"""Strategy.apply end to end: presets, composite strategies, defined edge cases, state."""

import copy

import core_reference as ref
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import BatchError, ConfigError, RolloutBatch, build_strategy, list_presets

DOMAINS = ["math", "code", "logic"]


def full_batch(n_groups=6, group=5, length=8, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    n = n_groups * group
    rewards = (torch.rand(n, generator=gen) > torch.rand(n_groups, generator=gen).repeat_interleave(group)).to(dtype)
    mask = torch.rand(n, length, generator=gen) > 0.2
    mask[:, 0] = True
    gids = (torch.arange(n) // group) * 3 + 11
    perm = torch.randperm(n, generator=gen)  # non-contiguous groups
    domains = [DOMAINS[(int(g) // 3) % 3] for g in gids[perm]]
    return RolloutBatch(
        rewards[perm],
        group_ids=gids[perm],
        completion_mask=mask,
        advantages=torch.randn(n, generator=gen).to(dtype),
        logprobs=(-torch.rand(n, length, generator=gen) * 3).to(dtype),
        entropies=torch.rand(n, length, generator=gen).to(dtype),
        domains=domains,
        prompt_keys=[f"p{int(g)}" for g in gids[perm]],
    )


def assert_decision_invariants(decision, batch):
    keep, weights = decision.keep, decision.weights
    assert keep.shape == (batch.n,) and keep.dtype == torch.bool
    assert torch.isfinite(weights).all() and (weights >= 0).all()
    if weights.dim() == 1:
        assert (weights[~keep] == 0).all()
        mask = keep
    else:
        mask = decision.token_keep if decision.token_keep is not None else batch.valid_mask & keep.unsqueeze(1)
        assert (weights[~mask] == 0).all()
        assert not (mask & ~batch.valid_mask).any()
    if mask.any():
        assert float(weights[mask].mean()) == pytest.approx(1.0, rel=1e-4)
    else:
        assert decision.metrics["dropped_all"] == 1.0 and (weights == 0).all()
    for key in ("kept_frac", "dropped_all", "weight_mean", "weight_std", "weight_max", "ess", "nonfinite_rewards"):
        assert isinstance(decision.metrics[key], float)


@pytest.mark.parametrize("preset", sorted(list_presets()))
def test_every_preset_builds_and_applies(preset):
    strategy = build_strategy(preset)
    batch = full_batch()
    if strategy.mix_enabled:
        strategy.bind_domains(DOMAINS)
    for step in range(12):
        decision = strategy.apply(batch, step)
        assert_decision_invariants(decision, batch)
    if strategy.mix_enabled:
        target = strategy.target_proportions
        assert set(target) == set(DOMAINS) and sum(target.values()) == pytest.approx(1.0)
        assert {f"mix/target/{d}" for d in DOMAINS} <= set(decision.metrics)
    assert {f"selection_reward/{d}" for d in DOMAINS} <= set(decision.metrics)


def test_difffilter_with_groups_of_five_keeps_exactly_two_or_three_correct():
    gids, rewards = [], []
    for correct in range(6):  # 0..5 of 5 correct, shuffled
        for j in range(5):
            gids.append(correct)
            rewards.append(1.0 if j < correct else 0.0)
    perm = torch.randperm(30)
    batch = RolloutBatch(torch.tensor(rewards)[perm], group_ids=torch.tensor(gids)[perm])
    keep = build_strategy("difffilter").apply(batch, 0).keep
    expected = torch.tensor([g in (2, 3) for g in gids])[perm]
    assert torch.equal(keep, expected)
    keep = build_strategy("diffband").apply(batch, 0).keep
    assert torch.equal(keep, torch.tensor([g in (1, 2, 3, 4) for g in gids])[perm])


COMPOSITE = {
    "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
    "reweight": {"scorer": "advantage_magnitude", "reweighter": {"name": "softmax", "temperature": 1.0}},
}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 8), st.integers(1, 6))
def test_composite_matches_reference(seed, n_groups, group):
    batch = full_batch(n_groups=n_groups, group=group, seed=seed)
    decision = build_strategy(COMPOSITE).apply(batch, 0)
    solve = ref.group_solve_rate(batch.rewards, batch.group_ids)
    keep = ref.threshold_band(solve, 0.2, 0.8)
    assert torch.equal(decision.keep, keep)
    magnitude = ref.advantage_magnitude(batch.advantages, batch.valid_mask)
    expected = ref.normalize(ref.softmax_raw(magnitude, keep, 1.0), keep)
    torch.testing.assert_close(decision.weights, expected, rtol=1e-4, atol=1e-5)
    assert_decision_invariants(decision, batch)
    perm = torch.randperm(batch.n)
    permuted = RolloutBatch(
        batch.rewards[perm],
        group_ids=batch.group_ids[perm],
        advantages=batch.advantages[perm],
        completion_mask=batch.completion_mask[perm],
    )
    again = build_strategy(COMPOSITE).apply(permuted, 0)
    assert torch.equal(again.keep, decision.keep[perm])
    torch.testing.assert_close(again.weights, decision.weights[perm], rtol=1e-4, atol=1e-5)


def test_select_and_token_reweight_compose():
    config = {
        "select": {"scorer": "reward", "selector": {"name": "max_variance", "keep_fraction": 0.5}},
        "reweight": {"scorer": "token_prob", "reweighter": {"name": "advantage_reweight", "alpha": 0.5}},
    }
    batch = full_batch()
    decision = build_strategy(config).apply(batch, 0)
    assert decision.weights.shape == batch.completion_mask.shape
    assert_decision_invariants(decision, batch)


@pytest.mark.parametrize("preset", ["ar", "entropy_top"])
def test_deferred_policy_parts(preset):
    if preset == "ar":  # response-level selection now, token reweighting at loss time
        strategy = build_strategy(
            {
                "select": {"scorer": "group_solve_rate", "selector": "threshold_band"},
                "reweight": build_strategy("ar").config.to_dict()["reweight"],
            }
        )
    else:
        strategy = build_strategy(preset)
    assert strategy.needs_policy_signals
    batch = full_batch()
    first = strategy.apply(batch, 0, defer_policy=True)
    assert first.deferred
    done = strategy.apply_policy(batch, first)
    direct = strategy.apply(batch, 0)
    assert not done.deferred
    torch.testing.assert_close(done.weights, direct.weights)
    assert_decision_invariants(done, batch)
    with pytest.raises(BatchError, match="rows"):
        strategy.apply_policy(
            RolloutBatch(torch.zeros(2), logprobs=torch.zeros(2, 8), entropies=torch.zeros(2, 8)), first
        )


@pytest.mark.parametrize("policy", ["zero", "drop", "raise"])
def test_nonfinite_rewards_policy(policy):
    batch = full_batch()
    rewards = batch.rewards.clone()
    rewards[[0, 3]] = float("nan")
    rewards[5] = float("inf")
    batch = batch.replace(rewards=rewards)
    strategy = build_strategy(
        {
            "reweight": COMPOSITE["reweight"],
            "nan_policy": policy,
            "mix": {"mixer": "reward_gap", "domains": DOMAINS, "warmup_steps": 0, "update_every": 1},
        }
    )
    if policy == "raise":
        with pytest.raises(BatchError, match="3 of 30 rewards are NaN or infinite"):
            strategy.apply(batch, 0)
        return
    decision = strategy.apply(batch, 0)
    assert decision.metrics["nonfinite_rewards"] == 3.0
    assert_decision_invariants(decision, batch)
    assert all(torch.isfinite(torch.tensor(v)) for k, v in decision.metrics.items())
    if policy == "drop":
        assert not decision.keep[[0, 3, 5]].any() and decision.keep.sum() == 27
        assert float(strategy.mixing.tracker.total_count.sum()) == 27  # dropped rewards are not statistics
    else:
        assert decision.keep.all()
        assert float(strategy.mixing.tracker.total_count.sum()) == 30


def test_selection_dropping_everything_gives_zero_weights_and_flag():
    batch = RolloutBatch(torch.ones(10), group_ids=torch.arange(10) // 5, advantages=torch.randn(10))
    decision = build_strategy(COMPOSITE).apply(batch, 0)
    assert not decision.keep.any() and torch.equal(decision.weights, torch.zeros(10))
    assert decision.metrics["dropped_all"] == 1.0 and decision.metrics["kept_frac"] == 0.0
    assert all(v == v for v in decision.metrics.values())  # no NaN metric


def test_empty_batch_every_preset():
    for preset in list_presets():
        strategy = build_strategy(preset)
        strategy.bind_domains(DOMAINS)
        batch = RolloutBatch(
            torch.zeros(0),
            group_ids=torch.zeros(0, dtype=torch.long),
            completion_mask=torch.zeros(0, 4),
            advantages=torch.zeros(0),
            logprobs=torch.zeros(0, 4),
            entropies=torch.zeros(0, 4),
            domains=[],
            prompt_keys=[],
        )
        decision = strategy.apply(batch, 0)
        assert decision.keep.shape == (0,) and decision.metrics["dropped_all"] == 0.0, preset


def test_singleton_and_unequal_groups():
    batch = RolloutBatch(
        torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0]),
        group_ids=torch.tensor([7, 2, 7, 2, 9, 2]),
        advantages=torch.ones(6),
        completion_mask=torch.ones(6, 3),
    )
    keep = build_strategy("diffband").apply(batch, 0).keep
    assert keep.tolist() == [False, True, False, True, False, True]  # 7: 2/2 correct, 9: singleton
    assert_decision_invariants(build_strategy("maxvar").apply(batch, 0), batch)
    assert_decision_invariants(build_strategy("gfpo").apply(batch, 0), batch)


def test_ties_are_deterministic():
    batch = RolloutBatch(
        torch.ones(16), group_ids=torch.arange(16) // 4, advantages=torch.ones(16), completion_mask=torch.ones(16, 4)
    )
    for preset in ("topk", "maxvar", "gfpo"):
        first = build_strategy(preset).apply(batch, 0).keep
        for _ in range(3):
            assert torch.equal(build_strategy(preset).apply(batch, 0).keep, first)


def test_group_scorer_without_groups_fails_at_apply_and_check_host():
    strategy = build_strategy("difffilter")
    assert strategy.needs_groups
    with pytest.raises(BatchError, match="RolloutBatch.group_ids"):
        strategy.apply(RolloutBatch(torch.ones(4)), 0)
    with pytest.raises(ConfigError, match="group_solve_rate.*group_ids"):
        strategy.check_host({"rewards", "advantages", "completion_mask"}, host="PPO")
    strategy.check_host({"rewards", "group_ids"})
    with pytest.raises(ConfigError, match="domain"):
        build_strategy("reward_gap").check_host({"rewards"})


def test_warmup_delays_parts():
    strategy = build_strategy({"select": {**COMPOSITE["select"], "warmup_steps": 3}})
    batch = RolloutBatch(torch.ones(10), group_ids=torch.arange(10) // 5)
    assert strategy.apply(batch, 2).keep.all()
    assert not strategy.apply(batch, 3).keep.any()


def test_mixing_schedule_and_actual_proportions():
    strategy = build_strategy(
        {
            "mix": {
                "mixer": {"name": "reward_gap", "temperature": 0.1},
                "domains": DOMAINS,
                "warmup_steps": 2,
                "update_every": 2,
            }
        }
    )
    prior = strategy.target_proportions
    assert prior == pytest.approx({d: 1 / 3 for d in DOMAINS})
    batch = RolloutBatch(
        torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0]), domains=["math", "math", "code", "code", "logic", "logic"]
    )
    strategy.apply(batch, 0)
    strategy.apply(batch, 1)
    assert strategy.target_proportions == prior
    strategy.apply(batch, 2)
    target = strategy.target_proportions
    assert target["code"] > target["logic"] > target["math"] >= 0.05
    strategy.observe_sampled({"math": 2, "code": 6, "logic": 2})
    metrics = strategy.apply(batch, 3).metrics
    assert metrics["mix/actual/code"] == pytest.approx(0.6)


def test_state_dict_round_trip_and_changed_config():
    config = {**COMPOSITE, "mix": {"mixer": "dump_ucb", "domains": DOMAINS, "warmup_steps": 1, "update_every": 2}}
    strategy = build_strategy(config)
    for step in range(5):
        strategy.apply(full_batch(seed=step), step)
    strategy.observe_sampled({"math": 1, "code": 2, "logic": 3})
    state = strategy.state_dict()
    restored = build_strategy(config)
    restored.load_state_dict(copy.deepcopy(state))
    assert restored.target_proportions == strategy.target_proportions
    for step in range(5, 9):
        a, b = strategy.apply(full_batch(seed=step), step), restored.apply(full_batch(seed=step), step)
        assert torch.equal(a.weights, b.weights) and a.metrics == b.metrics
    assert restored.state_dict()["mixing"]["target"] == strategy.state_dict()["mixing"]["target"]
    changed = copy.deepcopy(config)
    changed["mix"]["update_every"] = 3
    with pytest.raises(ConfigError, match="changed: mix"):
        build_strategy(changed).load_state_dict(state)


@pytest.mark.parametrize(
    "preset", ["difffilter", "maxvar", "gfpo", "topk", "softmax", "per", "ar", "entropy_top", "learnability"]
)
def test_bf16_batches(preset):
    batch = full_batch(dtype=torch.bfloat16)
    strategy = build_strategy(preset)
    strategy.bind_domains(DOMAINS)
    decision = strategy.apply(batch, 20)
    assert decision.weights.dtype == torch.float32
    assert_decision_invariants(decision, batch)
    reference = build_strategy(preset)
    reference.bind_domains(DOMAINS)
    float_batch = RolloutBatch(
        batch.rewards.float(),
        group_ids=batch.group_ids,
        completion_mask=batch.completion_mask,
        advantages=batch.advantages.float(),
        logprobs=batch.logprobs.float(),
        entropies=batch.entropies.float(),
        domains=batch.domains,
    )
    assert torch.equal(reference.apply(float_batch, 20).keep, decision.keep)


def test_apply_rejects_non_batch():
    with pytest.raises(BatchError, match="RolloutBatch"):
        build_strategy().apply({"rewards": torch.ones(2)}, 0)


@pytest.mark.parametrize("garbage", [None, [1, 2], "state", {"mixing": {}}])
def test_strategy_load_garbage_state_is_a_clear_error(garbage):
    from dataflex_callbacks import StateError

    with pytest.raises(StateError, match="Strategy.load_state_dict"):
        build_strategy("reward_gap").load_state_dict(garbage)


def test_a_saved_config_with_defaults_left_out_resumes_strictly():
    strategy = build_strategy("reward_gap")
    old = strategy.state_dict()
    old["config"]["mix"] = {k: v for k, v in old["config"]["mix"].items() if k != "window_unit"}
    build_strategy("reward_gap").load_state_dict(old)  # the default fills it: no "changed" error
    with pytest.raises(ConfigError, match="changed: domain_key"):  # a set column is a change, also "domain"
        build_strategy("reward_gap").load_state_dict(dict(old, config=dict(old["config"], domain_key="domain")))
    changed = dict(old, config=dict(old["config"], nan_policy="drop"))
    with pytest.raises(ConfigError, match="changed: nan_policy"):
        build_strategy("reward_gap").load_state_dict(changed)


def test_a_decision_is_weighted_when_a_weight_differs_from_its_keep_mask():
    from dataflex_callbacks import Decision

    keep = torch.tensor([True, False, True])
    assert not Decision(keep=keep, weights=keep.float()).weighted()
    assert Decision(keep=keep, weights=torch.tensor([1.5, 0.0, 0.5])).weighted()
    token = torch.tensor([[1.0, 7.0], [0.0, 0.0], [1.0, 1.0]])  # 7.0 sits on padding
    valid = torch.tensor([[True, False], [True, True], [True, True]])
    assert Decision(keep=keep, weights=token).weighted() and not Decision(keep=keep, weights=token).weighted(valid)
    assert Decision(keep=keep, weights=token * 2).weighted(valid)
