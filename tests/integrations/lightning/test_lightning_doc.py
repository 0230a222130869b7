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


def test_the_comparison_recipe_runs_as_written_with_a_smaller_budget(tmp_path):
    code = block_with("held_out_pass_rate")
    assert 'BUDGET = "completions:4096"' in code
    code = code.replace('BUDGET = "completions:4096"', 'BUDGET = "completions:16"')  # one step of 4 x 4
    code = code.replace('output_dir="runs/lightning_doc"', f"output_dir={str(tmp_path / 'cmp')!r}, progress=False")
    result = run(code, REPO)  # it adds examples/ from here
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"diffband - baseline, held-out pass@1: [+-]\d\.\d{3} \(paired over 2 seeds\)", last), last
    assert (tmp_path / "cmp" / "report.md").exists()
