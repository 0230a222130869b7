#!/usr/bin/env bash
# Run the TRL adapter's vLLM tests (colocate mode, vLLM's CPU build) in .venv-vllm.
#
#   bash scripts/test_vllm.sh            # builds/refreshes the environment, then runs the module
#   SKIP_SETUP=1 bash scripts/test_vllm.sh   # quicker during development: reuse the environment as it is
#
# DATAFLEX_REQUIRE_VLLM=1 makes the module fail, not skip, when vLLM does not import.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
if [[ "${SKIP_SETUP:-0}" != "1" ]]; then
    bash "$ROOT/scripts/setup_vllm_env.sh"
fi
cd "$ROOT"
start=$(date +%s)
DATAFLEX_REQUIRE_VLLM=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1 \
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/integrations/trl/test_vllm_colocate.py tests/integrations/trl/test_async_vllm.py "$@"
echo "test_vllm: module finished in $(( $(date +%s) - start ))s"
