"""Runs ddp_worker.py on two CPU processes (gloo) for the TRL adapter's distributed tests."""

import json
import os
import signal
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(__file__), "ddp_worker.py")


def run_two_ranks(tmp_path, mode=None, worker=WORKER):
    """Run ``worker`` (ddp_worker.py, in ``mode``) on 2 CPU processes; returns both ranks' records
    (``rank<r>.json`` in ``tmp_path``, which the worker gets as its first argument)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", worker]
    command += [str(tmp_path)] + ([] if mode is None else [mode])
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    # A hang (a collective one rank skips) shows up as this timeout instead of a stuck test session;
    # the workers get their own process group so a timeout ends all of them.
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, stderr = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("the two-process run did not finish in 240 s (hang in a collective?)")
    written = [r for r in (0, 1) if (tmp_path / f"rank{r}.json").exists()]
    assert process.returncode == 0, f"exit {process.returncode}; records written by ranks {written}\n{stderr[-4000:]}"
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
