#!/usr/bin/env bash
# Check the CUDA path in one run (at most 8 minutes on one GPU): the core's component tests with CUDA
# tensors, TRL GRPO with the testbed model in bf16 (baseline equals stock, every preset trains or is refused by
# the TRL adapter in one line, as `adaptive` is), the async
# adapter with its in-process worker, and benchmarks/bench_core.py. CI runs it on a CPU so it cannot rot.
#
#   bash scripts/gpu_check.sh                        # --device cuda
#   bash scripts/gpu_check.sh --device cpu --quick   # the CI run (tests/scripts/test_gpu_check.py), about 1-2 min
#   bash scripts/gpu_check.sh --parts trl,async      # some of: core, trl, async, bench
#
# Prints a figures table (seconds per part) and writes it, with each part's log, under --out
# (default: $OUT, else runs/gpu_check). Exits 1 when any part failed. See docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$@"
