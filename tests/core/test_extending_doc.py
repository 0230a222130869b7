"""docs/extending.md works as written: its module, config and conformance-check blocks run, with the output it shows."""

import os
import re
import subprocess
import sys

import yaml

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "extending.md")


def blocks(language):
    with open(DOC, encoding="utf-8") as handle:
        return re.findall(rf"```{language}\n(.*?)```", handle.read(), re.S)


def test_the_extending_guide_runs_as_written(tmp_path):
    module, use, check, broken = blocks("python")
    (tmp_path / "my_methods.py").write_text(module + "\n\n" + broken)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    for code in (use, check):
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-3000:]
        if code is use:
            assert result.stdout.strip() == "tensor([ True, False, False, False])"
        else:
            shown = blocks("text")[0].strip().splitlines()
            printed = result.stdout.strip().splitlines()
            assert printed[0] == shown[0]  # every check passed, the reference included
            assert all(line in shown for line in printed[1:] if "cuda" not in line)
    failing = (
        "from dataflex_callbacks.testing import check_component\nimport my_methods\n"
        "check_component(my_methods.BatchCentered)"
    )
    result = subprocess.run(
        [sys.executable, "-c", failing], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    shown = " ".join(blocks("text")[1].split())
    assert result.returncode == 1 and " ".join(result.stderr.strip().splitlines()[-1].split()).endswith(
        shown.split("ConformanceError: ", 1)[1]
    )
    text = blocks("yaml")[0]
    config = yaml.safe_load(text)
    assert config["select"]["scorer"] == "my_methods:GroupCenteredReward"
    (tmp_path / "strategy.yaml").write_text(text)
    script = "from dataflex_callbacks import build_strategy; print(build_strategy('strategy.yaml'))"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "select=group_centered_reward->threshold_band" in result.stdout  # a registered class keeps its name
