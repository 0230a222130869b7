"""Held-out sampled pass@1 of a LightningModule (or any Hugging Face causal LM): what a ``train(run)`` logs.

    from dataflex_callbacks.recipes.compare import held_out_pass_rate

    scores = held_out_pass_rate(module, test_rows, my_reward, k=4)   # {"overall": 0.41, "add2": 0.6, ...}
    run.log(accuracy=scores.pop("overall"), step=trainer.global_step, **scores)

It lives with the comparison, not in the Lightning adapter: the adapters import no recipe
(docs/architecture.md), and the scoring below is the recipes' own.

Sampled pass@1 is the mean, over the held-out prompts, of the share of ``k`` samples (at the training temperature)
that pass: RL sharpens the distribution before the greedy answer flips, and this sees it first. The samples are
seeded, so the same weights get the same score, and the caller's random state is left as it was. The scoring is
the recipes' own (`recipes.held_out.reward_pass_rate` with a reward, `recipes.tasks.sampled_pass_at_1` with the
built-in verifier): a Lightning user gets the figure `dataflex run` and `dataflex compare` report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dataflex_callbacks.errors import InputError


def held_out_pass_rate(
    module: Any,
    dataset: Any,
    reward: Callable | None = None,
    *,
    tokenizer: Any = None,
    k: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 8,
    threshold: float = 1.0,
    seed: int = 0,
) -> dict[str, float]:
    """Score `module` on held-out prompts: sampled pass@1 per domain and ``"overall"`` (each in [0, 1]).

    Args:
        module: a LightningModule with ``.model`` (a Hugging Face causal LM) and ``.tokenizer``, or the model itself
            (then pass `tokenizer`).
        dataset: held-out rows (a ``datasets.Dataset`` or a list of dicts) with ``prompt`` and what the reward reads
            (``answer``, ...); a ``domain`` column gives the per-domain scores (else one domain, ``all``).
        reward: a TRL-style reward ``reward(prompts=..., completions=..., **columns) -> list[float | None]``; a
            sample passes when it gives at least `threshold`. None: the built-in exact-answer verifier on
            ``answer``.
        tokenizer: the tokenizer, when `module` is the model.
        k: samples per prompt (>= 1).
        temperature: sampling temperature (> 0), the training one.
        max_new_tokens: tokens generated per sample.
        threshold: the reward at or above which a sample passes.
        seed: seeds the samples.

    The model is put in eval mode for the call and left in the mode it had. Raises `InputError` naming the fix
    for a module without ``.model`` / ``.tokenizer``, a `k` below 1 or a temperature not above 0.
    """
    from ..held_out import reward_pass_rate
    from ..tasks.evaluation import sampled_pass_at_1

    model, tokenizer = _model_and_tokenizer(module, tokenizer)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"held_out_pass_rate: k={k!r} samples per prompt; pass an integer >= 1, e.g. k=4")
    if not float(temperature) > 0:
        raise InputError(f"held_out_pass_rate: temperature={temperature!r}; pass the training temperature, > 0")
    rows = _as_dataset(dataset)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if reward is None:
                scores = sampled_pass_at_1(
                    model, tokenizer, rows, k, temperature, max_new_tokens=max_new_tokens, seed=seed
                )
            else:
                scores = reward_pass_rate(
                    model, tokenizer, rows, reward, threshold, max_new_tokens, k=k, temperature=temperature, seed=seed
                )
    finally:
        model.train(training)
    return {name: float(value) for name, value in (scores or {}).items()}


def _model_and_tokenizer(module: Any, tokenizer: Any) -> tuple[Any, Any]:
    model = getattr(module, "model", None)
    if model is None and hasattr(module, "generate"):
        model = module
    tokenizer = tokenizer if tokenizer is not None else getattr(module, "tokenizer", None)
    if model is None or tokenizer is None:
        raise InputError(
            f"held_out_pass_rate needs a causal LM and its tokenizer; {type(module).__name__} has "
            f"{'no .model' if model is None else 'no .tokenizer'}: give the module .model and .tokenizer "
            "attributes, or pass the model with tokenizer=..."
        )
    return model, tokenizer


def _as_dataset(rows: Any) -> Any:
    """A ``datasets.Dataset`` of `rows` (a list of dicts is converted; a Dataset is kept)."""
    if hasattr(rows, "column_names"):
        return rows
    from datasets import Dataset

    return Dataset.from_list(list(rows))
