"""evaluate(): greedy held-out accuracy per domain on the tiny model."""

import pytest

pytest.importorskip("transformers")

from dataflex_callbacks.tasks import evaluate, load_task_suite  # noqa: E402
from dataflex_callbacks.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402


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
