"""scripts/gpu_check.sh, the CUDA path's check, run on a CPU so that it cannot rot (docs/benchmarks.md).

The quick CPU run is the real script end to end: core tests through the device harness, TRL GRPO with
the testbed model (baseline equal to stock, every preset), the async adapter, bench_core. The second
shows a failing part fails the script, naming the part.
"""

import json
import subprocess
from pathlib import Path

import pytest
import torch

from dataflex_callbacks import list_presets

ROOT = Path(__file__).resolve().parents[2]
PARTS = ["core", "trl", "async", "bench"]


# A hang catcher, not a speed test: the quick CPU run took 111 s at load 5 on 2 cores (about twice that at load 10),
# and its parts' own limits on a CPU (benchmarks/gpu_check.py, PART_TIMEOUTS doubled) add up to 900 s, which this
# leaves the script the time to report.
def gpu_check(*arguments, out: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), *arguments, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.slow
def test_the_quick_cpu_run_passes_every_part_and_records_its_figures(tmp_path):
    done = gpu_check("--device", "cpu", "--quick", out=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "gpu_check: every part passed" in done.stdout
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    results = {r["part"]: r for r in record["results"]}
    assert list(results) == PARTS and all(r["status"] == "passed" for r in results.values())
    assert all(r["seconds"] > 0 for r in results.values())
    assert "passed" in results["core"]["figures"]["pytest"]
    trl = results["trl"]["figures"]
    assert trl["baseline_losses"] == trl["stock_losses"] and trl["baseline_max_param_difference"] == 0.0
    assert set(trl["presets_s"]) | set(trl["refused"]) == set(list_presets()) - {"baseline"} and not trl["failed"]
    assert trl["refused"] == {} and "adaptive" in trl["presets_s"]  # every preset trains in TRL since issue 49
    assert results["async"]["figures"]["steps"] == 2
    assert results["bench"]["figures"]["apply composite difffilter+softmax"] > 0
    table = (tmp_path / "gpu_check.txt").read_text()
    assert all(f"\n{part} " in table for part in PARTS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run on a machine without CUDA")
def test_a_failing_part_fails_the_script_and_is_named(tmp_path):
    # --device cuda without a GPU: the core tests refuse to start (tests/core/device_tensors.py).
    done = gpu_check("--device", "cuda", "--parts", "core", out=tmp_path, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "gpu_check: FAILED: core" in done.stdout and "sees no CUDA device" in done.stdout
    assert json.loads((tmp_path / "gpu_check.json").read_text())["results"][0]["status"] == "exit 4"
