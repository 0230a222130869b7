"""Held-out accuracy per domain with greedy decoding."""

from __future__ import annotations

from typing import Callable

from .suite import TaskReward


def generate_greedy(model, tokenizer, prompts: list[str], max_new_tokens: int = 8, batch_size: int = 64) -> list[str]:
    """Greedy completions (special tokens removed) for plain-text `prompts`, in order."""
    import torch

    was_training = model.training
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # generation continues from the right edge
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    completions: list[str] = []
    try:
        device = next(model.parameters()).device
        for start in range(0, len(prompts), batch_size):
            batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True).to(device)
            with torch.no_grad():
                output = model.generate(
                    **batch, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                    temperature=None, top_p=None, top_k=None,
                )
            new_tokens = output[:, batch["input_ids"].shape[1]:]
            completions.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return completions


def evaluate(model, tokenizer, dataset, max_new_tokens: int = 8, batch_size: int = 64, seed: int = 0,
             verifier: str | Callable = "exact", builtin_domains: bool = True) -> dict[str, float]:
    """Held-out accuracy per domain and `overall` (mean over rows), greedy decoding, batched.

    `dataset` has columns `prompt`, `answer` and optionally `domain`. Rows are scored like
    training rewards (`TaskReward`); the noisy domain's coin is seeded by `seed` only, so the
    same model gets the same score.
    """
    prompts = list(dataset["prompt"])
    answers = [str(a) for a in dataset["answer"]]
    domains = list(dataset["domain"]) if "domain" in dataset.column_names else ["default"] * len(prompts)
    completions = generate_greedy(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
    reward = TaskReward(seed=seed, verifier=verifier, builtin_domains=builtin_domains)
    scores = [reward.score(p, c, a, d, salt=(seed, "eval")) for p, c, a, d in zip(prompts, completions, answers, domains)]
    result: dict[str, float] = {}
    for name in sorted(set(domains)):
        values = [s for s, d in zip(scores, domains) if d == name]
        result[name] = sum(values) / len(values)
    result["overall"] = sum(scores) / len(scores) if scores else 0.0
    return result
