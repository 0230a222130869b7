"""Check the package's CUDA path in one run: core tests on the device, TRL GRPO, the async adapter, bench_core.

    python benchmarks/gpu_check.py                          # CUDA: under 8 minutes on one GPU
    python benchmarks/gpu_check.py --device cpu --quick     # the CI run (tests/scripts/test_gpu_check.py)

scripts/gpu_check.sh is the entry point. Four parts, each in its own process (a CUDA error or a hang in
one part is that part's failure, and the others still run):

  core   tests/core's component tests with their tensors on the device (DATAFLEX_TEST_DEVICE,
         tests/core/conftest.py), including test_device_placement.py, which asserts every output's device;
  trl    TRL GRPO with the shipped testbed model on the device (bf16 on CUDA, fp32 on a CPU): the
         `baseline` strategy equals the stock trainer (same seed: same losses, same parameters), and
         every preset trains a few steps;
  async  TRL's AsyncGRPOTrainer with DataFlex's strategy and the in-process rollout worker, its engine
         (the model's `generate`) on the device;
  bench  benchmarks/bench_core.py --device DEVICE.

Prints one figures table (seconds and figures per part), writes it as gpu_check.json and
gpu_check.txt under --out (default: $OUT, else runs/gpu_check), and exits 1 when any part failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("core", "trl", "async", "bench")
FIGURES = "GPU_CHECK_FIGURES "  # a part's child process prints its figures on one line after this
CORE_TESTS = [
    "tests/core/test_device_placement.py",
    "tests/core/components/test_scorers.py",
    "tests/core/components/test_selectors.py",
    "tests/core/components/test_reweighters.py",
    "tests/core/rollout/test_groups.py",
    "tests/core/mixing/test_mixers.py",
    "tests/core/mixing/test_tracker.py",
    "tests/core/strategy/test_strategy.py",
    "tests/core/sampling/test_dynamic_sampling.py",
]
QUICK_CORE_TESTS = ["tests/core/test_device_placement.py", "tests/core/rollout/test_groups.py"]
# Seconds each part may take before it is stopped (CUDA run; doubled on a CPU): hang catchers, not speed limits,
# sized so that a run at load 10 uses a fraction of them. Together at most 9 minutes of the 10 a device call may run.
PART_TIMEOUTS = {"core": 120, "trl": 150, "async": 150, "bench": 120}  # async: 37 s on a CPU at load 5


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--quick", action="store_true", help="fewer core tests, smaller runs (the CPU run in CI)")
    parser.add_argument(
        "--out", default=None, help="folder for gpu_check.json/.txt (default: $OUT, else runs/gpu_check)"
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--part", choices=("trl", "async"), help=argparse.SUPPRESS)  # a part's child process
    return parser.parse_args(argv)


# ---------------------------------------------------------------- the parts run in child processes


def setup_torch(device: str):
    """Deterministic kernels on CUDA (so `baseline` can equal stock exactly), one thread on a CPU."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {device} but this torch ({torch.__version__}) sees no CUDA device")
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch.set_num_threads(1)
    return torch


def testbed(quick: bool):
    """The shipped testbed model's folder, its tokenizer and a small train set (prompt, answer, domain)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from dataflex_callbacks.recipes.testbed import load_testbed_model_path, testbed_dataset

    path = load_testbed_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    rows = testbed_dataset(seed=0, split="train", per_level=2 if quick else 4)
    return path, tokenizer, Dataset.from_list(rows)


def load_model(path: str, device: str):
    """The testbed model in the run's precision (bf16 on CUDA), eager attention (deterministic)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")


def device_settings(device: str) -> dict:
    cuda = device.startswith("cuda")
    return dict(use_cpu=not cuda, bf16=cuda, report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True)


def losses(trainer) -> list[float]:
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def check_on_device(trainer, device: str, label: str) -> None:
    import torch

    where = {p.device.type for p in trainer.model.parameters()}
    if where != {torch.device(device).type}:
        raise AssertionError(f"{label}: the model's parameters are on {sorted(where)}, not on {device}")


def run_trl(device: str, quick: bool, scratch: str) -> dict:
    """Stock GRPO vs `baseline` (exactly equal), then every preset for a few steps; figures per run."""
    torch = setup_torch(device)
    from trl import GRPOConfig, GRPOTrainer

    from dataflex_callbacks import build_strategy, list_presets
    from dataflex_callbacks.errors import ConfigError
    from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
    from dataflex_callbacks.integrations.trl.allocation import check_allocation
    from dataflex_callbacks.recipes.testbed import testbed_reward

    path, tokenizer, dataset = testbed(quick)
    steps = 2

    def train(strategy):
        began = time.perf_counter()
        args = GRPOConfig(
            output_dir=os.path.join(scratch, strategy or "stock"),
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=8,
            max_steps=steps,
            learning_rate=1e-3,
            seed=0,
            **device_settings(device),
        )
        kwargs = dict(
            model=load_model(path, device),
            reward_funcs=[testbed_reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        trainer = GRPOTrainer(**kwargs) if strategy is None else DataFlexGRPOTrainer(**kwargs, strategy=strategy)
        trainer.train()
        check_on_device(trainer, device, strategy or "stock")
        if trainer.state.global_step != steps:
            raise AssertionError(f"{strategy or 'stock'}: {trainer.state.global_step} steps, expected {steps}")
        return trainer, time.perf_counter() - began

    stock, stock_s = train(None)
    ours, ours_s = train("baseline")
    differences = [
        float((a.float() - b.float()).abs().max())
        for a, b in zip(stock.model.parameters(), ours.model.parameters(), strict=True)
    ]
    figures = {
        "dtype": str(next(stock.model.parameters()).dtype).replace("torch.", ""),
        "stock_s": round(stock_s, 2),
        "baseline_s": round(ours_s, 2),
        "stock_losses": losses(stock),
        "baseline_losses": losses(ours),
        "baseline_max_param_difference": max(differences),
        "presets_s": {},
        "refused": {},  # presets the TRL adapter refuses by design, in one line (none since adaptive runs in stages)
        "failed": [],
    }
    if losses(stock) != losses(ours) or max(differences) != 0.0:
        figures["failed"].append(
            f"baseline differs from stock: losses {losses(ours)} vs {losses(stock)}, "
            f"largest parameter difference {max(differences):.3g}"
        )
    del stock, ours
    for preset in list_presets():
        if preset == "baseline":
            continue
        strategy = build_strategy(preset)
        if strategy.allocation is not None:
            try:
                check_allocation(None, strategy)
            except ConfigError as error:
                figures["refused"][preset] = str(error)
                continue
        try:
            _, seconds = train(preset)
            figures["presets_s"][preset] = round(seconds, 2)
        except Exception as error:  # noqa: BLE001  every preset is tried; each failure is reported
            figures["failed"].append(f"{preset}: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    if device.startswith("cuda"):
        figures["peak_gpu_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return figures


def run_async(device: str, quick: bool, scratch: str) -> dict:
    """AsyncGRPOTrainer with the `diffband` strategy and the in-process worker, its engine on the device."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    setup_torch(device)
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from dataflex_callbacks.integrations.trl import DataFlexAsyncGRPOTrainer
    from dataflex_callbacks.integrations.trl.async_rollout import (
        EngineWeightTransfer,
        InProcessRolloutWorker,
        TransformersEngine,
        cpu_device_name,
        use_cpu_tree_attention,
    )
    from dataflex_callbacks.recipes.testbed import testbed_reward

    path, tokenizer, dataset = testbed(quick)
    steps, generations = 2, 4
    engine_model = load_model(path, device).to(device)
    engine = TransformersEngine(engine_model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=0)
    worker = InProcessRolloutWorker(
        engine, dataset, [testbed_reward], tokenizer, num_generations=generations, max_tokens=8, wave_groups=4
    )
    settings = dict(
        output_dir=scratch,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=generations,
        max_completion_length=8,
        max_steps=steps,
        learning_rate=1e-3,
        seed=0,
        token_budget=0,
        max_staleness=1,
        **device_settings(device),
    )
    if device.startswith("cuda"):
        settings["dtype"] = "bfloat16"  # the trainer's copy, as the engine's
    began = time.perf_counter()
    with cpu_device_name():  # a no-op where CUDA is available
        trainer = DataFlexAsyncGRPOTrainer(
            model=path,
            reward_funcs=[testbed_reward],
            args=AsyncGRPOConfig(**settings),
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_worker=worker,
            weight_transfer=EngineWeightTransfer(engine),
            strategy="diffband",
        )
    # TRL's own tree attention fetches a FlashAttention-3 kernel from the hub; the plain-torch one needs nothing.
    use_cpu_tree_attention()
    trainer.train()
    seconds = time.perf_counter() - began
    check_on_device(trainer, device, "async")
    if trainer.state.global_step != steps:
        raise AssertionError(f"async: {trainer.state.global_step} steps, expected {steps}")
    figures = {"seconds": round(seconds, 2), "steps": trainer.state.global_step, "losses": losses(trainer)}
    figures["engine_calls"] = engine.calls
    return figures


# ---------------------------------------------------------------- the driver


def child_env(device: str) -> dict:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    env["DATAFLEX_TEST_DEVICE"] = device
    if device.startswith("cuda"):
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    return env


def part_command(part: str, args) -> list[str]:
    if part == "core":
        tests = QUICK_CORE_TESTS if args.quick else CORE_TESTS
        return [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", *tests]
    if part == "bench":
        size = ["--n", "512", "--length", "64", "--repeat", "2"] if args.quick else []
        return [sys.executable, os.path.join(ROOT, "benchmarks", "bench_core.py"), "--device", args.device, *size]
    command = [sys.executable, os.path.abspath(__file__), "--part", part, "--device", args.device, "--out", args.out]
    return command + (["--quick"] if args.quick else [])


def figures_of(part: str, output: str) -> dict:
    """What one part's output says: its FIGURES line (trl, async), pytest's counts (core), key rows (bench)."""
    lines = output.splitlines()
    if part in ("trl", "async"):
        found = [line[len(FIGURES) :] for line in lines if line.startswith(FIGURES)]
        return json.loads(found[-1]) if found else {}
    if part == "core":
        summary = [line for line in lines if " passed" in line or " failed" in line or " error" in line]
        return {"pytest": summary[-1].strip("= ")} if summary else {}
    rows = {}
    for line in lines:  # bench_core's table: the label in 44 columns, then the core's milliseconds
        if line.startswith(("scorer group_solve_rate", "apply composite difffilter+softmax", "apply preset")):
            rows[line[:44].strip()] = float(line[44:].split()[0])
        elif line.startswith("targets"):
            missed = line.split("MISSED: ", 1)[1].split("; ") if "MISSED: " in line else []
            rows["targets_missed"] = len(missed)  # the misses are in bench.log
    return rows


def run_part(part: str, args) -> dict:
    limit = PART_TIMEOUTS[part] * (2 if args.device == "cpu" else 1)
    began = time.perf_counter()
    try:
        done = subprocess.run(
            part_command(part, args),
            cwd=ROOT,
            env=child_env(args.device),
            capture_output=True,
            text=True,
            timeout=limit,
        )
        output, status = done.stdout + done.stderr, ("passed" if done.returncode == 0 else f"exit {done.returncode}")
    except subprocess.TimeoutExpired as stopped:
        output = "".join(
            text.decode(errors="replace") if isinstance(text, bytes) else text
            for text in (stopped.stdout or "", stopped.stderr or "")
        )
        status = f"stopped after {limit}s"
    seconds = time.perf_counter() - began
    figures = figures_of(part, output)
    if figures.get("failed"):
        status = "failed"
    with open(os.path.join(args.out, f"{part}.log"), "w", encoding="utf-8") as log:
        log.write(output)
    return {"part": part, "status": status, "seconds": round(seconds, 1), "figures": figures, "tail": output[-3000:]}


def describe_device(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return (
            f"{torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}, CUDA {torch.version.cuda}"
        )
    return f"{device}, torch {torch.__version__}, {os.cpu_count()} CPUs"


def summary(results: list[dict], device: str, quick: bool, total: float) -> str:
    lines = [
        f"gpu_check on {describe_device(device)}{' (quick)' if quick else ''}: {total:.0f}s",
        f"{'part':6s} {'status':22s} {'seconds':>8s}  figures",
    ]
    for result in results:
        figures = dict(result["figures"])
        for noisy in ("stock_losses", "baseline_losses", "losses"):
            figures.pop(noisy, None)
        if result["part"] == "bench":  # the headline rows; every row is in gpu_check.json and bench.log
            figures = {k: f"{v} ms" for k, v in figures.items() if not k.startswith("apply preset")}
            figures["targets_missed"] = result["figures"].get("targets_missed")
        shown = "; ".join(f"{k}={v}" for k, v in figures.items() if k != "failed")
        lines.append(f"{result['part']:6s} {result['status']:22s} {result['seconds']:8.1f}  {shown}")
        for failure in result["figures"].get("failed", []):
            lines.append(f"       FAILED {failure}")
    failed = [r["part"] for r in results if r["status"] != "passed"]
    lines.append("gpu_check: " + ("every part passed" if not failed else f"FAILED: {', '.join(failed)}"))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out = os.path.abspath(args.out or os.environ.get("OUT") or os.path.join(ROOT, "runs", "gpu_check"))
    os.makedirs(args.out, exist_ok=True)
    if args.part:  # a child process: run one part, print its figures
        run = run_trl if args.part == "trl" else run_async
        with tempfile.TemporaryDirectory(prefix=f"gpu_check_{args.part}_") as scratch:  # the trainers' output_dir
            print(FIGURES + json.dumps(run(args.device, args.quick, scratch)), flush=True)
        return 0
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"gpu_check: unknown part(s) {unknown}; choose from {','.join(PARTS)}", file=sys.stderr)
        return 2
    began = time.perf_counter()
    results = []
    for part in parts:
        print(f"== gpu_check: {part} on {args.device}", flush=True)
        result = run_part(part, args)
        if result["status"] != "passed":
            print(result["tail"], flush=True)
        print(f"== gpu_check: {part} {result['status']} in {result['seconds']}s", flush=True)
        results.append(result)
    text = summary(results, args.device, args.quick, time.perf_counter() - began)
    print(text)
    record = {"device": args.device, "quick": args.quick, "results": [{**r, "tail": None} for r in results]}
    with open(os.path.join(args.out, "gpu_check.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    with open(os.path.join(args.out, "gpu_check.txt"), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return 0 if all(r["status"] == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
