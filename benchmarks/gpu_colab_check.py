"""GPU check of the Colab notebook's training path: stock GRPO vs a strategy, step time and peak GPU memory.

Runs `examples/colab_grpo_lora.py` (the script twin of the notebook, same cells) as a
subprocess per variant, on a randomly initialised model of Qwen2.5-0.5B's shape (no hub
access: Qwen2Config with hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocab 151936,
tied embeddings; the built-in character tokenizer, whose ids the model's padded vocabulary
covers) and a synthetic GSM8K-format file, with the notebook's T4 settings (LoRA r=16,
4 questions x 8 completions per step, micro-batch 8, 256 completion tokens, gradient
checkpointing). Variants: stock GRPO and the strategy in the card's precision, and the
strategy in fp16 (the T4 path: fp16 base weights, fp32 LoRA, loss scaling).

    python benchmarks/gpu_colab_check.py --out gpu_colab_check.json           # CUDA, ~2-3 min on an H200
    python benchmarks/gpu_colab_check.py --device cpu --tiny --steps 2 --out /tmp/check.json   # CPU smoke run

Step time is the median over steps after the first (warm-up). A random model never answers
right, so every reward is 0 and `difffilter` drops every group (its loss is 0 but the backward
pass still runs); the time and memory figures are what matters here, not the rewards.
Needs only torch, transformers, peft, trl, datasets, accelerate (plus this repo, installed or not).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "colab_grpo_lora.py")

# Qwen/Qwen2.5-0.5B-Instruct's config.json, less the tokenizer ids (set from the tokenizer).
QWEN25_05B_SHAPE = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)

# Words for synthetic questions the character tokenizer can spell (lower case, no punctuation it lacks).
_WORDS = (
    "a farmer has apples and sells some of them at the market each day then buys more from "
    "a neighbour who grows pears how many does she have left at the end of the week"
).split()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the results table")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--tiny", action="store_true", help="the built-in tiny model instead of the 0.5B shape (CPU smoke run)"
    )
    parser.add_argument(
        "--strategy", default="difffilter", help="strategy compared with stock GRPO (default: %(default)s)"
    )
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps per variant (default: %(default)s)")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=256)
    parser.add_argument(
        "--question-chars",
        type=int,
        default=200,
        help="length of the synthetic questions; one token per character (default: %(default)s)",
    )
    parser.add_argument("--no-fp16", action="store_true", help="skip the fp16 (T4 path) variant")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per variant before it is stopped")
    return parser.parse_args(argv)


def repo_on_path(workdir: str) -> str | None:
    """A PYTHONPATH entry that makes `dataflex_callbacks.integrations` importable when the repo is not pip-installed.

    The adapters live in dataflex_callbacks/integrations/ and install as dataflex_callbacks.integrations (a
    package-dir mapping); without an install, a copy with that layout stands in.
    """
    probe = subprocess.run(
        [sys.executable, "-c", "import dataflex_callbacks.integrations.trl"],
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    if probe.returncode == 0:
        return None
    source = os.path.join(workdir, "src")
    shutil.copytree(
        os.path.join(ROOT, "dataflex_callbacks"),
        os.path.join(source, "dataflex_callbacks"),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return source


def save_model(path: str, tiny: bool, device: str) -> dict:
    """Save a random model and the character tokenizer to `path`; return a description."""
    sys.path.insert(0, ROOT)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer, save_tiny

    if tiny:
        save_tiny(path, max_position_embeddings=1024)
        return {"model": "built-in tiny Qwen2 (random)", "parameters": None}
    tokenizer = build_tiny_tokenizer()
    tokenizer.model_max_length = QWEN25_05B_SHAPE["max_position_embeddings"]
    config = Qwen2Config(
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        **QWEN25_05B_SHAPE,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)  # random init, on the GPU so it takes seconds
    model = model.to(torch.bfloat16)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"model": "Qwen2.5-0.5B shape, random init", "parameters": parameters}


def write_dataset(path: str, rows: int, question_chars: int) -> None:
    """A GSM8K-format jsonl (question, answer ending in `#### N`) of synthetic word problems."""
    with open(path, "w") as handle:
        for i in range(rows):
            words, position = [], i
            while len(" ".join(words)) < question_chars:
                words.append(_WORDS[position % len(_WORDS)])
                position += 7
            question = f"{' '.join(words)} if she starts with {i + 3} apples"
            handle.write(json.dumps({"question": question, "answer": f"she has {i + 3} left\n#### {i + 3}"}) + "\n")


def run_variant(
    name: str, strategy: str, precision: str, args, model_dir: str, data: str, workdir: str, pythonpath: str | None
) -> dict:
    """Run the example for one variant; return its row of the table (or the error)."""
    out_dir = os.path.join(workdir, name)
    command = [
        sys.executable,
        EXAMPLE,
        "--model",
        model_dir,
        "--dataset",
        data,
        "--strategy",
        strategy,
        "--steps",
        str(args.steps),
        "--prompts-per-step",
        str(args.prompts_per_step),
        "--num-generations",
        str(args.num_generations),
        "--micro-batch",
        str(args.micro_batch),
        "--max-completion-length",
        str(args.max_completion_length),
        "--n-eval",
        "4",
        "--n-train",
        "0",
        "--eval-batch-size",
        "4",
        "--precision",
        precision,
        "--device",
        args.device,
        "--output-dir",
        out_dir,
    ]
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=os.path.join(workdir, "hf_home"),
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
    )
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir, timeout=args.timeout)
        returncode, output = result.returncode, result.stdout + result.stderr
    except subprocess.TimeoutExpired as error:
        returncode, output = "timeout", f"{error.stdout or ''}{error.stderr or ''}"
    row = {
        "variant": name,
        "strategy": strategy,
        "precision": precision,
        "returncode": returncode,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    metrics_file = os.path.join(out_dir, "metrics.json")
    if returncode != 0 or not os.path.exists(metrics_file):
        row["error"] = (output if isinstance(output, str) else str(output))[-3000:]
        return row
    with open(metrics_file) as handle:
        metrics = json.load(handle)
    steps = metrics["step_seconds"]
    timed = steps[1:] if len(steps) > 1 else steps  # the first step carries CUDA warm-up
    kept = [entry["dataflex/kept_frac"] for entry in metrics["log_history"] if "dataflex/kept_frac" in entry]
    row.update(
        precision=metrics["precision"],
        median_step_s=round(statistics.median(timed), 4),
        mean_step_s=round(statistics.fmean(timed), 4),
        first_step_s=round(steps[0], 4),
        peak_memory_gib=None if metrics["peak_memory_gb"] is None else round(metrics["peak_memory_gb"], 3),
        train_seconds=round(metrics["train_seconds"], 1),
        kept_frac_mean=round(statistics.fmean(kept), 3) if kept else None,
    )
    return row


def print_table(rows: list[dict]) -> None:
    header = ("variant", "precision", "median s/step", "ratio vs stock", "peak GiB", "kept frac", "status")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for row in rows:
        ratio = row.get("ratio_vs_stock")
        print(
            " | ".join(
                str(value)
                for value in (
                    row["variant"],
                    row["precision"],
                    row.get("median_step_s", "-"),
                    "-" if ratio is None else f"{ratio:.3f}",
                    row.get("peak_memory_gib") if row.get("peak_memory_gib") is not None else "-",
                    row.get("kept_frac_mean") if row.get("kept_frac_mean") is not None else "-",
                    "ok" if "error" not in row else f"FAILED ({row['returncode']})",
                )
            )
        )


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible; for a CPU smoke run use: --device cpu --tiny", file=sys.stderr)
        return 2
    if args.device == "cuda":
        precision = "bf16" if torch.cuda.get_device_capability()[0] >= 8 else "fp16"
        device_name = torch.cuda.get_device_name()
    else:
        precision, device_name = "fp32", "cpu"
    variants = [("stock", "none", precision), (args.strategy, args.strategy, precision)]
    if args.device == "cuda" and not args.no_fp16 and precision != "fp16":
        variants.append((f"{args.strategy}-fp16", args.strategy, "fp16"))

    workdir = tempfile.mkdtemp(prefix="gpu_colab_check_")
    started = time.perf_counter()
    try:
        pythonpath = repo_on_path(workdir)
        model_dir = os.path.join(workdir, "model")
        model_info = save_model(model_dir, args.tiny, args.device)
        data = os.path.join(workdir, "gsm8k_synthetic.jsonl")
        write_dataset(data, rows=max(64, args.steps * args.prompts_per_step * 2), question_chars=args.question_chars)
        print(
            f"{device_name}: {model_info['model']}, {precision}; model and data ready in "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
        rows = []
        for name, strategy, variant_precision in variants:
            rows.append(run_variant(name, strategy, variant_precision, args, model_dir, data, workdir, pythonpath))
            status = "ok" if "error" not in rows[-1] else "FAILED:\n" + rows[-1]["error"]
            print(f"  {name} ({variant_precision}): {rows[-1]['wall_seconds']} s, {status}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    stock = next((r for r in rows if r["variant"] == "stock" and "error" not in r), None)
    for row in rows:
        if stock is not None and "median_step_s" in row and row["precision"] == stock["precision"]:
            row["ratio_vs_stock"] = round(row["median_step_s"] / stock["median_step_s"], 4)
    print()
    print_table(rows)
    import peft
    import transformers
    import trl

    report = {
        "device": device_name,
        **model_info,
        "settings": {
            key: getattr(args, key)
            for key in (
                "steps",
                "prompts_per_step",
                "num_generations",
                "micro_batch",
                "max_completion_length",
                "question_chars",
            )
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
            "peft": peft.__version__,
        },
        "total_seconds": round(time.perf_counter() - started, 1),
        "runs": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=2)
    print(f"\nwritten to {args.out} ({report['total_seconds']} s)")
    return 0 if all("error" not in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
