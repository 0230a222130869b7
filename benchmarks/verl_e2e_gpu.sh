#!/usr/bin/env bash
# The end-to-end run of scripts/verl_e2e.sh on a GPU machine: verl's own CUDA platform, NCCL, vLLM's
# CUDA build, no CPU settings. Same tiny model, data and test reward, same Hydra overrides, e.g.
#
#   bash benchmarks/verl_e2e_gpu.sh trainer.v1.trainer_mode=dataflex_sync +dataflex.strategy=difffilter
#
# Needs a Python environment with `verl[vllm]==0.9.1` (CUDA torch) and this repo installed
# (`pip install -e .`); set VERL_PYTHON to its interpreter (default: python3). Nothing is downloaded:
# the model is built by scripts/verl_e2e/make_assets.py. Environment: VERL_E2E_OUT (default
# runs/verl_e2e_gpu), VERL_E2E_STEPS (default 2), N_GPUS (default 1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${VERL_PYTHON:-python3}"
SUPPORT="$ROOT/scripts/verl_e2e"
OUT="${VERL_E2E_OUT:-$ROOT/runs/verl_e2e_gpu}"
ASSETS="${VERL_E2E_ASSETS:-$ROOT/runs/verl_e2e_assets_gpu}"
STEPS="${VERL_E2E_STEPS:-2}"
N_GPUS="${N_GPUS:-1}"

"$PY" -c "import torch; assert torch.cuda.is_available(), 'benchmarks/verl_e2e_gpu.sh needs a CUDA GPU'"
if [[ ! -f "$ASSETS/train.parquet" || ! -f "$ASSETS/model/config.json" ]]; then
    "$PY" "$SUPPORT/make_assets.py" "$ASSETS"
fi
mkdir -p "$OUT"
rm -f "$OUT/metrics.jsonl"
export VERL_FILE_LOGGER_PATH="$OUT/metrics.jsonl" HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
export PYTHONPATH="$SUPPORT${PYTHONPATH:+:$PYTHONPATH}"  # only for the optional loss_probe module
if [[ -n "${VERL_E2E_EXTRA_MODULES:-}" ]]; then export VERL_USE_EXTERNAL_MODULES="$VERL_E2E_EXTRA_MODULES"; fi

cd "$OUT"
start=$(date +%s)
"$PY" -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$ASSETS/train.parquet" data.val_files="$ASSETS/val.parquet" \
    data.train_batch_size=8 data.max_prompt_length=64 data.max_response_length=16 \
    data.dataloader_num_workers=0 data.seed=1 \
    actor_rollout_ref.model.path="$ASSETS/model" \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.optim.lr=1e-3 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 \
    reward.custom_reward_function.path="$SUPPORT/reward.py" \
    reward.custom_reward_function.name=compute_score \
    trainer.n_gpus_per_node="$N_GPUS" trainer.nnodes=1 \
    trainer.logger='[console,file]' trainer.project_name=dataflex_e2e trainer.experiment_name=gpu \
    trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=-1 \
    trainer.total_training_steps="$STEPS" trainer.resume_mode=disable \
    trainer.default_local_dir="$OUT/checkpoints" trainer.rollout_data_dir="$OUT/rollouts" \
    "$@"
echo "verl_e2e_gpu: $STEPS steps in $(( $(date +%s) - start ))s; metrics in $OUT/metrics.jsonl"
