#!/usr/bin/env bash
# verl's real trainer end to end on the CPU: set up .venv-verl with vLLM's CPU build, then run
# tests/integrations/verl/e2e (several main_ppo runs, one at a time; about 8-13 GB each).
# The tests must not skip here: DATAFLEX_REQUIRE_VERL=1 turns a missing verl into an error.
# SKIP_SETUP=1: the environment is known to be complete (scripts/test.sh built it in the background).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
[[ "${SKIP_SETUP:-0}" == "1" ]] || bash "$ROOT/scripts/setup_verl_e2e_env.sh"
cd "$ROOT"
export_verl_test_env
"$VENV/bin/python" -m pytest tests/integrations/verl/e2e -q -rs -s -p no:cacheprovider \
    -W ignore::DeprecationWarning -W ignore::UserWarning "$@"
