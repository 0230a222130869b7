"""Math answer verifier: GSM8K-style references, model-style completions, and outputs that must score 0."""

import pytest

from dataflex_callbacks.recipes.tasks.math_answers import (
    extract_final_answer,
    last_boxed,
    math_answer_reward,
    math_answers_match,
    parse_number,
    reference_answer,
)

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


@pytest.mark.parametrize("completion, reference", [
    ("She sold 24 in May, so 48 + 24 = 72 in total.\n\\boxed{72}", GSM8K_SOLUTIONS["72"]),
    ("\\boxed{72.0}", GSM8K_SOLUTIONS["72"]),
    ("The answer is $72$.", GSM8K_SOLUTIONS["72"]),
    ("48 + 24 = 72\n#### 72", GSM8K_SOLUTIONS["72"]),
    ("So she sold 72 clips", GSM8K_SOLUTIONS["72"]),  # no marker: the last number
    ("She earned $10.00 in total: \\boxed{\\$10}", GSM8K_SOLUTIONS["10"]),
    ("\\boxed{1,000}", GSM8K_SOLUTIONS["1000"]),
    ("In total 1,000 dollars.", GSM8K_SOLUTIONS["1000"]),
    ("\\boxed{1000 \\text{ dollars}}", GSM8K_SOLUTIONS["1000"]),
    ("It ends at -3 degrees. \\boxed{-3}", GSM8K_SOLUTIONS["-3"]),
    ("The final answer is: -3", GSM8K_SOLUTIONS["-3"]),
    ("\\boxed{\\frac{1}{2}}", "#### 0.5"),
    ("3/4", "\\boxed{\\dfrac{3}{4}}"),
    ("\\boxed{ \\sqrt{2} }", "\\sqrt{2}"),  # not a number: normalised text
    ([{"role": "assistant", "content": "\\boxed{5}"}], GSM8K_SOLUTIONS["5"]),  # TRL conversational completion
])
def test_correct_answers_match(completion, reference):
    assert math_answers_match(completion, reference)


@pytest.mark.parametrize("completion, reference", [
    ("\\boxed{71}", GSM8K_SOLUTIONS["72"]),
    ("First I got 72, but the answer is 70.", GSM8K_SOLUTIONS["72"]),  # the stated answer wins over earlier numbers
    ("72 is tempting; \\boxed{73}", GSM8K_SOLUTIONS["72"]),
    ("\\boxed{3}", GSM8K_SOLUTIONS["-3"]),  # the sign matters
    ("\\boxed{100}", GSM8K_SOLUTIONS["1000"]),
    ("\\boxed{\\sqrt{3}}", "\\sqrt{2}"),
])
def test_wrong_answers_do_not_match(completion, reference):
    assert not math_answers_match(completion, reference)


@pytest.mark.parametrize("completion", [
    "", "   \n", None, "I do not know.", "\\boxed{}", "The answer is", "####", "five", "nan", "inf",
    "1/0", [{"role": "assistant", "content": ""}], [],
])
def test_bad_outputs_score_zero(completion):
    assert not math_answers_match(completion, GSM8K_SOLUTIONS["5"])
    assert math_answer_reward([completion], [GSM8K_SOLUTIONS["5"]]) == [0.0]


@pytest.mark.parametrize("reference", ["", None, "####", "\\boxed{}"])
def test_unreadable_references_never_match(reference):
    assert not math_answers_match("\\boxed{5}", reference)


@pytest.mark.parametrize("text, value", [
    ("42", 42.0), ("42.0", 42.0), ("-3", -3.0), ("1,000", 1000.0), ("1,234,567.5", 1234567.5), ("$1,234.50", 1234.5),
    ("\\frac{3}{4}", 0.75), ("-\\frac{1}{2}", -0.5), ("\\dfrac{6}{3}", 2.0), ("3/4", 0.75), ("18 dollars", 18.0),
    ("10\\%", 10.0), ("45^\\circ", 45.0), (".5", 0.5), (7, 7.0),
    ("abc", None), ("", None), ("1/0", None), ("1,00", None), ("2 + 3", None), (float("nan"), None), (True, None),
])
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
