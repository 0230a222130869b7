"""Values in math answers: numbers (`parse_number`), units (`split_unit`, `units_agree`), and answers too costly to
compare (`too_costly`).

What `math_answers` reads out of an answer before math-verify compares it; the rules are in its module docstring.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# A number as written in answers: optional sign, digits with optional thousands commas, decimals,
# exponent (1e3). A sign right after a digit or a letter is an operator (48-24), not part of the number.
_SIGN = r"(?:(?<![\w)\]}])[-+−])?"
_NUMBER = rf"{_SIGN}(?:(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_RE = re.compile(_NUMBER)
# LaTeX's thousands separator as MATH writes it (``1{,}000``): a comma, read by the same three-digit-group rule.
_THOUSANDS_BRACE = "{,}"
NUMBER_OR_FRACTION = rf"(?:{_NUMBER})\s*/\s*(?:{_NUMBER})|{_NUMBER}"
# A percent sign stays with its number: 0.5% is not 0.5.
PERCENT_SIGN = r"(?:\s*\\?%)?"
_FRACTION_RE = re.compile(r"^([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_SLASH_FRACTION_RE = re.compile(rf"^({_NUMBER})\s*/\s*({_NUMBER})$")
_TIMES_TEN_RE = re.compile(rf"^({_NUMBER})(?:\\times|\\cdot|×)10\^\{{?([-+]?\d+)\}}?$")
# \frac12 (MATH writes one-digit fractions without braces) -> \frac{1}{2}.
_BARE_FRACTION_RE = re.compile(r"\\frac(\d)(\d)")
# Wrappers that do not change the value of an answer.
_STRIP_TOKENS = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "\\$", "$", "\\%", "%", "^\\circ", "^{\\circ}")
TEXT_COMMAND_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")

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

MAX_ANSWER_CHARS = 300
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
    if len(answer) > MAX_ANSWER_CHARS:
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


# ------------------------------------------------------------------ numbers


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _to_float(number: str) -> float | None:
    try:
        return _finite(float(number.replace(",", "").replace("−", "-")))
    except (ValueError, OverflowError):
        return None


def normalise_answer(answer: str) -> str:
    """Drop formatting that does not change an answer's value
    (``$``, ``\\left``, ``\\text{}``, spaces, trailing dot)."""
    answer = TEXT_COMMAND_RE.sub(r"\1", answer)
    for token in _STRIP_TOKENS:
        answer = answer.replace(token, "")
    answer = (
        answer.replace("−", "-")
        .replace(_THOUSANDS_BRACE, ",")
        .replace("\\dfrac", "\\frac")
        .replace("\\tfrac", "\\frac")
    )
    answer = _BARE_FRACTION_RE.sub(r"\\frac{\1}{\2}", answer)
    return "".join(answer.split()).rstrip(".")


def parse_number(answer) -> float | None:
    """Return the value of an answer that is a number
    (``1,000``, ``-3.50``, ``$12``, ``\\frac{3}{4}``, ``3/4``, ``18 dollars``), or None."""
    if answer is None or isinstance(answer, bool):
        return None
    if isinstance(answer, (int, float)):
        return float(answer) if math.isfinite(answer) else None
    text = normalise_answer(str(answer))
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


def plain_decimal(answer: str) -> str:
    """A number written as text (``1,000``, ``1{,}000``, ``1e3``, ``−3``) as plain decimal digits; others unchanged.

    math-verify reads ``1e3`` as ``e * 3``; exact decimals keep ``1000001 != 1000000`` at any size.
    """
    text = answer.strip().replace("−", "-").replace(_THOUSANDS_BRACE, ",")
    if not _NUMBER_RE.fullmatch(text):
        return answer
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return answer
    return format(value, "f") if value.is_finite() and abs(value.adjusted()) < 400 else answer
