"""DomainMixingSampler draws: one pool without a mix part, no row twice in a chunk (else a warning),
exact largest-remainder quotas.
"""

import itertools
import math
import warnings
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataflex_callbacks import ConfigError, DomainMixingSampler, RepeatedRowWarning, RolloutBatch, build_strategy
from dataflex_callbacks.sampling.sampler import largest_remainder_quotas


def take(iterator, n):
    return list(itertools.islice(iterator, n))


def endless(sampler):
    return itertools.chain.from_iterable(iter(sampler) for _ in itertools.count())


def interleaved(sizes, seed=123):
    labels = [d for d, n in sizes.items() for _ in range(n)]
    return [labels[i] for i in np.random.default_rng(seed).permutation(len(labels))]


def binomial_bound(p, n, sigmas=4.0):
    return sigmas * math.sqrt(p * (1 - p) / n)


# ------------------------------------------------------------------ one pool without a mix part

MAJORITY = interleaved({"big": 500, "small": 300})  # "big" holds 62.5% of the rows


@pytest.mark.parametrize("strategy", [None, "baseline", "softmax", "skip"])
@pytest.mark.parametrize("layout", ["grpo", "shard"])
def test_without_a_mix_part_each_domain_keeps_its_share_of_the_data(strategy, layout):
    # Lightning's self.dataflex.sampler(...) builds exactly this: a strategy, no proportions.
    sampler = DomainMixingSampler(
        labels=MAJORITY,
        batch_size=8,
        layout=layout,
        num_replicas=1,
        rank=0,
        strategy=None if strategy is None else build_strategy(strategy),
        num_samples=1200,
        seed=0,
        resume="continue",
    )
    assert sampler.pooled
    drawn = list(sampler)
    assert len(drawn) == 1200
    share = sum(MAJORITY[i] == "big" for i in drawn) / len(drawn)
    assert abs(share - 0.625) <= binomial_bound(0.625, len(drawn)), share
    assert sampler.target_proportions == {"big": 0.625, "small": 0.375}
    assert sampler.actual_proportions() == pytest.approx({"big": share, "small": 1 - share})


def test_with_mixing_on_the_domains_are_balanced_as_before():
    sampler = DomainMixingSampler(labels=MAJORITY, batch_size=8, num_samples=4000, seed=0, mixing=True)
    drawn = list(sampler)
    share = sum(MAJORITY[i] == "big" for i in drawn) / len(drawn)
    assert abs(share - 0.5) <= binomial_bound(0.5, len(drawn))
    assert not sampler.pooled


def test_a_pool_over_data_without_a_domain_column_for_a_strategy_without_mix_part():
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({"prompt": [f"p{i}" for i in range(10)]})
    sampler = DomainMixingSampler(data, batch_size=5, strategy=build_strategy("skip"), seed=1)
    assert sampler.domains == ["all"] and sorted(list(sampler)) == list(range(10))
    with pytest.raises(ConfigError, match="no domain column 'domain'"):  # a plain sampler: probably a wrong name
        DomainMixingSampler(data, batch_size=5)
    assert sorted(DomainMixingSampler(data, batch_size=5, mixing=False)) == list(range(10))


def test_skipping_moves_data_away_from_a_domain_that_never_gives_signal():
    """One pool: a skipped prompt is replaced from any domain, so a hopeless domain loses its share."""
    labels = interleaved({"never": 40, "mixed": 40})
    strategy = build_strategy(
        {"pre_select": {"name": "skip_zero_variance", "params": {"target_share": 0.0, "min_keep": 0.05}}}
    )
    sampler = DomainMixingSampler(
        labels=labels, batch_size=8, num_generations=4, strategy=strategy, num_samples=10_000, seed=0
    )
    generator = torch.Generator().manual_seed(0)
    stream = iter(sampler)
    late = Counter()
    for step in range(60):
        indices = take(stream, 8 * 4)
        p = torch.tensor([0.0 if labels[i] == "never" else 0.5 for i in indices])
        rewards = torch.bernoulli(p, generator=generator)
        groups = torch.arange(len(indices)) // 4
        strategy.apply(
            RolloutBatch(rewards, group_ids=groups, domains=[labels[i] for i in indices], prompt_keys=list(indices)),
            step,
        )
        if step >= 30:
            late.update(labels[i] for i in indices[::4])
    assert late["never"] / sum(late.values()) < 0.25  # its share of the rows is 0.5


def test_set_proportions_turns_a_pool_into_mixing_and_a_resume_follows():
    def run(save_at=None, state=None):
        sampler = DomainMixingSampler(labels=MAJORITY, batch_size=4, seed=2, num_samples=80, resume="continue")
        if state is not None:
            sampler.load_state_dict(state)
        stream, out, saved = endless(sampler), [], None
        for step in range(len(out) if state is None else save_at, 60):
            if step == 20:
                sampler.set_proportions({"big": 0.1, "small": 0.9})
            if step == save_at and state is None:
                saved = sampler.state_dict()
            out.append(take(stream, 4))
        return out, saved

    full, _ = run()
    late = [i for chunk in full[20:] for i in chunk]
    assert sum(MAJORITY[i] == "small" for i in late) / len(late) > 0.75
    for save_at in (10, 30):  # before and after the switch
        _, state = run(save_at=save_at)
        resumed, _ = run(save_at=save_at, state=state)
        assert resumed == full[save_at:]


def test_contradictory_pool_settings_are_refused():
    with pytest.raises(ConfigError, match="mixing=False asks for one pool"):
        DomainMixingSampler(labels=MAJORITY, strategy=build_strategy("dump_ucb"), mixing=False)
    with pytest.raises(ConfigError, match="quota='exact'"):
        DomainMixingSampler(labels=MAJORITY, quota="exact")
    with pytest.raises(ConfigError, match="mixing=False"):
        DomainMixingSampler(labels=MAJORITY, mixing=False).set_proportions({"big": 0.5, "small": 0.5})
    with pytest.raises(ValueError, match="'mixing'"):
        DomainMixingSampler(labels=MAJORITY, mixing="yes")
    with pytest.raises(ValueError, match="'quota'.*'independent', 'exact'"):
        DomainMixingSampler(labels=MAJORITY, quota="largest")


# ------------------------------------------------------------------ no row twice in one chunk


def chunk_rows(stream, chunk, num_generations=1):
    """Distinct prompts per generation chunk (each prompt repeated num_generations times in a row)."""
    prompts = stream[::num_generations]
    return [prompts[i : i + chunk] for i in range(0, len(prompts), chunk)]


def assert_no_needless_repeat(chunks, labels, sizes):
    """Within a chunk, domain d's draws are distinct rows as long as d has rows: min(count, size) distinct."""
    for rows in chunks:
        per_domain = {}
        for r in rows:
            per_domain.setdefault(labels[r], []).append(r)
        for d, drawn in per_domain.items():
            assert len(set(drawn)) == min(len(drawn), sizes[d]), (rows, d, drawn)


SMALL_DOMAINS = {"a": 5, "b": 9, "c": 200}


@pytest.mark.parametrize("quota", ["independent", "exact"])
@pytest.mark.parametrize("batch_size, num_generations", [(4, 1), (7, 3), (12, 2), (40, 1)])
def test_a_domain_that_wraps_inside_a_chunk_does_not_repeat_a_row(quota, batch_size, num_generations):
    labels = interleaved(SMALL_DOMAINS)
    sampler = DomainMixingSampler(
        labels=labels,
        batch_size=batch_size,
        num_generations=num_generations,
        proportions={"a": 0.4, "b": 0.4, "c": 0.2},
        num_samples=batch_size * 300,
        seed=5,
        quota=quota,
    )
    assert_no_needless_repeat(chunk_rows(list(sampler), batch_size, num_generations), labels, SMALL_DOMAINS)


def test_a_domain_with_fewer_rows_than_its_share_of_a_batch_repeats_them_and_warns_once():
    # The case: one prompt at proportion 0.9, batches of 2 prompts of 4 completions each.
    labels = ["tiny"] + ["big"] * 50
    sampler = DomainMixingSampler(
        labels=labels,
        proportions={"tiny": 0.9, "big": 0.1},
        batch_size=2,
        num_generations=4,
        num_samples=2 * 40,
        seed=0,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chunks = chunk_rows(list(sampler), 2, num_generations=4)
    found = [w for w in caught if w.category is RepeatedRowWarning]
    assert len(found) == 1, [str(w.message) for w in caught]
    assert found[0].filename == __file__  # points at the user's line that iterates the sampler
    warning = found[0].message
    assert warning.domains == {"tiny": (2, 1)}
    assert "domain 'tiny' has 1 row(s) and proportion 0.9 drew 2" in str(warning) and "Fix: add rows to 'tiny'" in str(
        warning
    )
    assert [0, 0] in chunks  # what the warning says happens: the row twice in one batch


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(1, 8),
    st.floats(0.05, 0.95),
    st.sampled_from(["independent", "exact"]),
    st.booleans(),
)
def test_the_sampler_warns_exactly_when_a_batch_holds_a_row_twice(small, large, batch_size, share, quota, pooled):
    labels = ["s"] * small + ["l"] * large
    kwargs = dict(mixing=False) if pooled else dict(proportions={"s": share, "l": 1 - share}, quota=quota)
    sampler = DomainMixingSampler(labels=labels, batch_size=batch_size, num_samples=batch_size * 30, seed=2, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chunks = chunk_rows(list(sampler), batch_size)
    repeated = any(len(set(rows)) < len(rows) for rows in chunks)  # reference: a plain loop over the batches
    assert [w.category for w in caught if w.category is RepeatedRowWarning] == (
        [RepeatedRowWarning] if repeated else []
    )


@pytest.mark.parametrize("batch_size", [3, 8])
def test_a_pool_that_wraps_inside_a_chunk_does_not_repeat_a_row(batch_size):
    labels = ["x"] * 7 + ["y"] * 4
    sampler = DomainMixingSampler(labels=labels, batch_size=batch_size, num_samples=batch_size * 200, seed=1)
    for rows in chunk_rows(list(sampler), batch_size):
        assert len(set(rows)) == len(rows)


@pytest.mark.parametrize("quota", ["independent", "exact"])
@pytest.mark.parametrize("num_replicas, batch_size", [(2, 3), (3, 2), (4, 4)])
def test_no_prompt_on_two_ranks_in_one_step_when_a_domain_wraps(quota, num_replicas, batch_size):
    labels = interleaved(SMALL_DOMAINS)
    kwargs = dict(
        labels=labels,
        batch_size=batch_size,
        layout="shard",
        num_replicas=num_replicas,
        seed=8,
        proportions={"a": 0.45, "b": 0.35, "c": 0.2},
        num_samples=batch_size * num_replicas * 200,
        quota=quota,
    )
    ranks = [list(DomainMixingSampler(rank=r, **kwargs)) for r in range(num_replicas)]
    steps = [
        sum((rank[s * batch_size : (s + 1) * batch_size] for rank in ranks), [])
        for s in range(len(ranks[0]) // batch_size)
    ]
    assert_no_needless_repeat(steps, labels, SMALL_DOMAINS)


# ------------------------------------------------------------------ exact quotas


def reference_quotas(weights, n):
    """Largest remainder over exact fractions; ties to the domain listed first."""
    total = sum(weights)
    exact = [Fraction(w * n, total) for w in weights]
    counts = [math.floor(e) for e in exact]
    remainders = [e - c for e, c in zip(exact, counts, strict=True)]
    for k in sorted(range(len(weights)), key=lambda k: (-remainders[k], k))[: n - sum(counts)]:
        counts[k] += 1
    return counts


weights_strategy = st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(lambda w: sum(w) > 0)


@given(weights=weights_strategy, n=st.integers(0, 97))
def test_largest_remainder_quotas_match_a_fraction_reference(weights, n):
    p = np.array(weights, dtype=np.float64) / sum(weights)
    assert largest_remainder_quotas(p, n).tolist() == reference_quotas(weights, n)


def test_quota_ties_go_to_the_domain_listed_first():
    assert largest_remainder_quotas([0.5, 0.25, 0.25], 6).tolist() == [3, 2, 1]
    assert largest_remainder_quotas([0.25, 0.25, 0.5], 6).tolist() == [2, 1, 3]
    assert largest_remainder_quotas([1 / 3] * 3, 10).tolist() == [4, 3, 3]
    assert largest_remainder_quotas([0.1] * 10, 30).tolist() == [3] * 10  # 0.1 * 30 is 3.0000000000000004
    assert largest_remainder_quotas([0.0, 1.0], 5).tolist() == [0, 5]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    weights=weights_strategy, batch_size=st.integers(1, 13), num_replicas=st.integers(1, 3), seed=st.integers(0, 2**32)
)
def test_every_chunk_holds_exactly_the_quotas(weights, batch_size, num_replicas, seed):
    domains = [f"d{k}" for k in range(len(weights))]
    labels = interleaved({d: 3 + k for k, d in enumerate(domains)}, seed=seed % 1000)
    proportions = {d: w / sum(weights) for d, w in zip(domains, weights, strict=True)}
    kwargs = dict(
        labels=labels,
        batch_size=batch_size,
        proportions=proportions,
        quota="exact",
        seed=seed,
        layout="shard",
        num_replicas=num_replicas,
        num_samples=batch_size * num_replicas * 12,
    )
    ranks = [list(DomainMixingSampler(rank=r, **kwargs)) for r in range(num_replicas)]
    quotas = reference_quotas(weights, batch_size * num_replicas)  # over the global chunk
    for s in range(12):
        step = sum((rank[s * batch_size : (s + 1) * batch_size] for rank in ranks), [])
        counts = Counter(labels[i] for i in step)
        assert [counts[d] for d in domains] == quotas


def test_exact_quotas_follow_a_mixer_and_positions_are_shuffled():
    labels = interleaved({"a": 50, "b": 50, "c": 50})
    strategy = build_strategy(
        {"mix": {"mixer": {"name": "dump_ucb", "temperature": 0.05}, "warmup_steps": 2, "update_every": 1}}
    )
    sampler = DomainMixingSampler(
        labels=labels, batch_size=10, num_generations=2, strategy=strategy, quota="exact", num_samples=10_000, seed=4
    )
    stream, firsts = iter(sampler), Counter()
    for step in range(30):
        indices = take(stream, 20)
        target = sampler.target_proportions  # what this chunk was drawn with
        counts = Counter(labels[i] for i in indices[::2])
        quotas = largest_remainder_quotas([target[d] for d in sampler.domains], 10).tolist()
        assert [counts[d] for d in sampler.domains] == quotas, (step, target)
        firsts[labels[indices[0]]] += 1
        rewards = torch.tensor(
            [float((i * 7 + k) % 3 == 0) if labels[i] != "c" else 0.0 for k, i in enumerate(indices)]
        )
        groups = torch.arange(20) // 2
        means = rewards.view(-1, 2).mean(1).repeat_interleave(2)
        strategy.apply(
            RolloutBatch(rewards, group_ids=groups, advantages=rewards - means, domains=[labels[i] for i in indices]),
            step,
        )
    assert len(firsts) > 1  # not always the first domain in the first position
    assert strategy.target_proportions != {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}


@pytest.mark.parametrize("resume", ["replay", "continue"])
@pytest.mark.parametrize("save_at", [1, 3, 7])
def test_exact_quota_runs_resume_exactly(resume, save_at):
    labels = interleaved({"a": 9, "b": 6, "c": 4})
    schedule = [{"a": 0.5, "b": 0.3, "c": 0.2}, {"a": 0.1, "b": 0.1, "c": 0.8}]

    def make():
        return DomainMixingSampler(
            labels=labels, batch_size=5, proportions=schedule[0], quota="exact", num_samples=15, seed=6, resume=resume
        )

    def steps(sampler, stream, first, last):
        out = []
        for step in range(first, last):
            out.append(take(stream, 5))
            sampler.set_proportions(schedule[step % 2])
        return out

    full = make()
    expected = steps(full, endless(full), 0, 10)
    first = make()
    got = steps(first, endless(first), 0, save_at)
    state = first.state_dict()
    second = make()
    second.load_state_dict(state)
    stream = endless(second)
    if resume == "replay":
        take(stream, (save_at * 5) % len(second))
    got += steps(second, stream, save_at, 10)
    assert got == expected


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_a_skipping_filter_does_not_take_a_row_twice_in_one_chunk(num_replicas):
    """A small domain whose rows the filter mostly skips wraps inside a chunk: its rows still come once each."""
    from dataflex_callbacks import RolloutBatch, build_strategy

    strategy = build_strategy(
        {"pre_select": {"name": "skip_zero_variance", "params": {"min_keep": 0.05, "explore": 0.1}}}
    )
    labels = ["a"] * 5 + ["c"] * 60
    always_solved = [0, 1, 2, 3]  # 'a' rows with long zero-variance streaks: nearly always skipped
    for step in range(30):
        rewards = torch.ones(len(always_solved) * 4)
        group_ids = torch.arange(len(always_solved)).repeat_interleave(4)
        keys = [k for k in always_solved for _ in range(4)]
        strategy.apply(RolloutBatch(rewards, group_ids=group_ids, prompt_keys=keys), step, sync=False)
    batch_size = 8 // num_replicas
    kwargs = dict(
        labels=labels,
        batch_size=batch_size,
        layout="shard",
        num_replicas=num_replicas,
        seed=3,
        proportions={"a": 0.5, "c": 0.5},
        num_samples=8 * 60,
        strategy=strategy,
    )
    ranks = [list(DomainMixingSampler(rank=r, **kwargs)) for r in range(num_replicas)]
    steps = [
        sum((rank[s * batch_size : (s + 1) * batch_size] for rank in ranks), [])
        for s in range(len(ranks[0]) // batch_size)
    ]
    assert_no_needless_repeat(steps, labels, {"a": 5, "c": 60})


def test_the_strategy_mix_quota_sets_the_sampler_quota():
    """`mix.quota` in the config reaches the sampler in every host; DataFlex-RL mix blocks get exact quotas."""
    labels = interleaved(SMALL_DOMAINS)
    composable = build_strategy({"mix": {"mixer": "static", "quota": "exact"}})
    reference = build_strategy({"mechanism": "mix", "actuator": {"name": "static", "params": {}}})
    assert DomainMixingSampler(labels=labels, strategy=build_strategy("static")).quota == "independent"
    for strategy in (composable, reference):
        sampler = DomainMixingSampler(labels=labels, strategy=strategy, batch_size=6, num_samples=6 * 30, seed=2)
        assert sampler.quota == "exact"
        for chunk in chunk_rows(list(sampler), 6):
            assert sorted(Counter(labels[r] for r in chunk).values()) == [2, 2, 2]
    # An explicit argument still wins.
    assert DomainMixingSampler(labels=labels, strategy=composable, quota="independent").quota == "independent"
    with pytest.raises(ConfigError, match="mix.quota must be one of independent, exact"):
        build_strategy({"mix": {"mixer": "static", "quota": "largest"}})
