"""recipes.held_out: the headline (sampled pass@1 on the testbed's headline levels, on every held-out prompt of other
data), its greedy fallback, and sampled pass@1 under a user's reward, each against an independent computation."""

import dataclasses

import pytest

from dataflex_callbacks.recipes.held_out import (
    GREEDY,
    SAMPLED,
    Headline,
    HeldOutEvaluation,
    fallback_warning,
    headline_of,
    headline_text,
    reward_pass_rate,
)
from dataflex_callbacks.recipes.options import RunOptions
from dataflex_callbacks.recipes.tasks import generate_greedy, generate_sampled, load_task_suite
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer


def _table(domains):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": ["p"] * len(domains), "answer": ["a"] * len(domains), "domain": domains})


def test_the_headline_pools_the_prompts_of_its_levels_each_weighing_the_same():
    headline = Headline(SAMPLED, ("a", "b"), 4, 4, 1.0)
    sampled = {"a": 1.0, "b": 0.0, "c": 0.5, "overall": 0.55}
    greedy = {"a": 0.0, "b": 1.0, "c": 1.0, "overall": 0.9}
    # a: 1 prompt at 1.0, b: 3 prompts at 0.0; the mean of the two levels' means would be 0.5.
    assert headline.value(greedy, sampled, {"a": 1, "b": 3, "c": 6}) == pytest.approx(0.25)
    assert dataclasses.replace(headline, metric=GREEDY).value(greedy, sampled, {"a": 1, "b": 3, "c": 6}) == 0.75
    assert dataclasses.replace(headline, levels=None).value(greedy, sampled, {}) == 0.55  # every prompt: overall


def test_on_the_testbed_the_headline_levels_are_the_testbeds_and_other_data_counts_every_prompt():
    from dataflex_callbacks.recipes.testbed import HEADLINE_LEVELS, LEVELS

    test = _table([level for level in LEVELS for _ in range(3)])
    headline = headline_of(RunOptions(), test)
    assert (headline.metric, headline.levels, headline.k) == (SAMPLED, tuple(HEADLINE_LEVELS), 4)
    assert headline.rows == 3 * len(HEADLINE_LEVELS)
    # --domains keeps the headline levels the run has; with none of them the headline is every held-out prompt.
    kept = [level for level in LEVELS if level != HEADLINE_LEVELS[0]]
    assert headline_of(RunOptions(domains=kept), _table(kept)).levels == tuple(HEADLINE_LEVELS[1:])
    others = [level for level in LEVELS if level not in HEADLINE_LEVELS]
    assert headline_of(RunOptions(domains=others), _table(others)).levels is None
    # The toy suite and a user's data: every held-out prompt, whatever its domains are called.
    assert headline_of(RunOptions(suite="toy"), test).levels is None
    assert headline_of(RunOptions(dataset="mine.jsonl"), test).levels is None
    assert headline_of(RunOptions(dataset="mine.jsonl"), test).rows == len(test)
    # --eval-samples 0: greedy accuracy, and one line says so.
    greedy = headline_of(RunOptions(eval_samples=0), test)
    assert greedy.metric == GREEDY and greedy.levels == tuple(HEADLINE_LEVELS)
    block = greedy.record(0.25, 0.5)
    assert block["metric"] == GREEDY and "k" not in block and block["levels"] == list(HEADLINE_LEVELS)
    warning = fallback_warning(block)
    assert warning.startswith("the headline falls back to held-out greedy accuracy (--eval-samples 0) on ")
    assert "sampled pass@1" in warning and len(warning.splitlines()) == 1
    assert fallback_warning(headline.record(0.25, 0.5)) is None
    assert headline_text(headline.record(0.25, 0.5)).startswith("held-out sampled pass@1 (k=4, T=1) on ")


def _model():
    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer), tokenizer


def test_the_evaluation_gives_greedy_and_sampled_figures_and_their_headline():
    model, tokenizer = _model()
    test = load_task_suite(seed=0, n_train=1, n_test=6)["test"]
    settings = {"verifier": "exact", "builtin_domains": True}
    options = RunOptions(suite="toy", eval_samples=3)
    scores = HeldOutEvaluation(options, test, settings)(model, tokenizer)
    from dataflex_callbacks.recipes.tasks import evaluate, sampled_pass_at_1

    assert scores.greedy == evaluate(model, tokenizer, test, max_new_tokens=8)
    assert scores.sampled == sampled_pass_at_1(model, tokenizer, test, k=3, temperature=1.0, max_new_tokens=8)
    assert scores.headline == scores.sampled["overall"] != scores.greedy["overall"]
    off = HeldOutEvaluation(dataclasses.replace(options, eval_samples=0), test, settings)(model, tokenizer)
    assert off.sampled is None and off.headline == off.greedy["overall"] == scores.greedy["overall"]
    assert scores.curve_fields() == {
        "accuracy": scores.greedy,
        "sampled_pass_at_1": scores.sampled,
        "headline": scores.headline,
    }


def _varied(prompts, completions, answer, **columns):
    """A reward that varies with the completion and reads the answer column, so each sample counts."""
    return [float(c[:1] == str(a)[:1]) + len(set(c)) / 10 for c, a in zip(completions, answer, strict=True)]


@pytest.mark.parametrize("k", [None, 3])
def test_pass_rate_under_a_users_reward_equals_a_loop_over_the_samples(k):
    model, tokenizer = _model()
    test = load_task_suite(seed=0, n_train=1, n_test=5)["test"]
    prompts = list(test["prompt"])
    if k is None:
        samples = [[text] for text in generate_greedy(model, tokenizer, prompts, max_new_tokens=6)]
    else:
        samples = generate_sampled(model, tokenizer, prompts, k, 1.0, max_new_tokens=6, seed=2)
    threshold = 1.0
    row_rates = []
    for prompt, row, answer in zip(prompts, samples, test["answer"], strict=True):
        passed = [_varied([prompt], [text], [answer])[0] >= threshold for text in row]
        row_rates.append(sum(passed) / len(row))
    expected = {}
    for domain in sorted(set(test["domain"])):
        rates = [r for r, d in zip(row_rates, test["domain"], strict=True) if d == domain]
        expected[domain] = sum(rates) / len(rates)
    expected["overall"] = sum(row_rates) / len(row_rates)
    got = reward_pass_rate(model, tokenizer, test, _varied, threshold, 6, k=k, temperature=1.0, seed=2)
    assert got == pytest.approx(expected, abs=1e-12) and list(got) == list(expected)
    assert 0.0 < got["overall"] < 1.0  # some samples pass, some fail: the threshold and each sample count


def test_sampled_pass_at_1_under_a_users_reward_runs_in_the_evaluation(tmp_path, monkeypatch):
    (tmp_path / "held_out_rewards_t39.py").write_text(
        "def varied(prompts, completions, answer, **columns):\n"
        "    return [float(c[:1] == str(a)[:1]) + len(set(c)) / 10 for c, a in zip(completions, answer)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model, tokenizer = _model()
    test = load_task_suite(seed=0, n_train=1, n_test=4)["test"]
    options = RunOptions(suite="toy", reward=["held_out_rewards_t39:varied"], reward_threshold=1.1, eval_samples=2)
    scores = HeldOutEvaluation(options, test, {"verifier": "reward", "builtin_domains": False})(model, tokenizer)
    expected = reward_pass_rate(model, tokenizer, test, _varied, 1.1, 8, k=2, temperature=1.0, seed=0)
    assert scores.sampled == expected and scores.headline == expected["overall"]
