"""docs/lightning.md works as written: its allocation module trains under the real Lightning Trainer, and its
held-out evaluation recipe trains, scores and pairs runs over seeds (fewer seeds and steps, the one change)."""

import ast
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.join(os.path.dirname(__file__), "..", "..", "..")
DOC = os.path.join(REPO, "docs", "lightning.md")

pytestmark = pytest.mark.slow


def python_blocks() -> list[str]:
    with open(DOC, encoding="utf-8") as handle:
        return re.findall(r"```python\n(.*?)```", handle.read(), re.S)


def block_with(text: str) -> str:
    (found,) = [block for block in python_blocks() if text in block]
    return found


def run(code: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=500)


def test_the_allocation_module_runs_as_written(tmp_path):
    result = run(block_with("allocation_rounds"), tmp_path)
    # Before: the snippet bound no group size, and rounds.start() raised ParamError "has no group size".
    assert result.returncode == 0, result.stderr[-3000:]
    # A step whose pilots were all unanimous trains nothing and calls no loss: at most the 4 steps are decided.
    assert re.search(r"dataflex: train end: strategy 'screen': [1-4] steps?, 0 kept nothing", result.stdout), (
        result.stdout[-2000:]
    )
    metrics = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert metrics["dataflex/alloc/prompts"] > 0 and metrics["dataflex/alloc/pilot_completions"] > 0
    assert metrics["dataflex/alloc/trained_groups"] > 0


def test_the_held_out_evaluation_recipe_runs_as_written_with_fewer_seeds_and_steps():
    code = block_with("paired_bootstrap_interval")
    assert "SEEDS, STEPS = 5, 60" in code
    result = run(code.replace("SEEDS, STEPS = 5, 60", "SEEDS, STEPS = 2, 1"), REPO)  # it adds examples/ from here
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"strategy - baseline, held-out accuracy: [+-]\d\.\d{3} \[\S+, \S+\]", lines[-2]), lines
    assert re.fullmatch(r"paired over 2 seeds, sign-flip p = \d\.\d{3}", lines[-1]), lines
    assert result.stdout.count("dataflex: train end: strategy 'baseline'") == 2
