"""Answer extraction and verifiers."""

import pytest

from dataflex_callbacks.recipes.tasks import (
    answer_is_readable,
    coin_flip,
    exact_match,
    extract_answer,
    extract_number,
    numeric_match,
    prefix_match,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("42", "42"),
        ("  7 \nmore", "7"),
        ("work... #### 18", "18"),
        ("The answer is: 5", ": 5"),
        ("Answer: yes\n", "yes"),
        ([{"role": "assistant", "content": " 9"}], "9"),
        ("", ""),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("42", 42.0),
        ("x = -3.5", -3.5),
        ("1,234 apples", 1234.0),
        ("#### 18", 18.0),
        ("a 3 then 4", None),  # prose: no final-answer slot
        ("none", None),
        (None, None),
        (7, 7.0),
        ("2e3", 2000.0),
    ],
)
def test_extract_number(text, expected):
    assert extract_number(text) == expected


@pytest.mark.parametrize(
    "text, expected", [("a 3 then 4", 4.0), ("so it is 12.0", 12.0), ("The answer is 5 or 7", None)]
)
def test_extract_number_from_prose_in_the_opt_in_free_text_mode(text, expected):
    assert extract_number(text, free_text=True) == expected


def test_matchers():
    assert exact_match(" 12\n", "12") and not exact_match("123", "12")
    assert numeric_match("12.0", "12") and not numeric_match("13", "12")
    assert not numeric_match("so it is 12.0", "12") and numeric_match("so it is 12.0", "12", free_text=True)
    assert not numeric_match("no number", "12")
    assert prefix_match(" 5555", "5") and not prefix_match("45", "5")
    assert not prefix_match("abc", "abcdefgh")


def test_coin_flip_is_deterministic_and_fair():
    draws = [coin_flip("coin", i) for i in range(2000)]
    assert draws == [coin_flip("coin", i) for i in range(2000)]
    assert 0.45 < sum(draws) / len(draws) < 0.55


def test_answer_readability():
    assert answer_is_readable("12", "numeric") and not answer_is_readable("twelve", "numeric")
    assert answer_is_readable("twelve", "exact") and not answer_is_readable("  ", "exact")
    assert not answer_is_readable(None, "exact")
