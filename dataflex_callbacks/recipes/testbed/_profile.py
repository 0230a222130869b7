"""The starting profile of a model on the testbed: greedy accuracy and pass rates over k samples, per level.

This is what makes a testbed useful to data strategies: prompts the model always solves, never solves
and sometimes solves. `pass_counts` samples `k` completions per prompt at temperature 1 (as GRPO's
rollouts do) and counts the correct ones; `profile_table` sums them up per level.
"""

from __future__ import annotations

from collections import defaultdict

from ._verify import verify

ANSWER_TOKENS = 9  # the longest answer (7 characters) plus end-of-sequence, with one to spare


def greedy_completions(
    model, tokenizer, prompts: list[str], max_new_tokens: int = ANSWER_TOKENS, batch_size: int = 256
) -> list[str]:
    """Greedy completions of `prompts`, in order
    (`tasks.evaluation.generate_greedy`, the runner's held-out decoding)."""
    from dataflex_callbacks.recipes.tasks.evaluation import generate_greedy

    return generate_greedy(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)


def greedy_correct(model, tokenizer, rows: list[dict], max_new_tokens: int = ANSWER_TOKENS) -> list[bool]:
    """Whether the greedy completion of each row is its answer (`verify`)."""
    completions = greedy_completions(model, tokenizer, [row["prompt"] for row in rows], max_new_tokens)
    return [verify(c, row["answer"]) for c, row in zip(completions, rows, strict=True)]


def pass_counts(
    model,
    tokenizer,
    rows: list[dict],
    k: int = 8,
    temperature: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = ANSWER_TOKENS,
    batch_size: int = 128,
) -> list[int]:
    """Correct completions out of `k` sampled at `temperature` (no top-k, no top-p) for each row; seeded by `seed`."""
    import torch

    model.eval()
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    counts: list[int] = []
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                batch = tokenizer([row["prompt"] for row in chunk], return_tensors="pt", padding=True)
                output = model.generate(
                    **batch,
                    do_sample=True,
                    temperature=temperature,
                    top_k=0,
                    top_p=1.0,
                    num_return_sequences=k,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
                texts = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
                for i, row in enumerate(chunk):
                    counts.append(sum(verify(text, row["answer"]) for text in texts[i * k : (i + 1) * k]))
    finally:
        tokenizer.padding_side = padding_side
    return counts


def profile_table(rows: list[dict], greedy: list[bool] | None, counts: list[int] | None, k: int = 8) -> dict:
    """Per level and `overall`: rows, greedy accuracy, mean sampled pass rate (sampled pass@1), pass@k, and the
    shares solved k/k, 0/k, mixed.

    Returns ``{level: {"rows", "greedy", "pass_rate", "pass_at_k", "all", "none", "mixed"}}`` (fractions in
    [0, 1]); a field whose input is None is left out.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        groups[row["domain"]].append(index)
        groups["overall"].append(index)
    table = {}
    for name, indices in groups.items():
        entry = {"rows": len(indices)}
        if greedy is not None:
            entry["greedy"] = sum(greedy[i] for i in indices) / len(indices)
        if counts is not None:
            entry["pass_rate"] = sum(counts[i] for i in indices) / (k * len(indices))
            entry["all"] = sum(counts[i] == k for i in indices) / len(indices)
            entry["none"] = sum(counts[i] == 0 for i in indices) / len(indices)
            entry["mixed"] = 1.0 - entry["all"] - entry["none"]
            entry["pass_at_k"] = 1.0 - entry["none"]
        table[name] = entry
    return table


def format_table(table: dict) -> str:
    """The profile as a markdown table (levels in their order, `overall` last)."""
    columns = [c for c in ("rows", "greedy", "pass_rate", "pass_at_k", "all", "none", "mixed") if c in table["overall"]]
    header = "| level | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns) + "\n"
    lines = []
    for name in [n for n in table if n != "overall"] + ["overall"]:
        cells = [str(table[name][c]) if c == "rows" else f"{table[name][c]:.2f}" for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return header + "\n".join(lines) + "\n"
