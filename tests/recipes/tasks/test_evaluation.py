"""evaluate(): greedy held-out accuracy per domain on the tiny model."""

import pytest

pytest.importorskip("transformers")

from dataflex_callbacks.recipes.tasks import evaluate, load_task_suite  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402
from dataflex_callbacks.rollout.batch import NO_DOMAIN  # noqa: E402


def test_untrained_model_accuracy_per_domain():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    model.train()
    test = load_task_suite(seed=0, n_train=1, n_test=20)["test"]
    accuracy = evaluate(model, tokenizer, test, batch_size=16)
    assert set(accuracy) == {"echo", "digit", "code", "coin", "overall"}
    assert accuracy["echo"] == 1.0  # the untrained prior repeats letters
    assert accuracy["code"] == 0.0
    assert accuracy["digit"] < 1.0
    assert accuracy == evaluate(model, tokenizer, test, batch_size=7)  # batching does not change the answer
    assert tokenizer.padding_side == "left" and model.training  # settings restored


def test_unchanged_weights_give_identical_completions_after_a_trainer_touched_the_model(tmp_path):
    """A 0-step `GRPOTrainer.train()` leaves the weights as they were; the evaluation must not change either.

    Measured before the fix: TRL's default bf16 made accelerate wrap `model.forward` in autocast during
    train(), and 1 of these 200 greedy completions changed.
    """
    pytest.importorskip("trl")
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from dataflex_callbacks.recipes.tasks import generate_greedy, make_reward_fn

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    suite = load_task_suite(seed=0, n_train=1, n_test=50)
    prompts = list(suite["test"]["prompt"])
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    before = generate_greedy(model, tokenizer, prompts)
    assert generate_greedy(model, tokenizer, prompts) == before  # deterministic as such

    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=64,
        num_generations=8,
        max_completion_length=4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        beta=0.0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=make_reward_fn(), args=args, train_dataset=suite["train"], processing_class=tokenizer
    )
    trainer.train()  # 4 rows, 8 prompts per step: no optimizer step
    assert trainer.state.global_step == 0
    assert all(torch.equal(weights[k], v) for k, v in trainer.model.state_dict().items())
    assert generate_greedy(trainer.model, tokenizer, prompts) == before
    assert evaluate(trainer.model, tokenizer, suite["test"]) == evaluate(
        build_tiny_model(tokenizer), tokenizer, suite["test"]
    )


def test_chat_prompts_are_rendered_with_the_chat_template():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    test = load_task_suite(seed=0, n_train=1, n_test=5)["test"]
    chat = test.map(lambda row: {"prompt": [{"role": "user", "content": row["prompt"]}]})
    # The tiny model's chat template is the message text itself: the same completions, the same scores.
    assert evaluate(model, tokenizer, chat) == evaluate(model, tokenizer, test)


def test_accuracy_equals_a_loop_over_the_scored_rows():
    from dataflex_callbacks.recipes.tasks import TaskReward, generate_greedy

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    test = load_task_suite(seed=0, n_train=1, n_test=12)["test"]
    completions = generate_greedy(model, tokenizer, list(test["prompt"]))
    reward = TaskReward(seed=0)
    scores = [
        reward.score(p, c, str(a), d, salt=(0, "eval"))
        for p, c, a, d in zip(test["prompt"], completions, test["answer"], test["domain"], strict=True)
    ]
    expected = {}
    for domain in sorted(set(test["domain"])):
        values = [s for s, d in zip(scores, test["domain"], strict=True) if d == domain]
        expected[domain] = sum(values) / len(values)
    expected["overall"] = sum(scores) / len(scores)
    accuracy = evaluate(model, tokenizer, test)
    assert accuracy == expected and list(accuracy) == list(expected)
    assert 0.0 < accuracy["overall"] < 1.0  # a case where the per-domain means differ from the overall one

    unlabelled = test.remove_columns("domain")  # every row in the library's NO_DOMAIN, scored by the verifier
    assert set(evaluate(model, tokenizer, unlabelled)) == {NO_DOMAIN, "overall"}
    assert evaluate(model, tokenizer, test.select([])) == {"overall": 0.0}


def test_sampled_pass_at_1_equals_a_loop_over_the_scored_samples():
    """Sampled pass@1: per row, the mean verifier score of its k samples; per domain and overall, the mean over rows."""
    from dataflex_callbacks.recipes.tasks import TaskReward, generate_sampled, sampled_pass_at_1

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    test = load_task_suite(seed=0, n_train=1, n_test=12)["test"]
    k, temperature, seed = 4, 1.0, 3
    samples = generate_sampled(model, tokenizer, list(test["prompt"]), k=k, temperature=temperature, seed=seed)
    assert len(samples) == len(test) and all(len(row) == k for row in samples)
    reward = TaskReward(seed=seed)
    row_means = []
    for p, row, a, d in zip(test["prompt"], samples, test["answer"], test["domain"], strict=True):
        row_means.append(sum(reward.score(p, c, str(a), d, salt=(seed, "sampled", j)) for j, c in enumerate(row)) / k)
    expected = {}
    for domain in sorted(set(test["domain"])):
        values = [m for m, d in zip(row_means, test["domain"], strict=True) if d == domain]
        expected[domain] = sum(values) / len(values)
    expected["overall"] = sum(row_means) / len(row_means)
    passed = sampled_pass_at_1(model, tokenizer, test, k=k, temperature=temperature, seed=seed)
    assert list(passed) == list(expected)
    assert all(abs(passed[name] - expected[name]) < 1e-12 for name in expected)
    assert 0.0 < passed["overall"] < 1.0
    assert passed["echo"] != evaluate(model, tokenizer, test)["echo"]  # sampling, not greedy: the prior's echo slips


def test_sampled_pass_at_1_is_deterministic_and_leaves_the_global_rng_alone():
    import torch

    from dataflex_callbacks.recipes.tasks import generate_sampled, sampled_pass_at_1

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    model.train()
    test = load_task_suite(seed=0, n_train=1, n_test=10)["test"]
    prompts = list(test["prompt"])
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first = generate_sampled(model, tokenizer, prompts, k=3, temperature=1.0, seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)  # the training RNG goes on as if nothing ran
    assert generate_sampled(model, tokenizer, prompts, k=3, temperature=1.0, seed=0) == first
    assert generate_sampled(model, tokenizer, prompts, k=3, temperature=1.0, seed=1) != first
    assert sampled_pass_at_1(model, tokenizer, test, k=3, temperature=1.0) == sampled_pass_at_1(
        model, tokenizer, test, k=3, temperature=1.0
    )
    assert torch.equal(torch.random.get_rng_state(), state)
    assert tokenizer.padding_side == "left" and model.training  # settings restored


def test_zero_samples_skip_the_sampled_evaluation():
    from dataflex_callbacks.recipes.tasks import generate_sampled, sampled_pass_at_1

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    test = load_task_suite(seed=0, n_train=1, n_test=3)["test"]
    assert sampled_pass_at_1(model, tokenizer, test, k=0, temperature=1.0) is None
    assert generate_sampled(model, tokenizer, list(test["prompt"]), k=0, temperature=1.0) == [[]] * len(test)
