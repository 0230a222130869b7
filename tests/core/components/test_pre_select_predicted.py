"""`skip_predicted`: per-state estimates learnt from the run, checked against a plain loop and on simulated domains."""

import io
import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pre_select_two_ranks import global_batches, run_two_ranks

from dataflex_callbacks import DomainMixingSampler, RolloutBatch, build_component, build_strategy

UNSEEN = 7  # state of a prompt never seen; 0 after signal; 1-3 failed streaks; 4-6 solved streaks


def group_batch(keys, rewards_per_group, domains):
    sizes = [len(r) for r in rewards_per_group]
    rewards = torch.tensor([v for r in rewards_per_group for v in r], dtype=torch.float32)
    group_ids = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return RolloutBatch(
        rewards=rewards,
        group_ids=group_ids,
        prompt_keys=[k for k, n in zip(keys, sizes, strict=True) for _ in range(n)],
        domains=[d for d, n in zip(domains, sizes, strict=True) for _ in range(n)],
    )


class LoopReference:
    """The estimates worked out one prompt and one group at a time, in plain Python."""

    def __init__(self, decay, prior_groups):
        self.decay, self.k = decay, prior_groups
        self.streak, self.last_solved = {}, {}
        self.cells = {}  # (domain, state) -> [groups, no_signal, solved]

    def state(self, key):
        if key not in self.streak:
            return UNSEEN
        z = min(self.streak[key], 3)
        return z + 3 if z > 0 and self.last_solved[key] else z

    def observe(self, keys, rewards_per_group, domains):
        states = [self.state(key) for key in keys]  # every group is counted under its state before the batch
        arrivals = {}
        for domain, state in zip(domains, states, strict=True):
            arrivals[(domain, state)] = arrivals.get((domain, state), 0) + 1
        for cell, count in arrivals.items():
            old = self.cells.get(cell, [0.0, 0.0, 0.0])
            self.cells[cell] = [v * (1 - self.decay) ** count for v in old]
        for key, rewards, domain, state in zip(keys, rewards_per_group, domains, states, strict=True):
            zero = len(set(rewards)) == 1
            solved = zero and sum(r > 0.5 for r in rewards) / len(rewards) > 0.5
            cell = self.cells[(domain, state)]
            cell[0] += 1
            cell[1] += zero
            cell[2] += solved
            self.streak[key] = self.streak.get(key, 0) + 1 if zero else 0
            self.last_solved[key] = sum(r > 0.5 for r in rewards) / len(rewards) > 0.5

    def estimate(self, key, domain):
        cells = [v for (d, _), v in self.cells.items() if d == domain]
        total = sum(c[0] for c in cells)
        groups, no_signal, solved = self.cells.get((domain, self.state(key)), [0.0, 0.0, 0.0])
        out = []
        for column, count in ((1, no_signal), (2, solved)):
            pooled = 0.5 if total + self.k == 0 else (sum(c[column] for c in cells) + 0.5 * self.k) / (total + self.k)
            out.append(pooled if groups + self.k == 0 else (count + self.k * pooled) / (groups + self.k))
        return tuple(out)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), decay=st.sampled_from([0.0, 0.01, 0.3]), prior_groups=st.sampled_from([0.0, 2.0, 10.0]))
def test_estimates_equal_a_loop_over_the_recorded_groups(data, decay, prior_groups):
    pre_select = build_component("pre_select", "skip_predicted", decay=decay, prior_groups=prior_groups)
    reference = LoopReference(decay, prior_groups)
    pool = [f"p{i}" for i in range(6)]
    domain_of = {key: "ab"[i % 2] for i, key in enumerate(pool)}
    for step in range(data.draw(st.integers(1, 8))):
        keys = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
        rewards = [data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=3, max_size=3)) for _ in keys]
        domains = [domain_of[key] for key in keys]
        pre_select.observe(group_batch(keys, rewards, domains), step)
        reference.observe(keys, rewards, domains)
    keys = pool + ["never-seen-a"]
    labels = [domain_of.get(key, "a") for key in keys]
    no_signal, solved = pre_select.estimate(keys, labels)
    expected = [reference.estimate(key, label) for key, label in zip(keys, labels, strict=True)]
    np.testing.assert_allclose(no_signal, [e[0] for e in expected], rtol=1e-12)
    np.testing.assert_allclose(solved, [e[1] for e in expected], rtol=1e-12)


def observe_domains(pre_select, solve_rates, steps, prompts_per_domain=30, generations=8, seed=0):
    """Every step, 2 groups per domain: ``solve_rates[domain]`` is each completion's chance to be right."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        keys, rewards, domains = [], [], []
        for domain, p in solve_rates.items():
            for i in rng.choice(prompts_per_domain, 2, replace=False):
                keys.append(f"{domain}{i}")
                rewards.append((rng.random(generations) < p).astype(float).tolist())
                domains.append(domain)
        pre_select.observe(group_batch(keys, rewards, domains), step)


def test_an_unlearnable_domain_and_a_solved_one_are_skipped_a_learnable_one_is_kept():
    pre_select = build_component("pre_select", "skip_predicted")
    rates = {"code": 0.0, "digit": 0.15, "echo": 1.0, "coin": 0.5}
    observe_domains(pre_select, rates, steps=60)
    domains = list(rates)
    keep = dict(
        zip(
            domains,
            pre_select.keep_probability([f"{d}{i}" for d, i in zip(domains, [0, 1, 2, 3], strict=True)], domains),
            strict=True,
        )
    )
    unseen = dict(zip(domains, pre_select.keep_probability([f"{d}-new" for d in domains], domains), strict=True))
    # code never gives signal: skipped seen or not; echo is always solved: skipped; digit (P(no signal)
    # = 0.85 ** 8 = 0.27) and the coin domain (always signal) are kept.
    assert keep == {"code": 0.2, "digit": 1.0, "echo": 0.2, "coin": 1.0}
    assert unseen == {"code": 0.2, "digit": 1.0, "echo": 0.2, "coin": 1.0}
    assert pre_select.metrics()["pre_select/skipped_states"] > 0


def test_a_few_early_failures_do_not_skip_a_domain_but_the_same_evidence_without_a_prior_does():
    failures = group_batch([f"d{i}" for i in range(6)], [[0.0] * 8] * 6, ["digit"] * 6)
    cautious = build_component("pre_select", "skip_predicted")
    cautious.observe(failures, 0)
    assert cautious.keep_probability(["d-new"], ["digit"])[0] == 1.0
    hasty = build_component("pre_select", "skip_predicted", prior_groups=0.0)
    hasty.observe(failures, 0)
    assert hasty.keep_probability(["d-new"], ["digit"])[0] == 0.2


def test_a_rarely_seen_state_borrows_its_domain_evidence():
    pre_select = build_component("pre_select", "skip_predicted")
    # Many failed groups of "code" prompts seen once or never; one prompt has a streak of 2 (a state seen once).
    observe_domains(pre_select, {"code": 0.0, "digit": 0.3}, steps=40, prompts_per_domain=200)
    pre_select.observe(group_batch(["code-x", "digit-x"], [[0.0] * 8] * 2, ["code", "digit"]), 40)
    pre_select.observe(group_batch(["code-x", "digit-x"], [[0.0] * 8] * 2, ["code", "digit"]), 41)
    assert pre_select.history.streaks(["code-x", "digit-x"]).tolist() == [2, 2]
    assert pre_select.keep_probability(["code-x", "digit-x"], ["code", "digit"]).tolist() == [0.2, 1.0]


def test_the_sampler_stops_drawing_an_unlearnable_domain():
    labels = ["code"] * 40 + ["digit"] * 40
    strategy = build_strategy({"pre_select": {"name": "skip_predicted", "params": {"min_keep": 0.05}}})
    sampler = DomainMixingSampler(
        labels=labels,
        batch_size=8,
        layout="shard",
        num_replicas=1,
        rank=0,
        strategy=strategy,
        seed=0,
        resume="continue",
    )
    stream = iter(itertools.chain.from_iterable(iter(sampler) for _ in itertools.count()))
    rng = np.random.default_rng(0)
    code_share = []
    for step in range(80):
        rows = [next(stream) for _ in range(8)]
        domains = [labels[r] for r in rows]
        rewards = [(rng.random(8) < (0.0 if d == "code" else 0.3)).astype(float).tolist() for d in domains]
        strategy.apply(group_batch(rows, rewards, domains), step, sync=False)
        code_share.append(domains.count("code") / 8)
    assert np.mean(code_share[:5]) > 0.3  # drawn as often as digit until the evidence builds up
    assert np.mean(code_share[-30:]) < 0.15  # then only re-checked (min_keep 0.05: about 5% expected)
    assert strategy.pre_select.metrics()["pre_select/skipped_prompts"] > 0


@pytest.mark.parametrize(
    "params, message",
    [
        ({"skip_above": 1.0}, "skip_above"),
        ({"skip_solved_above": 1.5}, "skip_solved_above"),
        ({"min_keep": 0.0}, "min_keep"),
        ({"decay": 1.0}, "decay"),
        ({"prior_groups": -1}, "prior_groups"),
        ({"noise_check": "yes"}, "noise_check"),
    ],
)
def test_bad_parameters_name_themselves(params, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build_component("pre_select", "skip_predicted", **params)


def test_state_loads_with_weights_only_and_the_filter_continues_exactly():
    first = build_component("pre_select", "skip_predicted")
    observe_domains(first, {"code": 0.0, "digit": 0.3, "echo": 0.95}, steps=30)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    restored = build_component("pre_select", "skip_predicted")
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    for pre_select in (first, restored):
        observe_domains(pre_select, {"code": 0.0, "digit": 0.3, "echo": 0.95}, steps=10, seed=1)
    keys = [f"{d}{i}" for d in ("code", "digit", "echo") for i in range(30)] + ["new"]
    labels = [key.rstrip("0123456789") for key in keys[:-1]] + ["digit"]
    for a, b in zip(first.estimate(keys, labels), restored.estimate(keys, labels), strict=True):
        np.testing.assert_array_equal(a, b)
    assert first.metrics() == restored.metrics()


def test_two_ranks_build_the_counts_one_process_builds_from_the_whole_batch(tmp_path):
    ranks = run_two_ranks(tmp_path, "skip_predicted")
    assert ranks[0] == ranks[1]
    whole = build_component("pre_select", "skip_predicted")
    for step, batch in enumerate(global_batches()):
        whole.observe(batch, step)
    state = whole.state_dict()
    for name in ("groups", "no_signal", "solved"):
        np.testing.assert_allclose(ranks[0][name], state[name].numpy(), rtol=1e-12)
    assert ranks[0]["domains"] == state["domains"]


def test_without_labels_a_seen_prompt_is_judged_in_its_own_domain_and_an_unseen_one_kept():
    """A mixing sampler passes no labels (its mixer chose the domain): the filter still skips by state."""
    pre_select = build_component("pre_select", "skip_predicted")
    observe_domains(pre_select, {"code": 0.0, "echo": 1.0, "digit": 0.3}, steps=60)
    keys = ["code0", "echo1", "digit2", "never-seen"]
    assert pre_select.keep_probability(keys).tolist() == [0.2, 0.2, 1.0, 1.0]
    with_labels = pre_select.keep_probability(keys, ["code", "echo", "digit", "code"])
    assert with_labels.tolist() == [0.2, 0.2, 1.0, 0.2]  # an unseen prompt is judged by its domain when known


def test_a_mixing_sampler_still_skips_solved_prompts():
    labels = ["echo"] * 40 + ["digit"] * 40
    strategy = build_strategy(
        {
            "pre_select": {"name": "skip_predicted", "params": {"min_keep": 0.05}},
            "mix": {"mixer": "static", "warmup_steps": 0, "update_every": 1, "quota": "exact"},
        }
    )
    sampler = DomainMixingSampler(
        labels=labels,
        batch_size=8,
        layout="shard",
        num_replicas=1,
        rank=0,
        strategy=strategy,
        seed=0,
        resume="continue",
    )
    strategy.bind_domains(sampler.domains)
    stream = iter(itertools.chain.from_iterable(iter(sampler) for _ in itertools.count()))
    rng = np.random.default_rng(0)
    for step in range(60):
        rows = [next(stream) for _ in range(8)]
        domains = [labels[r] for r in rows]
        assert domains.count("echo") == 4  # the mixer's share: skipping replaces within the domain
        rewards = [[1.0] * 8 if d == "echo" else (rng.random(8) < 0.3).astype(float).tolist() for d in domains]
        strategy.apply(group_batch(rows, rewards, domains), step, sync=False)
    # echo prompts are always solved: once every one has been seen, each echo slot takes on average
    # 1 / min_keep = 20 candidates, 19 of them skipped (4 slots a step); digit prompts are not skipped.
    skipped = strategy.pre_select.metrics()["pre_select/skipped_prompts"]
    assert 1000 < skipped < 60 * 4 * 19
    assert strategy.pre_select.keep_probability([r for r in range(40, 80)]).tolist() == [1.0] * 40
