#!/usr/bin/env bash
# The end-to-end run of scripts/verl_e2e.sh on a GPU machine: verl's own CUDA platform, NCCL, vLLM's
# CUDA build, no CPU settings. Same tiny model, data and test reward, same Hydra overrides, e.g.
#
#   bash benchmarks/verl_e2e_gpu.sh trainer.v1.trainer_mode=dataflex_sync +dataflex.strategy=difffilter
#   N_GPUS=2 bash benchmarks/verl_e2e_gpu.sh trainer.v1.trainer_mode=dataflex_separate_async \
#       actor_rollout_ref.rollout.checkpoint_engine.backend=nccl actor_rollout_ref.rollout.nnodes=1 \
#       actor_rollout_ref.rollout.n_gpus_per_node=1 +dataflex.strategy=difffilter   # a standalone rollout GPU
#
# Needs a Python environment with `verl[vllm]==0.9.1` (CUDA torch) and this repo installed
# (`pip install -e .`); set VERL_PYTHON to its interpreter (default: python3). Nothing is downloaded:
# the model is built by scripts/verl_e2e/make_assets.py. Environment: VERL_E2E_OUT (default
# runs/verl_e2e_gpu), VERL_E2E_STEPS (default 2), N_GPUS (default 1).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
PY="${VERL_PYTHON:-python3}"
verl_e2e_paths runs/verl_e2e_gpu runs/verl_e2e_assets_gpu
N_GPUS="${N_GPUS:-1}"

"$PY" -c "import torch; assert torch.cuda.is_available(), 'benchmarks/verl_e2e_gpu.sh needs a CUDA GPU'"
prepare_verl_e2e  # PYTHONPATH: only for the optional loss_probe module
if [[ -n "${VERL_E2E_EXTRA_MODULES:-}" ]]; then export VERL_USE_EXTERNAL_MODULES="$VERL_E2E_EXTRA_MODULES"; fi

verl_e2e_task
cd "$OUT"
start=$(date +%s)
"$PY" -m verl.trainer.main_ppo "${VERL_E2E_TASK[@]}" \
    data.train_batch_size=8 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
    trainer.n_gpus_per_node="$N_GPUS" trainer.experiment_name=gpu \
    trainer.rollout_data_dir="$OUT/rollouts" \
    "$@"
echo "verl_e2e_gpu: $STEPS steps in $(( $(date +%s) - start ))s; metrics in $OUT/metrics.jsonl"
