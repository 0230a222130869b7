"""Answer extraction and verifiers: completion text + reference answer -> correct or not.

All verifiers are pure functions of their arguments (the noisy one hashes its inputs), so a
reward is reproducible from the logged prompt, completion and call index.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataflex_callbacks.errors import InputError

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# Markers that introduce a final answer in common datasets (GSM8K's "####") and in prompts
# that ask for "Answer: ...".
_ANSWER_MARKERS = ("####", "answer:", "answer is")


def completion_text(completion) -> str:
    """Return the text of a TRL completion: a string, or the last message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)) and completion:
        return completion_text(completion[-1])
    return "" if completion is None else str(completion)


def extract_answer(text: str) -> str:
    """Return the final answer in `text`: what follows the last answer marker (`####`, `answer:`), first line, stripped."""
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


def extract_number(text) -> float | None:
    """Return the last number in `text` (after an answer marker if present), or None; `1,234` reads as 1234."""
    if text is None:
        return None
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text) if math.isfinite(text) else None
    text = completion_text(text)
    marked = extract_answer(text)
    for candidate in (marked, text):
        matches = _NUMBER.findall(candidate)
        if matches:
            try:
                value = float(matches[-1].replace(",", ""))
            except ValueError:
                continue
            if math.isfinite(value):
                return value
    return None


def exact_match(completion, answer) -> bool:
    """True when the extracted answer of `completion` equals `answer` (both stripped)."""
    return extract_answer(completion_text(completion)) == str(answer).strip()


def numeric_match(completion, answer, tolerance: float = 1e-6) -> bool:
    """True when the last number of `completion` equals the number in `answer` (relative tolerance `tolerance`)."""
    reference = extract_number(answer)
    predicted = extract_number(completion_text(completion))
    if reference is None or predicted is None:
        return False
    return abs(predicted - reference) <= tolerance * max(1.0, abs(reference))


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


VERIFIERS = {"exact": exact_match, "numeric": numeric_match, "prefix": prefix_match}


def get_verifier(name_or_fn):
    """Return a verifier `(completion, answer) -> bool` from its name (`exact`, `numeric`, `prefix`) or a callable."""
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
    if verifier == "numeric":
        return extract_number(answer) is not None
    return bool(str(answer).strip())
