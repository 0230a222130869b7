#!/usr/bin/env bash
# The project's test command (the README's, and what CI runs): installs what it needs, then tests.
#
# torch goes first, pinned to the CPU build, so that no later requirement pulls a CUDA build.
# The verl adapter is tested in its own virtual environment (verl pins an older transformers).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

PY="${PYTHON:-python3}"
"$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0"
"$PY" -m pip install -q --disable-pip-version-check -e ".[trl,lightning,dev]"

"$PY" -m pytest -q -p no:cacheprovider tests --ignore=tests/integrations/verl "$@"

if [[ "${SKIP_VERL:-0}" != "1" ]]; then
    bash scripts/test_verl.sh
fi
