"""Verifiers read the final-answer slot, not the prose (issue 38, section 3).

By default a completion is credited only for the one answer in its final-answer slots: every
``<answer>`` block, ``\\boxed{}``, GSM8K ``#### N`` line and line opening with "Answer:" (DAPO's, and
Minerva's template), all of which must state the same value (issue 46), or a completion that is the bare
answer ("6", "6.", " 6 \\n").
A slot holding a hedge, a range, a negation, two values or another unit scores 0, and so does prose
without a slot. Reading answers out of prose ("The answer is 6") is the opt-in ``free_text=True``
mode (verifier ``numeric_free_text``), documented as gameable.

FALSE_POSITIVES is at least as long as MISSES (the answers a slot reader must still credit).
"""

from pathlib import Path

import pytest

from dataflex_callbacks.recipes.tasks import get_verifier
from dataflex_callbacks.recipes.tasks.math_answers import math_answer_reward, math_answers_match
from dataflex_callbacks.recipes.tasks.multi_domain_reward import MultiDomainReward, compute_score
from dataflex_callbacks.recipes.tasks.verifiers import numeric_match

# (completion, reference): each scored 1.0 by some built-in verifier before; every one must score 0.
FALSE_POSITIVES = [
    ("It is either 5 or 6.", "6"),  # issue 38's phrasings
    ("x = 5 or x = 6", "6"),
    ("The answer is between 5 and 6", "5"),
    ("The answer cannot be 5.", "5"),
    ("5 is wrong.", "5"),
    ("The answer 5 is incorrect.", "5"),
    ("5°C", "5°F"),
    ("\\boxed{5°C}", "#### 5°F"),
    ("The answer is 6", "6"),  # prose without a slot: free text is opt-in
    ("So she sold 72 clips", "72"),
    ("I think it might be 6, maybe.", "6"),
    ("\\boxed{5} and later \\boxed{6}", "6"),  # two boxes that disagree
    ("\\boxed{6}, no wait, \\boxed{5}", "6"),
    ("\\boxed{5 \\text{ or } 6}", "6"),  # a hedge in the slot
    ("\\boxed{5 \\text{ to } 6}", "5"),  # a range in the slot
    ("\\boxed{5 \\text{ is wrong}}", "5"),  # a negation in the slot
    ("\\boxed{\\text{not } 5}", "5"),
    ("\\boxed{5, 6}", "6"),  # two values in the slot
    ("<answer>5 or 6</answer>", "6"),
    ("<answer>The answer cannot be 5.</answer>", "5"),
    ("<answer>not 5</answer>", "5"),
    ("#### 5 or 6", "6"),
    ("#### between 5 and 6", "5"),
    ("#### 5 is incorrect", "5"),
    ("5 or 6", "6"),  # a bare completion that is two values
    ("5, 6", "6"),
    ("5 - 6", "5"),
    ("Answer: The answer cannot be 5.", "5"),  # DAPO's answer line holding prose
    ("Answer: 5 or 6", "6"),
    ("It is 6. Answer: 6", "6"),  # "Answer:" in the middle of a line is prose
    ("\\boxed{5 \\text{ m}}", "5 km"),
    ("\\boxed{\\text{5 is wrong}}", "5"),  # a verdict inside a text wrapper
    ("\\boxed{\\geq 5}", "5"),  # a bound
    ("\\boxed{\\neq 5}", "5"),  # a negation written as a relation
    ("\\boxed{\\approx 5}", "5"),  # an estimate
    ("\\boxed{5?}", "5"),  # a guess
]

# (completion, reference): answers in the slot, as models and datasets write them; every one must score 1.
MISSES = [
    ("6", "6"),
    ("6.", "6"),
    ("  6 \n", "6"),
    ("\\boxed{6}", "6"),
    ("It is 6. \\boxed{6}", "6"),
    ("\\boxed{6} and again \\boxed{6.0}", "6"),  # boxes that agree
    ("<answer>6</answer>", "6"),
    ("<answer>\\boxed{6}</answer>", "6"),
    ("48 + 24 = 72\n#### 72", "Natalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"),
    ("#### 1,000", "1000"),
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("$\\frac{1}{2}$", "\\boxed{0.5}"),
    ("**6**", "6"),
    ("\\boxed{x = 6}", "6"),
    ("x = 6", "6"),
    ("\\boxed{5 \\text{ km}}", "5 km"),
    ("5°F", "5°F"),
    ("\\boxed{x=2 \\text{ or } x=-2}", "\\pm 2"),  # both solutions of a reference that has two
    ("\\boxed{1000 \\text{ dollars}}", "#### 1000"),
    ("\\boxed{25\\%}", "25\\%"),
    ("\\boxed{\\text{Devon}}", "\\text{Devon}"),
    ("\\boxed{\\sqrt{2}}", "\\sqrt2"),
    ("-3", "#### -3"),
    ("<answer>(1,2)</answer>", "(1,2)"),
    ("Natalia sold 48 + 24 = 72 clips.\nAnswer: 72", "72"),  # DAPO's "Answer: $Answer" line
    ("**Final Answer:** **18**", "18"),
    ("\\boxed{x \\ge 2}", "x \\geq 2"),  # a relation against a reference that states one
    ("\\boxed{\\text{5}}", "5"),
    ("\\boxed{(-\\infty, 2]}", "(-\\infty, 2]"),
]


def test_the_false_positive_table_is_as_large_as_the_misses_table():
    assert len(FALSE_POSITIVES) >= len(MISSES)


@pytest.mark.parametrize("completion, reference", FALSE_POSITIVES)
def test_a_slot_without_one_answer_scores_zero(completion, reference):
    assert compute_score("math", completion, reference) == 0.0
    assert not math_answers_match(completion, reference)
    assert math_answer_reward([completion], [reference]) == [0.0]
    assert MultiDomainReward()(["q"], [completion], data_source=["math"], answer=[reference]) == [0.0]
    assert not numeric_match(completion, reference)
    assert not get_verifier("numeric")(completion, reference)


@pytest.mark.parametrize("completion, reference", MISSES)
def test_one_answer_in_the_slot_scores_one(completion, reference):
    assert compute_score("math", completion, reference) == 1.0
    assert math_answers_match(completion, reference)


@pytest.mark.parametrize(
    "completion, reference",
    [("6", "6"), ("6.", "6"), (" 6\n", "6"), ("\\boxed{6}", "6"), ("#### 6", "6"), ("<answer>6</answer>", "#### 6")],
)
def test_the_numeric_verifier_credits_the_slot(completion, reference):
    assert numeric_match(completion, reference)


# Prose answers that paid by default before: they pay only in the opt-in free-text mode.
FREE_TEXT = [
    ("The answer is 6", "6"),
    ("So she sold 72 clips", "72"),
    ("The answer is not 5, it is 7.", "7"),
    ("It fell from 5 to 5 - 8 = -3 degrees.", "#### -3"),
]


@pytest.mark.parametrize("completion, reference", FREE_TEXT)
def test_prose_pays_only_in_the_opt_in_free_text_mode(completion, reference):
    assert compute_score("math", completion, reference) == 0.0
    assert compute_score("math", completion, reference, free_text=True) == 1.0
    assert math_answers_match(completion, reference, free_text=True)
    assert MultiDomainReward(free_text=True)(["q"], [completion], data_source=["math"], answer=[reference]) == [1.0]


@pytest.mark.parametrize("completion, reference", [("The answer is 6", "6"), ("so it is 12.0", "12")])
def test_the_numeric_free_text_verifier_is_an_explicit_name(completion, reference):
    assert not numeric_match(completion, reference)
    assert numeric_match(completion, reference, free_text=True)
    assert get_verifier("numeric_free_text")(completion, reference)


def test_gsm8k_and_math_reference_solutions_score_themselves():
    """DataFlex-RL users' data: GSM8K answers end in '#### 72', MATH solutions box theirs."""
    gsm8k = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    math = "Solving, $x=4$. The answer is $\\boxed{4}$."
    assert compute_score("openai/gsm8k", gsm8k, gsm8k) == 1.0
    assert compute_score("lighteval/MATH", math, math) == 1.0


# ------------------------------------------------------------------ the docs' tables are the code's

DOCS = Path(__file__).resolve().parents[3] / "docs" / "main_job.md"
ISSUE_PHRASINGS = [  # issue 38: each paid by default before; the docs' false-positive table must list each
    ("It is either 5 or 6.", "6"),
    ("x = 5 or x = 6", "6"),
    ("The answer is between 5 and 6", "5"),
    ("The answer cannot be 5.", "5"),
    ("5 is wrong.", "5"),
    ("The answer 5 is incorrect.", "5"),
    ("5°C", "5°F"),
]


def docs_table(name: str) -> list[tuple[str, str, float]]:
    """``(completion, reference, score)`` rows of the docs table between ``<!-- NAME`` and ``<!-- end NAME``."""
    text = DOCS.read_text(encoding="utf-8")
    body = text[text.index(f"<!-- {name}") : text.index(f"<!-- end {name}")]
    rows = []
    for line in body.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1].strip("`"), float(cells[2])))
    return rows


def test_the_docs_false_positive_table_lists_every_issue_phrasing_at_zero_and_as_many_rows_as_misses():
    false_positives, misses = docs_table("false-positive table"), docs_table("misses table")
    for completion, reference in ISSUE_PHRASINGS:
        assert (completion, reference, 0.0) in false_positives, completion
    assert len(false_positives) >= len(misses) > 0


@pytest.mark.parametrize(
    "completion, reference, score", docs_table("false-positive table") + docs_table("misses table")
)
def test_the_docs_tables_are_what_the_verifiers_score(completion, reference, score):
    assert compute_score("math", completion, reference) == score
    if score == 0.0:
        assert not numeric_match(completion, reference)


# ------------------------------------------------------------------ every slot must agree (issue 46)

# (completion, reference): slots of one or several kinds that disagree, a thousands reading of a list, and the
# MATH / Minerva template holding no single value; each must score 0.
DISAGREEING_SLOTS = [
    ("<answer>42</answer> <answer>43</answer>", "43"),  # the last block used to win
    ("<answer>43</answer> <answer>42</answer>", "43"),
    ("\\boxed{42} <answer>43</answer>", "43"),  # a box and a block
    ("<answer>43</answer> then \\boxed{42}", "43"),
    ("\\boxed{43}\n#### 42", "43"),  # a box and a GSM8K line
    ("\\boxed{42}\n#### 43", "43"),
    ("#### 42\n#### 43", "43"),
    ("Answer: 42\nAnswer: 43", "43"),
    ("<answer>43</answer>\nAnswer: 42", "43"),
    ("<answer>43</answer>\n#### 42", "43"),
    ("#### 43\nAnswer: The answer cannot be 43.", "43"),  # one slot of prose: no single answer
    ("#### 43 #### 42", "43"),  # two markers on one line: one slot holding two values
    ("\\boxed{1,2}", "12"),  # a list is not a thousands number
    ("\\boxed{1{,}2}", "12"),
    ("\\boxed{12{,}34}", "1234"),  # groups after the first have exactly three digits
    ("\\boxed{1,0000}", "10000"),
    ("Final Answer: The final answer is $5$ or $6$. I hope it is correct.", "5"),
    ("Final Answer: The final answer is not $5$. I hope it is correct.", "5"),
    ("Final Answer: The final answer is between 4 and 6. I hope it is correct.", "5"),
    (
        "Final Answer: The final answer is $5$. I hope it is correct.\n"
        "Final Answer: The final answer is $6$. I hope it is correct.",
        "5",
    ),
    ("Final Answer: The final answer is $5 \\text{ m}$. I hope it is correct.", "5 km"),  # another unit
    ("\\boxed{5}\nFinal Answer: The final answer is $6$. I hope it is correct.", "5"),
    ("The final answer is $5$. I hope it is correct.", "5"),  # without "Final Answer:" it is prose
]

# (completion, reference): slots that agree, MATH's thousands separators, the Minerva template; each scores 1.
AGREEING_SLOTS = [
    ("<answer>43</answer> <answer>43</answer>", "43"),
    ("\\boxed{43} <answer>43</answer>", "43"),
    ("\\boxed{43}\n#### 43", "43"),
    ("<answer>\\boxed{43}</answer>\nAnswer: 43.0", "43"),
    ("Answer: \\boxed{43}", "43"),  # an answer line holding a box is read by its box
    ("\\boxed{1{,}000}", "1000"),  # LaTeX's thousands separator, as MATH writes it
    ("\\boxed{1,000}", "1000"),
    ("\\boxed{1{,}000{,}000}", "#### 1000000"),
    ("\\boxed{1000}", "$\\boxed{1{,}000}$"),
    ("\\boxed{1,2}", "1,2"),  # a list stays a list
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),  # Minerva's template
    ("Final Answer: The final answer is $(1,2)$. I hope it is correct.", "(1,2)"),
    ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", "0.5"),
    ("\\boxed{5}\nFinal Answer: The final answer is $5$. I hope it is correct.", "\\boxed{5}"),
]


def test_the_disagreeing_table_is_as_large_as_the_agreeing_table():
    assert len(DISAGREEING_SLOTS) >= len(AGREEING_SLOTS)


@pytest.mark.parametrize("completion, reference", DISAGREEING_SLOTS)
def test_slots_that_disagree_or_hold_no_single_value_score_zero(completion, reference):
    assert compute_score("math", completion, reference) == 0.0
    assert not math_answers_match(completion, reference)
    assert not numeric_match(completion, reference)


@pytest.mark.parametrize("completion, reference", AGREEING_SLOTS)
def test_slots_that_agree_score_one(completion, reference):
    assert compute_score("math", completion, reference) == 1.0
    assert math_answers_match(completion, reference)


@pytest.mark.parametrize(
    "completion, reference",
    [
        ("\\boxed{1{,}000}", "1000"),
        ("#### 1{,}000", "1000"),
        ("\\boxed{43}\n#### 43", "43"),
        ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),
    ],
)
def test_the_numeric_verifier_reads_the_same_slots(completion, reference):
    assert numeric_match(completion, reference)
