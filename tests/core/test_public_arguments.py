"""A wrong-typed argument to a public entry point is a `DataFlexError` naming the argument, the value and the fix.

Each row calls one entry point as a user might get it wrong (a string step, arguments swapped, a
number for a dataset); before, these failed deep inside with a raw `TypeError` or `AttributeError`.
An `ArgumentError` is also a `TypeError`, the class it replaces.
"""

import pytest
import torch

from dataflex_callbacks import (
    ArgumentError,
    BatchError,
    ConfigError,
    DataFlexError,
    DomainMixingSampler,
    DomainTracker,
    RolloutBatch,
    Strategy,
    build_strategy,
    signal_rows,
)

DATA = [{"prompt": f"p{i}", "domain": ("math", "code")[i % 2]} for i in range(8)]


def batch():
    return RolloutBatch(
        torch.tensor([1.0, 0.0, 1.0, 0.0]), group_ids=torch.tensor([0, 0, 1, 1]), domains=["a", "a", "b", "b"]
    )


def swapped_apply_policy():
    strategy = build_strategy("difffilter")
    decision = strategy.apply(batch(), 0)
    return strategy.apply_policy(decision, batch())


# (id, call, error class, words the message holds: the argument, the bad value, what it takes or the fix)
ROWS = [
    (
        "apply step str",
        lambda: build_strategy("difffilter").apply(batch(), "x"),
        ArgumentError,
        ["Strategy.apply", "'step'", "an int", "'x'", "global_step"],
    ),
    ("apply step None", lambda: build_strategy("difffilter").apply(batch(), None), ArgumentError, ["'step'", "None"]),
    ("apply step float", lambda: build_strategy("difffilter").apply(batch(), 1.5), ArgumentError, ["'step'", "1.5"]),
    (
        "apply_policy arguments swapped",
        swapped_apply_policy,
        ArgumentError,
        ["apply_policy takes (batch, decision); got (decision, batch)", "swap"],
    ),
    (
        "apply_policy decision None",
        lambda: build_strategy("difffilter").apply_policy(batch(), None),
        ArgumentError,
        ["'decision'", "None", "defer_policy=True"],
    ),
    ("Strategy(5)", lambda: Strategy(5), ArgumentError, ["Strategy", "'config'", "5", "build_strategy"]),
    ("check_host(5)", lambda: build_strategy("difffilter").check_host(5), ArgumentError, ["'available'", "5"]),
    (
        "observe_sampled(5)",
        lambda: build_strategy("difffilter").observe_sampled(5),
        ArgumentError,
        ["'domain_counts'", "5", "mapping"],
    ),
    (
        "DomainMixingSampler(5)",
        lambda: DomainMixingSampler(5),
        ArgumentError,
        ["'dataset'", "got 5", "map-style dataset", "labels=[...]"],
    ),
    ("DomainMixingSampler(labels=5)", lambda: DomainMixingSampler(labels=5), ArgumentError, ["'labels'", "got 5"]),
    (
        "DomainMixingSampler(strategy=5)",
        lambda: DomainMixingSampler(DATA, strategy=5),
        ArgumentError,
        ["'strategy'", "got 5", "build_strategy"],
    ),
    (
        "DomainMixingSampler(domains=5)",
        lambda: DomainMixingSampler(DATA, domains=5),
        ConfigError,
        ["domains must be a list of domain names", "got 5"],
    ),
    ("DomainTracker.update(5)", lambda: DomainTracker(["a", "b"]).update(5), BatchError, ["RolloutBatch", "int"]),
    ("signal_rows(5)", lambda: signal_rows(5), BatchError, ["RolloutBatch", "int"]),
]


@pytest.mark.parametrize("call, error, words", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_a_wrong_typed_argument_is_a_dataflex_error_naming_it(call, error, words):
    with pytest.raises(DataFlexError) as info:
        call()
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for word in words:
        assert word in message, message
    assert "\n" not in message
    if error is ArgumentError:
        assert isinstance(info.value, TypeError)


def test_a_domain_name_given_alone_is_one_domain_not_its_letters():
    sampler = DomainMixingSampler(DATA, domains="math", batch_size=2)
    assert sampler.domains == ["math"] and {DATA[i]["domain"] for i in sampler} == {"math"}


def test_integer_steps_of_numpy_and_torch_are_steps():
    import numpy as np

    strategy = build_strategy(
        {"select": {"scorer": "group_solve_rate", "selector": "threshold_band", "warmup_steps": 3}}
    )
    strategy.warn_dropped_all = False
    solved_or_failed = RolloutBatch(torch.tensor([1.0, 1.0, 0.0, 0.0]), group_ids=torch.tensor([0, 0, 1, 1]))
    for step in (np.int64(3), torch.tensor(3)):
        assert not strategy.apply(solved_or_failed, step).keep.any()  # past the warm-up: both groups dropped
    assert strategy.apply(solved_or_failed, 2).keep.all()  # still warming up
