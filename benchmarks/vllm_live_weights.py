"""What the live-weight fix costs vLLM-CPU generation: vLLM's own CPU dispatch against `keep_live_weights`,
side by side.

    .venv-vllm/bin/python benchmarks/vllm_live_weights.py --prompts 64 --tokens 32 --repeats 3

Each mode runs in a fresh process (vLLM chooses its dispatch once per engine) on the same tiny model
(`recipes.tiny_model.save_tiny`, float32, eager) and the same prompts, and reports which dispatch its
linear layers got and the median wall time of one `generate` call over the repeats (after a warm-up
call). ``vllm`` is vLLM's own choice on this CPU (oneDNN on AVX-512 Xeons, the plain fallback where
oneDNN refuses the layer); ``live`` is the fix `cpu_engine()` and the verl run use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def measure(mode: str, folder: str, prompts: int, tokens: int, repeats: int) -> dict:
    """Build one engine in this process with `mode`'s dispatch and time its generate calls."""
    import time

    import torch
    import vllm
    from vllm.model_executor.layers import utils as layer_utils

    from dataflex_callbacks.recipes.vllm_colocate import CPU_ENGINE_SETTINGS
    from dataflex_callbacks.recipes.vllm_cpu import keep_live_weights

    torch.set_num_threads(1)
    kinds: dict[str, int] = {}
    original = layer_utils.dispatch_cpu_unquantized_gemm
    if mode == "live":
        keep_live_weights()
    chosen = layer_utils.dispatch_cpu_unquantized_gemm

    def counted(layer, remove_weight=False):
        chosen(layer, remove_weight=remove_weight)
        kind = (
            "live F.linear"
            if getattr(layer, "dataflex_live_weights", False)
            else ("weight dropped (repacked)" if layer.weight.numel() == 0 else "weight kept")
        )
        kinds[kind] = kinds.get(kind, 0) + 1

    layer_utils.dispatch_cpu_unquantized_gemm = counted
    llm = vllm.LLM(model=folder, max_num_seqs=64, **CPU_ENGINE_SETTINGS, gpu_memory_utilization=0.05, seed=0)
    layer_utils.dispatch_cpu_unquantized_gemm = original
    params = vllm.SamplingParams(max_tokens=tokens, min_tokens=tokens, temperature=1.0)
    batch = [f"{i} + {i} =" for i in range(prompts)]
    llm.generate(batch, params, use_tqdm=False)  # warm-up
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        seconds.append(time.perf_counter() - start)
    return {"mode": mode, "layers": kinds, "median_s": statistics.median(seconds), "runs_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", choices=["vllm", "live"], help=argparse.SUPPRESS)  # one mode, in a child
    parser.add_argument("--model", help=argparse.SUPPRESS)
    flags = parser.parse_args()
    if flags.measure:
        print(json.dumps(measure(flags.measure, flags.model, flags.prompts, flags.tokens, flags.repeats)))
        return

    from dataflex_callbacks.recipes.tiny_model import save_tiny

    with tempfile.TemporaryDirectory() as folder:
        save_tiny(folder)
        rows = []
        for mode in ("vllm", "live"):
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--measure",
                    mode,
                    "--model",
                    folder,
                    "--prompts",
                    str(flags.prompts),
                    "--tokens",
                    str(flags.tokens),
                    "--repeats",
                    str(flags.repeats),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    with open("/proc/cpuinfo") as cpuinfo:
        text = cpuinfo.read()
    flags_seen = [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in text]
    print(
        f"CPU flags: {' '.join(flags_seen)}; {flags.prompts} prompts x {flags.tokens} tokens, "
        f"median of {flags.repeats} generate calls"
    )
    print(f"{'dispatch':<8} {'linear layers':<40} {'generate s':>10}")
    for row in rows:
        layers = ", ".join(f"{n} {kind}" for kind, n in row["layers"].items())
        print(f"{row['mode']:<8} {layers:<40} {row['median_s']:>10.3f}")
    print(f"live / vllm: {rows[1]['median_s'] / rows[0]['median_s']:.2f}x")


if __name__ == "__main__":
    main()
