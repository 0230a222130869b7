"""Build the testbed's pretrained model and measure its starting profile.

    python scripts/build_testbed_model.py                      # rebuild the shipped model in place
    python scripts/build_testbed_model.py --output /tmp/tb     # build elsewhere
    python scripts/build_testbed_model.py --profile-only       # re-measure the profile of a built model

Writes to the output folder: the model (safetensors) and tokenizer, `build.json` (settings, wall time,
loss curve) and `profile.json` (greedy accuracy per level on the `eval` split, with the completions'
digest, and the pass rates over 8 samples at temperature 1 on the `train` split). docs/testbed.md
shows the figures. The build runs on one CPU thread by default: on a shared 2-core machine two threads
were ten times slower per step (see docs/testbed.md), and the weights depend on the thread count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time


def measure_profile(folder: str, seed: int = 0, k: int = 8) -> dict:
    """Per level: greedy accuracy, sampled pass@1 and pass@k over `k` samples on the eval split, and the pass rates
    over `k` samples on the train split (the shares of training groups solved k/k, 0/k and mixed)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dataflex_callbacks.recipes import testbed

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    started = time.perf_counter()
    eval_rows = testbed.testbed_dataset(seed, "eval")
    completions = testbed.greedy_completions(model, tokenizer, [row["prompt"] for row in eval_rows])
    greedy = [testbed.verify(c, row["answer"]) for c, row in zip(completions, eval_rows, strict=True)]
    eval_counts = testbed.pass_counts(model, tokenizer, eval_rows, k=k, seed=seed)
    train_rows = testbed.testbed_dataset(seed, "train")
    counts = testbed.pass_counts(model, tokenizer, train_rows, k=k, seed=seed)
    digest = hashlib.sha256("\n".join(completions).encode("utf-8")).hexdigest()
    return {
        "seed": seed,
        "k": k,
        "threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - started,
        "eval_greedy": testbed.profile_table(eval_rows, greedy, None),
        "eval_pass": testbed.profile_table(eval_rows, greedy, eval_counts, k=k),
        "eval_greedy_digest": digest,
        "train_pass": testbed.profile_table(train_rows, None, counts, k=k),
    }


def main(argv=None) -> int:
    from dataflex_callbacks.recipes import testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=testbed.MODEL_FOLDER, help="model folder (default: the shipped one)")
    defaults = testbed.BuildSettings()
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--profile-only", action="store_true", help="measure the profile of the model in --output")
    args = parser.parse_args(argv)

    import torch

    if not args.profile_only:
        settings = testbed.BuildSettings(seed=args.seed, steps=args.steps, threads=args.threads)
        model, tokenizer, record = testbed.pretrain(settings, log=lambda line: print(line, flush=True))
        testbed.save_model(model, tokenizer, args.output, record)
        print(
            f"built in {record['wall_seconds']:.0f} s ({record['parameters']} parameters) -> {args.output}", flush=True
        )
    torch.set_num_threads(1)  # the tests measure on one thread: the documented greedy digest is that one's
    profile = measure_profile(args.output)
    with open(os.path.join(args.output, "profile.json"), "w") as handle:
        json.dump(profile, handle, indent=2, sort_keys=True)
    print(f"the eval split, greedy and over {profile['k']} samples:\n" + testbed.format_table(profile["eval_pass"]))
    print("pass rates over 8 samples on the train split:\n" + testbed.format_table(profile["train_pass"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
