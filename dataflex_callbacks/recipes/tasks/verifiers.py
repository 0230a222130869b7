"""Answer extraction and verifiers: completion text + reference answer -> correct or not.

All verifiers are pure functions of their arguments (the noisy one hashes its inputs), so a
reward is reproducible from the logged prompt, completion and call index.
"""

from __future__ import annotations

import hashlib
import math
import re

from dataflex_callbacks.errors import InputError

from .final_answer import completion_text
from .math_extraction import extract_final_answer, final_answers, reference_answer
from .math_values import parse_number, split_unit, units_agree

# Markers that introduce a final answer in common datasets (GSM8K's "####") and in prompts
# that ask for "Answer: ...".
_ANSWER_MARKERS = ("####", "answer:", "answer is")
# "x = 4": one variable on the left states the value on the right.
_ASSIGNMENT_RE = re.compile(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=\s*([^=]+)$")


def extract_answer(text: str) -> str:
    """Return the final answer in `text`:
    what follows the last answer marker (`####`, `answer:`), first line, stripped."""
    text = completion_text(text)
    lowered = text.lower()
    cut = -1
    for marker in _ANSWER_MARKERS:
        position = lowered.rfind(marker)
        if position >= 0:
            cut = max(cut, position + len(marker))
    if cut >= 0:
        text = text[cut:]
    text = text.strip()
    return text.splitlines()[0].strip() if text else ""


def extract_number(text, free_text: bool = False) -> float | None:
    """Return the number a completion gives in its final-answer slot, or None; `1,234` reads as 1234.

    The slot is read as the math verifier reads it (`math_answers`: an ``<answer>`` block, the boxes,
    a ``#### N`` line, or a completion that is the bare answer); a hedge ("5 or 7"), a negation
    ("not 5") or prose gives None. ``free_text=True`` also reads prose ("so it is 12"), as references
    are read: opt-in for completions, and gameable.
    """
    if text is None:
        return None
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text) if math.isfinite(text) else None
    answer = extract_final_answer(text, free_text=free_text)
    return None if answer is None else _number_stated(answer)


def _reference_number(answer) -> tuple[float | None, str | None]:
    """The number and unit of a dataset reference (GSM8K ``#### N``, a box, a bare value, else its prose)."""
    value, unit = split_unit(reference_answer(answer))
    number = _number_stated(value)
    if number is None:
        return extract_number(answer, free_text=True), None
    return number, unit


def _number_stated(answer: str) -> float | None:
    """The number of an answer, or of an assignment's right side (``x = 4``)."""
    value = parse_number(answer)
    assignment = _ASSIGNMENT_RE.match(answer)
    return parse_number(assignment.group(1)) if value is None and assignment else value


def exact_match(completion, answer) -> bool:
    """True when the extracted answer of `completion` equals `answer` (both stripped)."""
    return extract_answer(completion_text(completion)) == str(answer).strip()


def numeric_match(completion, answer, tolerance: float = 1e-6, free_text: bool = False) -> bool:
    """True when the completion's final-answer slot states the number in `answer` (relative tolerance `tolerance`).

    Every answer in the slot (several boxes) must state it, in the reference's unit when the reference
    has one. A percent answer ("50%") matches only a percent reference: a percent scales its number.
    ``free_text=True`` (verifier ``numeric_free_text``) also reads prose: opt-in, and gameable.
    """
    reference, reference_unit = _reference_number(answer)
    if reference is None:
        return False
    predicted = final_answers(completion, free_text)
    return bool(predicted) and all(_states_number(one, reference, reference_unit, tolerance) for one in predicted)


def _states_number(predicted_text: str, reference: float, reference_unit: str | None, tolerance: float) -> bool:
    predicted = _number_stated(predicted_text)
    if predicted is None or not units_agree(split_unit(predicted_text)[1], reference_unit):
        return False
    return abs(predicted - reference) <= tolerance * max(1.0, abs(reference))


def numeric_free_text_match(completion, answer, tolerance: float = 1e-6) -> bool:
    """`numeric_match` that also reads answers out of prose ("The answer is 6"): opt-in, and gameable."""
    return numeric_match(completion, answer, tolerance, free_text=True)


def prefix_match(completion, answer) -> bool:
    """True when the completion, leading spaces removed, starts with `answer`.

    The built-in domains use it: their completions are a few tokens long, so the answer is
    read as the completion's first `len(answer)` characters.
    """
    return completion_text(completion).lstrip().startswith(str(answer))


def coin_flip(*parts, probability: float = 0.5) -> bool:
    """A Bernoulli(`probability`) draw that is a deterministic function of `parts` (stable across processes)."""
    digest = hashlib.blake2b("\x1f".join(str(part) for part in parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64 < probability


VERIFIERS = {
    "exact": exact_match,
    "numeric": numeric_match,
    "numeric_free_text": numeric_free_text_match,
    "prefix": prefix_match,
}


def get_verifier(name_or_fn):
    """Return a verifier `(completion, answer) -> bool` from its name or a callable.

    Names: `exact`, `numeric` (the final-answer slot), `numeric_free_text` (also prose: gameable), `prefix`.
    """
    if callable(name_or_fn):
        return name_or_fn
    try:
        return VERIFIERS[name_or_fn]
    except KeyError:
        raise InputError(
            f"unknown verifier {name_or_fn!r}; choose one of {sorted(VERIFIERS)} or pass a callable"
        ) from None


def answer_is_readable(answer, verifier: str) -> bool:
    """True when `verifier` can compare completions against this reference answer."""
    if answer is None:
        return False
    if verifier in ("numeric", "numeric_free_text"):
        return _reference_number(answer)[0] is not None
    return bool(str(answer).strip())
