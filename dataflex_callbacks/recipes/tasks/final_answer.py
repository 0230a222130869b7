"""Where a completion states its final answer, and which statements are no answer: hedges and negations.

Shared by every verifier family (math, numeric, multiple choice, Knights and Knaves). Every
function here runs in time linear in the completion's length: a policy in a repetition loop
writes megabytes, and one such completion must not stall a training step.

- A **hedge** offers two or more alternatives: "5 or 7", "either A or B", "A/B",
  ``x=2 \\text{ or } x=-2``. It is no single answer and earns no credit for either alternative.
- A **negation** rules a value out: "not 5", "isn't 5", "rather than 5", ``\\neq 5``. The negated
  value is never read as the answer.
"""

from __future__ import annotations

import re

# Words that join alternatives. "and/or" and "either" count; "and" alone does not (a list of
# solutions "2 and 3" is one answer).
_ALTERNATIVE_RE = re.compile(r"\\text\{\s*(?:or|either)\s*\}|\\lor\b|\\vee\b|\b(?:and/)?or\b|\beither\b", re.IGNORECASE)
# Words right before a value that rule the value out ("isn't equal to $5"); a regex fragment, so a
# scan for values can carry it as a group and flag negated values in the same pass.
NEGATION = (
    r"(?:\b[Nn][Oo][Tt]|n't|\b[Nn]ever|\b[Rr]ather\s+than|\b[Ii]nstead\s+of|\b[Oo]ther\s+than|\\neq?|≠|!=)"
    r"(?:\s+(?:be|equal|equals|equal\s+to|the|a|an))*[\s$(*]*"
)
_NEGATION_BEFORE_RE = re.compile(NEGATION + "$")
# How far before a value a negation may stand ("isn't equal to $5"): bounded, so the check is O(1).
_NEGATION_WINDOW = 40
_EMPHASIS_RE = re.compile(r"^[*_`\s]+|[*_`\s]+$")


def completion_text(completion) -> str:
    """Return the text of a TRL completion: a string, or the last message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)) and completion:
        return completion_text(completion[-1])
    return "" if completion is None else str(completion)


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


def _nested_braces(depth: int) -> str:
    """A regex for text whose braces balance, nested at most `depth` deep (possessive: no backtracking)."""
    if depth == 0:
        return r"[^{}]*+"
    return r"(?:[^{}]++|\{" + _nested_braces(depth - 1) + r"\})*+"


# Braces inside a box nest at most this deep (``\sqrt{\frac{1}{2}}`` is 2; `math_answers.too_costly` refuses
# answers deeper than 8). The bound keeps the search linear: a box that does not close within it is skipped.
_BOX_NESTING = 8
_BOX_RE = re.compile(r"\\(?:boxed|fbox)\{(" + _nested_braces(_BOX_NESTING) + r")\}")


def all_boxed(text: str) -> list[str]:
    """The contents of every balanced ``\\boxed{...}`` (or ``\\fbox{...}``) of `text` not inside another, in order.

    An unclosed box (a truncated completion) is left out while a closed box inside it still counts, as
    is a box nested deeper than 8 braces. Linear in the length of `text`: a loop of boxes, closed or not,
    costs one regex pass.
    """
    return _BOX_RE.findall(text)


def last_answer_tag(text: str) -> str | None:
    """Return the content of the last closed ``<answer>...</answer>`` block (any case), or None."""
    lowered = text.lower()
    close = lowered.rfind("</answer>")
    if close < 0:
        return None
    # rfind, not a regex over the text: a loop of unclosed "<answer>" tags must not cost O(n^2).
    start = lowered.rfind("<answer>", 0, close)
    return None if start < 0 else text[start + len("<answer>") : close]


_ANSWER_TAG_RE = re.compile(r"<(/?)answer>", re.IGNORECASE)


def answer_tags(text: str) -> tuple[list[str], str]:
    """Return the contents of every closed ``<answer>...</answer>`` block (any case) and the text outside them.

    A block is the last ``<answer>`` before each ``</answer>``; an unclosed tag stays in the outside text. One
    regex pass: a loop of unclosed tags costs O(n). The blocks' places in the outside text are line breaks, so
    a line there never joins the text before a block to the text after it.
    """
    blocks: list[str] = []
    outside: list[str] = []
    kept = 0  # where the outside text not yet copied starts
    opened = -1  # where the content of the latest unclosed <answer> starts
    for tag in _ANSWER_TAG_RE.finditer(text):
        if not tag.group(1):
            opened = tag.end()
        elif opened >= 0:
            start = opened - len("<answer>")
            blocks.append(text[opened : tag.start()])
            outside.append(text[kept:start])
            kept, opened = tag.end(), -1
    outside.append(text[kept:])
    return blocks, "\n".join(outside)


def strip_emphasis(text: str) -> str:
    """Drop markdown emphasis and code marks around an answer (``**18**`` -> ``18``)."""
    return _EMPHASIS_RE.sub("", text)


def offers_alternatives(text: str) -> bool:
    """True when `text` joins alternatives with "or", "either", "and/or", ``\\lor`` or ``\\text{ or }`` (a hedge)."""
    return _ALTERNATIVE_RE.search(text) is not None


def split_alternatives(text: str) -> list[str]:
    """The alternatives `text` offers (``x=2 \\text{ or } x=-2`` -> ``["x=2", "x=-2"]``); one item when none."""
    parts = [part.strip(" ,;") for part in _ALTERNATIVE_RE.split(text)]
    return [part for part in parts if part]


def is_negated(text: str, position: int) -> bool:
    """True when the value starting at `position` of `text` is ruled out by a negation just before it."""
    return _NEGATION_BEFORE_RE.search(text[max(0, position - _NEGATION_WINDOW) : position]) is not None
