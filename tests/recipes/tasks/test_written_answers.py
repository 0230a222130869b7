"""The multi-domain reward on answers as people and public datasets write them, one table row per case.

References are written as the datasets store them (GSM8K's ``#### 72`` solutions, MATH's
``\\boxed{\\frac{1}{2}}`` solutions, MMLU-Pro's letters A-J, K&K's "(1) Zoey is a knave" lines);
every row is scored through both entry points, TRL's `MultiDomainReward` and verl's
`compute_score`, which must agree with the expected score.
"""

import warnings

import pytest

from dataflex_callbacks.recipes.tasks.multi_domain_reward import MultiDomainReward, compute_score

GSM8K_72 = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
GSM8K_1000 = "The club raised 4 * 250 = <<4*250=1000>>1000 dollars.\n#### 1000"

# (completion, GSM8K reference, expected); by default only the final-answer slot is read: an <answer>
# block, the boxes (all must agree), the last "####" or "Answer:" line, or a completion that is the
# bare answer. Prose answers score 0 here and 1 in the opt-in free-text mode (FREE_TEXT below).
GSM8K = [
    ("48/2 = 24 in May, 48 + 24 = 72 in all.\n#### 72", GSM8K_72, 1.0),
    ("The answer is 1e3", GSM8K_1000, 0.0),  # prose: FREE_TEXT
    ("So the club raised 1,000 dollars.", GSM8K_1000, 0.0),
    ("**Answer:** 72", GSM8K_72, 1.0),
    ("My answer is 72 clips, not 70", GSM8K_72, 0.0),
    ("The answer is 5 and then I checked 7", "#### 5", 0.0),
    ("The answer is 5 and then I checked 7", "#### 7", 0.0),
    ("The answer is 5. Checking again: 3 + 4 = 7. Final answer: 7", "#### 7", 0.0),
    ("The answer is 5. Checking again: 3 + 4 = 7.\nFinal answer: 7", "#### 7", 1.0),  # an answer line is a slot
    ("\\boxed{5} because the answer is 7 when rounded", "#### 5", 1.0),  # a box wins over any marker
    ("It fell from 5 to 5 - 8 = -3 degrees.", "#### -3", 0.0),
    ("The answer is 25%.", "#### 25", 0.0),  # a percent against a plain number: 25% is 0.25
    ("Answer: **18**", "#### 18", 1.0),  # markdown emphasis around the answer
    ("<answer>7</answer> Check with 5.", "#### 5", 0.0),  # the answer block wins over a later number
    ("The answer is not 5, it is 7.", "#### 5", 0.0),  # a negated value is no answer
    ("The answer is not 5, it is 7.", "#### 7", 0.0),
    ("The answer isn't 5.", "#### 5", 0.0),
    ("The answer is 5 or 7.", "#### 5", 0.0),  # a hedge
    ("\\boxed{5} or \\boxed{7}", "#### 7", 0.0),  # a hedge across boxes
    ("The answer is 71", GSM8K_72, 0.0),
    ("I am not sure.", GSM8K_72, 0.0),
]

# (completion, MATH reference solution, expected)
MATH = [
    ("So $x = 4$.\n\\boxed{x=4}", "Solving, $x=4$. The answer is $\\boxed{4}$.", 1.0),  # an equation's last side
    ("\\boxed{48 + 24 = 72}", "\\boxed{72}", 1.0),
    ("\\boxed{\\frac{1}{2}}", "The probability is $\\boxed{\\frac{1}{2}}$.", 1.0),
    ("The answer is 0.5", "$\\boxed{\\frac{1}{2}}$", 0.0),
    ("\\boxed{1/2}", "$\\boxed{\\frac12}$", 1.0),  # MATH's brace-less one-digit fractions
    ("\\boxed{-\\dfrac{3}{4}}", "$\\boxed{-\\frac34}$", 1.0),
    ("\\boxed{2 \\times 10^{3}}", "$\\boxed{2000}$", 1.0),
    ("\\boxed{50\\%}", "$\\boxed{\\frac{1}{2}}$", 0.0),  # a percent against a plain number
    ("\\boxed{0.5\\%}", "$\\boxed{0.5}$", 0.0),
    ("\\boxed{25}", "$\\boxed{25\\%}$", 1.0),  # a bare number is read in the reference's unit
    ("\\boxed{0.25}", "$\\boxed{25\\%}$", 1.0),
    ("<answer>\\frac{1}{2}</answer>", "$\\boxed{0.5}$", 1.0),
    ("Final Answer: The final answer is $(1,2)$. I hope it is correct.", "$\\boxed{(1,2)}$", 1.0),  # Minerva's
    ("\\boxed{\\sqrt2}", "$\\boxed{\\sqrt{2}}$", 1.0),  # math-verify's equivalences
    ("\\boxed{10^3}", "$\\boxed{1000}$", 1.0),
    ("\\boxed{[1, 2)}", "$\\boxed{[1,2)}$", 1.0),
    ("\\boxed{\\{2, 1\\}}", "$\\boxed{\\{1,2\\}}$", 1.0),
    ("\\boxed{x=2 \\text{ or } x=-2}", "$\\boxed{-2}$", 0.0),  # a hedge
    ("\\boxed{x=2 \\text{ or } x=-2}", "$\\boxed{\\pm 2}$", 1.0),  # both solutions of a reference that has two
    ("\\boxed{5 \\text{ m}}", "$\\boxed{5 \\text{ km}}$", 0.0),  # another unit
    ("\\boxed{5 \\text{ kilometers}}", "$\\boxed{5 \\text{ km}}$", 1.0),
    ("\\boxed{2+2=5}", "$\\boxed{5}$", 0.0),  # an equation that is false states no value
    ("\\boxed{\\sqrt{2}}", "$\\boxed{\\sqrt{2}}$", 1.0),
    ("\\boxed{\\frac{1}{3}}", "$\\boxed{\\frac{1}{2}}$", 0.0),
    ("\\boxed{x=5}", "$\\boxed{4}$", 0.0),
    ("\\boxed{-4}", "$\\boxed{4}$", 0.0),
    ("The answer is \\boxed{\\frac{1}{2}", "$\\boxed{\\frac{1}{2}}$", 0.0),  # a truncated box is no answer
]

# (completion, MMLU-Pro answer letter or index, expected): ten options, A-J, in any case.
MMLU_PRO = [
    ("answer: b", "B", 1.0),
    ("Let's think step by step. The answer is (F).", "F", 1.0),
    ("The answer is (J)", "J", 1.0),
    ("the answer is (i)", "I", 1.0),
    ("Answer: C", "c", 1.0),  # a lowercase reference
    ("\\boxed{h}", "H", 1.0),
    ("The answer is (E).", 4, 1.0),  # a 0-based option index, as MMLU's answer column
    ("answer: b", "C", 0.0),
    ("The answer is a cell membrane.", "A", 0.0),  # the article, not option A
    ("The answer is (G).", "H", 0.0),
    ("The answer is A or B.", "A", 0.0),  # a hedge
    ("\\boxed{A/B}", "A", 0.0),
    ("\\boxed{\\text{B}}", "B", 1.0),
    ("**B**", "B", 1.0),
]

KK_TRUTH = "(1) Zoey is a knave\n(2) Oliver is a knight"
# (completion, K&K reference, expected)
KNIGHTS_KNAVES = [
    ("<answer>(1) Zoey is a knave\n(2) Oliver is a knight</answer>", KK_TRUTH, 1.0),
    ("<answer>(1) zoey is a knave (2) oliver is a knight</answer>", KK_TRUTH, 1.0),  # names in any case
    ("In conclusion, ZOEY is a knave and OLIVER is a knight.", KK_TRUTH, 1.0),
    ("Final answer: Zoey is a knave, Oliver is a knight.", "(1) zoey is a knave\n(2) oliver is a knight", 1.0),
    ("(1) Zoey is a knight (2) Oliver is a knave", KK_TRUTH, 0.0),
    ("<answer>(1) zoey is a knave</answer>", KK_TRUTH, 0.0),  # Oliver missing
    ("Zoey is a knight or a knave, Oliver is a knight", KK_TRUTH, 0.0),  # a hedge
    ("<answer>Zoey is either a knight or a knave, Oliver is a knight</answer>", KK_TRUTH, 0.0),
    ("Zoey is a knight. Wait: Zoey isn't a knight. Oliver is a knight.", KK_TRUTH, 1.0),  # "isn't" negates
]

ROWS = (
    [("openai/gsm8k", *row) for row in GSM8K]
    + [("lighteval/MATH", *row) for row in MATH]
    + [("TIGER-Lab/MMLU-Pro", *row) for row in MMLU_PRO]
    + [("kk_logic", *row) for row in KNIGHTS_KNAVES]
)


@pytest.mark.parametrize(
    "source, completion, reference, expected", ROWS, ids=[f"{source}-{i}" for i, (source, *_) in enumerate(ROWS)]
)
def test_written_answers_through_both_entry_points(source, completion, reference, expected):
    trl = MultiDomainReward()(["q"], [completion], data_source=[source], reward_model=[{"ground_truth": reference}])
    assert trl == [expected]
    assert compute_score(source, completion, reference, extra_info={"index": 0}) == expected


# Prose answers that paid by default before issue 38: now 1.0 only with free_text=True (0.0 in the tables above).
# The free-text rules: last box, else the last answer marker (####, "answer is", "answer:"), else the last number.
FREE_TEXT = [
    ("openai/gsm8k", *row)
    for row in [
        ("The answer is 1e3", GSM8K_1000, 1.0),
        ("So the club raised 1,000 dollars.", GSM8K_1000, 1.0),
        ("My answer is 72 clips, not 70", GSM8K_72, 1.0),  # any "answer is", first value of its sentence
        ("The answer is 5 and then I checked 7", "#### 5", 1.0),  # the marker's value, not the last number
        ("The answer is 5. Checking again: 3 + 4 = 7. Final answer: 7", "#### 7", 1.0),  # the last marker wins
        ("It fell from 5 to 5 - 8 = -3 degrees.", "#### -3", 1.0),
        ("The answer is not 5, it is 7.", "#### 7", 1.0),
    ]
] + [
    ("lighteval/MATH", *row)
    for row in [
        ("The answer is 0.5", "$\\boxed{\\frac{1}{2}}$", 1.0),
    ]
]


@pytest.mark.parametrize("source, completion, reference, expected", FREE_TEXT)
def test_prose_answers_pay_only_in_the_opt_in_free_text_mode(source, completion, reference, expected):
    trl = MultiDomainReward(free_text=True)(
        ["q"], [completion], data_source=[source], reward_model=[{"ground_truth": reference}]
    )
    assert trl == [expected]
    assert compute_score(source, completion, reference, free_text=True) == expected
    assert compute_score(source, completion, reference) == 0.0


UNREADABLE = [  # (data_source, reference no family can read)
    ("TIGER-Lab/MMLU-Pro", "K"),
    ("sciq", "Mitochondria"),
    ("kk_logic", "Nobody here is named."),
    ("openai/gsm8k", "####"),
]


@pytest.mark.parametrize("source, reference", UNREADABLE)
def test_an_unreadable_reference_scores_zero_with_one_warning(source, reference):
    reward = MultiDomainReward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # three training steps: one warning, no exception
            assert reward(["q", "q"], ["Answer: K", "answer: b"], data_source=[source] * 2, answer=[reference] * 2) == [
                0.0,
                0.0,
            ]
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert repr(reference) in str(caught[0].message) and "score 0" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert compute_score(source, "Answer: K", reference) == 0.0


# ------------------------------------------------------------------ properties over every way of writing a value

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dataflex_callbacks.recipes.tasks.multi_domain_reward import score_math, score_multiple_choice  # noqa: E402

MATH_WRITINGS = [  # how a completion may state the integer n in its final-answer slot
    lambda n: f"#### {n}",
    lambda n: f"\\boxed{{{n}}}",
    lambda n: f"\\boxed{{x = {n}}}",
    lambda n: f"Answer: {n}.0",
    lambda n: f"{n:,}",
    lambda n: f"<answer>{n}</answer>",
    lambda n: f"\\boxed{{\\frac{{{2 * n}}}{{2}}}}",
    lambda n: f"So the total is {n} apples.\n\\boxed{{{n} \\text{{ apples}}}}",
]
PROSE_WRITINGS = [  # how prose states it: read only with free_text=True
    lambda n: f"The answer is {n:,}.",
    lambda n: f"The answer is {n}e0 and I checked {n + 7}",
    lambda n: f"So the total is {n} apples.",
]


@settings(max_examples=80, deadline=None)
@given(st.integers(-(10**6), 10**6), st.sampled_from(range(len(MATH_WRITINGS))))
def test_every_writing_of_a_value_scores_one_and_of_its_neighbour_zero(n, writing):
    write = MATH_WRITINGS[writing]
    assert score_math(write(n), f"#### {n}") == 1.0
    assert score_math(write(n + 1), f"#### {n}") == 0.0


@settings(max_examples=40, deadline=None)
@given(st.integers(-(10**6), 10**6), st.sampled_from(range(len(PROSE_WRITINGS))))
def test_a_prose_writing_scores_only_in_the_opt_in_free_text_mode(n, writing):
    write = PROSE_WRITINGS[writing]
    assert score_math(write(n), f"#### {n}") == 0.0
    assert score_math(write(n), f"#### {n}", free_text=True) == 1.0
    assert score_math(write(n + 1), f"#### {n}", free_text=True) == 0.0


LETTER_WRITINGS = [
    lambda c: f"answer: {c.lower()}",
    lambda c: f"The answer is ({c}).",
    lambda c: f"\\boxed{{{c.lower()}}}",
    lambda c: f"<answer>{c}</answer>",
    lambda c: f"**Answer: {c}**",
    lambda c: f"({c.lower()})",
]


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from("ABCDEFGHIJ"),
    st.sampled_from("ABCDEFGHIJ"),
    st.sampled_from(range(len(LETTER_WRITINGS))),
    st.booleans(),
)
def test_a_letter_scores_one_against_itself_and_zero_against_another(chosen, truth, writing, lower_reference):
    reference = truth.lower() if lower_reference else truth
    assert score_multiple_choice(LETTER_WRITINGS[writing](chosen), reference) == float(chosen == truth)
