"""Held-out accuracy per domain: greedy accuracy and sampled pass@1.

The evaluation is one fixed computation whatever a trainer did to the model object: the model's
own forward in its parameter dtype (a mixed-precision wrapper that `accelerate` installs on
`model.forward` during `train()` is bypassed), KV cache on, eval mode, left padding, fixed
batches, and a fixed seed for the samples. So two evaluations of unchanged weights give identical
completions, and the "before" and "after" columns of a run differ only by what training changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

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


def _generate(model, tokenizer, prompts: list, max_new_tokens: int, batch_size: int, **decoding) -> list[str]:
    """Completions (special tokens removed) of `prompts` in fixed batches of `batch_size` prompts, in order: the
    `num_return_sequences` completions of a prompt follow each other.

    The one generation of the greedy and the sampled evaluation: eval mode, left padding, plain forward, KV cache.
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
                        max_new_tokens=max_new_tokens,
                        pad_token_id=pad_id,
                        use_cache=True,  # trainers switch `config.use_cache` off; the evaluation must not follow
                        **decoding,
                    )
                new_tokens = output[:, batch["input_ids"].shape[1] :]
                completions.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return completions


def generate_greedy(model, tokenizer, prompts: list, max_new_tokens: int = 8, batch_size: int = 64) -> list[str]:
    """Greedy completions (special tokens removed) for `prompts` (text or chat messages), in order.

    Deterministic for given weights: see the module docstring for what is held fixed.
    """
    return _generate(
        model, tokenizer, prompts, max_new_tokens, batch_size, do_sample=False, temperature=None, top_p=None, top_k=None
    )


def generate_sampled(
    model,
    tokenizer,
    prompts: list,
    k: int,
    temperature: float,
    max_new_tokens: int = 8,
    batch_size: int = 64,
    seed: int = 0,
) -> list[list[str]]:
    """`k` sampled completions per prompt (special tokens removed), sampled as GRPO training samples them.

    Plain sampling at `temperature` (no top-k or top-p cut, as TRL's `GRPOConfig` defaults), `batch_size` prompts
    per batch. The sampler is seeded by `seed` inside a forked RNG: the same weights give the same completions, and
    the caller's RNG (the trainer's, between the "before" evaluation and training) is left as it was.
    """
    if k == 0:
        return [[] for _ in prompts]
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        flat = _generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens,
            batch_size,
            do_sample=True,
            temperature=float(temperature),
            top_p=1.0,
            top_k=0,
            num_return_sequences=k,
        )
    return [flat[i * k : (i + 1) * k] for i in range(len(prompts))]


def _columns(dataset) -> tuple[list, list[str], list]:
    prompts = list(dataset["prompt"])
    answers = [str(a) for a in dataset["answer"]]
    domains = list(dataset["domain"]) if "domain" in dataset.column_names else [NO_DOMAIN] * len(prompts)
    return prompts, answers, domains


def _mean_per_domain(scores: list[float], domains: list) -> dict[str, float]:
    """Mean of `scores` per domain and `overall` (mean over all), accumulated in a `HeldOutAccuracy` metric."""
    from dataflex_callbacks.metrics import HeldOutAccuracy  # torchmetrics takes seconds to import; only this needs it

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
    prompts, answers, domains = _columns(dataset)
    completions = generate_greedy(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
    reward = TaskReward(seed=seed, verifier=verifier, builtin_domains=builtin_domains)
    scores = [
        reward.score(p, c, a, d, salt=(seed, "eval"))
        for p, c, a, d in zip(prompts, completions, answers, domains, strict=True)
    ]
    return _mean_per_domain(scores, domains)


def sampled_pass_at_1(
    model,
    tokenizer,
    dataset,
    k: int,
    temperature: float,
    max_new_tokens: int = 8,
    batch_size: int = 64,
    seed: int = 0,
    verifier: str | Callable = "exact",
    builtin_domains: bool = True,
) -> dict[str, float] | None:
    """Held-out sampled pass@1 per domain and `overall`: the mean verifier score of `k` samples per row at the
    training `temperature`, averaged over rows; None when `k` is 0 (the evaluation is off).

    Greedy accuracy only sees whether the most likely answer changed; RL first sharpens the distribution (the right
    answer gains probability while the argmax stays), which this mean over samples sees. The samples are seeded by
    `seed` (`generate_sampled`), so the same weights get the same score. Each row weighs the same (`k` samples each).
    """
    if k == 0:
        return None
    prompts, answers, domains = _columns(dataset)
    samples = generate_sampled(
        model, tokenizer, prompts, k, temperature, max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed
    )
    reward = TaskReward(seed=seed, verifier=verifier, builtin_domains=builtin_domains)
    scores = [
        reward.score(p, c, a, d, salt=(seed, "sampled", j))  # the noisy coin drawn afresh per sample
        for p, row, a, d in zip(prompts, samples, answers, domains, strict=True)
        for j, c in enumerate(row)
    ]
    return _mean_per_domain(scores, [d for d in domains for _ in range(k)])
