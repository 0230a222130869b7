"""DomainMixingSampler state: data fingerprint, bad input, weights_only checkpoints, reads that change nothing."""

import io
import itertools
import warnings

import numpy as np
import pytest
import torch

from dataflex_callbacks import ConfigError, DomainMixingSampler, build_strategy
from dataflex_callbacks.errors import StateError

LABELS = ["a", "b", "a", "c", "b", "a", "a", "c", "b", "a", "b", "a"] * 3  # 36 rows: a 18, b 12, c 6
PROPORTIONS = {"a": 0.5, "b": 0.3, "c": 0.2}


def take(iterator, n):
    return list(itertools.islice(iterator, n))


def saved_state(labels=LABELS, dataset=None, draws=10, **options):
    options = {"batch_size": 4, "seed": 3, "proportions": PROPORTIONS, **options}
    sampler = DomainMixingSampler(dataset, labels=labels if dataset is None else None, **options)
    take(iter(sampler), draws)
    return sampler.state_dict()


def through_checkpoint(state):
    """torch.save, then the safe default loading of Lightning and recent HF Trainer."""
    buffer = io.BytesIO()
    torch.save({"sampler": state}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)["sampler"]


# ------------------------------------------------------------------ a changed dataset is refused


def removed(labels):
    return labels[:-1]


def added(labels):
    return labels + ["b"]


def relabelled(labels):
    return ["c" if i == 0 else label for i, label in enumerate(labels)]


def reordered(labels):
    return labels[1:] + labels[:1]  # same counts, rows moved


@pytest.mark.parametrize(
    "change, message",
    [
        (removed, r"1 row\(s\) removed \(36 rows then, 35 now\)"),
        (added, r"1 row\(s\) added .*domain 'b' had 12 rows, has 13"),
        (relabelled, r"domain 'a' had 18 rows, has 17; domain 'c' had 6 rows, has 7"),
        (reordered, r"the rows carry different domain labels \(rows reordered or relabelled\)"),
    ],
)
def test_a_state_loaded_over_changed_labels_is_refused_with_what_changed(change, message):
    state = through_checkpoint(saved_state())
    sampler = DomainMixingSampler(labels=change(LABELS), batch_size=4, seed=3, proportions=PROPORTIONS)
    with pytest.raises(StateError, match="saved for different data: " + message):
        sampler.load_state_dict(state)


def test_a_state_loaded_over_reordered_prompts_of_one_domain_is_refused():
    datasets = pytest.importorskip("datasets")
    prompts = [f"question {i}" for i in range(len(LABELS))]
    data = datasets.Dataset.from_dict({"prompt": prompts, "domain": LABELS})
    state = saved_state(dataset=data)
    # Rows 0 and 2 are both domain "a": the labels are unchanged, the prompts are not.
    swapped = prompts[:]
    swapped[0], swapped[2] = swapped[2], swapped[0]
    changed = datasets.Dataset.from_dict({"prompt": swapped, "domain": LABELS})
    with pytest.raises(StateError, match=r"the prompts differ \(rows reordered or edited"):
        DomainMixingSampler(changed, batch_size=4, seed=3, proportions=PROPORTIONS).load_state_dict(state)
    # The same data rebuilt another way (another chunking) is the same data.
    rebuilt = datasets.concatenate_datasets([data.select(range(10)), data.select(range(10, len(LABELS)))])
    DomainMixingSampler(rebuilt, batch_size=4, seed=3, proportions=PROPORTIONS).load_state_dict(state)


# ------------------------------------------------------------------ nulls, seeds, garbage states


@pytest.mark.parametrize("null", [None, float("nan"), np.float64("nan")])
def test_a_null_domain_label_is_refused_with_its_row_and_column(null):
    labels = LABELS[:5] + [null] + LABELS[6:]
    with pytest.raises(ConfigError, match=r"1 row\(s\) have a null domain label in column 'labels' \(row 5\)"):
        DomainMixingSampler(labels=labels, batch_size=4)
    rows = [{"prompt": f"p{i}", "topic": label} for i, label in enumerate(labels)]
    with pytest.raises(ConfigError, match=r"null domain label in column 'topic' \(row 5\)"):
        DomainMixingSampler(rows, domain_key="topic", batch_size=4)
    datasets = pytest.importorskip("datasets")
    if null is None:  # an Arrow string column holds None, not NaN
        with pytest.raises(ConfigError, match=r"null domain label in column 'topic' \(row 5\)"):
            DomainMixingSampler(datasets.Dataset.from_list(rows), domain_key="topic", batch_size=4)


def test_a_domain_named_none_is_not_a_null():
    sampler = DomainMixingSampler(labels=["None", "nan"] * 4, batch_size=2)
    assert sampler.domains == ["None", "nan"]


def test_a_null_prompt_is_refused_with_its_row_and_column():
    datasets = pytest.importorskip("datasets")
    prompts = [f"p{i}" for i in range(len(LABELS))]
    prompts[7] = None
    data = datasets.Dataset.from_dict({"prompt": prompts, "domain": LABELS})
    with pytest.raises(ConfigError, match=r"null prompt in column 'prompt' \(row 7\)"):
        DomainMixingSampler(data, batch_size=4)
    rows = [{"prompt": p, "domain": d} for p, d in zip(prompts, LABELS, strict=True)]
    with pytest.raises(ConfigError, match=r"null prompt in column 'prompt' \(row 7\)"):
        DomainMixingSampler(rows, batch_size=4, strategy=build_strategy("skip"))
    keyed = datasets.Dataset.from_dict({"qid": [None] + list(range(1, len(LABELS))), "domain": LABELS})
    with pytest.raises(ConfigError, match=r"null prompt key in column 'qid' \(row 0\)"):
        DomainMixingSampler(keyed, batch_size=4, strategy=build_strategy("skip"), prompt_key_column="qid")


@pytest.mark.parametrize("seed", [-1, 1.5, "7", None, True])
def test_a_bad_seed_is_refused_naming_seed(seed):
    with pytest.raises(ValueError, match="'seed'"):
        DomainMixingSampler(labels=LABELS, batch_size=4, seed=seed)


def test_numpy_and_huge_seeds_are_seeds():
    def stream(seed):
        return list(DomainMixingSampler(labels=LABELS, batch_size=4, seed=seed))

    assert stream(np.int64(5)) == stream(5)
    assert len(stream(2**70)) == 36


@pytest.mark.parametrize(
    "state, error",
    [
        (None, "expects the dict returned by DomainMixingSampler.state_dict"),
        ([1, 2], "expects the dict returned by DomainMixingSampler.state_dict"),
        ("state", "expects the dict returned by DomainMixingSampler.state_dict"),
        ({"epoch": 0}, r"lacks key\(s\)"),
    ],
)
def test_a_state_that_is_not_a_sampler_state_is_one_clear_error(state, error):
    with pytest.raises(StateError, match=error):
        DomainMixingSampler(labels=LABELS, batch_size=4).load_state_dict(state)


@pytest.mark.parametrize(
    "key, value, error",
    [
        ("rng", "PCG64", "malformed"),
        ("rng", {"bit_generator": "MT19937"}, "malformed"),
        ("perm", [0, 1, 2], "does not fit"),
        ("perm", list(range(100, 136)), "does not fit"),
        ("pointers", [0, 99, 0], "does not fit"),
        ("epoch_rows", [[0, 1, 2]], "does not fit"),
        ("epoch_rows", "rows", "malformed"),
        ("position", 10_000, "does not fit"),
        ("drawn_total", [1, 2], "does not fit"),
        ("proportions", [0.5], "malformed"),
        ("uniforms", [0.5, 7.0], "does not fit"),
        ("data", "fingerprint", "fingerprint is malformed"),
        ("proportions", {"a": 2.0, "b": -1.0, "c": 0.0}, "negative"),
    ],
)
def test_a_corrupted_state_is_refused_and_leaves_the_sampler_untouched(key, value, error):
    state = saved_state()
    state[key] = value
    sampler = DomainMixingSampler(labels=LABELS, batch_size=4, seed=3, proportions=PROPORTIONS)
    fresh = DomainMixingSampler(labels=LABELS, batch_size=4, seed=3, proportions=PROPORTIONS)
    with pytest.raises((StateError, ConfigError), match=error):
        sampler.load_state_dict(state)
    assert list(sampler) == list(fresh)


# ------------------------------------------------------------------ safe checkpoints


def plain_types(value, path="state"):
    """Every leaf is a Python int / float / str / bool / None, containers are list / tuple / dict."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, str), (path, k)
            plain_types(v, f"{path}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            plain_types(v, f"{path}[{i}]")
    else:
        assert value is None or type(value) in (int, float, str, bool), (path, type(value))


def sampler_cases():
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({"prompt": [f"p{i}" for i in range(len(LABELS))], "domain": LABELS})
    np_props = {d: np.float64(p) for d, p in PROPORTIONS.items()}
    return {
        "proportions": lambda: DomainMixingSampler(labels=LABELS, batch_size=4, proportions=np_props, seed=np.int64(4)),
        "pool": lambda: DomainMixingSampler(labels=LABELS, batch_size=3),
        "mixer": lambda: DomainMixingSampler(data, batch_size=4, strategy=build_strategy("dump_ucb")),
        "skip": lambda: DomainMixingSampler(data, batch_size=4, strategy=build_strategy("skip")),
        "exact": lambda: DomainMixingSampler(labels=LABELS, batch_size=5, proportions=PROPORTIONS, quota="exact"),
        "shard": lambda: DomainMixingSampler(
            labels=LABELS,
            batch_size=2,
            layout="shard",
            num_replicas=3,
            rank=1,
            proportions=PROPORTIONS,
            num_generations=2,
        ),
    }


@pytest.mark.parametrize("case", ["proportions", "pool", "mixer", "skip", "exact", "shard"])
@pytest.mark.parametrize("draws", [0, 7, 36, 80])
def test_state_loads_with_weights_only_and_resumes_the_same_stream(case, draws):
    make = sampler_cases()[case]
    full = make()
    full.resume = "continue"
    stream = itertools.chain.from_iterable(iter(full) for _ in itertools.count())
    take(stream, draws)
    state = full.state_dict()
    plain_types(state)
    expected = take(stream, 60)

    resumed = make()
    resumed.resume = "continue"
    resumed.load_state_dict(through_checkpoint(state))
    stream = itertools.chain.from_iterable(iter(resumed) for _ in itertools.count())
    assert take(stream, 60) == expected


@pytest.mark.parametrize("batch_size", [2, 64])
def test_reading_the_state_changes_nothing(batch_size):
    """state_dict() mid-chunk, between chunks and mid drawn-ahead block leaves the stream and itself unchanged."""
    labels = ["a"] * 40 + ["b"] * 7 + ["c"] * 300

    def make():
        return DomainMixingSampler(
            labels=labels, batch_size=batch_size, proportions=PROPORTIONS, seed=9, num_samples=6000
        )

    expected = list(make())
    sampler = make()
    got, previous = [], None
    for i, index in enumerate(sampler):
        got.append(index)
        if i % 37 == 0:
            state = sampler.state_dict()
            again = sampler.state_dict()
            assert state == again
            assert previous is None or state != previous
            previous = state
    assert got == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make().load_state_dict(previous)
