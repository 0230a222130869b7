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
#   VERL_E2E_EXTRA_MODULES  more modules of scripts/verl_e2e for verl to import (e.g. loss_probe,
#                     force_repack)
#   VERL_E2E_GRACE    seconds the run may go on after a vLLM process died (default 20; supervise.py)
# Metrics of every step go to $VERL_E2E_OUT/metrics.jsonl (verl's file logger).
# Why each CPU setting is there: docs/verl.md, "End to end on a CPU".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
PY="$VENV/bin/python"
verl_e2e_paths runs/verl_e2e runs/verl_e2e_assets

if ! "$PY" -c "import importlib.metadata as m; assert m.version('vllm').endswith('+cpu')" 2>/dev/null; then
    bash "$ROOT/scripts/setup_verl_e2e_env.sh"
fi
prepare_verl_e2e

# The CPU platform (scripts/verl_e2e/cpu_platform.py), imported by verl in the driver and every
# Ray worker; the FSDP engine is registered for "cuda" only, hence VERL_ENGINE_DEVICE.
export VERL_USE_EXTERNAL_MODULES="cpu_platform${VERL_E2E_EXTRA_MODULES:+,$VERL_E2E_EXTRA_MODULES}" VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda
export HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
export RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 VERL_LOGGING_LEVEL="${VERL_LOGGING_LEVEL:-WARNING}"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# vLLM-CPU repacks linear weights on AVX-512/AMX CPUs, and verl's weight sync then fails: every vLLM
# process keeps live weights instead (dataflex_callbacks/recipes/vllm_cpu.py, a vLLM plugin).
export DATAFLEX_VLLM_LIVE_WEIGHTS="${DATAFLEX_VLLM_LIVE_WEIGHTS:-1}"

verl_e2e_task
cd "$OUT"
# supervise.py ends the run soon after a vLLM process dies, instead of letting the driver wait forever.
exec "$PY" "$SUPPORT/supervise.py" --grace "${VERL_E2E_GRACE:-20}" -- \
    "$PY" -m verl.trainer.main_ppo "${VERL_E2E_TASK[@]}" \
    data.train_batch_size=4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.model.use_remove_padding=False \
    actor_rollout_ref.model.enable_gradient_checkpointing=False \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.actor.use_torch_compile=False \
    actor_rollout_ref.rollout.enforce_eager=True \
    actor_rollout_ref.rollout.free_cache_engine=False \
    +actor_rollout_ref.rollout.enable_sleep_mode=False \
    actor_rollout_ref.rollout.agent.num_workers=1 \
    reward.num_workers=1 \
    transfer_queue.backend.SimpleStorage.num_data_storage_units=1 \
    trainer.device=cpu trainer.n_gpus_per_node=1 trainer.experiment_name=cpu \
    +ray_kwargs.ray_init.num_gpus=1 ray_kwargs.ray_init.num_cpus=16 +ray_kwargs.ray_init.include_dashboard=False \
    "$@"
