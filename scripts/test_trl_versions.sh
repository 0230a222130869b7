#!/usr/bin/env bash
# Run the TRL adapter's equivalence, resume, refusal and two-process tests on the OLDEST TRL that
# pyproject.toml admits (the floor, dataflex_callbacks/integrations/trl/compat.py TRL_FLOOR). The main environment
# (scripts/test.sh) runs them on the newest TRL release.
#
# The floor venv (path from TRL_FLOOR_VENV, default .venv-trl-floor) is layered on the environment of
# $PYTHON (the one scripts/test.sh installed into, a virtual environment or not): a .pth file appends
# that environment's site-packages, so torch 2.13.0 CPU, accelerate, datasets, peft and pytest come
# from there, and only TRL, the transformers of its release month (and what that transformers pins)
# are installed into the venv, ahead of them on sys.path. (--system-site-packages would not do:
# inside a virtual environment it reaches the base interpreter's packages, not the environment's.)
# Building takes 179 s on this 2-core machine under load (no torch copy); a venv that holds the floor
# TRL and imports this checkout is reused.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${TRL_FLOOR_VENV:-$ROOT/.venv-trl-floor}"
TRL_FLOOR="$(sed -n 's/^TRL_FLOOR = "\(.*\)"$/\1/p' "$ROOT/dataflex_callbacks/integrations/trl/compat.py")"  # = pyproject's trl>=
TRANSFORMERS_VERSION="5.14.1"  # the newest transformers when TRL 1.9.0 was released (2026-07-21)

# Reused when it holds the floor TRL and imports this checkout's package; otherwise (re)installed.
if ! { has_version trl "$TRL_FLOOR" && imports_checkout dataflex_callbacks.integrations.trl; }; then
    if [[ ! -x "$VENV/bin/python" ]]; then
        make_venv
        inner="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
        "$PYTHON" -c 'import sysconfig; print(*sorted({sysconfig.get_path(k) for k in ("purelib", "platlib")}), sep="\n")' \
            > "$inner/zz_dataflex_outer_env.pth"
    fi
    pip_install -q "torch==$TORCH_VERSION"
    # TRL 1.9 imports requests (its vLLM client) without declaring it.
    pip_install -q "torch==$TORCH_VERSION" "trl==$TRL_FLOOR" "transformers==$TRANSFORMERS_VERSION" requests
    pip_install_checkout -q --no-deps -e "$ROOT"
fi
"$VENV/bin/python" - <<PY
import torch, transformers, trl
assert trl.__version__ == "$TRL_FLOOR" and torch.__version__.startswith("$TORCH_VERSION"), (trl.__version__, torch.__version__)
print(f"test_trl_versions: trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__} "
      f"ready in $(( $(date +%s) - start ))s at $VENV")
PY
[[ "${SETUP_ONLY:-0}" == "1" ]] && exit 0  # scripts/test.sh builds the venv while the main suite runs

cd "$ROOT"
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
T=tests/integrations/trl
# RLOO's two-process test is left to the main run: it exercises the callback's distributed code that
# test_distributed.py runs here for GRPO, and costs as much as two of them (the two-process tests are
# most of this run's time).
"$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    "$T/test_compat.py" "$T/test_loss_equivalence.py" "$T/test_rloo.py" "$T/test_distributed.py" \
    "$T/test_resume_safe_loading.py" "$T/test_trainer.py" \
    --deselect "$T/test_rloo.py::test_two_ranks_make_identical_decisions_without_hanging" "$@"
echo "test_trl_versions: TRL $TRL_FLOOR tests done in $(( $(date +%s) - start ))s"
