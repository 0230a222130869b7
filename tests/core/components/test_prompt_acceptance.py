"""The one pre-rollout acceptance loop (`components.prompt_acceptance.accept_from`, `Strategy.accept_from`), its feed.

Each host used to write this loop itself; these tests hold the core's loop to those loops, written
out here as references: the same accepted prompts, the same candidates carried over, the same
count of skipped ones, and the same generator state (the same uniforms drawn), for any keep
probabilities, batch sizes and needs.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataflex_callbacks.components.prompt_acceptance import accept_from, accept_prompts, set_group_size
from dataflex_callbacks.host import BatchFeed, Candidates


class FixedFilter:
    """A filter with a fixed keep probability per key; it records what it was told."""

    def __init__(self, probability):
        self.probability = probability
        self.recorded = []
        self.num_generations = 1

    def keep_probability(self, keys, labels=None):
        return np.array([self.probability[k] for k in keys], dtype=np.float64)

    def record_draws(self, accepted, skipped):
        self.recorded.append((list(accepted), int(skipped)))


def reference_batches(pre_select, fetch, size, rng, carry):
    """verl's loop before the core had one: fetch (or take the carry), accept, carry what was not considered."""
    accepted, count, skipped, keys_used = [], 0, 0, []
    while count < size:
        if carry is not None:
            candidates, carry = carry, None
        else:
            candidates = fetch()
        passed = accept_prompts(pre_select, candidates, size - count, rng)
        skipped += passed.skipped
        if passed.considered < len(candidates):
            carry = candidates[passed.considered :]
        if len(passed.accepted):
            accepted.append([candidates[i] for i in passed.accepted.tolist()])
            keys_used.extend(candidates[i] for i in passed.accepted.tolist())
            count += len(passed.accepted)
    pre_select.record_draws(keys_used, skipped)
    return accepted, carry


def reference_stream(pre_select, rows, position, count, rng):
    """TRL's dynamic-sampling stream before the core had the loop: windows of max(2 * need, 8) rows."""
    taken, skipped = [], 0
    while len(taken) < count:
        need = count - len(taken)
        window = [rows[(position + i) % len(rows)] for i in range(max(2 * need, 8))]
        passed = accept_prompts(pre_select, window, need, rng)
        taken += [window[i] for i in passed.accepted.tolist()]
        skipped += passed.skipped
        position += passed.considered
    pre_select.record_draws(taken, skipped)
    return taken, position


def batches_of(keys, size):
    """``fetch()`` over ``keys`` in batches of ``size``, wrapping around."""
    state = {"next": 0}

    def fetch():
        start = state["next"]
        state["next"] = start + size
        return [keys[(start + i) % len(keys)] for i in range(size)]

    return fetch


@given(
    probabilities=st.lists(st.floats(0.05, 1.0), min_size=4, max_size=30),
    batch=st.integers(1, 9),
    needs=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_the_batch_feed_takes_and_carries_exactly_as_a_hand_written_loop(probabilities, batch, needs, seed):
    keys = [f"k{i}" for i in range(len(probabilities))]
    ours, theirs = (
        FixedFilter(dict(zip(keys, probabilities, strict=True))),
        FixedFilter(dict(zip(keys, probabilities, strict=True))),
    )
    rng, reference_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    fetch, reference_fetch = batches_of(keys, batch), batches_of(keys, batch)
    carry = reference_carry = None
    for need in needs:
        feed = BatchFeed(fetch, lambda rows: Candidates(keys=rows), lambda rows, at: [rows[i] for i in at])
        feed.carry = carry
        drawn = accept_from(feed, ours, need, rng)
        carry = feed.carry
        expected, reference_carry = reference_batches(theirs, reference_fetch, need, reference_rng, reference_carry)
        assert feed.accepted == expected
        assert carry == reference_carry
        assert drawn.keys == [key for part in expected for key in part] and len(drawn.keys) == need
    assert ours.recorded == theirs.recorded
    assert rng.bit_generator.state == reference_rng.bit_generator.state


class Stream:
    """A `PromptSource` over rows read in a circle from ``position``, as TRL's dynamic-sampling stream reads them."""

    def __init__(self, rows, position=0):
        self.rows, self.position, self.taken = rows, position, []

    def offer(self, need):
        self.window = [self.rows[(self.position + i) % len(self.rows)] for i in range(max(2 * need, 8))]
        return Candidates(keys=self.window)

    def take(self, accepted, considered):
        self.taken += [self.window[i] for i in accepted.tolist()]
        self.position += considered


@given(
    probabilities=st.lists(st.floats(0.05, 1.0), min_size=3, max_size=25),
    count=st.integers(1, 15),
    position=st.integers(0, 30),
    seed=st.integers(0, 2**16),
)
def test_a_source_that_consumes_by_position_draws_as_the_streams_own_loop(probabilities, count, position, seed):
    keys = [f"k{i}" for i in range(len(probabilities))]
    ours, theirs = (
        FixedFilter(dict(zip(keys, probabilities, strict=True))),
        FixedFilter(dict(zip(keys, probabilities, strict=True))),
    )
    rng, reference_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    stream = Stream(keys, position)
    drawn = accept_from(stream, ours, count, rng)
    taken, reference_position = reference_stream(theirs, keys, position, count, reference_rng)
    assert stream.taken == drawn.keys == taken and stream.position == reference_position
    assert ours.recorded == theirs.recorded
    assert rng.bit_generator.state == reference_rng.bit_generator.state


def test_record_false_leaves_the_report_to_the_caller_and_exclusions_are_never_taken():
    keys = [f"k{i}" for i in range(10)]
    pre_select = FixedFilter({k: 1.0 for k in keys})

    class Excluding(Stream):
        def offer(self, need):
            offered = super().offer(need)
            return Candidates(keys=offered.keys, exclude=np.array([k in ("k0", "k1") for k in offered.keys]))

    source = Excluding(keys)
    drawn = accept_from(source, pre_select, 3, np.random.default_rng(0), record=False)
    assert drawn.keys == ["k2", "k3", "k4"] and drawn.skipped == 0 and pre_select.recorded == []


def test_set_group_size_tells_the_filter_what_a_skipped_prompt_saves():
    pre_select = FixedFilter({})
    set_group_size(pre_select, 8)
    assert pre_select.num_generations == 8
    set_group_size(None, 8)  # no filter: nothing to tell


@pytest.mark.parametrize("need", [1, 4])
def test_the_feed_hands_accepted_rows_over_in_draw_order(need):
    keys = [f"k{i}" for i in range(6)]
    feed = BatchFeed(batches_of(keys, 2), lambda rows: Candidates(keys=rows), lambda rows, at: [rows[i] for i in at])
    accept_from(feed, FixedFilter({k: 1.0 for k in keys}), need, np.random.default_rng(0))
    assert [key for part in feed.accepted for key in part] == keys[:need]
    assert feed.carry == (None if need % 2 == 0 else [keys[need]])


def test_hosts_draw_through_the_strategy_which_refuses_without_a_pre_select_part():
    from dataflex_callbacks import build_strategy
    from dataflex_callbacks.errors import ConfigError

    keys = [f"k{i}" for i in range(12)]
    strategy = build_strategy("greso")
    assert strategy.skips_prompts and not build_strategy("difffilter").skips_prompts
    strategy.set_completions_per_prompt(6)
    assert strategy.pre_select.num_generations == 6
    ours, reference = np.random.default_rng(3), np.random.default_rng(3)
    drawn = strategy.accept_from(Stream(keys), 5, ours)
    assert drawn.keys == accept_from(Stream(keys), build_strategy("greso").pre_select, 5, reference).keys
    assert ours.bit_generator.state == reference.bit_generator.state
    passed = strategy.accept_prompts(keys, 2, ours, labels=["a"] * len(keys))
    strategy.record_prompt_draws([keys[i] for i in passed.accepted], passed.skipped)
    for method, args in (("accept_from", (Stream(keys), 1, ours)), ("record_prompt_draws", ([], 0))):
        with pytest.raises(ConfigError, match=rf"Strategy.{method}: strategy 'difffilter' has no pre_select part"):
            getattr(build_strategy("difffilter"), method)(*args)
