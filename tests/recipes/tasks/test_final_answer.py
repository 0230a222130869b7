"""The final-answer rules every verifier shares: hedges, negations, linear time, and math-verify off the main thread."""

import threading
import time

import pytest

from dataflex_callbacks.recipes.tasks.final_answer import (
    is_negated,
    last_answer_tag,
    offers_alternatives,
    split_alternatives,
    strip_emphasis,
)
from dataflex_callbacks.recipes.tasks.math_answers import math_answers_match
from dataflex_callbacks.recipes.tasks.multi_domain_reward import (
    score_knights_knaves,
    score_math,
    score_multiple_choice,
)
from dataflex_callbacks.recipes.tasks.verifiers import exact_match, extract_number, numeric_match


@pytest.mark.parametrize(
    "text, alternatives",
    [
        ("5 or 7", ["5", "7"]),
        ("either 5 or 7", ["5", "7"]),
        ("x=2 \\text{ or } x=-2", ["x=2", "x=-2"]),
        ("A and/or B", ["A", "B"]),
        ("p \\lor q", ["p", "q"]),
        ("5", ["5"]),
        ("2 and 3", ["2 and 3"]),
        ("10 hours", ["10 hours"]),
        ("forty", ["forty"]),
    ],
)
def test_alternatives(text, alternatives):
    assert split_alternatives(text) == alternatives
    assert offers_alternatives(text) == (len(alternatives) > 1)


@pytest.mark.parametrize(
    "text, negated",
    [
        ("not 5", True),
        ("isn't 5", True),
        ("is not equal to 5", True),
        ("rather than 5", True),
        ("x \\neq 5", True),
        ("never $5", True),
        ("is 5", False),
        ("Note 5", False),
        ("", False),
    ],
)
def test_negation_before_a_value(text, negated):
    assert is_negated(text, len(text) - (1 if text else 0)) == negated


def test_answer_tags_and_emphasis():
    assert last_answer_tag("<answer>1</answer> then <ANSWER>2</ANSWER>") == "2"
    assert last_answer_tag("<answer>unclosed") is None
    assert strip_emphasis("**18**") == "18" and strip_emphasis("`B`") == "B"


@pytest.mark.parametrize(
    "completion, reference, matches",
    [
        ("<answer>7</answer> Check with 5.", "5", False),
        ("The answer is not 5, it is 7.", "5", False),
        ("The answer is 5 or 7", "5", False),
        ("\\boxed{50\\%}", "50", False),
        ("<answer>18</answer>", "18", True),
        ("**18**", "18", True),
        ("\\boxed{50\\%}", "50%", True),
        ("Answer: **18**", "18", True),  # an answer line
        ("The answer is 18", "18", False),  # prose: read only in the opt-in free-text mode (below)
    ],
)
def test_the_numeric_verifier_reads_the_final_answer_as_the_math_one_does(completion, reference, matches):
    assert numeric_match(completion, reference) == matches


@pytest.mark.parametrize(
    "completion, reference, matches",
    [
        ("<answer>7</answer> Check with 5.", "5", False),
        ("The answer is not 5, it is 7.", "5", False),
        ("The answer is 5 or 7", "5", False),
        ("The answer is 50%", "50", False),
        ("Answer: **18**", "18", True),
        ("The answer is 50%", "50%", True),
    ],
)
def test_the_numeric_verifier_in_the_opt_in_free_text_mode(completion, reference, matches):
    assert numeric_match(completion, reference, free_text=True) == matches


def test_extract_number_of_a_hedge_or_a_negation_is_none():
    for free_text in (False, True):
        assert extract_number("The answer is 5 or 7", free_text=free_text) is None
        assert extract_number("The answer isn't 5.", free_text=free_text) is None


# ------------------------------------------------------------------ time

LOOPS = {  # repetition loops a small model falls into, and worst cases of the parsers; each ~1 MB
    "names": "Bob, ",
    "claims": "Bob is a knight, ",
    "hyphenated": "a-",
    "negations": "not 5 ",
    "digits": "1,",
    "unclosed tags": "<answer>",
    "unclosed boxes": "\\boxed{",
    "letters": "The answer is (A) ",
    "brackets": "(",
    "closed boxes": "\\boxed{5}",  # the slot reader compares boxes: 110,000 of them
    "braces after boxes": "{}\\boxed{",
    "answer lines": "\nAnswer: 5",
    "gsm8k markers": "#### ",
    "closed tags": "<answer>5</answer>",  # every block is a slot (issue 46)
    "template lines": "\nFinal Answer: The final answer is $5$. I hope it is correct.",
    "markers on one line": "#### 5 ",
    "dots after a marker": "Answer: 5" + "." * 100,
}
VERIFIERS = {
    "math": lambda text: score_math(text, "5"),
    "knights_knaves": lambda text: score_knights_knaves(text, "Bob is a knight, and Zoey is a knave."),
    "multiple_choice": lambda text: score_multiple_choice(text, "B"),
    "numeric": lambda text: numeric_match(text, "5"),
    "numeric_free_text": lambda text: numeric_match(text, "5", free_text=True),
    "exact": lambda text: exact_match(text, "5"),
}


@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
def test_every_verifier_scores_a_1mb_completion_in_linear_time(verifier):
    """Target 0.5 s per 1 MB (benchmarks/bench_verifiers.py: 0.3 s at most); the bound is generous for a
    loaded machine.
    """
    score = VERIFIERS[verifier]
    score("\\boxed{5}")  # the first math-verify call imports sympy
    for name, unit in LOOPS.items():
        text = unit * (1_000_000 // len(unit))
        start = time.perf_counter()
        score(text)
        assert time.perf_counter() - start < 3.0, f"{verifier} took too long on a 1 MB loop of {name!r}"


def test_knights_and_knaves_is_not_quadratic():
    """Issue 32: 20 KB of "Bob, " took 5.3 s; 50 times that now takes well under the old time."""
    start = time.perf_counter()
    score_knights_knaves("Bob, " * 200_000, "Bob is a knight.")
    assert time.perf_counter() - start < 3.0


# ------------------------------------------------------------------ math-verify outside the main thread


def test_the_math_verifier_works_in_a_worker_thread():
    """verl scores in worker threads, where math-verify's SIGALRM timeout cannot be set."""
    results, errors = [], []

    def score():
        try:
            results.extend(
                [
                    math_answers_match("\\boxed{\\frac12}", "0.5"),
                    math_answers_match("\\boxed{3}", "0.5"),
                    math_answers_match("\\boxed{(x+1)^{1000}}", "5"),
                ]
            )
        except Exception as error:  # noqa: BLE001 - the test reports any error raised in the thread
            errors.append(error)

    worker = threading.Thread(target=score)
    worker.start()
    worker.join(timeout=60)
    assert not errors and results == [True, False, False]
