"""A run's held-out evaluation: greedy accuracy and sampled pass@1 per domain, and the headline.

The headline is the one number `dataflex run` and `dataflex compare` report first: held-out **sampled pass@1**
(the mean pass rate of `--eval-samples` samples per prompt at the training temperature) on the testbed's headline
levels (`testbed.HEADLINE_LEVELS`, the levels where RL can move the pass rate) when the run trains on the testbed,
and on every held-out prompt otherwise (the toy suite, a `--dataset`; with `--reward` a sample passes when the
first reward function gives it at least `--reward-threshold`). Sampled pass@1 is what RL moves first: it sharpens
the distribution, so the right answer gains probability before it becomes the greedy one. Greedy accuracy is
reported beside it, and every domain apart. With `--eval-samples 0` the headline falls back to greedy accuracy,
and `fallback_warning` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .options import RunOptions, eval_tokens, resolve_rewards, with_suite_defaults
from .user_reward import checked_values

SAMPLED = "sampled_pass_at_1"
"""The headline metric: held-out sampled pass@1."""
GREEDY = "greedy_accuracy"
"""The headline's fallback with `--eval-samples 0`: held-out greedy accuracy."""
LOGGED = "logged_accuracy"
"""The headline of a comparison of a user's training function: the held-out accuracy it logged (`run.log`)."""


@dataclass(frozen=True)
class Headline:
    """What a run's headline measures: `metric` (`SAMPLED`, or `GREEDY` with `--eval-samples 0`) over the held-out
    prompts of `levels` (None: every held-out prompt), `rows` prompts in all; `k` samples per prompt at
    `temperature` (k = 0 for greedy)."""

    metric: str
    levels: tuple[str, ...] | None
    rows: int
    k: int
    temperature: float

    def value(self, greedy: dict[str, float], sampled: dict[str, float] | None, rows: dict[str, int]) -> float:
        """The headline of one evaluation: the row-weighted mean of the metric's per-domain values over `levels`
        (``overall`` when `levels` is None); `rows` is the held-out prompts per domain."""
        scores = sampled if self.metric == SAMPLED else greedy
        if self.levels is None:
            return float(scores["overall"])
        total = sum(rows[level] for level in self.levels)
        return sum(rows[level] * scores[level] for level in self.levels) / total

    def record(self, before: float, after: float) -> dict:
        """eval.json's ``headline``: what it measures and its value before and after training."""
        sampled = {"k": self.k, "temperature": self.temperature} if self.metric == SAMPLED else {}
        levels = None if self.levels is None else list(self.levels)
        return {"metric": self.metric, **sampled, "levels": levels, "rows": self.rows, "before": before, "after": after}


def fallback_warning(block: dict) -> str | None:
    """The one line saying a headline (eval.json's ``headline``) fell back to greedy accuracy, else None."""
    if block["metric"] in (SAMPLED, LOGGED):
        return None
    return (
        f"the headline falls back to {headline_text(block)}: it moves only when the most likely answer flips, "
        "later than sampled pass@1, which RL moves first; leave --eval-samples at its default (4) for the sampled "
        "headline"
    )


def headline_text(block: dict) -> str:
    """What a headline measures, from eval.json's (or a comparison result's) ``headline``:
    ``held-out sampled pass@1 (k=4, T=1) on add2, add3 (100 prompts)``."""
    if block["metric"] == LOGGED:
        return "the held-out accuracy your training function logged (run.log)"
    if block["metric"] == SAMPLED:
        metric = f"held-out sampled pass@1 (k={block['k']}, T={block['temperature']:g})"
    else:
        metric = "held-out greedy accuracy (--eval-samples 0)"
    where = "every held-out prompt" if block["levels"] is None else ", ".join(block["levels"])
    return f"{metric} on {where} ({block['rows']} prompts)"


def headline_of(options: RunOptions, test) -> Headline:
    """The headline of a run of `options` scored on the held-out rows `test`: on the testbed its headline levels
    that the run has (`--domains` may leave some out; none left: every held-out prompt), else every held-out prompt."""
    domains = [str(d) for d in test["domain"]] if "domain" in test.column_names else [NO_DOMAIN] * len(test)
    levels = None
    if options.dataset is None and options.suite == "testbed":
        from dataflex_callbacks.recipes.testbed import HEADLINE_LEVELS

        present = set(domains)
        levels = tuple(level for level in HEADLINE_LEVELS if level in present) or None
    rows = len(domains) if levels is None else sum(1 for d in domains if d in levels)
    k = options.eval_samples
    return Headline(SAMPLED if k else GREEDY, levels, rows, k, options.temperature)


@dataclass
class HeldOutScores:
    """One held-out evaluation: greedy accuracy and sampled pass@1 (None with `--eval-samples 0`) per domain and
    ``overall``, and the headline."""

    greedy: dict[str, float]
    sampled: dict[str, float] | None
    headline: float

    def curve_fields(self) -> dict:
        """The fields of a comparison's curve point: ``accuracy`` (greedy), ``sampled_pass_at_1`` and ``headline``."""
        return {"accuracy": self.greedy, SAMPLED: self.sampled, "headline": self.headline}


def reward_pass_rate(
    model,
    tokenizer,
    dataset,
    reward: Callable,
    threshold: float,
    max_new_tokens: int,
    k: int | None = None,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[str, float]:
    """Held-out pass rate under the user's reward, per domain and ``overall`` (mean over rows): a completion passes
    when `reward` gives it at least `threshold` (None counts as failed). `k` None: the greedy completion of each row
    (greedy accuracy); else the mean over `k` samples per row at `temperature` (sampled pass@1, samples seeded by
    `seed` as `tasks.generate_sampled` draws them).

    `reward` is called once, as TRL calls a reward function: ``reward(prompts=..., completions=..., **columns)``
    with every other column of `dataset` as a list, one entry per completion (chat prompts get chat completions).
    """
    from dataflex_callbacks.recipes.tasks.evaluation import generate_greedy, generate_sampled

    prompts = list(dataset["prompt"])
    if k is None:
        samples = [[text] for text in generate_greedy(model, tokenizer, prompts, max_new_tokens=max_new_tokens)]
    else:
        samples = generate_sampled(model, tokenizer, prompts, k, temperature, max_new_tokens=max_new_tokens, seed=seed)
    rows = [i for i, row in enumerate(samples) for _ in row]  # the row of each completion
    completions = [
        text if isinstance(prompts[i], str) else [{"role": "assistant", "content": text}]
        for i, text in zip(rows, (text for row in samples for text in row), strict=True)
    ]
    columns = {name: list(dataset[name]) for name in dataset.column_names if name != "prompt"}
    columns = {name: [values[i] for i in rows] for name, values in columns.items()}
    values = checked_values(
        reward, reward(prompts=[prompts[i] for i in rows], completions=completions, **columns), len(rows)
    )
    passes = [0] * len(prompts)
    for i, value in zip(rows, values, strict=True):
        passes[i] += value >= threshold  # NaN (None) compares False: failed
    passed = [count / len(row) for count, row in zip(passes, samples, strict=True)]
    domains = [str(d) for d in dataset["domain"]] if "domain" in dataset.column_names else [NO_DOMAIN] * len(prompts)
    result = {
        name: sum(p for p, d in zip(passed, domains, strict=True) if d == name) / domains.count(name)
        for name in sorted(set(domains))
    }
    result["overall"] = sum(passed) / len(passed) if passed else 0.0
    return result


class HeldOutEvaluation:
    """Scores a model on a run's held-out rows: ``evaluation(model, tokenizer) -> HeldOutScores``.

    Greedy accuracy and, with `options.eval_samples` > 0, sampled pass@1 (`options.eval_samples` samples per row at
    `options.temperature`, seeded by `options.seed`: the same weights get the same figures, and the caller's RNG is
    left as it was). With `options.reward`, a completion passes when the first reward function gives it at least
    `options.reward_threshold` (`reward_pass_rate`); else the built-in verifier scores it (`tasks.evaluate`,
    `tasks.sampled_pass_at_1`).

    Attributes:
        headline: what the headline measures (`headline_of`).
    """

    def __init__(self, options: RunOptions, test, reward_settings: dict):
        options = with_suite_defaults(options)  # the threshold's default with --reward
        self.options = options
        self.test = test
        self.reward_settings = dict(reward_settings)
        self.rewards = resolve_rewards(options)
        self.headline = headline_of(options, test)
        domains = [str(d) for d in test["domain"]] if "domain" in test.column_names else [NO_DOMAIN] * len(test)
        self.rows = {name: domains.count(name) for name in set(domains)}

    def __call__(self, model, tokenizer) -> HeldOutScores:
        greedy, sampled = self._greedy(model, tokenizer), self._sampled(model, tokenizer)
        return HeldOutScores(greedy, sampled, self.headline.value(greedy, sampled, self.rows))

    def _greedy(self, model, tokenizer) -> dict[str, float]:
        from dataflex_callbacks.recipes import tasks

        options, length = self.options, eval_tokens(self.options)
        if self.rewards is not None:
            return reward_pass_rate(model, tokenizer, self.test, self.rewards[0], options.reward_threshold, length)
        return tasks.evaluate(
            model, tokenizer, self.test, max_new_tokens=length, seed=options.seed, **self.reward_settings
        )

    def _sampled(self, model, tokenizer) -> dict[str, float] | None:
        from dataflex_callbacks.recipes import tasks

        options = self.options
        if not options.eval_samples:
            return None
        sampling = dict(k=options.eval_samples, temperature=options.temperature, seed=options.seed)
        if self.rewards is not None:
            return reward_pass_rate(
                model, tokenizer, self.test, self.rewards[0], options.reward_threshold, eval_tokens(options), **sampling
            )
        return tasks.sampled_pass_at_1(
            model, tokenizer, self.test, max_new_tokens=eval_tokens(options), **sampling, **self.reward_settings
        )

    def record(self, before: HeldOutScores, after: HeldOutScores) -> dict:
        """eval.json: greedy ``before`` and ``after``, ``sampled_pass_at_1`` (k, temperature, before, after; absent
        with `--eval-samples 0`) and ``headline`` (`Headline.record`)."""
        evaluation = {"before": before.greedy, "after": after.greedy}
        if before.sampled is not None:
            evaluation[SAMPLED] = {
                "k": self.options.eval_samples,
                "temperature": self.options.temperature,
                "before": before.sampled,
                "after": after.sampled,
            }
        evaluation["headline"] = self.headline.record(before.headline, after.headline)
        return evaluation


def headline_line(block: dict) -> str:
    """`dataflex run`'s summary line: ``headline: held-out sampled pass@1 (...) on ...: 0.301 -> 0.334 (+0.033)``."""
    before, after = block["before"], block["after"]
    return f"headline: {headline_text(block)}: {before:.3f} -> {after:.3f} ({after - before:+.3f})"
