"""Math answers (GSM8K, MATH, Minerva style): read a completion's final answer and check it with math-verify.

The answer slot (the default): a completion is credited only for the one answer in its final-answer slot,
the first of these it has:

1. the last ``<answer>...</answer>`` block: the boxes inside it, else all of it;
2. else every ``\\boxed{...}`` (or ``\\fbox{...}``): each must state the reference's value, so two boxes
   that disagree score 0; an unclosed (truncated) box is ignored;
3. else the last GSM8K ``####`` line or line that opens with "Answer:" (DAPO's ``Answer: $Answer``,
   ``**Final Answer:**``): the rest of that line;
4. else the whole completion, when it is the bare answer ("6", "6.", " 6 \\n").

The slot must hold one value and nothing else (a number, an expression, an equation such as ``x = 4``, a
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
TRL's ``accuracy_reward`` and verl's math scorers use): numbers by value (``1,000 == 1000 == 1e3``,
``42.0 == 42``), LaTeX and expression equivalence (``\\sqrt2 == \\sqrt{2}``, ``10^3 == 1000``,
``\\frac12 == 0.5 == 1/2``), sets, tuples and intervals. An unreadable completion scores 0.
"""

from __future__ import annotations

import math
import re
import threading
from decimal import Decimal, InvalidOperation

from dataflex_callbacks.errors import DataFlexError

from .final_answer import (
    NEGATION,
    all_boxed,
    completion_text,
    is_negated,
    last_answer_tag,
    last_boxed,
    offers_alternatives,
    split_alternatives,
    strip_emphasis,
)

__all__ = [
    "MathVerifyMissing",
    "extract_final_answer",
    "final_answers",
    "last_boxed",
    "math_answer_reward",
    "math_answer_reward_free_text",
    "math_answers_match",
    "parse_number",
    "reference_answer",
    "split_unit",
    "too_costly",
    "units_agree",
]


class MathVerifyMissing(DataFlexError, ImportError):
    """The math verifier needs the ``math-verify`` package, which is not installed."""


# A number as written in answers: optional sign, digits with optional thousands commas, decimals,
# exponent (1e3). A sign right after a digit or a letter is an operator (48-24), not part of the number.
_SIGN = r"(?:(?<![\w)\]}])[-+−])?"
_NUMBER = rf"{_SIGN}(?:(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_RE = re.compile(_NUMBER)
_NUMBER_OR_FRACTION = rf"(?:{_NUMBER})\s*/\s*(?:{_NUMBER})|{_NUMBER}"
# A percent sign stays with its number: 0.5% is not 0.5.
_PERCENT_SIGN = r"(?:\s*\\?%)?"
# The last-number rule reads each number with the negation before it (group 1 set: negated). The
# lookahead lets the scan skip, in one step, every position where neither can start.
_NUMBER_WITH_NEGATION_RE = re.compile(
    rf"(?=[-+−.\d\\≠!nNrRiIoO])({NEGATION})?((?:{_NUMBER_OR_FRACTION}){_PERCENT_SIGN})"
)
# The last-number rule reads the completion's end first, then 16 times more: a final number is near the end.
_FIRST_WINDOW, _WINDOW_GROWTH = 4096, 16
# A value inside an answer sentence: a $...$ span, a LaTeX fraction, a/b, or a number.
_VALUE_RE = re.compile(
    rf"\$[^$]+\$|[-+−]?\\[dt]?frac\{{[^{{}}]+\}}\{{[^{{}}]+\}}|(?:{_NUMBER_OR_FRACTION}){_PERCENT_SIGN}"
)
_FRACTION_RE = re.compile(r"^([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_SLASH_FRACTION_RE = re.compile(rf"^({_NUMBER})\s*/\s*({_NUMBER})$")
_TIMES_TEN_RE = re.compile(rf"^({_NUMBER})(?:\\times|\\cdot|×)10\^\{{?([-+]?\d+)\}}?$")
# \frac12 (MATH writes one-digit fractions without braces) -> \frac{1}{2}.
_BARE_FRACTION_RE = re.compile(r"\\frac(\d)(\d)")
# GSM8K's "####", "the answer is", "Final Answer:", "**Answer:**": the last one of any kind wins.
_ANSWER_MARKER_RE = re.compile(r"####|\banswer\b[\s*]*(?:is\b|:)", re.IGNORECASE)
# The text between two boxes that offers them as alternatives: "\boxed{5} or \boxed{7}".
_BOX_ALTERNATIVE_RE = re.compile(r"\}\$*\s*,?\s*(?:\bor\b|\beither\b|/)\s*\$*$", re.IGNORECASE)
# A math span that opens an answer line: $...$, $$...$$, \(...\), \[...\].
_MATH_SPAN_RE = re.compile(r"\$\$?([^$]+)\$\$?|\\\((.+?)\\\)|\\\[(.+?)\\\]")
# Wrappers that do not change the value of an answer.
_STRIP_TOKENS = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "\\$", "$", "\\%", "%", "^\\circ", "^{\\circ}")
_TEXT_COMMAND_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
# An English word in an answer line (a LaTeX command such as \frac is not one): the line is a sentence.
_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")

# ------------------------------------------------------------------ units

_TEXT_WRAPPER = r"\\(?:text|textrm|mathrm|mbox|textbf|operatorname)\s*"
_POWER = r"(?P<power>\^\s*\{?\s*[23]\s*\}?)?"
_PERCENT_RE = re.compile(rf"^(?P<value>.*?)\s*(?:\\?%|{_TEXT_WRAPPER}\{{\s*percent\s*\}}|\s+percent)$")
_DEGREE_RE = re.compile(
    r"^(?P<value>.*?)\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\s+degrees?)"
    r"\s*(?:(?P<scale>[CFK])|\\(?:text|mathrm)\s*\{\s*(?P<wrapped>[CFK])\s*\}|(?P<word>(?i:celsius|fahrenheit|kelvin)))?$"
)
_DOLLAR_RE = re.compile(r"^\\?\$\s*(?P<value>[^$]+)$")
_TEXT_UNIT_RE = re.compile(
    rf"^(?P<value>.*?[^\s\\])(?:\s|\\[,;! ]|~)*{_TEXT_WRAPPER}\{{\s*(?P<unit>[A-Za-z][A-Za-z. ]*?)\s*\}}{_POWER}$"
)
_WORD_UNIT_RE = re.compile(
    rf"^(?P<value>{_NUMBER})\s*(?P<unit>[A-Za-z]{{2,}}(?: [A-Za-z]+)*|(?<=\s)[mgslh])\.?{_POWER}$"
)
# Unit names -> one spelling; a plural is read as its singular.
_UNIT_SPELLINGS = {
    "meter": "m",
    "metre": "m",
    "kilometer": "km",
    "kilometre": "km",
    "centimeter": "cm",
    "centimetre": "cm",
    "millimeter": "mm",
    "millimetre": "mm",
    "inch": "in",
    "inche": "in",
    "foot": "ft",
    "feet": "ft",
    "yard": "yd",
    "mile": "mi",
    "gram": "g",
    "kilogram": "kg",
    "second": "s",
    "sec": "s",
    "minute": "min",
    "hour": "h",
    "hr": "h",
    "liter": "l",
    "litre": "l",
    "milliliter": "ml",
    "millilitre": "ml",
    "dollar": "$",
    "usd": "$",
    "cent": "¢",
    "degree": "°",
    "percent": "%",
}
# Words a dataset writes after a value that name no unit ("square units" is an area in the question's unit).
_NO_UNIT = {"unit", "units", "square units", "sq units", "cubic units"}


def split_unit(answer: str) -> tuple[str, str | None]:
    """``(value, unit or None)`` of an answer: ``5 \\text{ km}`` -> ``("5", "km")``, ``25\\%`` -> ``("25", "%")``.

    The unit is canonical (``kilometers`` and ``km`` read the same; a plural as its singular;
    ``\\$`` and "dollars" as ``$``; ``^\\circ`` and "degrees" as ``°``).
    """
    answer = answer.strip()
    match = _PERCENT_RE.match(answer)
    if match and match.group("value").strip():
        return match.group("value").strip(), "%"
    match = _DEGREE_RE.match(answer)
    if match and match.group("value").strip():
        scale = match.group("scale") or match.group("wrapped") or (match.group("word") or "")[:1].upper()
        return match.group("value").strip(), "°" + scale
    match = _DOLLAR_RE.match(answer)
    if match:
        return match.group("value").strip(), "$"
    for pattern in _TEXT_UNIT_RE, _WORD_UNIT_RE:
        match = pattern.match(answer)
        if match:
            unit = _canonical_unit(match.group("unit"), match.group("power"))
            return match.group("value").strip(), unit
    return answer, None


def _canonical_unit(name: str, power: str | None) -> str | None:
    words = name.lower().replace(".", " ").split()
    if " ".join(words) in _NO_UNIT:
        return None
    exponent = re.sub(r"\D", "", power or "")
    if words and words[0] in ("square", "sq", "cubic", "cu"):
        exponent = "2" if words[0] in ("square", "sq") else "3"
        words = words[1:]
    name = " ".join(words)
    for singular in (name, name[:-1] if name.endswith("s") else None, name[:-2] if name.endswith("es") else None):
        if singular in _UNIT_SPELLINGS:
            name = _UNIT_SPELLINGS[singular]
            break
    return name + (f"^{exponent}" if exponent else "")


def units_agree(unit: str | None, reference_unit: str | None) -> bool:
    """An answer without a unit is in the reference's; a percent needs a percent reference; other units must match."""
    if unit is None:
        return True
    if reference_unit is None:
        return unit != "%"
    if unit == "°" and reference_unit.startswith("°"):
        return True  # a degree without a scale names no other scale
    return unit == reference_unit


# ------------------------------------------------------------------ answers whose comparison could run for seconds

_MAX_ANSWER_CHARS = 300
_MAX_NESTING = 8
# An exponent above this, on a base that is not a plain integer, expands for seconds: (x+1)^{1000} took 9 s.
_MAX_SYMBOLIC_EXPONENT = 12
_MAX_EXPONENT = 10_000
_UNEVALUATED_RE = re.compile(r"\\(?:sum|prod|int|oint|lim)\b")
_FACTORIAL_RE = re.compile(r"(?<![\w)}])(?:\d{1,3}|[A-Za-z])!|!")
_BINOMIAL_RE = re.compile(r"\\[dt]?binom|\\choose")


def too_costly(answer: str) -> bool:
    """True when math-verify could take seconds on `answer`, which then scores 0.

    math-verify's own timeout is a SIGALRM, which only the main thread can set (verl scores in
    worker threads), and it cannot interrupt one long integer operation. So an answer is refused
    before it is parsed when it is longer than 300 characters, nested deeper than 8 brackets, an
    exponent tower (``10^{10^{10}}``), an exponent above 10,000 or above 12 on a base that is not
    an integer (``(x+1)^{1000}``), a factorial of more than three digits (``(10^{100})!``), a
    binomial with a power or a 5-digit number inside, or an unevaluated sum, product, integral or
    limit. A final answer is a value; none of these is one a dataset asks for.
    """
    if len(answer) > _MAX_ANSWER_CHARS:
        return True
    depth = deepest = 0
    for char in answer:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    if deepest > _MAX_NESTING or _UNEVALUATED_RE.search(answer):
        return True
    if "!" in answer and any(match.group(0) == "!" for match in _FACTORIAL_RE.finditer(answer)):
        return True
    if _BINOMIAL_RE.search(answer) and ("^" in answer or re.search(r"\d{5,}", answer)):
        return True
    for caret in (i for i, char in enumerate(answer) if char == "^"):
        exponent = _exponent_at(answer, caret + 1)
        if "^" in exponent or "!" in exponent:
            return True
        digits = re.fullmatch(r"\s*[-+]?\s*(\d+)\s*", exponent)
        if digits:
            value = int(digits.group(1))
            base_is_integer = caret > 0 and answer[caret - 1].isdigit()
            if value > _MAX_EXPONENT or (value > _MAX_SYMBOLIC_EXPONENT and not base_is_integer):
                return True
    return False


def _exponent_at(answer: str, position: int) -> str:
    """The exponent that starts at `position` (after a ``^``): a braced group, else one character."""
    while position < len(answer) and answer[position] == " ":
        position += 1
    if position >= len(answer):
        return ""
    if answer[position] != "{":
        return answer[position]
    depth = 0
    for end in range(position, len(answer)):
        depth += {"{": 1, "}": -1}.get(answer[end], 0)
        if depth == 0:
            return answer[position + 1 : end]
    return answer[position + 1 :]


# ------------------------------------------------------------------ extraction


def extract_final_answer(completion, free_text: bool = False) -> str | None:
    """Return the final answer of a completion as text, or None when it states no single answer.

    By default only the final-answer slot counts (module docstring, "The answer slot"); several boxes
    that are written differently give None even when they agree (`final_answers` lists them).
    ``free_text=True`` also reads answers out of prose (the opt-in rules of the module docstring).
    `completion` is a string or a TRL conversational completion (a list of messages).
    """
    answers = final_answers(completion, free_text)
    return answers[0] if len(answers) == 1 else None


def final_answers(completion, free_text: bool = False) -> list[str]:
    """The answers a completion states in its final-answer slot: one, several boxes to compare each, or none."""
    text = completion_text(completion)
    if not text or not text.strip():
        return []
    if free_text:
        answer = _free_text_answer(text)
        return [] if answer is None else [answer]
    tagged = last_answer_tag(text)
    if tagged is not None:
        boxes = all_boxed(tagged)
        return _box_answers(boxes) if boxes else _bare_answers(tagged)
    boxes = all_boxed(text)
    if boxes:
        return _box_answers(boxes)
    marker = text.rfind("####")
    line = None
    for line in _ANSWER_LINE_RE.finditer(text):
        pass
    start = max(marker + 4 if marker >= 0 else -1, line.end() if line is not None else -1)
    if start >= 0:
        tail = text[start:].strip()
        return _bare_answers(tail.splitlines()[0] if tail else "")
    return _bare_answers(text)


# A line that opens with "Answer:" (DAPO's "Answer: $Answer" line, "**Final Answer:**"): a slot like GSM8K's "####".
_ANSWER_LINE_RE = re.compile(r"^[ \t*_#>]*(?:final[ \t]+)?answer[ \t*_]*:[ \t*_]*", re.IGNORECASE | re.MULTILINE)
# More distinct boxes than this are no single answer (and would cost a comparison each).
_MAX_BOXES = 4


# Distinct box texts read at most: a loop of boxes costs one dictionary pass, not a parse per box.
_MAX_BOX_TEXTS = 64


def _box_answers(boxes: list[str]) -> list[str]:
    """The distinct answers of a completion's boxes (at most `_MAX_BOXES`), each a bare answer; else ``[]``."""
    texts = list(dict.fromkeys(boxes))
    if len(texts) > _MAX_BOX_TEXTS:
        return []
    distinct: dict[str, str] = {}
    for box in texts:
        distinct.setdefault(_normalise(box), box)
    if len(distinct) > _MAX_BOXES:
        return []
    answers = [_bare_answers(box) for box in distinct.values()]
    return [one[0] for one in answers] if all(answers) else []


# Words a bare answer may hold outside a unit: function names written without a backslash.
_MATH_WORDS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "pi", "inf", "infinity"}
# Units a dataset writes in several words (a "square"/"cubic" prefix; "square units").
_UNIT_PREFIXES = ("square ", "sq ", "cubic ", "cu ")
# One word after a value is read as its unit ("5 apples"), except a word that judges or hedges the value.
_NOT_UNITS = {
    "wrong",
    "incorrect",
    "false",
    "true",
    "not",
    "no",
    "never",
    "maybe",
    "approx",
    "approximately",
    "about",
    "roughly",
    "nearly",
    "almost",
    "around",
    "or",
    "to",
    "and",
    "is",
    "isnt",
    "either",
    "exactly",
}
_WHOLE_TEXT_RE = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\{[^{}]*\}$")


def _bare_answers(slot: str) -> list[str]:
    """``[answer]`` when `slot` is one answer and nothing else (a value, an equation, a set, a value and its unit,
    or alternatives of such for the hedge rule), else ``[]``: prose, a negation, a range or two lines."""
    answer = _unwrap(slot)
    if not answer or len(answer) > _MAX_ANSWER_CHARS or "\n" in answer or "\\boxed" in answer or "\\fbox" in answer:
        return []
    for alternative in split_alternatives(answer):
        if not _is_one_value(_unwrap(alternative)):
            return []
    return [answer]


def _is_one_value(answer: str) -> bool:
    """True when `answer` is a value, optionally with one unit: no words beyond the unit and function names."""
    if "?" in answer:
        return False  # "5?": a guess
    if _WHOLE_TEXT_RE.match(answer):
        content = _TEXT_COMMAND_RE.sub(r"\1", answer).strip()
        if not re.search(r"\d", content):
            return True  # a text answer: \text{Devon}, \text{(C)}
        return content != answer and _is_one_value(content)  # \text{5 is wrong} is read as its text
    value, unit = split_unit(answer)
    if unit is None and value != answer:
        return not _has_words(value)  # "12 square units": no unit, but its words are one
    if unit is not None:
        words = _unit_words(answer, value)
        if (" " in words and not words.startswith(_UNIT_PREFIXES)) or words.replace("'", "") in _NOT_UNITS:
            return False  # "5 is wrong", "5 \\text{ incorrect}": a sentence or a verdict, not a unit
    return not _has_words(value) and not _has_words(_TEXT_COMMAND_RE.sub(r"\1", value))


def _unit_words(answer: str, value: str) -> str:
    """The text after the value: the unit as written (``\\text{ km}`` -> ``km``), lower case."""
    tail = _TEXT_COMMAND_RE.sub(r"\1", answer[len(value) :] if answer.startswith(value) else answer)
    return " ".join(tail.lower().replace("\\", " ").split())


def _has_words(text: str) -> bool:
    return any(word.lower() not in _MATH_WORDS for word in _WORD_RE.findall(text))


def _free_text_answer(text: str) -> str | None:
    """The opt-in free-text reading: the last ``<answer>`` block, box, answer marker, else the last number."""
    tagged = last_answer_tag(text)
    if tagged is not None:
        return _answer_in(tagged)
    boxed = last_boxed(text)
    if boxed is not None:
        start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
        if _BOX_ALTERNATIVE_RE.search(text, max(0, start - 16), start):
            return None  # "\boxed{5} or \boxed{7}": a hedge across boxes
        return _unwrap(boxed) or None
    marker = _last_answer_marker(text)
    if marker is not None:
        return _answer_of_line(text[marker.end() :])
    return _last_number(text)


def _last_answer_marker(text: str) -> re.Match | None:
    """The last answer marker of `text`, read from the end first (a loop of 200,000 markers costs one window)."""
    size = _FIRST_WINDOW
    while True:
        start = max(0, len(text) - size)
        last = None
        for last in _ANSWER_MARKER_RE.finditer(text, start):
            pass
        # A match at the window's first character may be a cut marker: the next, larger window reads it.
        if last is not None and (start == 0 or last.start() > start):
            return last
        if start == 0:
            return None
        size *= _WINDOW_GROWTH


def _answer_in(region: str) -> str | None:
    """The answer inside an ``<answer>`` block: its box, else after its last marker, else its first line."""
    boxed = last_boxed(region)
    if boxed is not None:
        return _unwrap(boxed) or None
    markers = list(_ANSWER_MARKER_RE.finditer(region))
    return _answer_of_line(region[markers[-1].end() :] if markers else region)


def _unwrap(answer: str) -> str:
    """An answer without markdown emphasis, ``$`` delimiters and a closing full stop."""
    answer = strip_emphasis(answer.strip())
    span = _MATH_SPAN_RE.fullmatch(answer)
    if span:
        answer = next(group for group in span.groups() if group is not None)
    return answer.strip().rstrip(".").strip()


def _answer_of_line(tail: str) -> str | None:
    """The answer that opens `tail`: a math span, the first line when it is one expression, else its first value.

    A first line that offers alternatives ("5 or 7") is returned whole, so the comparison sees the hedge.
    """
    tail = strip_emphasis(tail.strip().lstrip(":").strip())
    line = tail.splitlines()[0].strip() if tail else ""
    span = _MATH_SPAN_RE.match(line)
    if span:
        return _unwrap(next(group for group in span.groups() if group is not None)) or None
    line = _unwrap(line)
    if not line or "\\boxed" in line or "\\fbox" in line:
        return None  # empty, or a box that never closed (a truncated completion)
    value, _ = split_unit(line)
    if not _WORD_RE.search(value) or parse_number(value) is not None:
        return line
    values = [match for match in _VALUE_RE.finditer(line) if not is_negated(line, match.start())]
    if offers_alternatives(line) and len(_VALUE_RE.findall(line)) > 1:
        return line
    return _unwrap(values[0].group(0)) if values else None


def _last_number(text: str) -> str | None:
    """The last number (or a/b) of `text` that no negation rules out ("The answer isn't 5" has none)."""
    size = _FIRST_WINDOW
    while True:
        start = max(0, len(text) - size)
        found = _NUMBER_WITH_NEGATION_RE.findall(text, start)
        # A match at the window's first character may be a cut number or miss its negation: the next window reads it.
        first = 1 if start > 0 and found else 0
        for negation, number in reversed(found[first:]):
            if not negation:
                return number
        if start == 0:
            return None
        size *= _WINDOW_GROWTH


def reference_answer(answer) -> str:
    """Return the final answer of a dataset reference:
    the text after GSM8K's ``####``, a boxed value, or the whole answer."""
    text = "" if answer is None else str(answer)
    if "####" in text:
        return _unwrap(text[text.rfind("####") + 4 :])
    boxed = last_boxed(text)
    return _unwrap(boxed if boxed is not None else text)


# ------------------------------------------------------------------ numbers


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _to_float(number: str) -> float | None:
    try:
        return _finite(float(number.replace(",", "").replace("−", "-")))
    except (ValueError, OverflowError):
        return None


def _normalise(answer: str) -> str:
    """Drop formatting that does not change an answer's value
    (``$``, ``\\left``, ``\\text{}``, spaces, trailing dot)."""
    answer = _TEXT_COMMAND_RE.sub(r"\1", answer)
    for token in _STRIP_TOKENS:
        answer = answer.replace(token, "")
    answer = answer.replace("−", "-").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    answer = _BARE_FRACTION_RE.sub(r"\\frac{\1}{\2}", answer)
    return "".join(answer.split()).rstrip(".")


def parse_number(answer) -> float | None:
    """Return the value of an answer that is a number
    (``1,000``, ``-3.50``, ``$12``, ``\\frac{3}{4}``, ``3/4``, ``18 dollars``), or None."""
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
                sign, numerator, denominator = (
                    match.group(1),
                    parse_number(match.group(2)),
                    parse_number(match.group(3)),
                )
            else:
                sign, numerator, denominator = "", _to_float(match.group(1)), _to_float(match.group(2))
            if numerator is None or not denominator:
                return None
            return (-1.0 if sign == "-" else 1.0) * numerator / denominator
    # A number followed by a unit word ("18dollars", "5cm"): the number alone is the answer.
    match = re.match(rf"^({_NUMBER})[a-zA-Z]*$", text)
    return _to_float(match.group(1)) if match else None


def _plain_decimal(answer: str) -> str:
    """A number written as text (``1,000``, ``1e3``, ``−3``) as plain decimal digits; other answers unchanged.

    math-verify reads ``1e3`` as ``e * 3``; exact decimals keep ``1000001 != 1000000`` at any size.
    """
    text = answer.strip().replace("−", "-")
    if not _NUMBER_RE.fullmatch(text):
        return answer
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return answer
    return format(value, "f") if value.is_finite() and abs(value.adjusted()) < 400 else answer


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
        f"${_plain_decimal(answer)}$",
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
    reference_value = _plain_decimal(reference_value)
    reference_is_equation = _EQUALS_RE.search(reference_value) is not None
    alternatives = split_alternatives(predicted)
    if len(alternatives) > 1 and not _lists_several(reference_value):
        return False  # a hedge
    values, units = [], set()
    for alternative in alternatives:
        value, unit = split_unit(_unwrap(alternative))
        value = _plain_decimal(value)
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
    return [float(math_answers_match(completion, reference)) for completion, reference in zip(completions, answer)]


def math_answer_reward_free_text(completions, answer, **kwargs) -> list[float]:
    """`math_answer_reward` that also reads answers out of prose ("The answer is 6"): opt-in, and gameable."""
    return [
        float(math_answers_match(completion, reference, free_text=True))
        for completion, reference in zip(completions, answer)
    ]
