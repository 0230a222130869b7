#!/usr/bin/env bash
# Set up .venv-verl (verl 0.9.1, CPU torch) and run the verl adapter tests in it.
# The tests must not skip here: DATAFLEX_REQUIRE_VERL=1 turns a missing verl into an error.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
# SKIP_SETUP=1: the environment is known to be complete (scripts/test.sh built it in the background).
[[ "${SKIP_SETUP:-0}" == "1" ]] || bash "$ROOT/scripts/setup_verl_env.sh"
cd "$ROOT"
export_verl_test_env
export OMP_NUM_THREADS=1
# The end-to-end runs of verl's trainer have their own script: scripts/test_verl_e2e.sh.
"$VENV/bin/python" -m pytest tests/integrations/verl --ignore=tests/integrations/verl/e2e -q -rs -W ignore::DeprecationWarning -W ignore::UserWarning "$@"
