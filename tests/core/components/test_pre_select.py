"""PromptHistory and skip_zero_variance on synthetic streams: streaks, re-checks, target tracking,
the domain prior, the reward-noise check, resume and two ranks."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pre_select_two_ranks import global_batches, run_two_ranks

from dataflex_callbacks import DomainMixingSampler, RolloutBatch, build_component, build_strategy
from dataflex_callbacks.components.history import PromptHistory, completion_hashes, identical_pairs
from dataflex_callbacks.rollout.groups import dense_groups


def group_batch(keys, rewards_per_group, domains=None, ids=None):
    """A batch with one group per key; ``rewards_per_group`` is a list of reward lists."""
    sizes = [len(r) for r in rewards_per_group]
    rewards = torch.tensor([v for r in rewards_per_group for v in r], dtype=torch.float32)
    group_ids = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    prompt_keys = [k for k, n in zip(keys, sizes, strict=True) for _ in range(n)]
    labels = None if domains is None else [d for d, n in zip(domains, sizes, strict=True) for _ in range(n)]
    return RolloutBatch(
        rewards=rewards, group_ids=group_ids, prompt_keys=prompt_keys, domains=labels, completion_ids=ids
    )


# ------------------------------------------------------------------ identical-completion pairs


def brute_force_pairs(ids, mask, rewards, groups):
    pairs = np.zeros(max(groups) + 1)
    disagreeing = np.zeros(max(groups) + 1)
    # Same answer: the same valid positions holding the same tokens.
    answers = [
        tuple(t if m else None for t, m in zip(row, keep, strict=True)) for row, keep in zip(ids, mask, strict=True)
    ]
    for i, j in itertools.combinations(range(len(rewards)), 2):
        if groups[i] == groups[j] and answers[i] == answers[j]:
            pairs[groups[i]] += 1
            disagreeing[groups[i]] += rewards[i] != rewards[j]
    return pairs, disagreeing


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_identical_pairs_match_a_brute_force_count(data):
    n = data.draw(st.integers(1, 24))
    length = data.draw(st.integers(1, 4))
    groups = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    ids = data.draw(st.lists(st.lists(st.integers(0, 2), min_size=length, max_size=length), min_size=n, max_size=n))
    mask = data.draw(st.lists(st.lists(st.booleans(), min_size=length, max_size=length), min_size=n, max_size=n))
    rewards = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n))
    batch = RolloutBatch(
        rewards=torch.tensor(rewards),
        group_ids=torch.tensor(groups),
        completion_ids=torch.tensor(ids),
        completion_mask=torch.tensor(mask),
    )
    index, count = dense_groups(batch.group_ids)
    pairs, disagreeing = identical_pairs(batch, np.array(rewards), index.numpy(), count)
    ref_pairs, ref_disagreeing = brute_force_pairs(ids, mask, rewards, index.tolist())
    np.testing.assert_array_equal(pairs, ref_pairs[:count])
    np.testing.assert_array_equal(disagreeing, ref_disagreeing[:count])


def test_completion_hash_cpu_product_equals_the_multiply_and_sum_cuda_uses():
    ids = torch.randint(0, 50_000, (64, 33), generator=torch.Generator().manual_seed(1))
    mask = torch.rand(64, 33, generator=torch.Generator().manual_seed(2)) < 0.8
    hashes = completion_hashes(ids, mask)
    weights = torch.randint(-(2**63), 2**63 - 1, (33,), generator=torch.Generator().manual_seed(20_506_021_770))
    assert torch.equal(hashes, (torch.where(mask, ids, -1) * weights).sum(dim=1))
    # Masked positions count as -1, not as token 0; the same answer hashes alike whatever its padding.
    zero = torch.zeros(1, 3, dtype=torch.long)
    assert completion_hashes(zero, torch.tensor([[True, True, False]])) != completion_hashes(zero, None)
    padded = torch.tensor([[5, 6, 0], [5, 6, 9]])
    same = completion_hashes(padded, torch.tensor([[True, True, False], [True, True, False]]))
    assert same[0] == same[1]


def test_without_completion_ids_no_pair_is_counted():
    batch = group_batch(["p"], [[0.0, 1.0, 0.0]])
    index, count = dense_groups(batch.group_ids)
    pairs, disagreeing = identical_pairs(batch, batch.rewards.numpy(), index.numpy(), count)
    assert pairs.tolist() == [0.0] and disagreeing.tolist() == [0.0]


def test_completion_ids_are_validated():
    with pytest.raises(Exception, match="completion_ids must be an integer tensor"):
        RolloutBatch(rewards=torch.zeros(2), completion_ids=torch.zeros(2, 3))
    with pytest.raises(Exception, match="completion_ids has L=3 tokens but other token fields have L=4"):
        RolloutBatch(
            rewards=torch.zeros(2), completion_mask=torch.ones(2, 4), completion_ids=torch.zeros(2, 3, dtype=torch.long)
        )
    with pytest.raises(Exception, match=r"completion_ids must have shape \(N, L\) with N=2"):
        RolloutBatch(rewards=torch.zeros(2), completion_ids=torch.zeros(3, 1, dtype=torch.long))


# ------------------------------------------------------------------ streaks and the skip rule


def test_streak_counts_zero_variance_and_noisy_groups_and_resets_on_signal():
    history = PromptHistory()
    same = torch.zeros(4, 2, dtype=torch.long)  # four identical answers
    distinct = torch.arange(8).reshape(4, 2)
    history.update(group_batch(["solved"], [[1, 1, 1, 1]], ids=distinct), step=0)
    history.update(group_batch(["solved"], [[1, 1, 1, 1]], ids=distinct), step=1)
    history.update(group_batch(["noisy"], [[1, 0, 1, 0]], ids=same), step=1)
    history.update(group_batch(["learnable"], [[1, 0, 1, 0]], ids=distinct), step=1)
    assert history.streaks(["solved", "noisy", "learnable", "unseen"]).tolist() == [2, 1, 0, 0]
    history.update(group_batch(["solved"], [[1, 0, 1, 1]], ids=distinct), step=2)
    assert history.streaks(["solved"]).tolist() == [0]
    assert history.seen[history.lookup(["solved"])].tolist() == [3]


def test_an_always_solved_prompt_is_skipped_more_and_more_down_to_the_floor():
    pre_select = build_component("pre_select", "skip_zero_variance", explore=0.6, min_keep=0.05, adapt_rate=0.0)
    keep = []
    for step in range(12):
        keep.append(float(pre_select.keep_probability(["easy"])[0]))
        pre_select.observe(group_batch(["easy"], [[1.0] * 4]), step)
    assert keep[0] == 1.0
    # strictly more likely to be skipped with every streak
    assert all(a > b for a, b in zip(keep[:5], keep[1:6], strict=True))
    assert keep[-1] == pytest.approx(0.05)  # never below the floor
    assert keep[1:6] == pytest.approx([0.6**k for k in range(1, 6)])


def skip_strategy(**params):
    return build_strategy({"pre_select": {"name": "skip_zero_variance", "params": params}})


def simulate(params, solve_rate, steps, batch_size=4, generations=4, seed=0, labels=None):
    """Draw prompts with a skip sampler and score them; ``solve_rate(prompt, step)`` is each prompt's true p.

    Returns the filter, and per step the drawn prompt indices and the batch's zero-variance share.
    """
    strategy = skip_strategy(**params)
    n = len(labels) if labels is not None else 40
    sampler = DomainMixingSampler(
        labels=labels or ["all"] * n,
        batch_size=batch_size,
        layout="shard",
        num_replicas=1,
        rank=0,
        strategy=strategy,
        seed=seed,
        resume="continue",
    )
    rng = np.random.default_rng(seed)
    stream = iter(itertools.chain.from_iterable(iter(sampler) for _ in itertools.count()))
    drawn, shares = [], []
    for step in range(steps):
        prompts = [next(stream) for _ in range(batch_size)]
        rewards = [(rng.random(generations) < solve_rate(p, step)).astype(float).tolist() for p in prompts]
        domains = None if labels is None else [labels[p] for p in prompts]
        decision = strategy.apply(group_batch(prompts, rewards, domains), step, sync=False)
        drawn.append(prompts)
        shares.append(decision.metrics["pre_select/zero_variance_share"])
    return strategy.pre_select, drawn, shares


def test_a_prompt_that_turns_learnable_is_rechecked_within_the_expected_number_of_passes(monkeypatch):
    # 40 always-solved prompts; prompt 0 turns learnable (solve rate 0.5) at step 100. Each pass over the
    # data makes it a candidate once, kept with probability >= min_keep: the wait in passes, counted from
    # step 100, is at most geometric with mean 1 / min_keep. (Counted from its last draw before step 100
    # it would be the renewal interval straddling step 100, of mean about 2 / min_keep - 1.)
    min_keep, waits = 0.2, []
    shuffles = []
    from dataflex_callbacks.sampling._block_drawer import BlockDrawer

    original = BlockDrawer._shuffle_domain

    def counting(self, k):
        shuffles.append(1)
        return original(self, k)

    monkeypatch.setattr(BlockDrawer, "_shuffle_domain", counting)
    for seed in range(20):
        passes_at = []

        def solve_rate(p, step, passes_at=passes_at):
            passes_at.append((p, step, len(shuffles)))  # called once per drawn prompt, in step order
            return 0.5 if (p == 0 and step >= 100) else 1.0

        shuffles.clear()
        pre_select, drawn, _ = simulate(dict(target_share=0.0, min_keep=min_keep), solve_rate, 400, seed=seed)
        assert pre_select.skipped > 0
        before = next(n for _, step, n in passes_at if step >= 100)  # passes started by step 100
        first_step, first_passes = next((step, n) for p, step, n in passes_at if p == 0 and step >= 100)
        waits.append(first_passes - before)
        # Once re-checked and learnable, its streak is reset and it is kept again.
        assert pre_select.history.streaks([0])[0] == 0 or any(0 in d for d in drawn[first_step + 1 :])
    assert np.mean(waits) <= 1.5 / min_keep
    assert max(waits) <= 5 / min_keep


def test_zero_variance_share_tracks_its_target():
    # 30% of prompts always give signal (solve rate 0.5 with 8 answers), 70% never do.
    def solve_rate(p, step):
        return 0.5 if p % 10 < 3 else (1.0 if p % 2 else 0.0)

    for target in (0.2, 0.5):
        _, _, shares = simulate(
            dict(target_share=target, adapt_rate=0.02, min_keep=0.01), solve_rate, 600, batch_size=10, generations=8
        )
        assert abs(np.mean(shares[300:]) - target) < 0.06, (target, np.mean(shares[300:]))
    baseline = np.mean([solve_rate(p, 0) in (0.0, 1.0) for p in range(40)])
    assert baseline == pytest.approx(0.7)


# ------------------------------------------------------------------ domain prior and noise estimate


def test_domain_prior_predicts_unseen_prompts_from_their_domain():
    pre_select = build_component("pre_select", "skip_zero_variance", explore=0.5, min_keep=0.05, adapt_rate=0.0)
    distinct = torch.arange(16).reshape(16, 1)
    # domain a: both groups zero variance; domain b: one of two groups.
    pre_select.observe(
        group_batch(
            ["a1", "a2", "b1", "b2"], [[1] * 4, [0] * 4, [1] * 4, [1, 0, 0, 1]], ["a", "a", "b", "b"], ids=distinct
        ),
        step=0,
    )
    assert pre_select.history.domain_prior == {"a": 1.0, "b": 0.5}
    keep = pre_select.keep_probability(["a9", "b9", "c9", "b2", "a1"], ["a", "b", "c", "b", "a"])
    # unseen: 1 - q (1 - explore); unknown domain: 1; seen prompts: their own streak.
    assert keep.tolist() == pytest.approx([0.5, 0.75, 1.0, 1.0, 0.5])
    assert pre_select.keep_probability(["a9"]).tolist() == [1.0]  # no labels: no prior
    off = build_component("pre_select", "skip_zero_variance", domain_prior=False)
    off.load_state_dict(pre_select.state_dict())
    assert off.keep_probability(["a9"], ["a"]).tolist() == [1.0]
    # The prior is a moving average: a second batch where domain a gives signal moves it by prior_rate.
    pre_select.observe(group_batch(["a3"], [[1, 0, 1, 0]], ["a"], ids=distinct[:4]), step=1)
    assert pre_select.history.domain_prior["a"] == pytest.approx(0.8 * 1.0 + 0.2 * 0.0)


def test_noise_estimate_is_twice_the_disagreement_rate_of_identical_answers():
    history = PromptHistory(prior_rate=1.0)
    # One group of 4 answers: x, x, x, y with rewards 1, 1, 0, 1: 3 identical pairs, 2 scored differently.
    ids = torch.tensor([[7], [7], [7], [8]])
    history.update(group_batch(["p"], [[1, 1, 0, 1]], ["d"], ids=ids), step=0)
    assert history.domain_noise["d"] == pytest.approx(1.0)  # min(1, 2 * 2/3)
    # Six answers: x x x x y y, rewards 1 1 1 0 | 1 0: 7 identical pairs, 3 + 1 = 4 disagree... use a 1-in-6 case.
    ids = torch.tensor([[1], [1], [1], [1], [2], [3]])
    history.update(group_batch(["q"], [[1, 1, 1, 0, 1, 0]], ["e"], ids=ids), step=0)
    assert history.domain_noise["e"] == pytest.approx(min(1.0, 2 * 3 / 6))
    assert history.domain_prior["e"] == pytest.approx(0.0 + 1.0 * 1.0)
    # Identical answers scored alike: no noise, and the prior is the zero-variance share alone.
    history.update(
        group_batch(["r", "s"], [[1, 1, 0], [1, 1, 1]], ["f", "f"], ids=torch.tensor([[1], [1], [2], [1], [1], [1]])), 0
    )
    assert history.domain_noise["f"] == 0.0 and history.domain_prior["f"] == pytest.approx(0.5)


def test_noise_check_off_ignores_disagreeing_answers():
    ids = torch.zeros(4, 1, dtype=torch.long)
    on = build_component("pre_select", "skip_zero_variance")
    off = build_component("pre_select", "skip_zero_variance", noise_check=False)
    for pre_select in (on, off):
        pre_select.observe(group_batch(["p"], [[1, 0, 1, 0]], ["d"], ids=ids), step=0)
    assert on.history.streaks(["p"]).tolist() == [1] and on.metrics()["pre_select/noisy_share"] == 1.0
    assert off.history.streaks(["p"]).tolist() == [0] and off.metrics()["pre_select/noisy_share"] == 0.0


@pytest.mark.parametrize(
    "params, message",
    [
        ({"explore": 1.5}, "explore"),
        ({"min_keep": 0.0}, "min_keep"),
        ({"prior_rate": 0.0}, "prior_rate"),
        ({"domain_prior": 1}, "domain_prior"),
        ({"noise_check": "yes"}, "noise_check"),
    ],
)
def test_bad_parameters_name_themselves(params, message):
    with pytest.raises(ValueError, match=message):
        build_component("pre_select", "skip_zero_variance", **params)


# ------------------------------------------------------------------ resume and two ranks


def test_resumed_filter_and_sampler_continue_exactly():
    labels = ["a"] * 20 + ["b"] * 20

    def run(steps, state=None):
        strategy = skip_strategy(target_share=0.1)
        sampler = DomainMixingSampler(
            labels=["all"] * 40,
            prompt_labels=labels,
            batch_size=4,
            layout="shard",
            num_replicas=1,
            rank=0,
            strategy=strategy,
            seed=5,
            resume="continue",
        )
        if state is not None:
            strategy.load_state_dict(state["strategy"])
            sampler.load_state_dict(state["sampler"])
        rng = np.random.default_rng(len(state["log"]) if state else 0)
        log = list(state["log"]) if state else []
        it = iter(sampler)
        for step in range(len(log), steps):
            prompts = [next(it) for _ in range(4)]
            rewards = [(rng.random(4) < (1.0 if p < 20 else 0.5)).astype(float).tolist() for p in prompts]
            strategy.apply(group_batch(prompts, rewards, [labels[p] for p in prompts]), step, sync=False)
            log.append(prompts)
        return log, {"strategy": strategy.state_dict(), "sampler": sampler.state_dict(), "log": log}

    full, _ = run(9)
    _, state = run(4)
    resumed, _ = run(9, state)
    assert resumed == full


def test_state_loads_with_weights_only_loading_and_restores_the_filter(tmp_path):
    # Keys as a collate function may deliver them: numpy and 0-d tensor integers name the same prompt as the int.
    pre_select = build_component("pre_select", "skip_zero_variance", explore=0.5)
    keys = [np.int64(3), torch.tensor(4), "q"]
    pre_select.observe(group_batch(keys, [[1, 1, 1], [0, 1, 0], [0, 0, 0]], ["a", "b", "a"]), step=0)
    pre_select.observe(group_batch([3, "q"], [[1, 1, 1], [0, 0, 0]], ["a", "a"]), step=1)
    torch.save(pre_select.state_dict(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)  # tensors and Python scalars only
    assert state["history"]["keys"] == [3, 4, "q"]
    restored = build_component("pre_select", "skip_zero_variance")
    restored.load_state_dict(state)
    assert restored.history.streaks([3, 4, "q"]).tolist() == [2, 0, 2]
    candidates, labels = [3, 4, "q", "new"], ["a", "b", "a", "a"]
    assert (
        restored.keep_probability(candidates, labels).tolist()
        == pre_select.keep_probability(candidates, labels).tolist()
    )
    assert restored.metrics() == pytest.approx(pre_select.metrics(), nan_ok=True)
    # Grows after a restore like a fresh history.
    restored.observe(group_batch([f"k{i}" for i in range(5)], [[1, 0]] * 5), step=2)
    assert restored.history.size == 8


def test_two_ranks_build_the_history_one_process_builds_from_the_whole_batch(tmp_path):
    ranks = run_two_ranks(tmp_path)
    assert ranks[0] == ranks[1]

    # The same global batches, whole, in one process.
    pre_select = build_component("pre_select", "skip_zero_variance")
    for step, batch in enumerate(global_batches()):
        pre_select.observe(batch, step)
    history = pre_select.history
    assert ranks[0]["keys"] == history.keys
    assert ranks[0]["streak"] == history.streak[: history.size].tolist()
    assert ranks[0]["seen"] == history.seen[: history.size].tolist()
    assert ranks[0]["domain_prior"] == pytest.approx(history.domain_prior)
    assert ranks[0]["domain_noise"] == pytest.approx(history.domain_noise)
    assert ranks[0]["explore"] == pre_select.explore


def test_list_valued_prompt_keys_are_keys():
    """Chat prompts as keys (lists of messages) work and equal lists share one history entry."""
    strategy = skip_strategy()
    chat = [{"role": "user", "content": "2+2?"}]
    keys = [chat, [1, 2], [3]]
    for step in range(3):
        strategy.apply(group_batch(keys, [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]), step, sync=False)
    streaks = strategy.pre_select.history.streaks([[{"role": "user", "content": "2+2?"}], [1, 2], [3], [4]])
    assert streaks.tolist() == [3, 0, 3, 0]


def test_the_pre_select_kind_lists_its_filters_and_its_state_round_trips():
    from dataflex_callbacks import registry

    assert registry.list_components("pre_select") == ["skip_predicted", "skip_zero_variance"]
    strategy = build_strategy("skip")
    state = strategy.state_dict()
    state["pre_select"]["skipped"] = 7
    resumed = build_strategy("skip")
    resumed.load_state_dict(state)
    assert resumed.pre_select.skipped == 7


def test_a_prompt_history_state_without_tensors_is_a_state_error():
    from dataflex_callbacks.errors import StateError

    state = build_strategy("greso").state_dict()["pre_select"]["history"]
    state["streak"] = state["streak"].numpy()
    with pytest.raises(StateError, match="'streak' must be the tensor"):
        build_strategy("greso").pre_select.history.load_state_dict(state)
