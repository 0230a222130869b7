"""Math word-problem answers (GSM8K, MATH-style): extract the final answer of a completion and compare it to the reference.

Which part of a completion is its final answer (one rule, first that applies):

1. the last ``\\boxed{...}`` (or ``\\fbox{...}``); an unbalanced (truncated) box is ignored;
2. else the last answer marker of any kind, ``####`` (GSM8K's), "answer is" or "answer:" (so
   "The answer is 5. ... Final answer: 7" answers 7): the first line after it, or the first
   value of that line when it is a sentence ("The answer is 5 and then I checked 7" answers 5);
3. else the last number (or ``a/b``) of the completion.

How answers compare: numbers by value, ``42.0 == 42``, ``1,000 == 1000``, ``1e3 == 1000``,
``2\\times10^{3} == 2000``, ``$-3$ == -3``, ``\\frac{1}{2} == \\frac12 == 0.5 == 1/2``; an answer
written as an equation is read as its last side (``x = 4`` and ``48 + 24 = 72`` answer 4 and 72);
a percent matches its number (``50\\%`` == 50, GSM8K's way) or its fraction (``50\\% == 0.5``)
when only one side has the sign. A reference that is not a number (``\\sqrt{2}``, ``(1, 2)``) is
compared as normalised text. An unreadable completion scores 0.
"""

from __future__ import annotations

import math
import re

from .verifiers import completion_text

# A number as written in answers: optional sign, digits with optional thousands commas, decimals,
# exponent (1e3). A sign right after a digit or a letter is an operator (48-24), not part of the number.
_SIGN = r"(?:(?<![\w)\]}])[-+−])?"
_NUMBER = rf"{_SIGN}(?:(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_RE = re.compile(_NUMBER)
_NUMBER_OR_FRACTION_RE = re.compile(rf"(?:{_NUMBER})\s*/\s*(?:{_NUMBER})|{_NUMBER}")
# The first value of an answer sentence: a LaTeX fraction, a/b, or a number.
_VALUE_RE = re.compile(rf"[-+−]?\\[dt]?frac\{{[^{{}}]+\}}\{{[^{{}}]+\}}|(?:{_NUMBER})\s*/\s*(?:{_NUMBER})|{_NUMBER}")
_FRACTION_RE = re.compile(r"^([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_SLASH_FRACTION_RE = re.compile(rf"^({_NUMBER})\s*/\s*({_NUMBER})$")
_TIMES_TEN_RE = re.compile(rf"^({_NUMBER})(?:\\times|\\cdot|×)10\^\{{?([-+]?\d+)\}}?$")
# \frac12 (MATH writes one-digit fractions without braces) -> \frac{1}{2}.
_BARE_FRACTION_RE = re.compile(r"\\frac(\d)(\d)")
# GSM8K's "####", "the answer is", "Final Answer:", "**Answer:**": the last one of any kind wins.
_ANSWER_MARKER_RE = re.compile(r"####|\banswer\b[\s*]*(?:is\b|:)", re.IGNORECASE)
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
    """Return the final answer of a completion as text (last box, else after the last answer marker, else last number), or None.

    `completion` is a string or a TRL conversational completion (a list of messages).
    """
    text = completion_text(completion)
    if not text or not text.strip():
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip() or None
    markers = list(_ANSWER_MARKER_RE.finditer(text))
    if markers:
        return _answer_after(text, markers[-1].end())
    numbers = _NUMBER_OR_FRACTION_RE.findall(text)
    return numbers[-1] if numbers else None


def _answer_after(text: str, position: int) -> str | None:
    """The first line after an answer marker; its first value when the line is a sentence ("42 apples in total")."""
    tail = text[position:].strip().lstrip(":*").strip()
    line = tail.splitlines()[0].strip().rstrip(".") if tail else ""
    if not line:
        return None
    if parse_number(line) is None and " " in line:
        value = _VALUE_RE.search(line)
        if value:
            return value.group(0)
    return line


def _normalise(answer: str) -> str:
    """Drop formatting that does not change an answer's value (``$``, ``\\left``, ``\\text{}``, spaces, trailing dot)."""
    answer = _TEXT_COMMAND_RE.sub(r"\1", answer)
    for token in _STRIP_TOKENS:
        answer = answer.replace(token, "")
    answer = answer.replace("−", "-").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    answer = _BARE_FRACTION_RE.sub(r"\\frac{\1}{\2}", answer)
    return "".join(answer.split()).rstrip(".")


def _last_side(answer: str) -> str:
    """The value an equation states: its last side (``x=4`` -> ``4``, ``48+24=72`` -> ``72``); else `answer`."""
    if "=" not in answer:
        return answer
    return answer.rsplit("=", 1)[1] or answer


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _to_float(number: str) -> float | None:
    try:
        return _finite(float(number.replace(",", "").replace("−", "-")))
    except (ValueError, OverflowError):
        return None


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
    match = _TIMES_TEN_RE.match(text)
    if match:
        mantissa = _to_float(match.group(1))
        return None if mantissa is None else _finite(mantissa * 10.0 ** int(match.group(2)))
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
    The module docstring lists the rules.
    """
    predicted = extract_final_answer(completion)
    if predicted is None:
        return False
    reference = reference_answer(answer)
    if not reference:
        return False
    reference_value = parse_number(_last_side(reference))
    if reference_value is not None:
        value = parse_number(_last_side(predicted))
        if value is None:
            return False
        candidates = [value]
        # A percent on one side only: 50% is 50 (GSM8K writes percent answers bare) or 0.5.
        if ("%" in predicted) != ("%" in reference):
            candidates.append(value / 100.0 if "%" in predicted else value * 100.0)
        return any(abs(v - reference_value) <= tolerance * max(1.0, abs(reference_value)) for v in candidates)
    predicted, reference = _normalise(predicted), _normalise(reference)
    return predicted == reference or _last_side(predicted) == _last_side(reference)


def math_answer_reward(completions, answer, **kwargs) -> list[float]:
    """TRL reward function: 1.0 per completion whose final answer matches the `answer` column, else 0.0."""
    return [float(math_answers_match(completion, reference)) for completion, reference in zip(completions, answer)]
