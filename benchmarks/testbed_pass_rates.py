"""Per-level pass-rate distribution on the testbed before and after plain GRPO (`dataflex run --strategy none`).

For every training prompt of the testbed, 8 completions are sampled at temperature 1 from the shipped
model and from the model after one default run of plain GRPO (60 steps, learning rate 3e-5); each
prompt counts as solved 8/8, 0/8 or mixed. Prints a markdown table and writes one PNG: per level,
the three shares at the start and at the end.

    python benchmarks/testbed_pass_rates.py --seed 0 --figure docs/figures/testbed_pass_rates.png
"""

from __future__ import annotations

import argparse
import os
import tempfile


def trained_model(seed: int):
    """The model and tokenizer after `dataflex run --strategy none --seed SEED` (the testbed's defaults)."""
    from transformers import TrainerCallback

    from dataflex_callbacks.recipes.runner import RunOptions, run_training

    class KeepModel(TrainerCallback):
        def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            self.model, self.tokenizer = model, processing_class

    keep = KeepModel()
    with tempfile.TemporaryDirectory() as folder:
        result = run_training(
            RunOptions(strategy="none", seed=seed, progress=False, output_dir=os.path.join(folder, "run")),
            callbacks=[keep],
        )
    return keep.model, keep.tokenizer, result


def shares(table: dict) -> dict[str, tuple[float, float, float]]:
    """Level (in the testbed's order, then `overall`) -> shares of prompts solved 8/8, mixed, solved 0/8."""
    from dataflex_callbacks.recipes.testbed import LEVELS

    return {
        level: (table[level]["all"], table[level]["mixed"], table[level]["none"])
        for level in [*LEVELS, "overall"]
        if level in table
    }


def plot(path: str, before: dict, after: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    levels = [level for level in before if level != "overall"]
    x = np.arange(len(levels))
    figure, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    for axis, (title, table) in zip(
        axes, (("start: the shipped model", before), ("after plain GRPO, 60 steps", after)), strict=False
    ):
        bottom = np.zeros(len(levels))
        for index, (name, color) in enumerate(
            (("solved 8/8", "tab:green"), ("mixed", "tab:orange"), ("solved 0/8", "tab:red"))
        ):
            values = np.array([table[level][index] for level in levels])
            axis.bar(x, values, bottom=bottom, color=color, label=name)
            bottom += values
        axis.set(title=title, xticks=x, xlabel="level")
        axis.set_xticklabels(levels, rotation=45, ha="right")
    axes[0].set_ylabel("share of training prompts (8 samples each)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--figure", default="testbed_pass_rates.png")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dataflex_callbacks.recipes import testbed

    torch.set_num_threads(1)
    rows = testbed.testbed_dataset(args.seed, "train", {level: testbed.TRAIN_ROWS[level] for level in testbed.LEVELS})
    path = testbed.load_testbed_model_path()
    start_model, start_tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    before = testbed.profile_table(rows, None, testbed.pass_counts(start_model, start_tokenizer, rows, seed=args.seed))
    model, tokenizer, result = trained_model(args.seed)
    after = testbed.profile_table(rows, None, testbed.pass_counts(model, tokenizer, rows, seed=args.seed))
    print(f"held-out accuracy {result.eval_before['overall']:.3f} -> {result.eval_after['overall']:.3f}\n")
    print("| level | 8/8 start | 8/8 end | mixed start | mixed end | 0/8 start | 0/8 end |")
    print("|---|---|---|---|---|---|---|")
    start, end = shares(before), shares(after)
    for level in start:
        (a0, m0, n0), (a1, m1, n1) = start[level], end[level]
        print(f"| {level} | {a0:.2f} | {a1:.2f} | {m0:.2f} | {m1:.2f} | {n0:.2f} | {n1:.2f} |")
    plot(args.figure, start, end)
    print(f"\nfigure: {args.figure}")


if __name__ == "__main__":
    main()
