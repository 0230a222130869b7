"""Build the built-in task suite as a `datasets.DatasetDict` and score completions for TRL."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence

from dataflex_callbacks.errors import InputError
from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .domains import TASK_DOMAINS, TaskDomain
from .verifiers import completion_text, get_verifier


def prompt_key(domain: str, prompt: str) -> str:
    """Return a stable key for a prompt (same text, same key, in every process and run)."""
    digest = hashlib.sha1(f"{domain}\x1f{prompt}".encode()).hexdigest()[:12]
    return f"{domain}-{digest}"


def _resolve_domains(domains: Sequence[str] | None) -> list[TaskDomain]:
    if domains is None:
        return list(TASK_DOMAINS.values())
    unknown = [name for name in domains if name not in TASK_DOMAINS]
    if unknown:
        raise InputError(f"unknown task domain(s) {unknown}; available: {sorted(TASK_DOMAINS)}")
    twice = sorted({name for name in domains if list(domains).count(name) > 1})
    if twice:
        raise InputError(f"task domain(s) {twice} named twice in {list(domains)}; name each domain once")
    return [TASK_DOMAINS[name] for name in domains]


def generate_domain_splits(domain: TaskDomain, seed: int, n_train: int, n_test: int) -> tuple[list[dict], list[dict]]:
    """Draw `n_train + n_test` distinct prompts of one domain; the first `n_train` train, the rest are held out."""
    needed = n_train + n_test
    if needed > domain.max_unique:
        raise InputError(
            f"domain {domain.name!r} has only {domain.max_unique} distinct prompts; "
            f"asked for n_train + n_test = {needed}"
        )
    rng = random.Random(f"dataflex-tasks:{seed}:{domain.name}")
    seen: set[str] = set()
    rows: list[dict] = []
    while len(rows) < needed:
        prompt, answer = domain.make_example(rng)
        if prompt in seen:
            continue
        seen.add(prompt)
        rows.append(
            {"prompt": prompt, "answer": answer, "domain": domain.name, "prompt_key": prompt_key(domain.name, prompt)}
        )
    return rows[:n_train], rows[n_train:]


def load_task_suite(seed: int = 0, n_train: int = 200, n_test: int = 50, domains: Sequence[str] | None = None):
    """Build the built-in suite: a `datasets.DatasetDict` with `train` and `test` splits.

    Columns: `prompt` (plain text), `answer`, `domain`, `prompt_key`. `n_train` and `n_test`
    count prompts per domain; the two splits share no prompt. Same seed, same dataset;
    training rows are shuffled across domains.
    """
    from datasets import Dataset, DatasetDict

    train_rows: list[dict] = []
    test_rows: list[dict] = []
    for domain in _resolve_domains(domains):
        train, test = generate_domain_splits(domain, seed, n_train, n_test)
        train_rows.extend(train)
        test_rows.extend(test)
    random.Random(f"dataflex-tasks-order:{seed}").shuffle(train_rows)
    columns = ("prompt", "answer", "domain", "prompt_key")
    return DatasetDict(
        train=Dataset.from_dict({c: [row[c] for row in train_rows] for c in columns}),
        test=Dataset.from_dict({c: [row[c] for row in test_rows] for c in columns}),
    )


class TaskReward:
    """A TRL reward function: `(prompts, completions, answer, domain, **kwargs) -> list[float]`.

    Rows of a built-in domain are scored by that domain (the noisy domain draws a coin seeded
    by `seed`, the call index and the row); other rows by `verifier` (`exact`, `numeric`,
    `prefix` or a callable `(completion, answer) -> bool`). When TRL passes `log_metric`,
    the mean reward and the share of each domain in the call are logged as
    `tasks/reward/<domain>` and `tasks/share/<domain>`.
    """

    __name__ = "task_reward"

    def __init__(self, seed: int = 0, verifier: str | Callable = "exact", builtin_domains: bool = True):
        self.seed = seed
        self.verifier = get_verifier(verifier)
        self.builtin_domains = builtin_domains
        self.calls = 0

    def score(self, prompt, completion, answer, domain, salt) -> float:
        """Reward of one row (1.0 or 0.0)."""
        task = TASK_DOMAINS.get(domain) if self.builtin_domains else None
        if task is not None:
            return task.score(completion_text(prompt), completion, answer, salt=salt)
        return float(self.verifier(completion, answer))

    def __call__(self, prompts, completions, answer=None, domain=None, **kwargs) -> list[float]:
        n = len(completions)
        answers = list(answer) if answer is not None else [""] * n
        domains = list(domain) if domain is not None else [NO_DOMAIN] * n
        call = self.calls
        self.calls += 1
        rewards = [
            self.score(prompts[i], completions[i], answers[i], domains[i], salt=(self.seed, call, i)) for i in range(n)
        ]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and n:
            for name in sorted(set(domains)):
                values = [r for r, d in zip(rewards, domains, strict=True) if d == name]
                log_metric(f"tasks/reward/{name}", sum(values) / len(values))
                log_metric(f"tasks/share/{name}", len(values) / n)
        return rewards


def make_reward_fn(seed: int = 0, verifier: str | Callable = "exact", builtin_domains: bool = True) -> TaskReward:
    """Return a TRL-compatible reward function for the built-in suite and for user data (see `TaskReward`)."""
    return TaskReward(seed=seed, verifier=verifier, builtin_domains=builtin_domains)
