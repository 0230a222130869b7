"""The testbed's verifier credits the exact answer only: no hedge, negation, part, extra digit or
number-equal string.
"""

import pytest

from dataflex_callbacks.recipes import testbed


@pytest.mark.parametrize("completion", ["58", " 58", "58 ", [{"role": "assistant", "content": "58"}], "answer: 58"])
def test_the_exact_answer_scores(completion):
    assert testbed.verify(completion, "58")


@pytest.mark.parametrize(
    "completion",
    [
        "57",  # wrong
        "85",  # the digits in the wrong order (the forward form of the reversed answer)
        "58 or 59",  # a hedge
        "59 or 58",
        "not 58",  # a negation
        "5",  # a part
        "582",  # an extra digit
        "58 58",  # a repeat
        "",
        None,
    ],
)
def test_wrong_answers_score_zero(completion):
    assert not testbed.verify(completion, "58")


def test_number_equal_strings_are_not_the_answer():
    assert not testbed.verify("4", "04")  # 40 written least-significant digit first
    assert testbed.verify("04", "04")
    assert not testbed.verify("", "")  # an empty reference matches nothing


def test_reward_scores_each_completion():
    rewards = testbed.testbed_reward(
        prompts=["47+38="] * 3, completions=["58", "58 or 59", "85"], answer=["58"] * 3, domain=["add2"] * 3
    )
    assert rewards == [1.0, 0.0, 0.0]
