"""Math answer verifier: GSM8K-style references, model-style completions, and outputs that must score 0."""

import pytest

from dataflex_callbacks.recipes.tasks.final_answer import last_boxed
from dataflex_callbacks.recipes.tasks.math_answers import math_answer_reward, math_answers_match
from dataflex_callbacks.recipes.tasks.math_extraction import extract_final_answer, reference_answer
from dataflex_callbacks.recipes.tasks.math_values import parse_number, split_unit, too_costly

# Solutions as GSM8K's `answer` column writes them (calculator annotations, `#### N` last).
GSM8K_SOLUTIONS = {
    "72": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    "10": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n"
    "Working 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    "5": "In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\n"
    "Betty's grandparents gave her 15 * 2 = $<<15*2=30>>30.\n"
    "This means, Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5",
    "1000": "The club raised 4 * 250 = <<4*250=1000>>1000 dollars.\n#### 1000",
    "-3": "The temperature fell from 5 to 5 - 8 = <<5-8=-3>>-3 degrees.\n#### -3",
}


@pytest.mark.parametrize("expected, solution", GSM8K_SOLUTIONS.items())
def test_gsm8k_reference_solutions_read_and_match_themselves(expected, solution):
    assert reference_answer(solution) == expected
    assert extract_final_answer(solution) == expected
    assert math_answers_match(solution, solution)


@pytest.mark.parametrize(
    "completion, reference",
    [
        ("She sold 24 in May, so 48 + 24 = 72 in total.\n\\boxed{72}", GSM8K_SOLUTIONS["72"]),
        ("\\boxed{72.0}", GSM8K_SOLUTIONS["72"]),
        ("48 + 24 = 72\n#### 72", GSM8K_SOLUTIONS["72"]),
        ("She earned $10.00 in total: \\boxed{\\$10}", GSM8K_SOLUTIONS["10"]),
        ("\\boxed{1,000}", GSM8K_SOLUTIONS["1000"]),
        ("\\boxed{1000 \\text{ dollars}}", GSM8K_SOLUTIONS["1000"]),
        ("It ends at -3 degrees. \\boxed{-3}", GSM8K_SOLUTIONS["-3"]),
        ("\\boxed{\\frac{1}{2}}", "#### 0.5"),
        ("3/4", "\\boxed{\\dfrac{3}{4}}"),
        ("\\boxed{ \\sqrt{2} }", "\\sqrt{2}"),  # not a number: normalised text
        ([{"role": "assistant", "content": "\\boxed{5}"}], GSM8K_SOLUTIONS["5"]),  # TRL conversational completion
        ("<answer>\\frac{1}{2}</answer>", "0.5"),  # the answer block
        ("Answer: **18**", "18"),  # markdown emphasis
        ("\\boxed{\\sqrt2}", "\\sqrt{2}"),  # math-verify's equivalences
        ("\\boxed{10^3}", "1000"),
        ("\\boxed{\\frac12}", "0.5"),
        ("\\boxed{x = \\pm 2}", "-2, 2"),
        ("\\boxed{5 \\text{ km}}", "5 \\text{ km}"),  # the same unit
        ("\\boxed{5}", "5 \\text{ km}"),  # no unit: the reference's
        ("\\boxed{25\\%}", "25\\%"),  # a percent reference
        ("\\boxed{0.25}", "25\\%"),
    ],
)
def test_correct_answers_match(completion, reference):
    assert math_answers_match(completion, reference)


# Answers stated in prose: before issue 38 they paid by default; now only in the opt-in free-text mode.
PROSE_ANSWERS = [
    ("The answer is $72$.", GSM8K_SOLUTIONS["72"]),
    ("So she sold 72 clips", GSM8K_SOLUTIONS["72"]),  # no marker: the last number
    ("In total 1,000 dollars.", GSM8K_SOLUTIONS["1000"]),
    ("The final answer is: -3", GSM8K_SOLUTIONS["-3"]),
    ("The answer is not 5, it is 7.", "7"),  # the value no negation rules out
]


@pytest.mark.parametrize("completion, reference", PROSE_ANSWERS)
def test_prose_answers_match_only_in_the_opt_in_free_text_mode(completion, reference):
    assert not math_answers_match(completion, reference)
    assert math_answers_match(completion, reference, free_text=True)


@pytest.mark.parametrize(
    "completion, reference",
    [
        ("\\boxed{71}", GSM8K_SOLUTIONS["72"]),
        ("First I got 72, but the answer is 70.", GSM8K_SOLUTIONS["72"]),  # the stated answer wins over earlier numbers
        ("72 is tempting; \\boxed{73}", GSM8K_SOLUTIONS["72"]),
        ("\\boxed{3}", GSM8K_SOLUTIONS["-3"]),  # the sign matters
        ("\\boxed{100}", GSM8K_SOLUTIONS["1000"]),
        ("\\boxed{\\sqrt{3}}", "\\sqrt{2}"),
        ("<answer>7</answer> Check with 5.", "5"),  # the answer block, not the last number
        ("The answer is not 5, it is 7.", "5"),  # negations
        ("The answer isn't 5.", "5"),
        ("The result is 7, rather than 5", "5"),
        ("\\boxed{x=2 \\text{ or } x=-2}", "-2"),  # hedges
        ("The answer is 5 or 7.", "5"),
        ("The answer is either 5 or 7.", "7"),
        ("\\boxed{5} or \\boxed{7}", "7"),
        ("\\boxed{5 \\text{ m}}", "5 km"),  # another unit
        ("\\boxed{5 \\text{ seconds}}", "5 \\text{ minutes}"),
        ("\\boxed{2+2=5}", "5"),  # a false equation states no value
        ("\\boxed{1 + 1 = 2 = 5}", "5"),
        ("\\boxed{0.5\\%}", "0.5"),  # a percent against a plain number
        ("\\boxed{50\\%}", "\\frac{1}{2}"),
    ],
)
def test_wrong_answers_do_not_match(completion, reference):
    assert not math_answers_match(completion, reference)
    assert not math_answers_match(completion, reference, free_text=True)


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "   \n",
        None,
        "I do not know.",
        "\\boxed{}",
        "The answer is",
        "####",
        "five",
        "nan",
        "inf",
        "1/0",
        [{"role": "assistant", "content": ""}],
        [],
    ],
)
def test_bad_outputs_score_zero(completion):
    assert not math_answers_match(completion, GSM8K_SOLUTIONS["5"])
    assert math_answer_reward([completion], [GSM8K_SOLUTIONS["5"]]) == [0.0]


@pytest.mark.parametrize("reference", ["", None, "####", "\\boxed{}"])
def test_unreadable_references_never_match(reference):
    assert not math_answers_match("\\boxed{5}", reference)


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", 42.0),
        ("42.0", 42.0),
        ("-3", -3.0),
        ("1,000", 1000.0),
        ("1,234,567.5", 1234567.5),
        ("$1,234.50", 1234.5),
        ("\\frac{3}{4}", 0.75),
        ("-\\frac{1}{2}", -0.5),
        ("\\dfrac{6}{3}", 2.0),
        ("3/4", 0.75),
        ("18 dollars", 18.0),
        ("10\\%", 10.0),
        ("45^\\circ", 45.0),
        (".5", 0.5),
        (7, 7.0),
        ("abc", None),
        ("", None),
        ("1/0", None),
        ("1,00", None),
        ("2 + 3", None),
        (float("nan"), None),
        (True, None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_last_boxed_handles_nesting_and_truncation():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("cut off: \\boxed{\\frac{1}{2}") is None
    assert last_boxed("no box") is None


def test_reward_function_scores_each_completion_against_its_own_answer():
    completions = [[{"role": "assistant", "content": "\\boxed{72}"}], "#### 10", "\\boxed{72}", ""]
    answers = [GSM8K_SOLUTIONS["72"], GSM8K_SOLUTIONS["10"], GSM8K_SOLUTIONS["10"], GSM8K_SOLUTIONS["5"]]
    assert math_answer_reward(completions, answers, prompts=["p"] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_a_large_integer_off_by_one_is_wrong():
    assert not math_answers_match("#### 1000001", "1000000")
    assert math_answers_match("#### 1,000,000", "1000000")


@pytest.mark.parametrize(
    "answer",
    [
        "10^{10^{10}}",
        "(x+1)^{1000}",
        "(10^{100})!",
        "1000!",
        "\\binom{10^{9}}{10^{5}}",
        "\\sum_{i=1}^{10^{10}} i",
        "(" * 12 + "1" + ")" * 12,
        "1+" * 200 + "1",
    ],
)
def test_answers_whose_comparison_could_take_seconds_are_refused(answer):
    assert too_costly(answer)
    assert not math_answers_match(f"\\boxed{{{answer}}}", "5")


@pytest.mark.parametrize("answer", ["2^{2010}", "10^{12}", "x^2 + 1", "100!", "\\binom{10}{3}", "\\frac{\\sqrt{3}}{2}"])
def test_ordinary_answers_are_not_refused(answer):
    assert not too_costly(answer)


@pytest.mark.parametrize(
    "answer, value, unit",
    [
        ("5 \\text{ km}", "5", "km"),
        ("5 kilometers", "5", "km"),
        ("25\\%", "25", "%"),
        ("25 percent", "25", "%"),
        ("\\$10", "10", "$"),
        ("10 dollars", "10", "$"),
        ("45^\\circ", "45", "°"),
        ("3 \\text{cm}^2", "3", "cm^2"),
        ("3 square centimeters", "3", "cm^2"),
        ("12 square units", "12", None),
        ("5x", "5x", None),
        ("\\text{Devon}", "\\text{Devon}", None),
    ],
)
def test_split_unit(answer, value, unit):
    assert split_unit(answer) == (value, unit)
