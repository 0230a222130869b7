"""Read a completion's final math answer: the answer slot (the default) or, opt-in, free text.

`final_answers` and `extract_final_answer` follow the rules of the `math_answers` module docstring ("The answer
slot", "Free text"); `reference_answer` reads a dataset's reference the same way.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator

from .final_answer import (
    NEGATION,
    all_boxed,
    answer_tags,
    completion_text,
    is_negated,
    last_answer_tag,
    last_boxed,
    offers_alternatives,
    split_alternatives,
    strip_emphasis,
)
from .math_values import (
    MAX_ANSWER_CHARS,
    NUMBER_OR_FRACTION,
    PERCENT_SIGN,
    TEXT_COMMAND_RE,
    normalise_answer,
    parse_number,
    split_unit,
)

# The last-number rule reads each number with the negation before it (group 1 set: negated). The
# lookahead lets the scan skip, in one step, every position where neither can start.
_NUMBER_WITH_NEGATION_RE = re.compile(rf"(?=[-+−.\d\\≠!nNrRiIoO])({NEGATION})?((?:{NUMBER_OR_FRACTION}){PERCENT_SIGN})")
# The last-number rule reads the completion's end first, then 16 times more: a final number is near the end.
_FIRST_WINDOW, _WINDOW_GROWTH = 4096, 16
# A value inside an answer sentence: a $...$ span, a LaTeX fraction, a/b, or a number.
_VALUE_RE = re.compile(
    rf"\$[^$]+\$|[-+−]?\\[dt]?frac\{{[^{{}}]+\}}\{{[^{{}}]+\}}|(?:{NUMBER_OR_FRACTION}){PERCENT_SIGN}"
)
# GSM8K's "####", "the answer is", "Final Answer:", "**Answer:**": the last one of any kind wins.
_ANSWER_MARKER_RE = re.compile(r"####|\banswer\b[\s*]*(?:is\b|:)", re.IGNORECASE)
# The text between two boxes that offers them as alternatives: "\boxed{5} or \boxed{7}".
_BOX_ALTERNATIVE_RE = re.compile(r"\}\$*\s*,?\s*(?:\bor\b|\beither\b|/)\s*\$*$", re.IGNORECASE)
# A math span that opens an answer line: $...$, $$...$$, \(...\), \[...\].
_MATH_SPAN_RE = re.compile(r"\$\$?([^$]+)\$\$?|\\\((.+?)\\\)|\\\[(.+?)\\\]")
# An English word in an answer line (a LaTeX command such as \frac is not one): the line is a sentence.
_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")


def _last_match(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    """The last of `matches` (None if there is none), holding one match at a time."""
    last = deque(matches, maxlen=1)
    return last[0] if last else None


def extract_final_answer(completion, free_text: bool = False) -> str | None:
    """Return the final answer of a completion as text, or None when it states no single answer.

    By default only the final-answer slot counts (`math_answers` module docstring, "The answer slot"); several
    boxes that are written differently give None even when they agree (`final_answers` lists them).
    ``free_text=True`` also reads answers out of prose (the opt-in rules of that docstring).
    `completion` is a string or a TRL conversational completion (a list of messages).
    """
    answers = final_answers(completion, free_text)
    return answers[0] if len(answers) == 1 else None


def final_answers(completion, free_text: bool = False) -> list[str]:
    """The answers a completion states in its final-answer slots: one, several to compare each, or none.

    Every slot counts (every ``<answer>`` block, box, ``####``, "Answer:" and "The final answer is" line), each
    must hold one value, and the distinct values are returned: a completion whose slots disagree is paid only
    if each of them states the reference, which two different values never do.
    """
    text = completion_text(completion)
    if not text or not text.strip():
        return []
    if free_text:
        answer = _free_text_answer(text)
        return [] if answer is None else [answer]
    blocks, outside = answer_tags(text)
    slots = [slot for block in blocks for slot in (all_boxed(block) or [block])]
    slots += all_boxed(outside)
    slots += _line_slots(outside)
    return _slot_answers(slots or [text])


# A GSM8K "####" anywhere, or a line that opens with "Answer:" (DAPO's "Answer: $Answer", "**Final Answer:**"):
# each starts an answer slot, the rest of its line. In the MATH / Minerva few-shot template, "Final Answer: The
# final answer is $5$. I hope it is correct.", the template's words are not the value (lm-eval's minerva_math
# reads it so); "The final answer is 5" without "Final Answer:" is prose, as "The answer is 5" is.
_LINE_SLOT_RE = re.compile(
    r"####|^[ \t*_#>]*(?:final[ \t]+)?answer[ \t*_]*:[ \t*_]*(?:the[ \t]+final[ \t]+answer[ \t]+is\b[ \t*_:]*)?",
    re.IGNORECASE | re.MULTILINE,
)
# Where a slot's text starts: after spaces, on the next line when the marker ends its own ("####\n72").
_SLOT_START_RE = re.compile(r"\s*")
# The template's closing words, which are not part of its value.
_TEMPLATE_END_RE = re.compile(r"[ \t.]*\bI[ \t]+hope[ \t]+it[ \t]+is[ \t]+correct[ \t.!]*$", re.IGNORECASE)
# More distinct answers than this are no single answer (and would cost a comparison each).
_MAX_ANSWERS = 4
# Distinct slot texts read at most: a loop of slots costs one dictionary pass, not a parse per slot.
_MAX_SLOT_TEXTS = 64


def _line_slots(text: str) -> list[str]:
    """The text of every ``####`` / answer-line slot of `text`; a line holding a box is left to its boxes.

    A marker inside the text of an earlier slot on its line is part of that text ("#### 5 #### 6" is one slot
    holding two values): each line is read once, so a line of 100,000 markers costs O(n).
    """
    slots = []
    line_end = -1
    for marker in _LINE_SLOT_RE.finditer(text):
        if marker.start() < line_end:
            continue
        start = _SLOT_START_RE.match(text, marker.end()).end()
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        slot = text[start:line_end]
        if len(slot) <= 2 * MAX_ANSWER_CHARS:  # longer is no answer, and the template's end is sought in O(1)
            slot = _TEMPLATE_END_RE.sub("", slot).strip().rstrip(".")
        if "\\boxed" not in slot and "\\fbox" not in slot:
            slots.append(slot)
    return slots


def _slot_answers(slots: list[str]) -> list[str]:
    """The distinct answers of a completion's slots (at most `_MAX_ANSWERS`), each a bare answer; else ``[]``.

    A slot that holds no single answer (prose, a hedge in a box, an empty line) makes the whole completion
    answerless: a reader that skipped it would let a policy add slots until one pays.
    """
    texts = dict.fromkeys(slots)
    if len(texts) > _MAX_SLOT_TEXTS:
        return []
    distinct: dict[str, str] = {}
    for slot in texts:
        answer = _bare_answers(slot)
        if not answer:
            return []
        distinct.setdefault(normalise_answer(answer[0]), answer[0])
        if len(distinct) > _MAX_ANSWERS:
            return []
    return list(distinct.values())


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
    answer = unwrap_answer(slot)
    if not answer or len(answer) > MAX_ANSWER_CHARS or "\n" in answer or "\\boxed" in answer or "\\fbox" in answer:
        return []
    for alternative in split_alternatives(answer):
        if not _is_one_value(unwrap_answer(alternative)):
            return []
    return [answer]


def _is_one_value(answer: str) -> bool:
    """True when `answer` is a value, optionally with one unit: no words beyond the unit and function names."""
    if "?" in answer:
        return False  # "5?": a guess
    if _WHOLE_TEXT_RE.match(answer):
        content = TEXT_COMMAND_RE.sub(r"\1", answer).strip()
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
    return not _has_words(value) and not _has_words(TEXT_COMMAND_RE.sub(r"\1", value))


def _unit_words(answer: str, value: str) -> str:
    """The text after the value: the unit as written (``\\text{ km}`` -> ``km``), lower case."""
    tail = TEXT_COMMAND_RE.sub(r"\1", answer[len(value) :] if answer.startswith(value) else answer)
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
        return unwrap_answer(boxed) or None
    marker = _last_answer_marker(text)
    if marker is not None:
        return _answer_of_line(text[marker.end() :])
    return _last_number(text)


def _last_answer_marker(text: str) -> re.Match | None:
    """The last answer marker of `text`, read from the end first (a loop of 200,000 markers costs one window)."""
    size = _FIRST_WINDOW
    while True:
        start = max(0, len(text) - size)
        last = _last_match(_ANSWER_MARKER_RE.finditer(text, start))
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
        return unwrap_answer(boxed) or None
    markers = list(_ANSWER_MARKER_RE.finditer(region))
    return _answer_of_line(region[markers[-1].end() :] if markers else region)


def unwrap_answer(answer: str) -> str:
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
        return unwrap_answer(next(group for group in span.groups() if group is not None)) or None
    line = unwrap_answer(line)
    if not line or "\\boxed" in line or "\\fbox" in line:
        return None  # empty, or a box that never closed (a truncated completion)
    value, _ = split_unit(line)
    if not _WORD_RE.search(value) or parse_number(value) is not None:
        return line
    values = [match for match in _VALUE_RE.finditer(line) if not is_negated(line, match.start())]
    if offers_alternatives(line) and len(_VALUE_RE.findall(line)) > 1:
        return line
    return unwrap_answer(values[0].group(0)) if values else None


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
        return unwrap_answer(text[text.rfind("####") + 4 :])
    boxed = last_boxed(text)
    return unwrap_answer(boxed if boxed is not None else text)
