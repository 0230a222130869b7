"""Math word-problem answers (GSM8K, MATH-style): extract the final answer of a completion and compare it to the reference.

The final answer is read, in this order of preference, from the last ``\\boxed{...}``, the text
after the last ``####`` (GSM8K's marker), the text after the last "answer is" / "answer:", and
else the last number (or ``a/b``) of the completion; an unbalanced
(truncated) ``\\boxed{`` is ignored. Numbers compare by value: ``42.0 == 42``,
``1,000 == 1000``, ``$-3$ == -3``, ``\\frac{1}{2} == 0.5 == 1/2``. A reference that is not a
number (``\\sqrt{2}``, ``(1, 2)``) is compared as normalised text. Anything unreadable scores 0.
"""

from __future__ import annotations

import math
import re

from .verifiers import completion_text

# A number as written in answers: optional sign, digits with optional thousands commas, decimals.
_NUMBER = r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+−]?\.\d+"
_NUMBER_RE = re.compile(_NUMBER)
_NUMBER_OR_FRACTION_RE = re.compile(rf"(?:{_NUMBER})\s*/\s*(?:{_NUMBER})|{_NUMBER}")
_FRACTION_RE = re.compile(r"^([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_SLASH_FRACTION_RE = re.compile(rf"^({_NUMBER})\s*/\s*({_NUMBER})$")
_TEXT_MARKERS = ("the answer is", "final answer is", "final answer:", "answer:")
# Wrappers that do not change the value of an answer.
_STRIP_TOKENS = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "\\$", "$", "\\%", "%", "^\\circ", "^{\\circ}")
_TEXT_COMMAND_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def last_boxed(text: str) -> str | None:
    """Return the content of the last balanced ``\\boxed{...}`` (or ``\\fbox{...}``) in `text`, or None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    position = text.index("{", start) + 1
    depth = 1
    for end in range(position, len(text)):
        if text[end] == "{":
            depth += 1
        elif text[end] == "}":
            depth -= 1
            if depth == 0:
                return text[position:end]
    return None  # unbalanced: a truncated completion


def extract_final_answer(completion) -> str | None:
    """Return the final answer of a completion as text (boxed, after ``####``, after "answer is", else last number), or None.

    `completion` is a string or a TRL conversational completion (a list of messages).
    """
    text = completion_text(completion)
    if not text or not text.strip():
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip() or None
    if "####" in text:
        return _answer_after(text, text.rfind("####") + 4)
    lowered = text.lower()
    for marker in _TEXT_MARKERS:
        position = lowered.rfind(marker)
        if position >= 0:
            return _answer_after(text, position + len(marker))
    numbers = _NUMBER_OR_FRACTION_RE.findall(text)
    return numbers[-1] if numbers else None


def _answer_after(text: str, position: int) -> str | None:
    """The first line after an answer marker; its first number when the line is a sentence ("42 apples in total")."""
    tail = text[position:].strip().lstrip(":").strip()
    line = tail.splitlines()[0].strip().rstrip(".") if tail else ""
    if not line:
        return None
    if parse_number(line) is None and " " in line:
        number = _NUMBER_RE.search(line)
        if number:
            return number.group(0)
    return line


def _normalise(answer: str) -> str:
    """Drop formatting that does not change an answer's value (``$``, ``\\left``, ``\\text{}``, spaces, trailing dot)."""
    answer = _TEXT_COMMAND_RE.sub(r"\1", answer)
    for token in _STRIP_TOKENS:
        answer = answer.replace(token, "")
    answer = answer.replace("−", "-").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return "".join(answer.split()).rstrip(".")


def _to_float(number: str) -> float | None:
    try:
        value = float(number.replace(",", "").replace("−", "-"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_number(answer) -> float | None:
    """Return the value of an answer that is a number (``1,000``, ``-3.50``, ``$12``, ``\\frac{3}{4}``, ``3/4``, ``18 dollars``), or None."""
    if answer is None or isinstance(answer, bool):
        return None
    if isinstance(answer, (int, float)):
        return float(answer) if math.isfinite(answer) else None
    text = _normalise(str(answer))
    if not text:
        return None
    if _NUMBER_RE.fullmatch(text):
        return _to_float(text)
    for pattern in (_FRACTION_RE, _SLASH_FRACTION_RE):
        match = pattern.match(text)
        if match:
            if pattern is _FRACTION_RE:
                sign, numerator, denominator = match.group(1), parse_number(match.group(2)), parse_number(match.group(3))
            else:
                sign, numerator, denominator = "", _to_float(match.group(1)), _to_float(match.group(2))
            if numerator is None or not denominator:
                return None
            return (-1.0 if sign == "-" else 1.0) * numerator / denominator
    # A number followed by a unit word ("18dollars", "5cm"): the number alone is the answer.
    match = re.match(rf"^({_NUMBER})[a-zA-Z]*$", text)
    return _to_float(match.group(1)) if match else None


def reference_answer(answer) -> str:
    """Return the final answer of a dataset reference: the text after GSM8K's ``####``, a boxed value, or the whole answer."""
    text = "" if answer is None else str(answer)
    if "####" in text:
        return text[text.rfind("####") + 4:].strip()
    boxed = last_boxed(text)
    return (boxed if boxed is not None else text).strip()


def math_answers_match(completion, answer, tolerance: float = 1e-9) -> bool:
    """True when the completion's final answer equals the reference (by value for numbers, else normalised text).

    `answer` is a dataset reference: a GSM8K solution ending in ``#### N``, a MATH ``\\boxed{}``
    solution, or a bare answer. `tolerance` is relative (``|a - b| <= tolerance * max(1, |b|)``).
    """
    predicted = extract_final_answer(completion)
    if predicted is None:
        return False
    reference = reference_answer(answer)
    if not reference:
        return False
    reference_value = parse_number(reference)
    if reference_value is not None:
        value = parse_number(predicted)
        return value is not None and abs(value - reference_value) <= tolerance * max(1.0, abs(reference_value))
    return _normalise(predicted) == _normalise(reference)


def math_answer_reward(completions, answer, **kwargs) -> list[float]:
    """TRL reward function: 1.0 per completion whose final answer matches the `answer` column, else 0.0."""
    return [float(math_answers_match(completion, reference)) for completion, reference in zip(completions, answer)]
