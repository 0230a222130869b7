"""Run a test's worker as several processes at once (gloo ranks) and fail with the first one's error output."""

import os
import subprocess
import sys


def run_ranks(argv_per_rank: list[list[str]], timeout: float = 120) -> None:
    """Start ``python ARGV`` for every rank together (one thread each) and wait; a failed rank fails the test."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for argv in argv_per_rank
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err.decode()[-2000:]
