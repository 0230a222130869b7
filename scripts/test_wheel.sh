#!/usr/bin/env bash
# Build the wheel from this checkout, install it with its [trl] extra into a clean virtual environment
# (.venv-wheel, or WHEEL_VENV) and run examples/trl_grpo.py, examples/trl_async_grpo.py and `dataflex list`
# from a folder outside the checkout, so that only the installed wheel can be imported: what a user who
# installs the wheel gets. The venv has no [ray] extra, whose dependencies would hide one [trl] lacks
# (TRL's AsyncGRPOTrainer needs `requests` when it is built).
#
#   bash scripts/test_wheel.sh                 # build the venv if needed, build and install the wheel, run
#   SETUP_ONLY=1 bash scripts/test_wheel.sh    # the venv and its dependencies only (scripts/test.sh runs
#                                              # this in the background while the main suite runs)
#
# The venv is clean (no packages of another environment): torch 2.13.0 CPU first, then the wheel's
# dependencies. A venv that already holds that torch is reused; the wheel itself is rebuilt and
# reinstalled on every run, from a copy of the checkout's files (tracked and untracked, not ignored), so
# setuptools' build/ folder and egg-info never land in the checkout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${WHEEL_VENV:-$ROOT/.venv-wheel}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The wheel, built from a copy of what git would commit (plus new files not yet added).
build_wheel() {
    mkdir -p "$work/source" "$work/dist"
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' path; do
        [[ -e "$path" ]] && printf '%s\0' "$path"
    done | xargs -0 cp --parents -t "$work/source")
    "$VENV/bin/python" -m build --wheel --outdir "$work/dist" "$work/source" > "$work/build.log" 2>&1 || {
        tail -30 "$work/build.log"; exit 1; }
    WHEEL="$(ls "$work"/dist/dataflex_callbacks-*.whl)"
}

make_venv
if ! has_version torch "$TORCH_VERSION"; then
    pip_install -q "torch==$TORCH_VERSION"
fi
if ! (cd / && "$VENV/bin/python" -c "import build") 2>/dev/null; then
    pip_install -q build
fi
build_wheel
# The wheel's dependencies (torch pinned, so the CPU build stays), then the wheel itself afresh.
pip_install -q "torch==$TORCH_VERSION" "${WHEEL}[trl]"
pip_install -q --force-reinstall --no-deps "$WHEEL"
say_ready test_wheel
[[ "${SETUP_ONLY:-0}" == "1" ]] && exit 0

export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
run_dir="$work/run"
mkdir -p "$run_dir"
cp "$ROOT/examples/trl_grpo.py" "$ROOT/examples/trl_async_grpo.py" "$run_dir/"
cd "$run_dir"
"$VENV/bin/python" - <<PY
import importlib.util
import dataflex_callbacks, dataflex_callbacks.integrations.trl as trl_adapter
for module in (dataflex_callbacks, trl_adapter):
    assert module.__file__.startswith("$VENV/"), f"{module.__name__} imported from {module.__file__}, not the wheel"
assert importlib.util.find_spec("ray") is None, "ray is installed: the venv must hold [trl] only"
print("test_wheel: dataflex_callbacks imported from", dataflex_callbacks.__file__)
PY
"$VENV/bin/dataflex" list > list.txt
grep -q "diffband" list.txt || { echo "test_wheel: 'dataflex list' does not list diffband"; cat list.txt; exit 1; }
"$VENV/bin/python" trl_grpo.py --steps 3 --output-dir "$run_dir/out" | tee example.txt
grep -q "^dataflex: strategy 'diffband'" example.txt
grep -q "^trained 3 steps" example.txt
"$VENV/bin/python" trl_async_grpo.py --steps 3 --output-dir "$run_dir/async" | tee async_example.txt
grep -q "^dataflex: strategy 'diffband'" async_example.txt
grep -q "^trained 3 steps with strategy 'diffband' asynchronously" async_example.txt
echo "test_wheel: the wheel installs in a clean venv and runs examples/trl_grpo.py and trl_async_grpo.py" \
    "in $(( $(date +%s) - start ))s"
