"""The testbed refuses what it cannot supply, at once: more prompts than a level's split holds, an unknown
split, a level named twice."""

import time

import pytest

from dataflex_callbacks.errors import ArgumentError, InputError
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


def test_one_level_name_as_a_string_is_that_level_not_its_letters():
    rows = testbed.testbed_dataset(0, "train", levels="add2")
    assert rows and {row["domain"] for row in rows} == {"add2"}
    assert rows == testbed.testbed_dataset(0, "train", levels=["add2"])  # before: "unknown level(s) ['a', 'd', ...]"
    assert testbed.testbed_rows("eval", per_level=3, levels="sub3") == testbed.testbed_rows("eval", 0, 3, ["sub3"])


def test_a_level_outside_the_mix_gets_its_default_rows_not_none():
    rows = testbed.testbed_dataset(0, "eval", levels=["mul1x2"])
    assert len(rows) == testbed.default_rows("eval", ["mul1x2"])["mul1x2"] > 0  # before: [] (0 rows in the mix)


@pytest.mark.parametrize("per_level", [-1, 0, {"add2": -2}, {"add2": 0}])
def test_a_count_that_asks_for_no_rows_is_refused_naming_it(per_level, tmp_path):
    with pytest.raises(InputError, match="per_level") as caught:
        testbed.testbed_dataset(0, "train", per_level=per_level, levels=["add2"])  # before: [] for -1
    assert "-2" in str(caught.value) or str(per_level) in str(caught.value)
    with pytest.raises(InputError):
        testbed.write_jsonl(tmp_path / "rows.jsonl", 0, "train", per_level, ["add2"])
    assert not (tmp_path / "rows.jsonl").exists()


@pytest.mark.parametrize("per_level", [1.5, True, "3", {"add2": 2.0}])
def test_a_count_that_is_not_an_int_is_refused_naming_the_value(per_level):
    with pytest.raises(ArgumentError, match=r"whole number of rows.*got .*\((float|bool|str)\)"):
        testbed.testbed_dataset(0, "train", per_level=per_level, levels=["add2", "add3"])  # before: 1 row per level


def test_a_negative_or_fractional_count_for_one_level_is_refused():
    with pytest.raises(InputError, match="count=-1"):
        testbed.level_rows("add2", "train", -1)
    with pytest.raises(ArgumentError, match="got 2.5"):
        testbed.level_rows("add2", "train", 2.5)
    assert testbed.level_rows("add2", "train", 0) == []  # zero rows of one level is a valid ask


def test_levels_that_are_not_names_are_refused_naming_the_levels():
    with pytest.raises(ArgumentError, match="got 5 .*add2, add3"):
        testbed.testbed_dataset(0, "train", levels=5)
