"""The testbed refuses what it cannot supply, at once: more prompts than a level's split holds, an unknown
split, a level named twice."""

import time

import pytest

from dataflex_callbacks.errors import InputError
from dataflex_callbacks.recipes import testbed
from dataflex_callbacks.recipes.testbed import split_of


def _add2_prompts():
    """Every prompt of level add2, written independently of the testbed's generator (operands reversed)."""
    return [f"{str(a)[::-1]}+{str(b)[::-1]}=" for a in range(10, 100) for b in range(10, 100)]


def test_a_levels_capacity_is_its_count_of_distinct_prompts_in_the_split():
    expected = sum(split_of(prompt) == "train" for prompt in _add2_prompts())
    assert testbed.split_capacity("add2", "train") == expected
    assert len(testbed.level_rows("add2", "train", expected)) == expected  # the whole split can be drawn


@pytest.mark.parametrize("count", [1000, 1_000_000])
def test_asking_a_level_for_more_than_it_holds_is_refused_at_once_naming_the_most(count):
    most = testbed.split_capacity("add2", "train")
    start = time.perf_counter()
    with pytest.raises(InputError, match=rf"'add2'.*{most}") as caught:
        testbed.level_rows("add2", "train", count)
    assert time.perf_counter() - start < 5.0  # before: 1000 took ~1 s of sampling, 1,000,000 minutes
    assert str(count) in str(caught.value) or f"{count:,}" in str(caught.value)


@pytest.mark.parametrize("split", ["bogus", "test", "pretrain"])
def test_an_unknown_split_or_one_without_a_default_size_is_refused(split, tmp_path):
    with pytest.raises(InputError, match="train") as caught:
        testbed.testbed_dataset(split=split)
    assert repr(split) in str(caught.value)
    with pytest.raises(InputError):
        testbed.write_jsonl(tmp_path / "rows.jsonl", split=split)
    assert not (tmp_path / "rows.jsonl").exists()  # before: an empty file was written


def test_pretrain_rows_with_an_explicit_size_are_still_served():
    assert len(testbed.testbed_dataset(split="pretrain", per_level=2, levels=["add2"])) == 2


def test_a_level_named_twice_is_refused():
    with pytest.raises(InputError, match="add2.*twice|twice.*add2"):
        testbed.testbed_rows("train", per_level=2, levels=["add2", "add2"])
