"""scripts/verl_e2e/supervise.py, the wrapper that keeps verl's CPU run from hanging on a failed vLLM engine.

Stand-in runs (bash commands) show the three ways a run can go: a vLLM engine that logs an error while the
run waits on it, a vLLM process that dies while the run waits, and a run that ends by itself. The real
thing (main_ppo with a killed vLLM worker) is in tests/integrations/verl/e2e.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("psutil")

SUPERVISE = Path(__file__).resolve().parents[2] / "scripts" / "verl_e2e" / "supervise.py"
GRACE_S = 2
# What Ray prints for a line of vLLM's worker process inside verl's vLLM server actor (colours included).
ENGINE_ERROR_LINES = (
    "\x1b[36m(vLLMHttpServer pid=7)\x1b[0m (Worker pid=8) ERROR 12-02 13:25:26 [multiproc_executor.py:1058] "
    "WorkerProc hit an exception.\n"
    "\x1b[36m(vLLMHttpServer pid=7)\x1b[0m (Worker pid=8) ERROR 12-02 13:25:26 [multiproc_executor.py:1058] "
    "AttributeError: 'Parameter' object has no attribute 'weight_loader'\n"
)


def supervise(script: str, grace: float = GRACE_S, timeout: float = 60):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SUPERVISE), "--grace", str(grace), "--", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.monotonic() - started


def report(done) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("[supervise]")]


def test_an_engine_error_while_the_run_waits_stops_it_after_the_grace_with_the_error(tmp_path):
    (tmp_path / "lines").write_text(ENGINE_ERROR_LINES)
    done, seconds = supervise(f"cat {tmp_path / 'lines'}; sleep 300")
    assert done.returncode == 1, done.stdout[-2000:]
    assert seconds < GRACE_S + 15, seconds
    lines = report(done)
    assert any("stopped the run" in line for line in lines), lines
    assert any("AttributeError: 'Parameter' object has no attribute 'weight_loader'" in line for line in lines), lines
    assert "\x1b[" not in "".join(lines)  # Ray's colour codes are gone from the report


def test_a_dead_vllm_process_while_the_run_waits_stops_it(tmp_path):
    # A child titled as vLLM titles its workers, killed 6 s in (seen alive long enough to count).
    script = "(exec -a VLLM::Worker_TP0 sleep 300) & worker=$!; sleep 6; kill -9 $worker; sleep 300"
    done, seconds = supervise(script)
    assert done.returncode == 1, done.stdout[-2000:]
    assert seconds < 6 + GRACE_S + 15, seconds
    assert any("stopped the run: VLLM::Worker_TP0" in line and "died" in line for line in report(done)), done.stdout


def test_a_run_that_ends_by_itself_keeps_its_exit_code_and_its_output():
    done, _ = supervise("echo step:1; echo step:2; exit 0")
    assert done.returncode == 0 and done.stdout.splitlines() == ["step:1", "step:2"], done.stdout
    done, _ = supervise("echo training; exit 3")
    assert done.returncode == 3 and not report(done), done.stdout


def test_a_run_that_fails_after_an_engine_error_ends_with_the_engines_error(tmp_path):
    (tmp_path / "lines").write_text(ENGINE_ERROR_LINES)
    done, _ = supervise(f"cat {tmp_path / 'lines'}; echo 'RuntimeError: no trajectories'; exit 1", grace=30)
    assert done.returncode == 1
    lines = report(done)
    assert any("the run ended (exit 1)" in line for line in lines), lines
    assert any("weight_loader" in line for line in lines), lines
