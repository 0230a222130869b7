"""Math answers (GSM8K, MATH, Minerva style): read a completion's final answer and check it with math-verify.

The answer slots (the default): a completion is credited only for the one answer its final-answer slots
state. Every slot of every kind counts, and all of them must state the reference's value (two that disagree
score 0, whatever their kinds):

1. every ``<answer>...</answer>`` block: the boxes inside it, else all of it;
2. every ``\\boxed{...}`` (or ``\\fbox{...}``) outside the blocks; an unclosed (truncated) box is ignored;
3. every GSM8K ``####`` and every line that opens with "Answer:" (DAPO's ``Answer: $Answer``,
   ``**Final Answer:**``): the rest of that line (a line holding a box is read by its box). The MATH /
   Minerva few-shot template, "Final Answer: The final answer is $5$. I hope it is correct.", is such a line:
   its words around the value are not part of it;
4. when there is none of these, the whole completion, when it is the bare answer ("6", "6.", " 6 \\n").

Each slot must hold one value and nothing else (a number, an expression, an equation such as ``x = 4``, a
set or tuple, optionally one unit): a slot holding prose, a negation ("cannot be 5", "5 is wrong"), a
range ("between 5 and 6"), two values ("5, 6") or another unit scores 0. A policy searches for the
phrasing that pays, so prose is not read at all (`final_answers`).

Free text (opt-in, ``free_text=True``; gameable: prose that pays can be found by a policy). One rule,
first that applies:

1. the last ``<answer>...</answer>`` block: its box, else its text after an answer marker, else
   all of it (``<answer>7</answer> Check with 5.`` answers 7);
2. else the last ``\\boxed{...}`` (or ``\\fbox{...}``); an unbalanced (truncated) box is ignored;
3. else the last answer marker of any kind, ``####`` (GSM8K's), "answer is" or "answer:" (so
   "The answer is 5. ... Final answer: 7" answers 7), and the first line after it: a ``$...$`` span
   that opens it (Minerva's "The final answer is $(1,2)$. I hope it is correct."), the line itself
   when it is one expression, else the first value of the sentence that no negation rules out
   ("The answer is 5 and then I checked 7" answers 5, "The answer is not 5, it is 7" answers 7);
4. else the last number (or ``a/b``) of the completion that no negation rules out.

Markdown emphasis and ``$`` delimiters around an answer are dropped (``Answer: **18**`` answers 18).

What earns no credit, whatever the reference (see `final_answer` for hedges and negations):

- a hedge, alternatives joined by "or" / "either" (``5 or 7``, ``x=2 \\text{ or } x=-2``), unless the
  reference itself lists several values (``\\pm 2``, ``-2, 2``): then the alternatives compare as a set;
- an equation that states no value: ``x = 4`` (one variable on the left) answers 4, a true chain
  ``48 + 24 = 72`` answers 72, but ``2+2=5`` answers nothing; against a reference that is an
  equation, equations compare whole;
- another unit than the reference's (``5 \\text{ m}`` against ``5 km``). An answer without a unit
  is read in the reference's unit, and a reference without a unit accepts any (``1000 dollars``
  against 1000);
- a percent against a reference that is not one (``0.5\\%`` against 0.5: a percent scales its
  number). Against a percent reference ``25\\%``, the answers 25, ``25\\%`` and 0.25 are right;
- an answer whose comparison could run for seconds (see `too_costly`).

How answers compare: with math-verify (``math_verify.parse`` and ``math_verify.verify``, the verifier
TRL's ``accuracy_reward`` and verl's math scorers use): numbers by value (``1,000 == 1{,}000 == 1000 ==
1e3``, ``42.0 == 42``; ``1,2`` is a list, not 12: after the first group of digits only groups of exactly three
make a thousands number), LaTeX and expression equivalence (``\\sqrt2 == \\sqrt{2}``, ``10^3 == 1000``,
``\\frac12 == 0.5 == 1/2``), sets, tuples and intervals. An unreadable completion scores 0.
"""

from __future__ import annotations

import re
import threading

from dataflex_callbacks.errors import DataFlexError

from .final_answer import offers_alternatives, split_alternatives
from .math_extraction import final_answers, reference_answer, unwrap_answer
from .math_values import plain_decimal, split_unit, too_costly, units_agree

__all__ = ["MathVerifyMissing", "math_answer_reward", "math_answer_reward_free_text", "math_answers_match"]


class MathVerifyMissing(DataFlexError, ImportError):
    """The math verifier needs the ``math-verify`` package, which is not installed."""


# ------------------------------------------------------------------ comparison with math-verify

# Seconds math-verify may spend on one parse or one comparison, where its SIGALRM timeout can run (the main thread).
MATH_VERIFY_TIMEOUT_S = 5


def _math_verify():
    try:
        import math_verify
    except ImportError:
        raise MathVerifyMissing(
            "the math verifier needs the math-verify package: pip install math-verify "
            "(it comes with pip install 'dataflex-callbacks[trl]')"
        ) from None
    return math_verify


def _timeout_s() -> int | None:
    """math-verify's timeout sets SIGALRM, which only the main thread may; elsewhere `too_costly` bounds the work."""
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _parsed(answer: str) -> list:
    math_verify = _math_verify()
    return math_verify.parse(
        f"${plain_decimal(answer)}$",
        parsing_timeout=_timeout_s(),
        extraction_config=[math_verify.LatexExtractionConfig(), math_verify.ExprExtractionConfig()],
    )


def _equivalent(reference: str, predicted: str) -> bool:
    """math-verify's verdict on two answer texts (reference first: its comparison is not symmetric)."""
    gold, target = _parsed(reference), _parsed(predicted)
    return bool(gold) and bool(target) and _math_verify().verify(gold, target, timeout_seconds=_timeout_s())


_EQUALS_RE = re.compile(r"(?<![<>!=\\])=(?!=)")
_VARIABLE_RE = re.compile(r"^\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?(?:\(\s*[A-Za-z]\s*\))?\s*$")


def _stated_value(answer: str) -> str | None:
    """The value an equation states: ``x=4`` -> ``4``, a true chain ``48+24=72`` -> ``72``; None for ``2+2=5``."""
    sides = [side.strip() for side in _EQUALS_RE.split(answer)]
    if len(sides) == 1:
        return answer
    if _VARIABLE_RE.match(sides[0]):
        sides = sides[1:]
    if not all(sides):
        return None
    if all(_equivalent(sides[-1], side) for side in sides[:-1]):
        return sides[-1]
    return None


# A comma between two values; a thousands comma ("1,000") was read as a number before this is checked.
_TOP_LEVEL_COMMA_RE = re.compile(r",(?!\d{3}(?:\D|$))")


# Relations other than "=": an answer that states one is no value unless the reference states one too.
_RELATION_RE = re.compile(r"\\(?:neq?|geq?|leq?|geqslant|leqslant|approx|sim|simeq|gt|lt)(?![A-Za-z])|[<>≠≈≤≥]")


def _lists_several(reference: str) -> bool:
    """True when a reference gives several values (``\\pm 2``, ``-2, 2``, ``2 or 3``):
    a list of alternatives is then its form."""
    return "\\pm" in reference or "\\mp" in reference or "," in reference or offers_alternatives(reference)


def answers_equal(predicted: str, reference: str) -> bool:
    """True when a final answer `predicted` states the value of `reference`
    (both texts; rules in the module docstring)."""
    reference_value, reference_unit = split_unit(reference)
    reference_value = plain_decimal(reference_value)
    reference_is_equation = _EQUALS_RE.search(reference_value) is not None
    alternatives = split_alternatives(predicted)
    if len(alternatives) > 1 and not _lists_several(reference_value):
        return False  # a hedge
    values, units = [], set()
    for alternative in alternatives:
        value, unit = split_unit(unwrap_answer(alternative))
        value = plain_decimal(value)
        if not units_agree(unit, reference_unit) or too_costly(value):
            return False
        if not reference_is_equation:
            value = _stated_value(value)
            if value is None:
                return False
        values.append(value)
        units.add(unit)
    if not values:
        return False
    if any(_TOP_LEVEL_COMMA_RE.search(value) for value in values) and not _lists_several(reference_value):
        return False  # "5, 6" against 6: two values
    if _RELATION_RE.search(predicted) and not _RELATION_RE.search(reference):
        return False  # "\geq 5", "\neq 5", "\approx 5" against 5: a bound, a negation or an estimate
    candidates = [reference_value]
    if reference_unit == "%" and units == {None}:
        candidates.append(f"\\frac{{{reference_value}}}{{100}}")  # 0.25 against 25%
    predicted_value = ", ".join(values)
    return any(_equivalent(candidate, predicted_value) for candidate in candidates)


def math_answers_match(completion, answer, free_text: bool = False) -> bool:
    """True when the completion's final answer states the reference's value, checked by math-verify.

    `answer` is a dataset reference: a GSM8K solution ending in ``#### N``, a MATH ``\\boxed{}``
    solution, or a bare answer. By default only the final-answer slot is read, and every answer there
    (several boxes) must state the value; ``free_text=True`` also reads prose (gameable). The module
    docstring lists the rules.
    """
    predicted = final_answers(completion, free_text)
    reference = reference_answer(answer)
    if not predicted or not reference:
        return False
    return all(answers_equal(one, reference) for one in predicted)


def math_answer_reward(completions, answer, **kwargs) -> list[float]:
    """TRL reward function: 1.0 per completion whose final-answer slot matches the `answer` column, else 0.0."""
    return [
        float(math_answers_match(completion, reference))
        for completion, reference in zip(completions, answer, strict=True)
    ]


def math_answer_reward_free_text(completions, answer, **kwargs) -> list[float]:
    """`math_answer_reward` that also reads answers out of prose ("The answer is 6"): opt-in, and gameable."""
    return [
        float(math_answers_match(completion, reference, free_text=True))
        for completion, reference in zip(completions, answer, strict=True)
    ]
