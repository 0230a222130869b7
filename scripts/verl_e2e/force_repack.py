"""Make vLLM's CPU dispatch repack linear layers in every process of a run, whatever the CPU: for the tests.

Loaded like ``cpu_platform`` (``VERL_E2E_EXTRA_MODULES=force_repack``: verl imports it on ``import
verl``). vLLM's worker processes import verl when they load verl's worker extension, before they load
the model, so there `force_repacking_dispatch` (``dataflex_callbacks.recipes.vllm_cpu``) makes vLLM's
own dispatch pack and drop the linear weights as it does on AVX-512 and AMX CPUs. The run's live-weight
fix (``DATAFLEX_VLLM_LIVE_WEIGHTS=1``, set by scripts/verl_e2e.sh) replaces that dispatch, so a run
passes with it and fails its first weight sync without it, on any CPU.

Processes that have not imported vLLM (the driver, the trainer's workers) are left alone. Each process
where it acts appends ``{"pid", "title"}`` to ``$DATAFLEX_E2E_REPACK_LOG`` when that is set, so a test can
check that the forcing reached vLLM's workers.
"""

from __future__ import annotations

import json
import os
import sys

REPACK_LOG_ENV = "DATAFLEX_E2E_REPACK_LOG"


def _process_title() -> str:
    try:
        with open(f"/proc/{os.getpid()}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


if "vllm" in sys.modules:
    from dataflex_callbacks.recipes.vllm_cpu import force_repacking_dispatch

    force_repacking_dispatch()
    if os.environ.get(REPACK_LOG_ENV):
        with open(os.environ[REPACK_LOG_ENV], "a") as log:
            log.write(json.dumps({"pid": os.getpid(), "title": _process_title()}) + "\n")
