"""The testbed's graded tasks: deterministic, disjoint splits, right answers, difficulty varying inside a level."""

import json

import pytest

from dataflex_callbacks.errors import InputError
from dataflex_callbacks.recipes import testbed


def _value(prompt: str) -> str:
    """An independent reference: the expected completion computed from the prompt's text."""
    if prompt.startswith("sort "):
        return "".join(sorted(prompt[len("sort ") : -1]))
    expression = prompt.rstrip("=")
    for symbol, operation in (("+", int.__add__), ("-", int.__sub__), ("*", int.__mul__)):
        if symbol in expression:
            left, right = expression.split(symbol)  # both written least-significant digit first
            return str(operation(int(left[::-1]), int(right[::-1])))[::-1]
    raise AssertionError(prompt)


def test_same_seed_same_rows_other_seed_other_rows():
    first = testbed.testbed_dataset(seed=3, split="train")
    assert first == testbed.testbed_dataset(seed=3, split="train")
    assert first != testbed.testbed_dataset(seed=4, split="train")
    assert len(first) == sum(testbed.TRAIN_ROWS.values())
    # Pinned: a change to any generator or to the split hash shows here.
    assert testbed.level_rows("add3", "eval", 2, seed=0) == [
        {"prompt": "752+343=", "answer": "006", "domain": "add3", "difficulty": 2},  # 257 + 343 = 600
        {"prompt": "249+287=", "answer": "4271", "domain": "add3", "difficulty": 2},  # 942 + 782 = 1724
    ]


def test_splits_share_no_prompt_and_every_answer_is_right():
    prompts = {}
    for split in ("train", "calibration", "eval"):
        rows = testbed.testbed_dataset(seed=0, split=split)
        prompts[split] = {row["prompt"] for row in rows}
        assert len(prompts[split]) == len(rows)  # distinct inside a split
        assert all(testbed.split_of(row["prompt"]) == split for row in rows)
        assert all(row["answer"] == _value(row["prompt"]) for row in rows)
    assert not prompts["train"] & prompts["eval"]
    assert not prompts["train"] & prompts["calibration"]
    assert not prompts["calibration"] & prompts["eval"]


@pytest.mark.parametrize("level", sorted(testbed.LEVELS))
def test_difficulty_varies_inside_each_level(level):
    rows = testbed.level_rows(level, "calibration", 64, seed=0)
    assert len({row["difficulty"] for row in rows}) >= 3
    assert all(len(row["answer"]) <= testbed.LEVELS[level].max_answer_chars for row in rows)


def test_unknown_level_split_and_too_many_rows_are_refused():
    with pytest.raises(InputError, match="unknown testbed level.*add2"):
        testbed.level_rows("add9", "train", 1)
    with pytest.raises(InputError, match="unknown testbed split 'test'.*eval"):
        testbed.level_rows("add2", "test", 1)
    with pytest.raises(InputError, match="holds 77 distinct eval prompts.*at most 77"):
        testbed.level_rows("mul1x2", "eval", 500)  # 720 prompts in all, a tenth of them in eval


def test_jsonl_loads_as_a_run_dataset(tmp_path):
    pytest.importorskip("datasets")
    from dataflex_callbacks.recipes.tasks import load_prompt_dataset

    path = testbed.write_jsonl(tmp_path / "eval.jsonl", seed=0, split="eval", per_level=3)
    rows = [json.loads(line) for line in open(path)]
    assert rows == testbed.testbed_dataset(0, "eval", per_level=3)
    data = load_prompt_dataset(str(path))
    assert list(data["prompt"]) == [row["prompt"] for row in rows]
    assert sorted(set(data["domain"])) == sorted(testbed.LEVELS)


def test_worked_answers_slip_only_where_a_carry_or_borrow_is():
    import random

    rng = random.Random(0)
    for rows in (testbed.testbed_dataset(0, "calibration"),):
        assert all(testbed.slipped_answer(row["prompt"], rng, 0.0) == row["answer"] for row in rows)
        no_carry = [row for row in rows if row["difficulty"] == 0 and not row["prompt"].startswith("sort")]
        assert no_carry and all(testbed.slipped_answer(row["prompt"], rng, 1.0) == row["answer"] for row in no_carry)
    assert testbed.slipped_answer("99+99=", rng, 1.0) == "88"  # 198 with both carries dropped
    assert testbed.slipped_answer("11-9=", rng, 1.0) == "21"  # 11 - 9 without the borrow: 12
    assert testbed.slipped_answer("9*99=", rng, 1.0) == "11"  # 891 without carries: 11 (81 -> 1, 81 -> 1)
    assert testbed.slipped_answer("sort 9210:", rng, 1.0) == "0129"
