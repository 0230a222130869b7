# What the scripts that build and use this repo's extra virtual environments share; sourced, not run:
#
#   set -euo pipefail
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Sets ROOT (this checkout), PYTHON (the interpreter that creates venvs), the versions pinned in more
# than one venv and `start` (the time it was sourced); the venv functions act on the virtual
# environment $VENV, which the calling script names.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
# The CPU wheel: every venv installs it FIRST so that no later requirement pulls a CUDA build.
TORCH_VERSION="2.13.0"
VERL_VERSION="0.9.1"  # .venv-verl: scripts/setup_verl_env.sh, then setup_verl_e2e_env.sh
start=$(date +%s)

# Create the virtual environment $VENV with $PYTHON unless it exists.
make_venv() {
    if [[ ! -x "$VENV/bin/python" ]]; then
        "$PYTHON" -m venv "$VENV"
    fi
}

# Run $VENV's pip without its version check.
venv_pip() {
    "$VENV/bin/python" -m pip --disable-pip-version-check "$@"
}

# pip install into $VENV, dropping the per-package notes about this machine's local index mirrors.
pip_install() {
    venv_pip install "$@" 2>&1 | { grep -v "^WARNING: Location 'file://.*' is ignored" || true; }
}

# pip install this checkout (editable) into $VENV, one such install at a time across every script
# (scripts/test.sh builds several environments at once, and editable installs share the checkout's
# build files): pip_install_checkout [PIP ARGS...] TARGET, e.g. pip_install_checkout --no-deps -e "$ROOT".
pip_install_checkout() {
    flock "$ROOT/.editable-install.lock" "$VENV/bin/python" -m pip --disable-pip-version-check install "$@" 2>&1 \
        | { grep -v "^WARNING: Location 'file://.*' is ignored" || true; }
}

# has_version DIST VERSION: is exactly DIST==VERSION installed in $VENV?
has_version() {
    (cd / && "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')") 2>/dev/null
}

# imports_checkout MODULE: does $VENV import MODULE from this checkout? Asked from / so that the
# checkout's own folder on sys.path (and the egg-info another environment's editable install leaves
# there) cannot answer for the venv.
imports_checkout() {
    (cd / && "$VENV/bin/python" -c "import $1 as v, sys
sys.exit(not v.__file__.startswith('$ROOT/'))") 2>/dev/null
}

# has_entry_point GROUP NAME: does $VENV's metadata register the entry point NAME in GROUP?
has_entry_point() {
    (cd / && "$VENV/bin/python" -c "import importlib.metadata as m, sys
sys.exit(not any(e.name == '$2' for e in m.entry_points(group='$1')))") 2>/dev/null
}

# say_ready NAME: print how long since $start the script took and where its venv is.
say_ready() {
    echo "$1: ready in $(( $(date +%s) - start ))s at $VENV"
}

# Export what the verl tests run under: a missing verl is an error, not a skip; nothing is downloaded.
export_verl_test_env() {
    export DATAFLEX_REQUIRE_VERL=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 VERL_LOGGING_LEVEL=WARNING
    export RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
}

# verl's trainer end to end (scripts/verl_e2e.sh on the CPU, benchmarks/verl_e2e_gpu.sh on a GPU).
# Both set PY (the interpreter) and call verl_e2e_paths first.

# verl_e2e_paths OUT ASSETS: set SUPPORT (scripts/verl_e2e), OUT and ASSETS (these defaults, under
# $ROOT, unless VERL_E2E_OUT / VERL_E2E_ASSETS say otherwise) and STEPS (VERL_E2E_STEPS, default 2).
verl_e2e_paths() {
    SUPPORT="$ROOT/scripts/verl_e2e"
    OUT="${VERL_E2E_OUT:-$ROOT/$1}"
    ASSETS="${VERL_E2E_ASSETS:-$ROOT/$2}"
    STEPS="${VERL_E2E_STEPS:-2}"
}

# Build the tiny model and data into $ASSETS unless they are there, start $OUT/metrics.jsonl afresh and
# export what both runs share (verl's file logger, no hub, the support modules on PYTHONPATH).
prepare_verl_e2e() {
    if [[ ! -f "$ASSETS/train.parquet" || ! -f "$ASSETS/model/config.json" ]]; then
        "$PY" "$SUPPORT/make_assets.py" "$ASSETS"
    fi
    mkdir -p "$OUT"
    rm -f "$OUT/metrics.jsonl"
    export PYTHONPATH="$SUPPORT${PYTHONPATH:+:$PYTHONPATH}"
    export VERL_FILE_LOGGER_PATH="$OUT/metrics.jsonl" HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
}

# Set the array VERL_E2E_TASK to the Hydra overrides both runs share: GRPO on the tiny model and data,
# the test reward, metrics to the console and $OUT/metrics.jsonl, $STEPS steps, no validation or
# checkpoints. Each run adds its batch sizes and device settings.
verl_e2e_task() {
    VERL_E2E_TASK=(
        algorithm.adv_estimator=grpo
        data.train_files="$ASSETS/train.parquet" data.val_files="$ASSETS/val.parquet"
        data.max_prompt_length=64 data.max_response_length=16
        data.dataloader_num_workers=0 data.seed=1
        actor_rollout_ref.model.path="$ASSETS/model"
        actor_rollout_ref.actor.strategy=fsdp2
        actor_rollout_ref.actor.optim.lr=1e-3
        actor_rollout_ref.actor.use_kl_loss=False
        actor_rollout_ref.rollout.name=vllm
        actor_rollout_ref.rollout.n=4
        actor_rollout_ref.rollout.tensor_model_parallel_size=1
        reward.custom_reward_function.path="$SUPPORT/reward.py"
        reward.custom_reward_function.name=compute_score
        trainer.nnodes=1
        trainer.logger='[console,file]' trainer.project_name=dataflex_e2e
        trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=-1
        trainer.total_training_steps="$STEPS" trainer.resume_mode=disable
        trainer.default_local_dir="$OUT/checkpoints"
    )
}
