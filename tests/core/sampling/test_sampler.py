"""DomainMixingSampler: proportions, within-domain passes, GRPO/shard layouts, exact resume, errors."""

import io
import itertools
from collections import Counter

import numpy as np
import pytest
import torch

from dataflex_callbacks import ConfigError, DomainMixingSampler, RolloutBatch, build_strategy


def make_labels(sizes):
    """Interleaved labels, so a domain's rows are not one contiguous block of indices."""
    labels = [d for d, n in sizes.items() for _ in range(n)]
    return [labels[i] for i in np.random.default_rng(123).permutation(len(labels))]


def take(iterator, n):
    return list(itertools.islice(iterator, n))


def shares(indices, labels, domains):
    counts = Counter(labels[i] for i in indices)
    return {d: counts[d] / len(indices) for d in domains}


def endless(sampler):
    """A host's epoch loop: iter() once per epoch, forever."""
    while True:
        yield from sampler


# ------------------------------------------------------------------ proportions


@pytest.mark.parametrize(
    "target", [{"a": 0.5, "b": 0.3, "c": 0.2}, {"a": 0.1, "b": 0.1, "c": 0.8}, {"a": 0.0, "b": 0.5, "c": 0.5}]
)
def test_fixed_proportions_within_two_points_over_5000_draws(target):
    labels = make_labels({"a": 300, "b": 200, "c": 100})
    sampler = DomainMixingSampler(labels=labels, proportions=target, batch_size=50, num_samples=5000, seed=1)
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == 5000
    got = shares(drawn, labels, "abc")
    for d in "abc":
        assert abs(got[d] - target[d]) < 0.02, (d, got, target)
    assert sampler.actual_proportions() == pytest.approx(got)
    assert sampler.target_proportions == target


def test_recent_window_follows_a_proportion_change():
    labels = make_labels({"a": 500, "b": 500, "c": 500})
    sampler = DomainMixingSampler(
        labels=labels, proportions={"a": 0.8, "b": 0.1, "c": 0.1}, batch_size=100, num_samples=100_000, seed=2
    )
    stream = iter(sampler)
    before = take(stream, 2000)
    assert sampler.actual_proportions(recent=True)["a"] == pytest.approx(0.8, abs=0.03)
    new = {"a": 0.1, "b": 0.2, "c": 0.7}
    sampler.set_proportions(new)
    after = take(stream, 2000)  # 20 chunks: exactly the recent window
    recent = sampler.actual_proportions(recent=True)
    assert recent == pytest.approx(shares(after, labels, "abc"))
    for d in "abc":
        assert abs(recent[d] - new[d]) < 0.03, recent
    overall = sampler.actual_proportions()
    assert overall == pytest.approx(shares(before + after, labels, "abc"))
    assert sampler.target_proportions == new


def test_rows_drawn_without_replacement_within_a_domain_then_reshuffled():
    sizes = {"a": 7, "b": 13, "c": 5}
    labels = make_labels(sizes)
    sampler = DomainMixingSampler(labels=labels, batch_size=4, num_samples=600, seed=3)
    stream = list(sampler)
    for d, n in sizes.items():
        rows = sorted(i for i, label in enumerate(labels) if label == d)
        of_domain = [i for i in stream if labels[i] == d]
        passes = [of_domain[k : k + n] for k in range(0, len(of_domain) - n + 1, n)]
        assert len(passes) >= 5
        for one_pass in passes:  # every row exactly once per pass
            assert sorted(one_pass) == rows
        assert len({tuple(p) for p in passes}) > 1  # reshuffled between passes


def test_passes_continue_across_epochs():
    labels = make_labels({"a": 10, "b": 10})
    sampler = DomainMixingSampler(labels=labels, batch_size=3, num_samples=9, seed=4)
    stream = list(sampler) + list(sampler) + list(sampler) + list(sampler)
    assert sampler.epoch == 4
    of_a = [i for i in stream if labels[i] == "a"][:10]
    if len(of_a) == 10:
        assert sorted(of_a) == sorted(i for i, label in enumerate(labels) if label == "a")
    assert list(sampler) != list(sampler)  # a new epoch is a new draw


# ------------------------------------------------------------------ layouts


def trl_repeat_sampler():
    pytest.importorskip("trl")
    from trl.trainer.grpo_trainer import RepeatSampler

    return RepeatSampler


def block_pattern(stream, batch_size, num_generations, repeat_count):
    """Replace each index by its first-appearance rank within its chunk: the stream's shape."""
    block = batch_size * num_generations * repeat_count
    assert len(stream) % block == 0
    pattern = []
    for start in range(0, len(stream), block):
        first = {}
        pattern.extend(first.setdefault(i, len(first)) for i in stream[start : start + block])
    return pattern


# (num_generations, per_device_train_batch_size, world_size, steps_per_generation, num_iterations)
GRPO_CASES = [(2, 3, 2, 4, 1), (4, 4, 1, 1, 1), (8, 2, 4, 2, 2), (3, 6, 1, 2, 3), (1, 5, 2, 1, 1)]


@pytest.mark.parametrize("num_generations, per_device, world, steps_per_generation, num_iterations", GRPO_CASES)
def test_grpo_layout_matches_trl_repeat_sampler(
    num_generations, per_device, world, steps_per_generation, num_iterations
):
    RepeatSampler = trl_repeat_sampler()
    # TRL's GRPOTrainer._get_train_sampler arithmetic.
    generation_batch_size = per_device * world * steps_per_generation
    batch_size = generation_batch_size // num_generations
    repeat_count = num_iterations * steps_per_generation
    num_samples = 5 * batch_size + 1  # an incomplete last chunk, dropped by both
    reference = RepeatSampler(
        range(num_samples), mini_repeat_count=num_generations, batch_size=batch_size, repeat_count=repeat_count, seed=0
    )
    # Large domains: no domain wraps inside an epoch, so rows within a chunk are distinct as in TRL.
    labels = make_labels({"x": 200, "y": 200, "z": 200})
    sampler = DomainMixingSampler(
        labels=labels,
        batch_size=batch_size,
        num_generations=num_generations,
        repeat_count=repeat_count,
        num_samples=num_samples,
        seed=0,
    )
    ours, theirs = list(sampler), list(reference)
    assert len(ours) == len(theirs) == len(sampler) == len(reference)
    assert block_pattern(ours, batch_size, num_generations, repeat_count) == block_pattern(
        theirs, batch_size, num_generations, repeat_count
    )
    # And spelled out: each prompt num_generations times in a row, each chunk repeat_count times.
    shaped = np.array(ours).reshape(-1, repeat_count, batch_size, num_generations)
    assert (shaped == shaped[..., :1]).all()
    assert (shaped == shaped[:, :1]).all()


def test_grpo_layout_gives_every_rank_the_same_stream():
    labels = make_labels({"a": 40, "b": 30, "c": 20})
    streams = [
        list(
            DomainMixingSampler(
                labels=labels, batch_size=6, num_generations=4, repeat_count=2, num_replicas=4, rank=r, seed=7
            )
        )
        for r in range(4)
    ]
    assert all(s == streams[0] for s in streams)


@pytest.mark.parametrize("num_replicas", [2, 3])
def test_shard_layout_ranks_are_disjoint_and_together_the_global_draw(num_replicas):
    labels = make_labels({"a": 300, "b": 200, "c": 150})
    batch_size, num_samples = 5, 120
    kwargs = dict(
        labels=labels, proportions={"a": 0.2, "b": 0.3, "c": 0.5}, num_samples=num_samples, seed=9, layout="shard"
    )
    ranks = [
        list(DomainMixingSampler(batch_size=batch_size, num_replicas=num_replicas, rank=r, **kwargs))
        for r in range(num_replicas)
    ]
    whole = list(DomainMixingSampler(batch_size=batch_size * num_replicas, num_replicas=1, rank=0, **kwargs))
    assert all(len(s) == len(whole) // num_replicas for s in ranks)
    for i, j in itertools.combinations(range(num_replicas), 2):
        assert not set(ranks[i]) & set(ranks[j])
    # Global chunk c, position p belongs to rank p % R.
    chunk = batch_size * num_replicas
    for c in range(len(whole) // chunk):
        global_chunk = whole[c * chunk : (c + 1) * chunk]
        for r in range(num_replicas):
            assert ranks[r][c * batch_size : (c + 1) * batch_size] == global_chunk[r::num_replicas]


# ------------------------------------------------------------------ resume

LABELS = make_labels({"a": 23, "b": 17, "c": 11})


def reward_of(index, j):
    """Deterministic reward of response j to prompt `index`; domain c is never solved."""
    if LABELS[index] == "c":
        return 0.0
    return float((index * 31 + j * 17) % 5 >= 2)


def rollout_batch(indices, num_generations):
    """A GRPO batch from consecutive groups of num_generations responses to one prompt."""
    rewards = torch.tensor([reward_of(i, k % num_generations) for k, i in enumerate(indices)])
    group_ids = torch.arange(len(indices)) // num_generations
    means = rewards.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations)
    return RolloutBatch(
        rewards,
        group_ids=group_ids,
        advantages=rewards - means,
        domains=[LABELS[i] for i in indices],
        prompt_keys=list(indices),
    )


SCHEDULE = [{"a": 0.6, "b": 0.3, "c": 0.1}, {"a": 0.1, "b": 0.1, "c": 0.8}, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}]


class Run:
    """A training loop: each step consumes `step_size` indices, then updates the proportions."""

    def __init__(self, driver, resume, step_size=6):
        self.driver, self.step_size = driver, step_size
        self.strategy = None
        if driver != "set_proportions":
            config = {"mix": {"mixer": {"name": "dump_ucb", "temperature": 0.05}, "warmup_steps": 2, "update_every": 1}}
            if driver == "strategy+pre_select":  # prompts skipped before rollout: replayed from the row log
                config["pre_select"] = {"name": "skip_zero_variance", "explore": 0.3}
            self.strategy = build_strategy(config)
        # 4 prompts x 2 generations per chunk; 3 chunks per epoch of 12 prompts.
        self.sampler = DomainMixingSampler(
            labels=LABELS,
            batch_size=4,
            num_generations=2,
            num_samples=12,
            strategy=self.strategy,
            seed=11,
            resume=resume,
        )

    def step(self, stream, step):
        indices = take(stream, self.step_size)
        if self.strategy is not None:
            self.strategy.apply(rollout_batch(indices, 2), step)
        else:
            self.sampler.set_proportions(SCHEDULE[step % len(SCHEDULE)])
        return indices

    def state(self):
        state = {
            "sampler": self.sampler.state_dict(),
            "strategy": None if self.strategy is None else self.strategy.state_dict(),
        }
        buffer = io.BytesIO()  # as a checkpoint would: through torch.save
        torch.save(state, buffer)
        buffer.seek(0)
        return torch.load(buffer, weights_only=False)

    def load(self, state):
        self.sampler.load_state_dict(state["sampler"])
        if self.strategy is not None:
            self.strategy.load_state_dict(state["strategy"])


@pytest.mark.parametrize("driver", ["set_proportions", "strategy", "strategy+pre_select"])
@pytest.mark.parametrize("resume", ["replay", "continue"])
@pytest.mark.parametrize("save_at", [1, 3, 4, 8, 11])  # step 4 and 8 end an epoch (24 indices = 4 steps)
def test_resumed_run_yields_exactly_the_uninterrupted_stream(driver, resume, save_at):
    total_steps = 14
    full = Run(driver, resume)
    stream = endless(full.sampler)
    expected = [full.step(stream, s) for s in range(total_steps)]
    if driver != "set_proportions":  # the mixer did move the proportions mid-epoch
        assert full.strategy.mixing.last_update_step == total_steps - 1
    if driver == "strategy+pre_select":
        assert full.strategy.pre_select.skipped > 0

    first = Run(driver, resume)
    stream = endless(first.sampler)
    got = [first.step(stream, s) for s in range(save_at)]
    state = first.state()

    second = Run(driver, resume)
    second.load(state)
    stream = endless(second.sampler)
    if resume == "replay":  # the host re-iterates the epoch and skips what it already consumed
        consumed_in_epoch = (save_at * second.step_size) % len(second.sampler)
        take(stream, consumed_in_epoch)
    got += [second.step(stream, s) for s in range(save_at, total_steps)]

    assert got == expected
    if driver != "set_proportions":
        assert second.strategy.target_proportions == full.strategy.target_proportions
        assert second.strategy.mixing.drawn_total == full.strategy.mixing.drawn_total
    assert second.sampler.actual_proportions() == full.sampler.actual_proportions()


def test_state_mismatch_is_refused():
    state = DomainMixingSampler(labels=LABELS, batch_size=4).state_dict()
    with pytest.raises(ConfigError, match="batch_size|draw_size"):
        DomainMixingSampler(labels=LABELS, batch_size=5).load_state_dict(state)
    with pytest.raises(ConfigError, match="seed"):
        DomainMixingSampler(labels=LABELS, batch_size=4, seed=1).load_state_dict(state)


def test_reiterating_mid_epoch_starts_a_fresh_epoch():
    sampler = DomainMixingSampler(labels=LABELS, batch_size=4, num_samples=20, seed=5)
    first = take(iter(sampler), 7)
    again = list(sampler)
    assert len(again) == len(sampler) and again[:7] != first


# ------------------------------------------------------------------ inputs


def test_unknown_domain_in_proportions():
    with pytest.raises(ConfigError, match=r"unknown domain\(s\) \['z'\]"):
        DomainMixingSampler(labels=LABELS, proportions={"a": 0.5, "b": 0.25, "z": 0.25})
    sampler = DomainMixingSampler(labels=LABELS)
    with pytest.raises(ConfigError, match="unknown domain"):
        sampler.set_proportions({"a": 0.5, "b": 0.25, "c": 0.0, "z": 0.25})


def test_domain_without_rows():
    with pytest.raises(ConfigError, match=r"\['d'\] have no rows"):
        DomainMixingSampler(labels=LABELS, domains=["a", "b", "c", "d"])
    strategy = build_strategy({"mix": {"mixer": "static", "domains": ["a", "d"]}})
    with pytest.raises(ConfigError, match="no rows"):
        DomainMixingSampler(labels=LABELS, strategy=strategy)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"a": 0.5, "b": 0.4, "c": 0.0}, "sum to 0.9"),
        ({"a": 1.2, "b": -0.2, "c": 0.0}, "negative"),
        ({"a": 0.5, "b": 0.5}, "no proportion for domain"),
    ],
)
def test_invalid_proportions(bad, message):
    with pytest.raises(ConfigError, match=message):
        DomainMixingSampler(labels=LABELS, proportions=bad)
    with pytest.raises(ConfigError, match=message):
        DomainMixingSampler(labels=LABELS).set_proportions(bad)


def test_dataset_without_domain_column_names_its_columns():
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({"prompt": ["p0", "p1"], "answer": ["0", "1"]})
    with pytest.raises(ConfigError, match=r"no domain column 'domain'.*\['prompt', 'answer'\]"):
        DomainMixingSampler(dataset)
    with pytest.raises(ConfigError, match=r"no domain field 'topic'.*\['prompt', 'domain'\]"):
        DomainMixingSampler([{"prompt": "p", "domain": "a"}], domain_key="topic")


def test_iterable_dataset_points_to_interleave_datasets():
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({"prompt": ["p0", "p1"], "domain": ["a", "b"]}).to_iterable_dataset()
    with pytest.raises(ConfigError, match="interleave_datasets"):
        DomainMixingSampler(dataset)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([{"domain": "a"}])

    with pytest.raises(ConfigError, match="interleave_datasets"):
        DomainMixingSampler(Stream())


def test_bad_sizes_and_choices():
    with pytest.raises(ValueError, match="batch_size"):
        DomainMixingSampler(labels=LABELS, batch_size=0)
    with pytest.raises(
        ConfigError, match=r"prompt\(s\) to draw from \(num_samples\) but one batch needs 100 distinct"
    ) as caught:
        DomainMixingSampler(labels=LABELS, batch_size=100)
    assert (caught.value.prompts_available, caught.value.prompts_needed) == (len(LABELS), 100)
    with pytest.raises(ValueError, match="layout"):
        DomainMixingSampler(labels=LABELS, layout="ddp")
    with pytest.raises(ConfigError, match="rank"):
        DomainMixingSampler(labels=LABELS, layout="shard", num_replicas=2, rank=2)


def test_a_strategy_driven_sampler_refuses_set_proportions():
    strategy = build_strategy("dump_ucb")
    sampler = DomainMixingSampler(labels=LABELS, strategy=strategy)
    assert strategy.domains == ["a", "b", "c"]
    with pytest.raises(ConfigError, match="follows its strategy"):
        sampler.set_proportions({"a": 1.0, "b": 0.0, "c": 0.0})


def test_strategy_domain_order_is_kept():
    strategy = build_strategy({"mix": {"mixer": "static", "domains": ["c", "a", "b"]}})
    sampler = DomainMixingSampler(labels=LABELS, strategy=strategy)
    assert sampler.domains == ["c", "a", "b"]


# ------------------------------------------------------------------ datasets


def test_works_with_datasets_dataset_and_list_of_dicts():
    datasets = pytest.importorskip("datasets")
    rows = [{"prompt": f"p{i}", "topic": label} for i, label in enumerate(LABELS)]
    dataset = datasets.Dataset.from_list(rows)
    from_dataset = DomainMixingSampler(dataset, domain_key="topic", batch_size=4, seed=6)
    from_list = DomainMixingSampler(rows, domain_key="topic", batch_size=4, seed=6)
    assert list(from_dataset) == list(from_list)
    loader = torch.utils.data.DataLoader(dataset, sampler=from_dataset, batch_size=4, collate_fn=lambda b: b)
    batches = list(loader)
    assert len(batches) == len(from_dataset) // 4
    assert all(LABELS[int(row["prompt"][1:])] == row["topic"] for b in batches for row in b)
    assert sum(len(b) for b in batches) == len(from_dataset)


# ------------------------------------------------------------------ mixer-driven


@pytest.mark.parametrize("mixer", ["dump_ucb", "learnability"])
def test_mixer_moves_data_away_from_an_unlearnable_domain(mixer):
    domains = ["easy", "medium", "never"]
    labels = make_labels({d: 60 for d in domains})
    solve_rate = {"easy": 0.5, "medium": 0.35, "never": 0.0}
    strategy = build_strategy({"mix": {"mixer": mixer, "warmup_steps": 4, "update_every": 2}})
    num_generations, batch_size = 4, 12
    sampler = DomainMixingSampler(
        labels=labels,
        strategy=strategy,
        batch_size=batch_size,
        num_generations=num_generations,
        num_samples=10_000,
        seed=0,
    )
    generator = torch.Generator().manual_seed(0)
    stream = iter(sampler)
    steps = 40
    for step in range(steps):
        indices = take(stream, batch_size * num_generations)
        p = torch.tensor([solve_rate[labels[i]] for i in indices])
        rewards = torch.bernoulli(p, generator=generator)
        group_ids = torch.arange(len(indices)) // num_generations
        means = rewards.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations)
        decision = strategy.apply(
            RolloutBatch(
                rewards, group_ids=group_ids, advantages=rewards - means, domains=[labels[i] for i in indices]
            ),
            step,
        )
    uniform = 1 / 3
    assert strategy.target_proportions["never"] < uniform / 2
    assert sampler.actual_proportions(recent=True)["never"] < uniform / 2
    assert decision.metrics["mix/actual/never"] == pytest.approx(sampler.actual_proportions(recent=True)["never"])
    assert decision.metrics["mix/signal/never"] < decision.metrics["mix/signal/easy"]
    assert strategy.target_proportions["never"] >= strategy.mixing.mixer.floor - 1e-12
    # The strategy saw exactly what the sampler drew.
    assert sum(strategy.mixing.drawn_total.values()) == sampler.drawn_total.sum() == steps * batch_size


@pytest.mark.parametrize("batch_size", [1, 4, 16])
def test_small_chunk_shortcut_draws_the_same_stream(monkeypatch, batch_size):
    import dataflex_callbacks.sampling._block_drawer as drawer_module

    labels = make_labels({"a": 9, "b": 5, "c": 30})
    kwargs = dict(
        labels=labels, proportions={"a": 0.5, "b": 0.3, "c": 0.2}, batch_size=batch_size, num_samples=480, seed=8
    )

    def two_epochs():
        sampler = DomainMixingSampler(**kwargs)
        return list(sampler) + list(sampler)

    shortcut = two_epochs()
    monkeypatch.setattr(drawer_module, "SMALL_CHUNK", 0)
    assert two_epochs() == shortcut


def test_prompt_key_column_names_the_prompts_the_filter_sees_and_a_missing_one_is_an_error():
    datasets = pytest.importorskip("datasets")

    from dataflex_callbacks import build_strategy

    data = datasets.Dataset.from_dict(
        {"domain": ["a"] * 4, "prompt": ["p0", "p1", "p2", "p3"], "qid": ["q0", "q1", "q2", "q3"]}
    )
    by_qid = DomainMixingSampler(data, batch_size=2, strategy=build_strategy("skip"), prompt_key_column="qid")
    default = DomainMixingSampler(data, batch_size=2, strategy=build_strategy("skip"))
    assert by_qid._keys == ["q0", "q1", "q2", "q3"]
    assert default._keys == ["p0", "p1", "p2", "p3"]
    with pytest.raises(ConfigError, match="prompt_key_column 'nope'.*columns are"):
        DomainMixingSampler(data, batch_size=2, strategy=build_strategy("skip"), prompt_key_column="nope")
