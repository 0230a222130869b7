"""examples/trl_async_grpo.py: the asynchronous GRPO script runs on a CPU as written, offline, with its strategy."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("trl")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "trl_async_grpo.py")
ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@pytest.mark.parametrize("strategy", ["diffband", "dapo"])
def test_the_async_example_trains_with_its_strategy(tmp_path, strategy):
    command = [sys.executable, SCRIPT, "--steps", "3", "--strategy", strategy, "--output-dir", str(tmp_path / "run")]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, **ENV}
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert f"dataflex: strategy '{strategy}'" in result.stdout
    assert f"trained 3 steps with strategy '{strategy}' asynchronously" in result.stdout
