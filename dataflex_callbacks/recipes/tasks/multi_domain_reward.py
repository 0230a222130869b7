"""Score math, Knights-and-Knaves and multiple-choice answers in one reward, routed by each row's domain.

A drop-in reward for multi-domain RLVR data in verl's parquet layout (``data_source``, ``prompt``,
``reward_model.ground_truth``, optionally a ``domain`` column), such as DataFlex-RL's
math / logic / science mix. Three task families, each scored 1.0 (right) or 0.0 (wrong or
unreadable):

- ``math``: the final answer (last ``\\boxed{}``, after ``####``, after "Answer:", else the last
  number) equals the reference by value (``0.5 == 1/2 == \\frac{1}{2}``), see `math_answers`.
- ``knights_knaves``: the reference is a sentence such as "Zoey is a knight, and Ethan is a
  knave." (or a mapping ``{name: "knight"|"knave"|True|False}``, True meaning knight); the
  completion's final answer must assign every person the reference's role (see
  `claimed_roles`).
- ``multiple_choice``: the reference is a letter (``B``, ``(B)``, ``B. text``); the completion's
  chosen letter (see `chosen_letter`) must equal it.

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
from typing import Any, Callable, Mapping, Sequence

# Absolute imports: verl may load this file by path (``custom_reward_function.path=/.../multi_domain_reward.py``),
# outside its package, where relative imports fail.
from dataflex_callbacks.recipes.tasks.math_answers import last_boxed, math_answers_match
from dataflex_callbacks.recipes.tasks.verifiers import completion_text

FAMILIES = ("math", "knights_knaves", "multiple_choice")

# Labels seen in public RLVR data (verl's preprocessing scripts, DataFlex-RL's mix); lower case.
KNOWN_LABELS: dict[str, str] = {
    "math": "math", "math_dapo": "math", "openai/gsm8k": "math", "gsm8k": "math", "deepscaler": "math",
    "lighteval/math": "math", "digitallearninggmbh/math-lighteval": "math", "aime": "math", "amc": "math",
    "logic": "knights_knaves", "kk_logic": "knights_knaves", "knights-and-knaves": "knights_knaves",
    "knights_knaves": "knights_knaves", "kk": "knights_knaves",
    "science": "multiple_choice", "sciq": "multiple_choice", "multiple_choice": "multiple_choice",
    "mcq": "multiple_choice", "gpqa": "multiple_choice", "mmlu": "multiple_choice", "arc": "multiple_choice",
}
# Words inside a label that name the family (the label is split at non-alphanumerics).
_KEYWORDS: dict[str, str] = {
    "math": "math", "gsm8k": "math", "aime": "math", "amc": "math", "deepscaler": "math", "numina": "math",
    "kk": "knights_knaves", "knights": "knights_knaves", "knaves": "knights_knaves", "knight": "knights_knaves",
    "logic": "knights_knaves",
    "sciq": "multiple_choice", "mcq": "multiple_choice", "gpqa": "multiple_choice", "mmlu": "multiple_choice",
    "science": "multiple_choice", "choice": "multiple_choice", "arc": "multiple_choice",
}

# Markers after which a completion states its final answer, strongest first: the last occurrence
# of the strongest kind present starts the answer ("Final answer: A is a knight, therefore B ...").
_FINAL_MARKERS = (("final answer",), ("answer:", "answer is"),
                  ("in conclusion", "conclusion:", "in summary", "to summarize"), ("therefore", "thus,"))
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


# ------------------------------------------------------------------ math


# Relative tolerance of numeric answers: off-by-one stays wrong up to 1e11, float noise (0.1 + 0.2) stays right.
MATH_TOLERANCE = 1e-12


def score_math(completion, ground_truth) -> float:
    """1.0 when the completion's final answer equals `ground_truth` by value (or as normalised text), else 0.0."""
    return float(math_answers_match(completion, ground_truth, tolerance=MATH_TOLERANCE))


# ------------------------------------------------------------------ Knights and Knaves

_NAME = r"[A-Z][a-zA-Z'\-]*"
# "Zoey is a knight", "Zoey and Ethan are knaves", "Zoey is not a knave", "Zoey: knight".
_CLAIM_RE = re.compile(
    rf"(?P<subject>{_NAME}(?:\s*(?:,\s*and|,|and)\s+{_NAME})*)\s*"
    r"(?:(?:is|are|was|were|must\s+be|->|=|:|-|—)\s*)(?P<negation>(?i:not\s+))?"
    r"(?:(?i:a|an|the|both|all)\s+)?(?P<role>(?i:knight|knave))(?i:s)?\b")
_SUBJECT_SPLIT_RE = re.compile(r"\s*(?:,\s*and|,|and)\s+")
_OPPOSITE = {"knight": "knave", "knave": "knight"}


def _claims(text: str) -> list[tuple[str, str]]:
    """``[(name lower, role)]`` for every claim in `text`, in order of appearance."""
    out = []
    for match in _CLAIM_RE.finditer(text):
        role = match.group("role").lower()
        if match.group("negation"):
            role = _OPPOSITE[role]
        for name in _SUBJECT_SPLIT_RE.split(match.group("subject")):
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
                raise ValueError(f"Knights-and-Knaves reference gives {name!r} the role {role!r}; "
                                 "use 'knight', 'knave', True (knight) or False (knave)")
        return roles
    roles = dict(_claims(str(ground_truth)))
    if not roles:
        raise ValueError(f"Knights-and-Knaves reference {ground_truth!r} assigns no roles; expected a sentence like "
                         "'Zoey is a knight, and Ethan is a knave.' or a mapping {name: 'knight'|'knave'}")
    return roles


def _final_region(text: str) -> str | None:
    """The part of a completion that states its final answer: an ``<answer>`` block, a box, or after a marker."""
    tagged = _ANSWER_TAG_RE.findall(text)
    if tagged:
        return tagged[-1]
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
    answer, a person claimed both knight and knave is ambiguous (hedging): None.
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
            if roles.setdefault(name, role) != role:
                return None
        return roles
    return dict(relevant(_claims(text)))


def score_knights_knaves(completion, ground_truth) -> float:
    """1.0 when the completion's final answer gives every person of the reference the reference's role."""
    truth = reference_roles(ground_truth)
    claimed = claimed_roles(completion, names=list(truth))
    return float(claimed is not None and all(claimed.get(name) == role for name, role in truth.items()))


# ------------------------------------------------------------------ multiple choice

# "answer is (B)", "Answer: **C**", "answer: option D"; then, weaker, "the correct option is B".
_LETTER_AFTER_ANSWER_RE = re.compile(
    r"(?i:answer)\s*(?:(?i:is)\s*)?[:\-]?\s*(?:(?i:option|choice)\s*)?[\(\[\*]*(?P<letter>[A-Z])(?![A-Za-z])")
_LETTER_AFTER_OPTION_RE = re.compile(
    r"(?i:option|choice)\s*(?:(?i:is)\s*)?[:\-]?\s*[\(\[\*]*(?P<letter>[A-Z])(?![A-Za-z])")
_LONE_LETTER_RE = re.compile(r"^\W*(?P<letter>[A-Z])(?:\W|$)")
_PARENTHESISED_RE = re.compile(r"\((?P<letter>[A-Z])\)")


def reference_letter(ground_truth, choices: str = "ABCDE") -> str:
    """The reference's option letter (``"B"``, ``"(b)"``, ``"B. Mitochondria"``); error when it is none of `choices`."""
    match = _LONE_LETTER_RE.match(str(ground_truth).strip().upper())
    letter = match.group("letter") if match else None
    if letter is None or letter not in choices:
        raise ValueError(f"multiple-choice reference {ground_truth!r} is not an option letter of {choices!r}; "
                         "store the correct letter as the ground truth")
    return letter


def chosen_letter(completion, choices: str = "ABCDE") -> str | None:
    """The option letter a completion picks, or None when it picks none.

    In order: the last ``<answer>X</answer>`` or ``\\boxed{X}``; the letter after the last
    "answer is" / "answer:", else after the last "option" / "choice"; a completion that is only
    a letter (``"C"``, ``"(C)"``, ``"C. text"``); else the last parenthesised letter ``(C)``. A
    bare capital word such as the article "A" in running text is never taken for a choice.
    """
    text = completion_text(completion)
    for region in (_ANSWER_TAG_RE.findall(text)[-1:] or [None])[0], last_boxed(text):
        if region is not None:
            match = _LONE_LETTER_RE.match(region.strip())
            if match and match.group("letter") in choices:
                return match.group("letter")
    for pattern in _LETTER_AFTER_ANSWER_RE, _LETTER_AFTER_OPTION_RE:
        after_marker = [m.group("letter") for m in pattern.finditer(text) if m.group("letter") in choices]
        if after_marker:
            return after_marker[-1]
    stripped = text.strip()
    match = _LONE_LETTER_RE.match(stripped)
    if match and match.group("letter") in choices and (len(stripped) <= 3 or re.match(r"^\W*[A-Z][.):]", stripped)):
        return match.group("letter")
    parenthesised = [m.group("letter") for m in _PARENTHESISED_RE.finditer(text) if m.group("letter") in choices]
    return parenthesised[-1] if parenthesised else None


def score_multiple_choice(completion, ground_truth, choices: str = "ABCDE") -> float:
    """1.0 when the completion's chosen letter equals the reference letter, else 0.0."""
    return float(chosen_letter(completion, choices) == reference_letter(ground_truth, choices))


# ------------------------------------------------------------------ routing

SCORERS: dict[str, Callable[[Any, Any], float]] = {
    "math": score_math, "knights_knaves": score_knights_knaves, "multiple_choice": score_multiple_choice,
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
                raise ValueError(f"routes maps {label!r} to unknown task family {family!r}; "
                                 f"families: {', '.join(FAMILIES)}")
            return family
    words = [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]
    found = sorted({_KEYWORDS[w] for w in words if w in _KEYWORDS})
    if len(found) == 1:
        return found[0]
    why = f"it matches several families {found}" if found else "it names no known task"
    raise ValueError(f"cannot route domain {label!r} to a reward: {why}. Families: {', '.join(FAMILIES)}; "
                     f"pass routes={{{text!r}: '<family>'}} (verl: reward.custom_reward_function.reward_kwargs.routes)")


def score_answer(label, completion, ground_truth, routes: Mapping[str, str] | None = None) -> float:
    """Score one completion with the family its `label` routes to (see `task_family`)."""
    return SCORERS[task_family(label, routes)](completion, ground_truth)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, routes=None, **kwargs) -> float:
    """verl reward function: set ``reward.custom_reward_function.name=compute_score`` and ``.path`` to this module.

    The path is ``pkg://dataflex_callbacks.recipes.tasks.multi_domain_reward`` (or the file's path).

    Routes by `data_source`; when it names no family, by ``extra_info["domain"]`` if present.
    `routes` (``reward.custom_reward_function.reward_kwargs.routes``) adds ``{label: family}``.
    """
    try:
        family = task_family(data_source, routes)
    except ValueError:
        domain = extra_info.get("domain") if isinstance(extra_info, Mapping) else None
        if domain is None:
            raise
        family = task_family(domain, routes)
    return SCORERS[family](solution_str, ground_truth)


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

    Completions may be plain strings or conversations (lists of message dicts; the last message
    is scored). Logs the mean reward per family as ``multi_domain/<family>`` when TRL passes
    ``log_metric``.
    """

    __name__ = "multi_domain_reward"

    def __init__(self, label_key: str | None = None, answer_key: str | None = None,
                 routes: Mapping[str, str] | None = None):
        self.label_key, self.answer_key = label_key, answer_key
        self.routes = dict(routes or {})
        for label in self.routes:
            task_family(label, self.routes)  # a bad family fails here, not mid-training

    def _column(self, kwargs: Mapping[str, Any], key: str | None, candidates: Sequence[str], what: str):
        names = [key] if key else [c for c in candidates if kwargs.get(c) is not None]
        if not names or kwargs.get(names[0]) is None:
            have = sorted(k for k, v in kwargs.items() if isinstance(v, (list, tuple)))
            wanted = key or " or ".join(candidates)
            option = "label_key" if what == "label" else "answer_key"
            raise ValueError(f"multi_domain_reward needs the {what} column {wanted!r}; the dataset passes {have}. "
                             f"Add the column or pass MultiDomainReward({option}=...)")
        return list(kwargs[names[0]])

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        labels = self._column(kwargs, self.label_key, _LABEL_COLUMNS, "label")
        references = [_reference_of(v) for v in self._column(kwargs, self.answer_key, _REFERENCE_COLUMNS, "reference")]
        families = {label: task_family(label, self.routes) for label in set(map(str, labels))}
        rewards = [SCORERS[families[str(label)]](completion, reference)
                   for completion, label, reference in zip(completions, labels, references)]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and rewards:
            for family in sorted(set(families.values())):
                values = [r for r, label in zip(rewards, labels) if families[str(label)] == family]
                log_metric(f"multi_domain/{family}", sum(values) / len(values))
        return rewards


multi_domain_reward = MultiDomainReward()
