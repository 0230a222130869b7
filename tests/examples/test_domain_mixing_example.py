"""examples/domain_mixing_dataloader.py runs as a script and shows the proportions moving."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("datasets")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "domain_mixing_dataloader.py")


def test_domain_mixing_example_runs():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # Part 1: each 20-step window follows the proportions set for it.
    drawn = [float(x) for x in re.findall(r"steps .*drawn: arithmetic=\S+\s+spelling=\S+\s+trivia=([0-9.]+)", out)]
    assert len(drawn) == 3
    assert drawn[0] < 0.25 and drawn[1] > 0.6 and 0.2 < drawn[2] < 0.45
    # Part 2: the never-solved domain ends well below its uniform share.
    final = re.search(r"final target trivia=([0-9.]+) \(uniform ([0-9.]+)\)", out)
    assert final and float(final.group(1)) < float(final.group(2)) / 2
