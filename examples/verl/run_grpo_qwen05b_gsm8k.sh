#!/usr/bin/env bash
# GRPO + difffilter on GSM8K with Qwen2.5-0.5B-Instruct in verl 0.9.1 (multi-GPU; not run in CI).
#
# Needs: a GPU machine with verl's rollout backend (e.g. pip install "verl[vllm]==0.9.1"),
# this package installed in the same environment (pip install -e . in a clone, or its wheel: it is not on
# PyPI; installing it registers the verl plugin), and GSM8K in verl's parquet layout:
#   python examples/data_preprocess/gsm8k.py --local_save_dir data/gsm8k   (from verl's repository)
# Usage: DATA_DIR=data/gsm8k N_GPUS=4 bash examples/verl/run_grpo_qwen05b_gsm8k.sh [hydra overrides...]
# Several nodes: start a Ray cluster first (docs/verl.md, "Several nodes"), then on the head node
#   DATA_DIR=/shared/data/gsm8k N_GPUS=8 NNODES=2 bash examples/verl/run_grpo_qwen05b_gsm8k.sh \
#       trainer.default_local_dir=/shared/checkpoints/gsm8k_difffilter
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA_DIR="${DATA_DIR:-data/gsm8k}" N_GPUS="${N_GPUS:-4}" NNODES="${NNODES:-1}"
python - <<'PY'
from verl.trainer.ppo.v1 import get_trainer_cls
get_trainer_cls("dataflex_sync")  # fails early if the plugin is not installed in this environment
PY
# Literal overrides (ints, absolute paths), resolved here once: verl re-resolves its config on a
# Ray actor that may sit on another node, where this shell's environment is not set.
python -m verl.trainer.main_ppo --config-path="$HERE" --config-name=grpo_qwen05b_gsm8k_difffilter \
    data.train_files="$(realpath -m "$DATA_DIR/train.parquet")" \
    data.val_files="$(realpath -m "$DATA_DIR/test.parquet")" \
    trainer.n_gpus_per_node="$N_GPUS" trainer.nnodes="$NNODES" "$@"
