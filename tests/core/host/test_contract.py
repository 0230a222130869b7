"""The host contract (`dataflex_callbacks.host`): strategy building, domain column, batch fields, local cuts,
kept tokens, loss aggregations and their B/K rescale and every host's loss names, pre-rollout acceptance, state
reads that change nothing, the one call that decides a step, and the decision edits."""

import copy
import itertools
import warnings

import numpy as np
import pytest
import torch

from dataflex_callbacks import ConfigError, DomainMixingSampler, RolloutBatch, Strategy, build_strategy
from dataflex_callbacks.components.history import PromptHistory
from dataflex_callbacks.components.prompt_acceptance import accept_prompts
from dataflex_callbacks.config.fields import MixConfig
from dataflex_callbacks.host.contract import (
    AGGREGATIONS,
    GRPO_FIELDS,
    ROLLOUT_FIELDS,
    ROW_NORMALISED,
    acts_before_rollout,
    aggregate,
    as_strategy,
    batch_fields,
    decide,
    finish_loss,
    grpo_fields,
    kept_token_mask,
    local_decision,
    micro_batch_decision,
    prompt_choosing_parts,
    removal_scale,
    resolve_domain_key,
    restrict_rows,
)
from dataflex_callbacks.mixing import DomainMixing
from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.mixing.tracker import DomainTracker
from dataflex_callbacks.registry import build_component

N, L, GROUP = 12, 7, 4
TOKEN_SELECT = {
    "select": {
        "scorer": {"name": "token_entropy"},
        "selector": {"name": "entropy_top_tokens", "params": {"fraction": 0.5}},
    }
}


def make_batch(seed=0, n=N, length=L, domains=True, keys=True):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (n,), generator=generator)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    return RolloutBatch(
        rewards=torch.randint(0, 2, (n,), generator=generator).float(),
        group_ids=torch.arange(n) // GROUP,
        completion_mask=mask,
        advantages=torch.randn(n, generator=generator),
        logprobs=-torch.rand(n, length, generator=generator),
        entropies=torch.rand(n, length, generator=generator),
        domains=[("easy", "hard", "mid")[i // GROUP % 3] for i in range(n)] if domains else None,
        prompt_keys=[f"p{i // GROUP}" for i in range(n)] if keys else None,
    )


# ------------------------------------------------------------ building the strategy, domain column, fields


def test_as_strategy_keeps_a_strategy_and_builds_anything_else():
    strategy = build_strategy("difffilter")
    assert as_strategy(strategy) is strategy
    built = as_strategy("difffilter")
    assert isinstance(built, Strategy) and built is not strategy and built.config == strategy.config
    assert as_strategy({"select": {"scorer": "group_solve_rate", "selector": "threshold_band"}}).select is not None
    with pytest.raises(ConfigError):
        as_strategy("no-such-preset")


def test_the_domain_column_comes_from_the_argument_the_config_or_the_hosts_default():
    unset, topic = build_strategy("difffilter"), build_strategy({"name": "t", "domain_key": "topic"})
    assert resolve_domain_key(unset) == ("domain", "the default domain column 'domain'")
    assert resolve_domain_key(unset, default="data_source")[0] == "data_source"
    assert resolve_domain_key(topic) == ("topic", "the strategy config's domain_key='topic'")
    assert resolve_domain_key(topic, default="data_source")[0] == "topic"
    assert resolve_domain_key(unset, "source") == ("source", "domain_key='source'")
    assert resolve_domain_key(topic, "topic")[0] == "topic"
    with pytest.raises(ConfigError, match=r"domain_key='domain' contradicts the strategy config's domain_key='topic'"):
        resolve_domain_key(topic, "domain", argument="domain_key")
    with pytest.raises(ConfigError, match="non-empty string"):
        resolve_domain_key(unset, "")


def test_batch_fields_are_what_the_batch_holds_and_grpo_hosts_add_domains_when_the_data_has_them():
    assert batch_fields(make_batch()) == set(ROLLOUT_FIELDS) - {"completion_ids", "policy_versions", "trainer_version"}
    assert batch_fields(RolloutBatch(rewards=torch.zeros(3))) == {"rewards"}
    assert grpo_fields(domains=False) == set(GRPO_FIELDS)
    assert grpo_fields(domains=True) == set(GRPO_FIELDS) | {"domains"}
    assert set(ROLLOUT_FIELDS) == {f for f in RolloutBatch.__dataclass_fields__ if not f.startswith("_")}
    with pytest.raises(ConfigError, match="domain labels"):
        build_strategy({"mix": {"mixer": "reward_gap"}}).check_host(grpo_fields(domains=False), host="h")


# ------------------------------------------------------------ local rows and kept tokens


@pytest.mark.parametrize("config", ["difffilter", "softmax", TOKEN_SELECT], ids=["select", "reweight", "tokens"])
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_the_local_cut_of_a_decision_equals_slicing(config, ranks):
    batch = make_batch(seed=ranks)
    decision = build_strategy(config).apply(batch, step=0)
    per_rank = N // ranks
    for rank in range(ranks):
        rows = slice(rank * per_rank, (rank + 1) * per_rank)
        tokens = L - rank  # a rank's own, shorter token length
        local = local_decision(decision, rows, tokens)
        assert torch.equal(local.keep, decision.keep[rows])
        expected_weights = decision.weights[rows]
        if expected_weights.dim() == 2:
            expected_weights = expected_weights[:, :tokens]
        assert torch.equal(local.weights, expected_weights)
        for name in ("token_keep", "response_weights"):
            whole = getattr(decision, name)
            if whole is None:
                assert getattr(local, name) is None
            else:
                cut = whole[rows]
                assert torch.equal(getattr(local, name), cut[:, :tokens] if cut.dim() == 2 else cut)
        assert local.metrics == decision.metrics and local.metrics is not decision.metrics
    assert torch.equal(local_decision(decision, slice(0, N)).weights, decision.weights)


@pytest.mark.parametrize("config", ["difffilter", TOKEN_SELECT], ids=["rows", "tokens"])
def test_kept_tokens_are_valid_tokens_of_kept_rows_not_dropped_by_a_token_selector(config):
    batch = make_batch(seed=5)
    decision = build_strategy(config).apply(batch, step=0)
    kept = kept_token_mask(decision, batch.completion_mask)
    for i in range(N):
        for t in range(L):
            expected = bool(batch.completion_mask[i, t]) and bool(decision.keep[i])
            if decision.token_keep is not None:
                expected = expected and bool(decision.token_keep[i, t])
            assert bool(kept[i, t]) == expected
    assert kept.any() and not bool(kept.all())


# ------------------------------------------------------------ loss aggregation


def host_reduction(per_token_loss, mask, kind, num_items=None):
    """How a host reduces a micro-batch whose dropped rows are only masked out: row normalisers count all B rows."""
    rows, length = mask.shape
    terms = torch.where(mask, per_token_loss, torch.zeros_like(per_token_loss))
    if kind == "token_mean":
        return terms.sum() / mask.sum().clamp(min=1)
    if kind == "token_mean_global":
        return terms.sum() / num_items
    if kind == "token_sum":
        return terms.sum()
    if kind == "sequence_mean":
        return (terms.sum(1) / mask.sum(1).clamp(min=1)).sum() / rows
    if kind == "sequence_sum":
        return terms.sum() / rows
    return terms.sum() / (rows * length)


def physical_reduction(per_token_loss, mask, kind):
    """The same reduction written per response, over a batch that only holds the kept rows."""
    rows = [(per_token_loss[i][mask[i]]) for i in range(mask.shape[0]) if mask[i].any()]
    if not rows:
        return per_token_loss.sum() * 0
    tokens = sum(r.numel() for r in rows)
    if kind in ("token_mean", "token_mean_global"):
        return sum(r.sum() for r in rows) / tokens
    if kind == "token_sum":
        return sum(r.sum() for r in rows)
    if kind == "sequence_mean":
        return sum(r.mean() for r in rows) / len(rows)
    if kind == "sequence_sum":
        return sum(r.sum() for r in rows) / len(rows)
    return sum(r.sum() for r in rows) / (len(rows) * mask.shape[1])


@pytest.mark.parametrize("kind", list(AGGREGATIONS))
@pytest.mark.parametrize("seed", range(4))
def test_masked_and_rescaled_loss_equals_the_loss_of_physically_removed_rows(kind, seed):
    batch = make_batch(seed=seed)
    generator = torch.Generator().manual_seed(100 + seed)
    keep = torch.rand(N, generator=generator) < 0.6
    keep[seed] = True  # at least one row stays
    mask = batch.completion_mask
    theta = torch.randn(N, L, generator=generator, requires_grad=True)
    loss_of = lambda: theta.square() * 0.5 + theta  # noqa: E731 - one per-token loss, built fresh for each graph
    kept_mask = mask & keep.unsqueeze(1)

    physical = physical_reduction(loss_of()[keep], mask[keep], kind)
    (physical_grad,) = torch.autograd.grad(physical, theta)

    # Masking + B/K: the host's own normaliser (with a recounted token count for token_mean_global).
    masked = host_reduction(loss_of(), kept_mask, kind, num_items=kept_mask.sum()) * removal_scale(kind, N, keep.sum())
    (masked_grad,) = torch.autograd.grad(masked, theta)
    torch.testing.assert_close(masked, physical)
    torch.testing.assert_close(masked_grad, physical_grad)

    # `aggregate` over the kept tokens: the reduction a host that owns its loss does (Lightning).
    total, count = aggregate(loss_of(), kept_mask, kind, max_length=L)
    reduced = finish_loss(total, count)
    (reduced_grad,) = torch.autograd.grad(reduced, theta)
    torch.testing.assert_close(reduced, physical)
    torch.testing.assert_close(reduced_grad, physical_grad)
    assert (kind in ROW_NORMALISED) == (float(removal_scale(kind, N, keep.sum())) != 1.0 or bool(keep.all()))


def test_weights_multiply_the_token_losses_and_padding_nan_never_leaks():
    batch = make_batch(seed=1)
    mask = batch.completion_mask
    loss = torch.where(mask, torch.ones(N, L), torch.full((N, L), float("nan")))
    weights = torch.arange(N, dtype=torch.float32)
    total, count = aggregate(loss, mask, "token_mean", weights=weights)
    assert torch.isclose(total, (weights.unsqueeze(1) * mask).sum()) and count == mask.sum()
    total, count = aggregate(loss, torch.zeros_like(mask), "sequence_mean")
    assert float(finish_loss(total, count)) == 0.0


def test_removal_scale_is_b_over_k_only_for_row_normalised_kinds_and_zero_when_nothing_is_kept():
    for kind in AGGREGATIONS:
        expected = 4 / 3 if kind in ROW_NORMALISED else 1.0
        assert float(removal_scale(kind, 4, torch.tensor(3))) == pytest.approx(expected)
    assert float(removal_scale("sequence_mean", 4, torch.tensor(0))) == 0.0
    with pytest.raises(ConfigError, match="sequence_mean"):
        removal_scale("grpo", 4, 3)
    with pytest.raises(Exception, match=r"\(N, L\)"):
        aggregate(torch.zeros(3, 4), torch.ones(3, 5, dtype=torch.bool), "token_mean")


# ------------------------------------------------------------ pre-rollout acceptance


class FixedFilter:
    """A filter with a fixed keep probability per key (and per domain label, when given)."""

    def __init__(self, probability):
        self.probability = probability

    def keep_probability(self, keys, labels=None):
        return np.array([self.probability[k] for k in keys], dtype=np.float64)


def reference_acceptance(probabilities, need, uniforms, exclude):
    accepted, skipped = [], 0
    for i, (p, u) in enumerate(zip(probabilities, uniforms, strict=True)):
        if exclude is not None and exclude[i]:
            continue
        if u < p:
            accepted.append(i)
            if len(accepted) == need:
                return accepted, i + 1, skipped
        else:
            skipped += 1
    return accepted, len(probabilities), skipped


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_exclude", [False, True])
def test_acceptance_takes_candidates_in_order_until_the_need_is_met(seed, with_exclude):
    rng = np.random.default_rng(seed)
    keys = [f"k{i}" for i in range(20)]
    pre_select = FixedFilter({k: p for k, p in zip(keys, rng.random(20), strict=True)})
    exclude = rng.random(20) < 0.2 if with_exclude else None
    need = int(rng.integers(1, 12))
    uniforms = np.random.default_rng(seed + 100).random(20)
    passed = accept_prompts(pre_select, keys, need, np.random.default_rng(seed + 100), exclude=exclude)
    accepted, considered, skipped = reference_acceptance(
        [pre_select.probability[k] for k in keys], need, uniforms, exclude
    )
    assert passed.accepted.tolist() == accepted
    assert (passed.considered, passed.skipped) == (considered, skipped)


# ------------------------------------------------------------ state reads change nothing


def pooled_sampler_mid_block():
    """A one-pool sampler that has served some chunks of a drawn-ahead block without booking them yet."""
    sampler = DomainMixingSampler(labels=["a"] * 300 + ["b"] * 100, batch_size=2, seed=4)
    iterator = iter(sampler)
    list(itertools.islice(iterator, 9))
    return sampler, iterator


def sampler_internals(sampler):
    ahead = sampler._drawer._ahead
    return (
        list(sampler._drawer._drawn_total),
        [list(c) for c in sampler._drawer._drawn_recent],
        None if ahead is None else (ahead["booked"], ahead["pos"]),
        list(sampler._drawer._pointers),
        sampler._drawer._uniform_pos,
    )


def test_sampler_state_dict_books_nothing():
    sampler, iterator = pooled_sampler_mid_block()
    twin, twin_iterator = pooled_sampler_mid_block()
    before = sampler_internals(sampler)
    assert before[2][0] != before[2][1]  # served chunks not booked yet: what a flush would have changed
    state = sampler.state_dict()
    assert sampler_internals(sampler) == before
    assert state["drawn_total"] == twin.drawn_total.tolist()  # the read counts what was served
    assert state["drawn_recent"] == [list(c) for c in twin.drawn_recent]
    assert list(itertools.islice(iterator, 20)) == list(itertools.islice(twin_iterator, 20))
    assert sampler.state_dict() == twin.state_dict()


def observed_batch(step):
    return make_batch(seed=step)


def strategy_with_state():
    strategy = build_strategy(
        {
            "mix": {"mixer": "reward_gap", "warmup_steps": 0, "update_every": 1},
            "pre_select": {"name": "skip_zero_variance", "params": {}},
        }
    )
    strategy.bind_domains(["easy", "hard", "mid"])
    for step in range(3):
        strategy.apply(observed_batch(step), step)
    return strategy


def pre_select_filter():
    pre_select = build_component("pre_select", "skip_zero_variance")
    for step in range(3):
        pre_select.observe(observed_batch(step), step)
    return pre_select


def predicted_skip_filter():
    pre_select = build_component("pre_select", "skip_predicted")
    for step in range(3):
        pre_select.observe(observed_batch(step), step)
    return pre_select


def prompt_history():
    history = PromptHistory()
    for step in range(3):
        history.update(observed_batch(step), step)
    return history


def domain_mixing():
    mixer = build_component("mixer", "reward_gap")
    assert isinstance(mixer, Mixer)
    mixing = DomainMixing(
        mixer, MixConfig(mixer="reward_gap", domains=["easy", "hard", "mid"], warmup_steps=0, update_every=1)
    )
    for step in range(3):
        mixing.observe(observed_batch(step), step)
    mixing.observe_sampled({"easy": 2, "hard": 1, "mid": 1})
    return mixing


def domain_tracker():
    tracker = DomainTracker(["easy", "hard", "mid"], window=4)
    for step in range(3):
        tracker.update(observed_batch(step), step)
    return tracker


def same_state(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(same_state(x, y) for x, y in zip(a, b, strict=True))
        )
    return a == b or (a != a and b != b)  # NaN equals NaN here


STATEFUL = {  # how to build one with some state, and how to advance it by one batch
    "Strategy": (strategy_with_state, lambda obj, batch: obj.apply(batch, 7)),
    "SkipZeroVarianceFilter": (pre_select_filter, lambda obj, batch: obj.observe(batch, 7)),
    "SkipPredictedFilter": (predicted_skip_filter, lambda obj, batch: obj.observe(batch, 7)),
    "PromptHistory": (prompt_history, lambda obj, batch: obj.update(batch, 7)),
    "DomainMixing": (domain_mixing, lambda obj, batch: obj.observe(batch, 7)),
    "DomainTracker": (domain_tracker, lambda obj, batch: obj.update(batch, 7)),
}


@pytest.mark.parametrize("name", list(STATEFUL))
def test_state_dict_leaves_the_object_as_it_was(name):
    make, advance = STATEFUL[name]
    obj, twin = make(), make()
    before = copy.deepcopy(obj.state_dict())
    for _ in range(3):
        obj.state_dict()
    assert same_state(obj.state_dict(), before)
    # The object behaves as one that was never read: one more batch gives the twin's state.
    for target in (obj, twin):
        advance(target, observed_batch(7))
    assert same_state(obj.state_dict(), twin.state_dict())


# ------------------------------------------------------------ the step's decision, loss names, decision edits


def test_decide_with_a_seed_gives_every_rank_the_same_random_decision_and_leaves_the_hosts_stream_alone():
    config = {
        "select": {
            "scorer": "custom_components:RandomScore",
            "selector": {"name": "topk_fraction", "params": {"fraction": 0.5}},
        }
    }
    batch = make_batch(seed=3)
    torch.manual_seed(11)
    host_stream = torch.get_rng_state()
    first = decide(build_strategy(config), batch, 5, seed=7)
    assert torch.equal(torch.get_rng_state(), host_stream)  # restored: TRL's own shuffling is as without us
    torch.manual_seed(99)  # another rank's host stream
    second = decide(build_strategy(config), batch, 5, seed=7)
    assert torch.equal(first.keep, second.keep)
    other_steps = [decide(build_strategy(config), batch, step, seed=7).keep for step in range(6, 12)]
    assert any(not torch.equal(first.keep, keep) for keep in other_steps)  # (seed, step), not seed alone


def test_decide_says_which_process_warns_and_spells_the_hosts_setting_in_the_fix():
    from dataflex_callbacks.errors import DroppedAllWarning

    rewards = torch.tensor([0.1, 0.3, 0.1, 0.3] * (N // 4))  # not 0/1: every solve rate is 0, difffilter keeps none
    batch = make_batch(seed=1).replace(rewards=rewards)
    quiet = build_strategy("difffilter")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decide(quiet, batch, 0, warn=False)
    assert not [w for w in caught if w.category is DroppedAllWarning]
    assert not hasattr(quiet, "warn_dropped_all")  # the call says whether to warn; nothing is written on the strategy
    spelled = build_strategy("difffilter")
    spelled.bind_selection_reward("Trainer(pick=...)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decide(spelled, batch, 0)
    dropped = [w.message for w in caught if w.category is DroppedAllWarning]
    assert len(dropped) == 1 and dropped[0].cause == "reward_scale"
    assert "a selection reward (Trainer(pick=...))" in dropped[0].fix and "Trainer(pick=...)" in str(dropped[0])
    assert "set in the host adapter" not in dropped[0].fix


def test_acts_before_rollout_names_the_prompt_choosing_parts():
    assert prompt_choosing_parts(build_strategy("difffilter")) == () and not acts_before_rollout(
        build_strategy("baseline")
    )
    assert prompt_choosing_parts(build_strategy("skip")) == ("pre_select",)
    assert prompt_choosing_parts(build_strategy("reward_gap")) == ("mix",) and acts_before_rollout(
        build_strategy("static")
    )


def test_restrict_rows_drops_the_rows_outside_and_a_micro_batch_decision_drops_the_token_mask():
    decision = build_strategy(TOKEN_SELECT).apply(make_batch(seed=2), 0, sync=False)
    rows = torch.arange(N) % 3 != 0
    restricted = restrict_rows(decision, rows)
    assert torch.equal(restricted.keep, decision.keep & rows)
    assert torch.equal(restricted.weights, decision.weights * rows.unsqueeze(1).to(decision.weights.dtype))
    part = micro_batch_decision(decision, decision.keep[:4], decision.weights[:4], None)
    assert part.token_keep is None and torch.equal(part.keep, decision.keep[:4]) and part.metrics == decision.metrics
