#!/usr/bin/env bash
# Run verl's real trainer (verl.trainer.main_ppo, GRPO, FSDP2 actor, vLLM rollout) on a tiny model, on the CPU.
#
#   bash scripts/verl_e2e.sh [HYDRA_OVERRIDES...]
#   bash scripts/verl_e2e.sh trainer.v1.trainer_mode=dataflex_sync +dataflex.strategy=difffilter
#
# Extra arguments are passed to main_ppo as Hydra overrides, after the CPU settings below (a later
# override wins). Needs .venv-verl with vLLM's CPU build: scripts/setup_verl_e2e_env.sh (run here
# if vllm is missing). Environment:
#   VERL_E2E_OUT      output folder (metrics.jsonl, checkpoints); default runs/verl_e2e
#   VERL_E2E_ASSETS   tiny model + parquet data, built once; default runs/verl_e2e_assets
#   VERL_E2E_STEPS    training steps (default 2)
#   VERL_E2E_EXTRA_MODULES  more modules of scripts/verl_e2e for verl to import (e.g. loss_probe)
# Metrics of every step go to $VERL_E2E_OUT/metrics.jsonl (verl's file logger).
# Why each CPU setting is there: docs/verl.md, "End to end on a CPU".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
PY="$VENV/bin/python"
SUPPORT="$ROOT/scripts/verl_e2e"
OUT="${VERL_E2E_OUT:-$ROOT/runs/verl_e2e}"
ASSETS="${VERL_E2E_ASSETS:-$ROOT/runs/verl_e2e_assets}"
STEPS="${VERL_E2E_STEPS:-2}"

if ! "$PY" -c "import importlib.metadata as m; assert m.version('vllm').endswith('+cpu')" 2>/dev/null; then
    bash "$ROOT/scripts/setup_verl_e2e_env.sh"
fi
if [[ ! -f "$ASSETS/train.parquet" || ! -f "$ASSETS/model/config.json" ]]; then
    "$PY" "$SUPPORT/make_assets.py" "$ASSETS"
fi
mkdir -p "$OUT"
rm -f "$OUT/metrics.jsonl"

# The CPU platform (scripts/verl_e2e/cpu_platform.py), imported by verl in the driver and every
# Ray worker; the FSDP engine is registered for "cuda" only, hence VERL_ENGINE_DEVICE.
export PYTHONPATH="$SUPPORT${PYTHONPATH:+:$PYTHONPATH}"
export VERL_USE_EXTERNAL_MODULES="cpu_platform${VERL_E2E_EXTRA_MODULES:+,$VERL_E2E_EXTRA_MODULES}" VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda
export VERL_FILE_LOGGER_PATH="$OUT/metrics.jsonl"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
export RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 VERL_LOGGING_LEVEL="${VERL_LOGGING_LEVEL:-WARNING}"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

cd "$OUT"
exec "$PY" -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$ASSETS/train.parquet" data.val_files="$ASSETS/val.parquet" \
    data.train_batch_size=4 data.max_prompt_length=64 data.max_response_length=16 \
    data.dataloader_num_workers=0 data.seed=1 \
    actor_rollout_ref.model.path="$ASSETS/model" \
    actor_rollout_ref.model.use_remove_padding=False \
    actor_rollout_ref.model.enable_gradient_checkpointing=False \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.use_torch_compile=False \
    actor_rollout_ref.actor.optim.lr=1e-3 \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.enforce_eager=True \
    actor_rollout_ref.rollout.free_cache_engine=False \
    +actor_rollout_ref.rollout.enable_sleep_mode=False \
    actor_rollout_ref.rollout.agent.num_workers=1 \
    reward.num_workers=1 \
    reward.custom_reward_function.path="$SUPPORT/reward.py" \
    reward.custom_reward_function.name=compute_score \
    transfer_queue.backend.SimpleStorage.num_data_storage_units=1 \
    trainer.device=cpu trainer.n_gpus_per_node=1 trainer.nnodes=1 \
    trainer.logger='[console,file]' trainer.project_name=dataflex_e2e trainer.experiment_name=cpu \
    trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=-1 \
    trainer.total_training_steps="$STEPS" trainer.resume_mode=disable \
    trainer.default_local_dir="$OUT/checkpoints" \
    +ray_kwargs.ray_init.num_gpus=1 ray_kwargs.ray_init.num_cpus=16 \
    "$@"
