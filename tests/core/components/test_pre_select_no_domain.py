"""One rule for "no domain" (issue 24): data without a domain column skips as data with one domain,
a filter that says it acts while it does not warns once naming the cause, and a `SignalGroupBuffer`
shows the filter every generated round."""

import itertools
import warnings

import pytest
import torch

from dataflex_callbacks import DomainMixingSampler, DomainTracker, RolloutBatch, SignalGroupBuffer, build_strategy
from dataflex_callbacks.errors import BatchError
from dataflex_callbacks.rollout.batch import NO_DOMAIN

PROMPTS = [f"p{i}" for i in range(24)]


def rows(domain=None):
    """Dataset rows with a prompt, and a domain column when ``domain`` is given."""
    return [{"prompt": p} if domain is None else {"prompt": p, "domain": domain} for p in PROMPTS]


def zero_reward_run(preset, data, steps=24, batch_domains="column", prompts=4, generations=2, key=None):
    """A loop of sampler draws and `Strategy.apply` with a reward that is always 0; returns the strategy.

    ``batch_domains``: ``"column"`` gives the batch each row's domain column (None without one);
    a string gives every row that domain instead. ``key`` maps a row index to the batch's prompt key.
    """
    strategy = build_strategy(preset)
    sampler = DomainMixingSampler(
        data, strategy=strategy, batch_size=prompts, layout="shard", num_replicas=1, rank=0, seed=0, resume="continue"
    )
    stream = itertools.chain.from_iterable(iter(sampler) for _ in itertools.count())
    for step in range(steps):
        drawn = [next(stream) for _ in range(prompts)]
        if batch_domains == "column":
            domains = None if "domain" not in data[0] else [data[r]["domain"] for r in drawn]
        else:
            domains = [batch_domains] * prompts
        keys = [data[r]["prompt"] if key is None else key(r) for r in drawn]
        batch = RolloutBatch(
            rewards=torch.zeros(prompts * generations),
            group_ids=torch.arange(prompts).repeat_interleave(generations),
            prompt_keys=[k for k in keys for _ in range(generations)],
            domains=None if domains is None else [d for d in domains for _ in range(generations)],
        )
        strategy.apply(batch, step, sync=False)
    return strategy


# ------------------------------------------------------------------ one label


@pytest.mark.parametrize("preset", ["skip", "greso"])
def test_data_without_a_domain_column_skips_as_one_domain(preset):
    none, one = (zero_reward_run(preset, data) for data in (rows(), rows("task")))
    assert none.pre_select.skipped == one.pre_select.skipped > 0
    assert none.pre_select.history.keys == one.pre_select.history.keys
    assert (none.pre_select.history.streak == one.pre_select.history.streak).all()
    if preset == "skip":
        assert list(none.pre_select.domains) == [NO_DOMAIN]
        assert (none.pre_select.groups == one.pre_select.groups).all()
    else:
        assert none.pre_select.history.domain_prior == {NO_DOMAIN: one.pre_select.history.domain_prior["task"]}


def test_the_tracker_counts_a_batch_without_domains_under_no_domain():
    batch = RolloutBatch(rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]), group_ids=torch.tensor([0, 0, 1, 1]))
    tracker = DomainTracker([NO_DOMAIN], window=4)
    tracker.update(batch, sync=False)
    assert tracker.total_count.tolist() == [4.0]
    with pytest.raises(BatchError, match=f"without them is domain '{NO_DOMAIN}'.*'math'"):
        DomainTracker(["math", "code"]).update(batch, sync=False)


# ------------------------------------------------------------------ a filter that does not act


def filter_warnings(record):
    return [str(w.message) for w in record if "dataflex: pre_select" in str(w.message)]


def test_a_filter_asked_about_other_domains_than_it_learnt_warns_once_naming_them():
    # The sampler reads the domain column ("task"); the rollouts come without domains (recorded as "all").
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        strategy = zero_reward_run("skip", rows("task"), steps=40, batch_domains=NO_DOMAIN)
    messages = filter_warnings(record)
    assert strategy.pre_select.skipped == 0 and strategy.pre_select.metrics()["pre_select/skipped_states"] > 0
    assert len(messages) == 1, messages
    assert "skipped no prompt over 8 observed batches" in messages[0]
    assert "domain(s) ['task']" in messages[0] and "recorded under ['all']" in messages[0]


def mixing_run(key, steps, rewards=1.0):
    """skip_predicted under a static mix (the sampler asks without labels), rewards all ``rewards``."""
    labels = ["echo"] * 40 + ["digit"] * 40
    strategy = build_strategy(
        {
            "pre_select": {"name": "skip_predicted", "params": {"min_keep": 0.05}},
            "mix": {"mixer": "static", "warmup_steps": 0, "update_every": 1},
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
    stream = itertools.chain.from_iterable(iter(sampler) for _ in itertools.count())
    for step in range(steps):
        drawn = [next(stream) for _ in range(8)]
        batch = RolloutBatch(
            rewards=torch.full((16,), rewards),
            group_ids=torch.arange(8).repeat_interleave(2),
            prompt_keys=[key(r) for r in drawn for _ in range(2)],
            domains=[labels[r] for r in drawn for _ in range(2)],
        )
        strategy.apply(batch, step, sync=False)
    return strategy


def test_a_filter_whose_rollout_keys_are_not_the_samplers_warns_naming_the_keys():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        strategy = mixing_run(lambda r: f"row-{r}", steps=30)
    messages = filter_warnings(record)
    assert strategy.pre_select.skipped == 0
    assert len(messages) == 1 and "prompt_keys must name prompts as the sampler does" in messages[0], messages


def test_a_filter_no_sampler_asks_warns_naming_the_sampler():
    strategy = build_strategy("skip")
    batch = RolloutBatch(
        rewards=torch.zeros(8),
        group_ids=torch.arange(4).repeat_interleave(2),
        prompt_keys=[k for k in PROMPTS[:4] for _ in range(2)],
    )
    with pytest.warns(UserWarning, match="no prompt sampler asks it"):
        for step in range(12):
            strategy.apply(batch, step, sync=False)


def test_a_filter_that_skips_or_has_not_met_its_prompts_again_stays_quiet():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        acting = zero_reward_run("skip", rows(), steps=30)
        # A mixing sampler asks without labels; in the first pass every candidate is new, so nothing is skipped yet.
        first_pass = mixing_run(lambda r: r, steps=9)
        later = mixing_run(lambda r: r, steps=30)
    assert acting.pre_select.skipped > 0 and later.pre_select.skipped > 0
    assert first_pass.pre_select.skipped == 0 and first_pass.pre_select.metrics()["pre_select/skipped_states"] > 0
    assert filter_warnings(record) == []


# ------------------------------------------------------------------ every generated round


def test_the_signal_buffer_shows_the_filter_every_round_and_apply_does_not_again():
    strategy = build_strategy("dapo+skip")
    buffer = SignalGroupBuffer(strategy)
    buffer.start_step(num_groups=2, step=0)
    keys = iter(PROMPTS)
    added = 0
    while buffer.should_generate_more():
        rewards = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # one signal group of three per round
        round_keys = [next(keys) for _ in range(3)]
        buffer.add(
            RolloutBatch(
                rewards=rewards,
                group_ids=torch.arange(3).repeat_interleave(2),
                prompt_keys=[k for k in round_keys for _ in range(2)],
            )
        )
        added += 3
    taken = buffer.take()
    history = strategy.pre_select.history
    assert added == 6 and history.size == 6 and history.seen[:6].tolist() == [1] * 6
    trained = RolloutBatch(
        rewards=taken.rewards, group_ids=taken.group_index, prompt_keys=[PROMPTS[2], PROMPTS[2], PROMPTS[5], PROMPTS[5]]
    )
    decision = strategy.apply(trained, 0, sync=False)
    assert history.seen[:6].tolist() == [1] * 6, "the trained groups are not observed twice"
    assert decision.metrics["pre_select/skipped_states"] == strategy.pre_select.metrics()["pre_select/skipped_states"]


def test_the_signal_buffer_of_a_filter_needs_prompt_keys():
    buffer = SignalGroupBuffer(build_strategy("dapo+skip"))
    buffer.start_step(num_groups=1)
    with pytest.raises(BatchError, match="prompt_keys"):
        buffer.add(RolloutBatch(rewards=torch.tensor([0.0, 1.0]), group_ids=torch.tensor([0, 0])))
