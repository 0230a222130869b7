"""Held-out accuracy per domain with greedy decoding.

The evaluation is one fixed computation whatever a trainer did to the model object: the model's
own forward in its parameter dtype (a mixed-precision wrapper that `accelerate` installs on
`model.forward` during `train()` is bypassed), KV cache on, eval mode, left padding, fixed
batches. So two evaluations of unchanged weights give identical completions, and the "before"
and "after" columns of a run differ only by what training changed.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .suite import TaskReward


@contextlib.contextmanager
def _plain_forward(model):
    """Run `model` with its own forward, without the autocast wrapper `accelerate` puts on it for mixed precision.

    TRL's `GRPOConfig` defaults to bf16, so after `trainer.train()` (even one of 0 steps) the model
    would compute in bf16 autocast, which can change greedy completions of unchanged weights.
    """
    wrapped = model.__dict__.get("forward")
    original = model.__dict__.get("_original_forward")
    if wrapped is None or original is None:
        yield
        return
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped  # training goes on in the precision the trainer chose


def render_prompts(tokenizer, prompts: list) -> list[str]:
    """Prompt texts for generation: plain text as is, chat prompts through the tokenizer's chat template."""
    rendered = []
    for prompt in prompts:
        if isinstance(prompt, str):
            rendered.append(prompt)
        else:  # a conversation, rendered as TRL renders it for generation
            rendered.append(tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True))
    return rendered


def generate_greedy(model, tokenizer, prompts: list, max_new_tokens: int = 8, batch_size: int = 64) -> list[str]:
    """Greedy completions (special tokens removed) for `prompts` (text or chat messages), in order.

    Deterministic for given weights: see the module docstring for what is held fixed.
    """
    was_training = model.training
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # generation continues from the right edge
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    texts = render_prompts(tokenizer, prompts)
    completions: list[str] = []
    try:
        device = next(model.parameters()).device
        with _plain_forward(model):
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(texts[start : start + batch_size], return_tensors="pt", padding=True).to(device)
                with torch.no_grad():
                    output = model.generate(
                        **batch,
                        do_sample=False,
                        max_new_tokens=max_new_tokens,
                        pad_token_id=pad_id,
                        temperature=None,
                        top_p=None,
                        top_k=None,
                        use_cache=True,  # trainers switch `config.use_cache` off; the evaluation must not follow
                    )
                new_tokens = output[:, batch["input_ids"].shape[1] :]
                completions.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return completions


def evaluate(
    model,
    tokenizer,
    dataset,
    max_new_tokens: int = 8,
    batch_size: int = 64,
    seed: int = 0,
    verifier: str | Callable = "exact",
    builtin_domains: bool = True,
) -> dict[str, float]:
    """Held-out accuracy per domain and `overall` (mean over rows), greedy decoding, batched.

    `dataset` has columns `prompt`, `answer` and optionally `domain`. Rows are scored like
    training rewards (`TaskReward`) and accumulated in a `HeldOutAccuracy` metric; the noisy
    domain's coin is seeded by `seed` only, so the same model gets the same score.
    """
    from dataflex_callbacks.metrics import HeldOutAccuracy  # torchmetrics takes seconds to import; only this needs it

    prompts = list(dataset["prompt"])
    answers = [str(a) for a in dataset["answer"]]
    domains = list(dataset["domain"]) if "domain" in dataset.column_names else [NO_DOMAIN] * len(prompts)
    completions = generate_greedy(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
    reward = TaskReward(seed=seed, verifier=verifier, builtin_domains=builtin_domains)
    scores = [
        reward.score(p, c, a, d, salt=(seed, "eval")) for p, c, a, d in zip(prompts, completions, answers, domains)
    ]
    names = sorted(set(domains))
    position = {name: i for i, name in enumerate(names)}
    # Every process scores the whole dataset: no cross-process reduction. An empty dataset has no
    # domain, and a metric needs one.
    accuracy = HeldOutAccuracy([str(name) for name in names] or [NO_DOMAIN], sync_on_compute=False)
    accuracy.update(
        torch.tensor(scores, dtype=torch.float64), torch.tensor([position[d] for d in domains], dtype=torch.long)
    )
    values = accuracy.compute()
    result = {name: values[str(name)] for name in names}
    result["overall"] = values["overall"]
    return result
