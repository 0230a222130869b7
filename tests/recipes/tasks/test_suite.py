"""The built-in task suite: deterministic, disjoint splits, TRL-style reward function."""

import pytest

pytest.importorskip("datasets")

from dataflex_callbacks.errors import InputError  # noqa: E402
from dataflex_callbacks.recipes.tasks import TASK_DOMAINS, load_task_suite, make_reward_fn  # noqa: E402


def test_suite_columns_and_sizes():
    suite = load_task_suite(seed=0, n_train=20, n_test=5)
    assert set(suite) == {"train", "test"}
    for split, per_domain in (("train", 20), ("test", 5)):
        data = suite[split]
        assert data.column_names == ["prompt", "answer", "domain", "prompt_key"]
        assert len(data) == per_domain * len(TASK_DOMAINS)
        assert {d: list(data["domain"]).count(d) for d in TASK_DOMAINS} == {d: per_domain for d in TASK_DOMAINS}


def test_suite_is_deterministic_and_seeded():
    a, b, c = (
        load_task_suite(seed=1, n_train=10, n_test=5),
        load_task_suite(seed=1, n_train=10, n_test=5),
        load_task_suite(seed=2, n_train=10, n_test=5),
    )
    assert a["train"].to_list() == b["train"].to_list() and a["test"].to_list() == b["test"].to_list()
    assert a["train"]["prompt"] != c["train"]["prompt"]


def test_splits_are_disjoint_and_keys_stable():
    suite = load_task_suite(seed=0, n_train=200, n_test=50)
    train, test = set(suite["train"]["prompt"]), set(suite["test"]["prompt"])
    assert not train & test
    assert len(train) == len(suite["train"])
    keys = suite["train"]["prompt_key"]
    assert len(set(keys)) == len(keys)
    again = load_task_suite(seed=0, n_train=200, n_test=50)
    assert again["train"]["prompt_key"] == keys


def test_unknown_domain_and_too_many_prompts():
    with pytest.raises(ValueError, match="available"):
        load_task_suite(domains=["nope"])
    with pytest.raises(ValueError, match="distinct prompts"):
        load_task_suite(n_train=5000, n_test=10, domains=["digit"])


def test_reward_function_scores_each_domain():
    reward = make_reward_fn(seed=0)
    logged = {}
    rewards = reward(
        prompts=["echo q k d", "echo 3 8 5", "echo 3 8 5", "code 1 2 3:", "code 1 2 3:"],
        completions=["dddd", "5 ", "4", "abcdefgh", "abcdefgx"],
        answer=["d", "5", "5", "abcdefgh", "abcdefgh"],
        domain=["echo", "digit", "digit", "code", "code"],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert rewards == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert logged["tasks/reward/digit"] == 0.5 and logged["tasks/share/code"] == 0.4


def test_noisy_domain_ignores_the_answer_but_is_reproducible():
    n = 400
    args = dict(prompts=["coin 1 2 3:"] * n, completions=["h"] * n, answer=["h"] * n, domain=["coin"] * n)
    first, second = make_reward_fn(seed=0), make_reward_fn(seed=0)
    rewards = first(**args)
    assert 0.4 < sum(rewards) / n < 0.6
    assert rewards == second(**args)  # same seed, same call index -> same draws
    assert first(**args) != rewards  # a new call draws anew


def test_user_verifier_for_unknown_domains():
    reward = make_reward_fn(verifier="numeric", builtin_domains=False)
    assert reward(["q"] * 3, ["4", "5", "it is 4"], answer=["4", "4", "4"], domain=["echo", "math", "math"]) == [
        1.0,
        0.0,
        0.0,  # prose: only the opt-in numeric_free_text verifier reads it
    ]
    free_text = make_reward_fn(verifier="numeric_free_text", builtin_domains=False)
    assert free_text(["q"], ["it is 4"], answer=["4"], domain=["math"]) == [1.0]


def test_a_domain_named_twice_is_refused_not_doubled():
    with pytest.raises(InputError, match="'echo'.*twice|twice.*echo"):
        load_task_suite(n_train=4, n_test=2, domains=["echo", "digit", "echo"])
