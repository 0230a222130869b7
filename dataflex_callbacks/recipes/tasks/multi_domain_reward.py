"""Score math, Knights-and-Knaves and multiple-choice answers in one reward, routed by each row's domain.

A drop-in reward for multi-domain RLVR data in verl's parquet layout (``data_source``, ``prompt``,
``reward_model.ground_truth``, optionally a ``domain`` column), such as DataFlex-RL's
math / logic / science mix. Three task families, each scored 1.0 (right) or 0.0 (wrong or
unreadable):

- ``math``: the one answer in the final-answer slots (every ``<answer>`` block, ``\\boxed{}``, ``####``
  and "Answer:" line, all of which must agree; else a completion that is the bare answer) states the
  reference's value, checked by math-verify (``1e3 == 1000``, ``x = 4`` answers 4,
  ``0.5 == 1/2 == \\frac{1}{2}``, sets and intervals); prose, hedges, ranges, negations, two values,
  equations such as ``2+2=5``, other units and percents against plain numbers score 0. ``free_text=True``
  also reads prose ("The answer is 6"): opt-in, and gameable. See `math_answers`.
- ``knights_knaves``: the reference is a sentence such as "Zoey is a knight, and Ethan is a
  knave." or K&K's "(1) Zoey is a knight\\n(2) Ethan is a knave" (or a mapping
  ``{name: "knight"|"knave"|True|False}``, True meaning knight); the completion's final answer
  must assign every person the reference's role (see `claimed_roles`). Names compare in any case;
  a hedge ("Zoey is a knight or a knave", "Zoey or Ethan is a knight") assigns no role.
- ``multiple_choice``: the reference is a letter A-J in any case (``B``, ``(b)``, ``B. text``; ten
  options as in MMLU-Pro) or a 0-based option index (an int, as MMLU's ``answer`` column); the
  completion's chosen letter (see `chosen_letter`; ``answer: b`` picks B) must equal it. A hedge
  ("A or B", "A/B", "A and B") picks no letter.

Every family scores in time linear in the completion's length (a 1 MB repetition loop in well
under a second; ``benchmarks/bench_verifiers.py``).

A reference the family cannot read (a multiple-choice reference ``K`` or ``Mitochondria``, a K&K
reference naming no roles, an empty math reference) scores 0 with one warning per family and
process, naming the reference; training goes on. The ``score_*`` functions themselves raise
`UnreadableReference` for it.

Each row is routed to a family by its label (``data_source`` or ``domain``): first the
``routes`` you pass, then the known labels (`KNOWN_LABELS`), then keywords in the label
(``gsm8k_short`` -> math). An unroutable label is an error that lists the families.

Two entry points:

- TRL: ``GRPOTrainer(reward_funcs=[MultiDomainReward()])`` (or the ready instance
  `multi_domain_reward`); it reads the label and the reference from the dataset columns TRL
  passes as keyword arguments.
- verl: ``reward.custom_reward_function.path=pkg://dataflex_callbacks.recipes.tasks.multi_domain_reward``
  (or this file's path) and ``...name=compute_score``; verl calls
  ``compute_score(data_source, solution_str, ground_truth, extra_info)``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from typing import Any

# Absolute imports: verl may load this file by path (``custom_reward_function.path=/.../multi_domain_reward.py``),
# outside its package, where relative imports fail.
from dataflex_callbacks.errors import InputError
from dataflex_callbacks.recipes.tasks.final_answer import completion_text, last_answer_tag, last_boxed, strip_emphasis
from dataflex_callbacks.recipes.tasks.math_answers import math_answers_match
from dataflex_callbacks.recipes.tasks.math_extraction import reference_answer

FAMILIES = ("math", "knights_knaves", "multiple_choice")

# Labels seen in public RLVR data (verl's preprocessing scripts, DataFlex-RL's mix); lower case.
KNOWN_LABELS: dict[str, str] = {
    "math": "math",
    "math_dapo": "math",
    "openai/gsm8k": "math",
    "gsm8k": "math",
    "deepscaler": "math",
    "lighteval/math": "math",
    "digitallearninggmbh/math-lighteval": "math",
    "aime": "math",
    "amc": "math",
    "logic": "knights_knaves",
    "kk_logic": "knights_knaves",
    "knights-and-knaves": "knights_knaves",
    "knights_knaves": "knights_knaves",
    "kk": "knights_knaves",
    "science": "multiple_choice",
    "sciq": "multiple_choice",
    "multiple_choice": "multiple_choice",
    "mcq": "multiple_choice",
    "gpqa": "multiple_choice",
    "mmlu": "multiple_choice",
    "arc": "multiple_choice",
}
# Words inside a label that name the family (the label is split at non-alphanumerics).
_KEYWORDS: dict[str, str] = {
    "math": "math",
    "gsm8k": "math",
    "aime": "math",
    "amc": "math",
    "deepscaler": "math",
    "numina": "math",
    "kk": "knights_knaves",
    "knights": "knights_knaves",
    "knaves": "knights_knaves",
    "knight": "knights_knaves",
    "logic": "knights_knaves",
    "sciq": "multiple_choice",
    "mcq": "multiple_choice",
    "gpqa": "multiple_choice",
    "mmlu": "multiple_choice",
    "science": "multiple_choice",
    "choice": "multiple_choice",
    "arc": "multiple_choice",
}

# Markers after which a completion states its final answer, strongest first: the last occurrence
# of the strongest kind present starts the answer ("Final answer: A is a knight, therefore B ...").
_FINAL_MARKERS = (
    ("final answer",),
    ("answer:", "answer is"),
    ("in conclusion", "conclusion:", "in summary", "to summarize"),
    ("therefore", "thus,"),
)


class UnreadableReference(InputError):
    """A ground truth its task family cannot read; the rewards score the row 0 and warn once."""


# ------------------------------------------------------------------ math


def score_math(completion, ground_truth, free_text: bool = False) -> float:
    """1.0 when the completion's final-answer slot states the value of `ground_truth` (math-verify decides), else 0.0.

    ``free_text=True`` also reads answers out of prose ("The answer is 6"): opt-in, and gameable.
    """
    if not reference_answer(ground_truth):
        raise UnreadableReference(
            f"math reference {ground_truth!r} holds no answer; store the final answer "
            "(e.g. '72', '#### 72' or '\\boxed{72}') as the ground truth"
        )
    return float(math_answers_match(completion, ground_truth, free_text=free_text))


# ------------------------------------------------------------------ Knights and Knaves

# Names in any case ("zoey is a knight"): a claim about a word that is no person of the reference is ignored.
# A claim is found from its verb and role ("is a knight"), then its subject is read backwards from the verb,
# at most 12 names of at most 30 letters: each claim costs O(1), so scoring is linear in the completion's
# length (a regex matching subject first rescans the subject from every word: "Bob, " * 4000 took 5.3 s).
# "Zoey is a knight", "Zoey and Ethan are knaves", "Zoey is not a knave", "Zoey isn't a knave", "Zoey: knight";
# a hedge: "Zoey is a knight or a knave", "Zoey is either a knight or a knave", "Zoey or Ethan is a knight".
_VERB_AND_ROLE_RE = re.compile(
    r"(?=[iIawcm\-=:—])(?:(?<![A-Za-z'])(?P<negating>(?i:isn't|aren't|wasn't|weren't|cannot\s+be|can't\s+be|must\s+not\s+be))\s*"
    r"|(?:(?<![A-Za-z'])(?:is|are|was|were|must\s+be)\b|->|=|:|-|—)\s*(?P<negation>(?i:not\s+))?)"
    r"(?:(?i:either)\s+)?(?:(?i:a|an|the|both|all)\s+)?(?P<role>(?i:knight|knave))(?i:s)?\b"
    r"(?P<alternative>\s*(?:(?i:or)|/)\s*(?:(?i:a|an)\s+)?(?i:knight|knave))?"
)
# The subject before a verb, read on the reversed text: names joined by ",", "and", "or" (", and", ", or").
_SUBJECT_REVERSED_RE = re.compile(
    r"\s*(?P<subject>[A-Za-z]{1,30}(?:\s+(?:dna|ro)\s*,\s*[A-Za-z]{1,30}|\s*,\s*[A-Za-z]{1,30}"
    r"|\s+(?:dna|ro)\s+[A-Za-z]{1,30}){0,11})(?![A-Za-z])"
)
# A subject is at most 12 names of 30 letters and their joins.
_SUBJECT_WINDOW = 12 * 38
_SUBJECT_SPLIT_RE = re.compile(r"(?:\s*,\s*(?:and|or)|\s*,|\s+and|\s+or)\s+")
_OR_RE = re.compile(r"\bor\b")
_OPPOSITE = {"knight": "knave", "knave": "knight"}
# The role of a person a claim hedges on: it equals no reference role.
HEDGED = "knight or knave"


def _claims(text: str) -> list[tuple[str, str]]:
    """``[(name lower, role)]`` for every claim in `text`, in order of appearance; a hedged claim's role is `HEDGED`."""
    out = []
    previous_end = 0  # a subject never reaches back into the claim before it ("A is a knight, B is ...")
    for match in _VERB_AND_ROLE_RE.finditer(text):
        before = text[max(previous_end, match.start() - _SUBJECT_WINDOW) : match.start()][::-1]
        found = _SUBJECT_REVERSED_RE.match(before)
        if found is None:
            continue
        previous_end = match.end()
        subject = found.group("subject")[::-1]
        role = match.group("role").lower()
        if match.group("negation") or match.group("negating"):
            role = _OPPOSITE[role]
        if match.group("alternative") or _OR_RE.search(subject):
            role = HEDGED
        for name in _SUBJECT_SPLIT_RE.split(subject):
            out.append((name.lower(), role))
    return out


def reference_roles(ground_truth) -> dict[str, str]:
    """``{name (lower case): "knight"|"knave"}`` from a K&K reference (sentence or mapping); error if unreadable."""
    if isinstance(ground_truth, Mapping):
        roles = {}
        for name, role in ground_truth.items():
            if isinstance(role, bool):
                roles[str(name).lower()] = "knight" if role else "knave"
            elif str(role).strip().lower() in _OPPOSITE:
                roles[str(name).lower()] = str(role).strip().lower()
            else:
                raise UnreadableReference(
                    f"Knights-and-Knaves reference gives {name!r} the role {role!r}; "
                    "use 'knight', 'knave', True (knight) or False (knave)"
                )
        return roles
    roles = dict(_claims(str(ground_truth)))
    if not roles:
        raise UnreadableReference(
            f"Knights-and-Knaves reference {ground_truth!r} assigns no roles; expected a sentence like "
            "'Zoey is a knight, and Ethan is a knave.' or a mapping {name: 'knight'|'knave'}"
        )
    return roles


def _final_region(text: str) -> str | None:
    """The part of a completion that states its final answer: an ``<answer>`` block, a box, or after a marker."""
    tagged = last_answer_tag(text)
    if tagged is not None:
        return tagged
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    lowered = text.lower()
    for markers in _FINAL_MARKERS:
        cut = max(lowered.rfind(m) for m in markers)
        if cut >= 0:
            return text[cut:]
    return None


def claimed_roles(completion, names: Sequence[str] | None = None) -> dict[str, str] | None:
    """``{name: role}`` the completion finally claims, or None when its answer is ambiguous.

    The final answer is the completion's ``<answer>`` block, else its last ``\\boxed{}``, else the
    text after its last final-answer marker ("final answer", "answer:", "therefore", ...), if that
    part names a person of `names` (all persons when None); else the whole completion, where a later
    claim about a person replaces an earlier one (reasoning tries hypotheses). Within a final
    answer, a person claimed both knight and knave, or hedged ("a knight or a knave"), is
    ambiguous: None. In the whole completion, a person whose last claim hedges has the role `HEDGED`.
    """
    text = completion_text(completion)
    wanted = None if names is None else {n.lower() for n in names}

    def relevant(claims):
        return [(n, r) for n, r in claims if wanted is None or n in wanted]

    region = _final_region(text)
    claims = relevant(_claims(region)) if region is not None else []
    if claims:
        roles: dict[str, str] = {}
        for name, role in claims:
            if role == HEDGED or roles.setdefault(name, role) != role:
                return None
        return roles
    return dict(relevant(_claims(text)))


def score_knights_knaves(completion, ground_truth) -> float:
    """1.0 when the completion's final answer gives every person of the reference the reference's role."""
    truth = reference_roles(ground_truth)
    claimed = claimed_roles(completion, names=list(truth))
    return float(claimed is not None and all(claimed.get(name) == role for name, role in truth.items()))


# ------------------------------------------------------------------ multiple choice

# Ten options, A-J, as MMLU-Pro; a question with fewer simply never has the later letters as its reference.
CHOICES = "ABCDEFGHIJ"
# "answer is (B)", "Answer: **C**", "answer: option D", "answer: b"; then, weaker, "the correct option is B".
_LETTER_AFTER_ANSWER_RE = re.compile(
    r"(?i:answer)\s*(?:(?i:is)\s*)?[:\-]?\s*(?:(?i:option|choice)\s*)?(?P<open>[\(\[\*]*)(?P<letter>[A-Za-z])(?![A-Za-z])"
)
_LETTER_AFTER_OPTION_RE = re.compile(
    r"(?i:option|choice)\s*(?:(?i:is)\s*)?[:\-]?\s*(?P<open>[\(\[\*]*)(?P<letter>[A-Za-z])(?![A-Za-z])"
)
_LONE_LETTER_RE = re.compile(r"^\W*(?P<letter>[A-Z])(?:\W|$)")
_PARENTHESISED_RE = re.compile(r"\((?P<letter>[A-Za-z])\)")
# After a lowercase letter, a word means the letter is the article: "the answer is a cell".
_WORD_FOLLOWS_RE = re.compile(r"\s+[A-Za-z]")
# Another option offered beside the chosen one: "A or B", "A/B", "(A) and (B)", "A, or B", "A & B".
_ALTERNATIVE_LETTER_AFTER_RE = re.compile(
    r"[)\]*.]*(?:\s*,?\s+(?i:or|and/or|and)\s+|\s*[/&]\s*)(?:(?i:option|choice)\s+)?(?P<open>[(\[*]*)"
    r"(?P<letter>[A-Za-z])(?![A-Za-z])"
)
_ALTERNATIVE_LETTER_BEFORE_RE = re.compile(
    r"(?:^|[^A-Za-z])(?:[(\[][A-Za-z][)\]]|[A-Z])\**(?:\s*,?\s+(?i:or|and/or|and)\s+|\s*[/&]\s*)[(\[*]*$"
)
# LaTeX text wrappers around a letter in a box: \boxed{\text{B}}.
_TEXT_WRAPPER_RE = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")


def _marked_letter(match: re.Match, text: str) -> str | None:
    """The upper-case letter of a marker match; None for a lowercase "a" used as an article."""
    letter = match.group("letter")
    if letter.islower() and not match.group("open") and _WORD_FOLLOWS_RE.match(text, match.end()):
        return None
    return letter.upper()


def _offers_another_letter(text: str, start: int, end: int, choices: str) -> bool:
    """True when the letter at ``text[start:end]`` stands beside another option as an alternative ("A or B")."""
    after = _ALTERNATIVE_LETTER_AFTER_RE.match(text, end)
    if after is not None and _marked_letter(after, text) in tuple(choices):
        return True
    return _ALTERNATIVE_LETTER_BEFORE_RE.search(text[max(0, start - 16) : start]) is not None


def _plain(region: str) -> str:
    """A short answer without LaTeX text wrappers, ``$`` signs and markdown emphasis (``**\\text{B}**`` -> ``B``)."""
    return strip_emphasis(_TEXT_WRAPPER_RE.sub(r"\1", region).replace("$", "").strip())


def reference_letter(ground_truth, choices: str = CHOICES) -> str:
    """The reference's option letter (``"B"``, ``"(b)"``, ``"B. Mitochondria"``, or the 0-based index ``1``).

    Raises `UnreadableReference` when it is none of `choices`.
    """
    if isinstance(ground_truth, Integral) and not isinstance(ground_truth, bool):
        letter = choices[int(ground_truth)] if 0 <= int(ground_truth) < len(choices) else None
    else:
        match = _LONE_LETTER_RE.match(str(ground_truth).strip().upper())
        letter = match.group("letter") if match else None
    if letter is None or letter not in choices:
        raise UnreadableReference(
            f"multiple-choice reference {ground_truth!r} is not an option letter of "
            f"{choices!r} (any case) or a 0-based option index; store the correct letter "
            "as the ground truth"
        )
    return letter


def chosen_letter(completion, choices: str = CHOICES) -> str | None:
    """The option letter (upper case) a completion picks, or None when it picks none.

    In order: the last ``<answer>X</answer>`` or ``\\boxed{X}`` (``\\boxed{\\text{B}}`` too); the
    letter after the last "answer is" / "answer:", else after the last "option" / "choice"; a
    completion that is only a letter (``"C"``, ``"(c)"``, ``"**C**"``, ``"C. text"``); else the last
    parenthesised letter ``(C)``. Letters count in any case (``answer: b`` picks B), except a
    lowercase letter followed by a word ("the answer is a cell") and a bare capital in running text
    ("A cell is ..."): those are the article, not a choice. A letter offered beside another as an
    alternative ("A or B", "A/B", "(A) and (B)") is a hedge: the completion picks none.
    """
    text = completion_text(completion)
    for region in last_answer_tag(text), last_boxed(text):
        if region is not None:
            plain = _plain(region).upper()
            match = _LONE_LETTER_RE.match(plain)
            if match and match.group("letter") in choices:
                letter_end = match.end("letter")
                if _offers_another_letter(plain, match.start("letter"), letter_end, choices):
                    return None
                return match.group("letter")
    for pattern in _LETTER_AFTER_ANSWER_RE, _LETTER_AFTER_OPTION_RE:
        after_marker = [
            (letter, m)
            for m in pattern.finditer(text)
            if (letter := _marked_letter(m, text)) is not None and letter in choices
        ]
        if after_marker:
            letter, m = after_marker[-1]
            return None if _offers_another_letter(text, m.start("letter"), m.end("letter"), choices) else letter
    stripped = _plain(text) if len(text) <= 64 else text.strip()
    lone = stripped.upper() if len(stripped) <= 3 else stripped
    match = _LONE_LETTER_RE.match(lone)
    if match and match.group("letter") in choices and (len(stripped) <= 3 or re.match(r"^\W*[A-Z][.):]", stripped)):
        if _offers_another_letter(lone, match.start("letter"), match.end("letter"), choices):
            return None
        return match.group("letter")
    parenthesised = [m for m in _PARENTHESISED_RE.finditer(text) if m.group("letter").upper() in choices]
    if not parenthesised:
        return None
    last = parenthesised[-1]
    return None if _offers_another_letter(text, last.start(), last.end(), choices) else last.group("letter").upper()


def score_multiple_choice(completion, ground_truth, choices: str = CHOICES) -> float:
    """1.0 when the completion's chosen letter equals the reference letter, else 0.0."""
    return float(chosen_letter(completion, choices) == reference_letter(ground_truth, choices))


# ------------------------------------------------------------------ routing

SCORERS: dict[str, Callable[[Any, Any], float]] = {
    "math": score_math,
    "knights_knaves": score_knights_knaves,
    "multiple_choice": score_multiple_choice,
}


def task_family(label, routes: Mapping[str, str] | None = None) -> str:
    """The task family (one of `FAMILIES`) of a ``data_source`` / ``domain`` label; error when unknown.

    `routes` maps your own labels to families and wins over the built-in ones.
    """
    text = str(label).strip()
    for table in (routes or {}), KNOWN_LABELS:
        family = table.get(text, table.get(text.lower()))
        if family is not None:
            if family not in SCORERS:
                raise InputError(
                    f"routes maps {label!r} to unknown task family {family!r}; families: {', '.join(FAMILIES)}"
                )
            return family
    words = [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]
    found = sorted({_KEYWORDS[w] for w in words if w in _KEYWORDS})
    if len(found) == 1:
        return found[0]
    why = f"it matches several families {found}" if found else "it names no known task"
    raise InputError(
        f"cannot route domain {label!r} to a reward: {why}. Families: {', '.join(FAMILIES)}; "
        f"pass routes={{{text!r}: '<family>'}} (verl: reward.custom_reward_function.reward_kwargs.routes)"
    )


# Families already warned about an unreadable reference in this process (compute_score has no object to keep it).
_WARNED: set[str] = set()


def score_or_zero(
    family: str, completion, ground_truth, warned: set[str] | None = None, free_text: bool = False
) -> float:
    """`SCORERS[family]`, but an unreadable reference scores 0.0 and warns once per family (never raises mid-run).

    `warned` holds the families already warned about (default: one set per process); `free_text` is
    passed to `score_math`.
    """
    try:
        if family == "math":
            return score_math(completion, ground_truth, free_text=free_text)
        return SCORERS[family](completion, ground_truth)
    except UnreadableReference as error:
        warned = _WARNED if warned is None else warned
        if family not in warned:
            warned.add(family)
            warnings.warn(
                f"multi_domain_reward: {error}. Such rows score 0; this warning is shown once per family ({family})",
                RuntimeWarning,
                stacklevel=2,
            )
        return 0.0


def score_answer(label, completion, ground_truth, routes: Mapping[str, str] | None = None) -> float:
    """Score one completion with the family its `label` routes to (see `task_family`); unreadable references score 0."""
    return score_or_zero(task_family(label, routes), completion, ground_truth)


def compute_score(
    data_source, solution_str, ground_truth, extra_info=None, routes=None, free_text: bool = False, **kwargs
) -> float:
    """verl reward function: set ``reward.custom_reward_function.name=compute_score`` and ``.path`` to this module.

    The path is ``pkg://dataflex_callbacks.recipes.tasks.multi_domain_reward`` (or the file's path).

    Routes by `data_source`; when it names no family, by ``extra_info["domain"]`` if present.
    `routes` (``reward.custom_reward_function.reward_kwargs.routes``) adds ``{label: family}``.
    `free_text` (``...reward_kwargs.free_text=true``) also reads math answers out of prose: opt-in, gameable.
    """
    try:
        family = task_family(data_source, routes)
    except ValueError:
        domain = extra_info.get("domain") if isinstance(extra_info, Mapping) else None
        if domain is None:
            raise
        family = task_family(domain, routes)
    return score_or_zero(family, solution_str, ground_truth, free_text=free_text)


# ------------------------------------------------------------------ TRL

_REFERENCE_COLUMNS = ("ground_truth", "answer", "solution", "reward_model")
_LABEL_COLUMNS = ("data_source", "domain")


def _reference_of(value):
    """A reference cell; verl's ``reward_model`` column holds ``{"ground_truth": ...}``."""
    if isinstance(value, Mapping) and "ground_truth" in value:
        return value["ground_truth"]
    return value


class MultiDomainReward:
    """TRL reward function ``(prompts, completions, **columns) -> list[float]`` over three task families.

    Args:
        label_key: the column routing each row (default: ``data_source`` if the data has it,
            else ``domain``).
        answer_key: the column holding the reference (default: the first of ``ground_truth``,
            ``answer``, ``solution``, ``reward_model`` (verl's ``{"ground_truth": ...}``) present).
        routes: ``{label: family}`` for labels the built-in routing does not know.
        free_text: also read math answers out of prose ("The answer is 6"), not only the final-answer
            slot; opt-in, and gameable (a policy learns the phrasing that pays).

    Completions may be plain strings or conversations (lists of message dicts; the last message
    is scored). Logs the mean reward per family as ``multi_domain/<family>`` when TRL passes
    ``log_metric``.
    """

    __name__ = "multi_domain_reward"

    def __init__(
        self,
        label_key: str | None = None,
        answer_key: str | None = None,
        routes: Mapping[str, str] | None = None,
        free_text: bool = False,
    ):
        self.label_key, self.answer_key = label_key, answer_key
        self.free_text = free_text
        self.routes = dict(routes or {})
        self._warned: set[str] = set()  # families whose unreadable references were reported
        for label in self.routes:
            task_family(label, self.routes)  # a bad family fails here, not mid-training

    def _column(self, kwargs: Mapping[str, Any], key: str | None, candidates: Sequence[str], what: str):
        names = [key] if key else [c for c in candidates if kwargs.get(c) is not None]
        if not names or kwargs.get(names[0]) is None:
            have = sorted(k for k, v in kwargs.items() if isinstance(v, (list, tuple)))
            wanted = key or " or ".join(candidates)
            option = "label_key" if what == "label" else "answer_key"
            raise InputError(
                f"multi_domain_reward needs the {what} column {wanted!r}; the dataset passes {have}. "
                f"Add the column or pass MultiDomainReward({option}=...)"
            )
        return list(kwargs[names[0]])

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        labels = self._column(kwargs, self.label_key, _LABEL_COLUMNS, "label")
        references = [_reference_of(v) for v in self._column(kwargs, self.answer_key, _REFERENCE_COLUMNS, "reference")]
        families = {label: task_family(label, self.routes) for label in set(map(str, labels))}
        rewards = [
            score_or_zero(families[str(label)], completion, reference, self._warned, self.free_text)
            for completion, label, reference in zip(completions, labels, references, strict=True)
        ]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and rewards:
            for family in sorted(set(families.values())):
                values = [r for r, label in zip(rewards, labels, strict=True) if families[str(label)] == family]
                log_metric(f"multi_domain/{family}", sum(values) / len(values))
        return rewards


multi_domain_reward = MultiDomainReward()
