#!/usr/bin/env bash
# Create (or refresh) .venv-verl: verl 0.9.1 + its own transformers + this repo, CPU only.
#
# verl pins transformers<5.11, which conflicts with the main environment, so the verl adapter
# is tested in its own virtual environment. Idempotent: re-running only installs what is missing.
# torch is installed FIRST from the CPU wheel so that no requirement later pulls a CUDA build.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
# verl 0.9.1 requires transformers>=5.5.3,<5.11 (and !=5.6.0).
TRANSFORMERS_SPEC="transformers>=5.5.3,<5.11,!=5.6.0"

make_venv

# A venv that already holds every requirement skips pip's resolver (minutes on a busy machine).
installed() {
    "$VENV/bin/python" - "$TORCH_VERSION" "$VERL_VERSION" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
torch_version, verl_version = sys.argv[1:]
assert m.version("torch") == torch_version + "+cpu" and m.version("verl") == verl_version
for dist in ("transformers", "TransferQueue", "pyzmq", "msgspec", "cachetools", "fastapi", "uvicorn", "numpy",
             "pyyaml", "torchmetrics", "tqdm", "pytest", "hypothesis", "math-verify"):
    m.version(dist)
PY
}
if ! installed; then
    pip_install -q "torch==$TORCH_VERSION"
    # TransferQueue (the v1 trainer's data plane) is a verl-core extra; we install it directly rather
    # than verl[verl-core], which would also pull fastapi, torchcodec, nvtx, qwen_vl_utils ...
    pip_install -q "torch==$TORCH_VERSION" "verl==$VERL_VERSION" "$TRANSFORMERS_SPEC" \
        "TransferQueue>=0.1.10" pyzmq msgspec cachetools fastapi uvicorn
    pip_install -q numpy pyyaml torchmetrics tqdm "pytest>=8" "hypothesis>=6.100" "math-verify>=0.9"
fi
# This checkout, editable; skipped when the venv already imports the package, adapters included, from it,
# and has its current entry points (the vLLM plugin came later than some venvs).
if ! imports_checkout dataflex_callbacks.integrations.verl || ! has_entry_point vllm.general_plugins dataflex_live_weights; then
    pip_install_checkout -q --no-deps -e "$ROOT"
fi

cd /
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
eps = [ep.value for ep in md.entry_points(group="verl.plugins")]
assert "dataflex_callbacks.integrations.verl.plugin:register" in eps, eps
import torch, transformers, verl
print(f"verl {verl.__version__}, torch {torch.__version__}, transformers {transformers.__version__}; "
      f"verl.plugins entry points: {eps}")
PY
say_ready setup_verl_env
