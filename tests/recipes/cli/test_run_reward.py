"""`dataflex run --reward module:function`: the user's reward trains the run and scores its held-out prompts."""

import json
import sys

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402


def test_run_trains_and_scores_with_the_users_reward_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "run_rewards_t30.py").write_text(
        "def half(prompts, completions, **columns):\n    return [0.5] * len(completions)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "run_rewards_t30", raising=False)
    base = [
        "run",
        "--strategy",
        "none",
        "--steps",
        "1",
        "--prompts-per-step",
        "2",
        "--num-generations",
        "2",
        "--suite",
        "toy",
        "--n-train",
        "2",
        "--n-test",
        "2",
        "--domains",
        "digit",
        "--reward",
        "run_rewards_t30:half",
        "--no-progress",
    ]
    for threshold, accuracy in (("0.5", 1.0), ("0.6", 0.0)):
        out = tmp_path / f"run{threshold}"
        assert main([*base, "--reward-threshold", threshold, "--output-dir", str(out)]) == 0
        held_out = json.loads((out / "eval.json").read_text())
        assert held_out["before"]["overall"] == held_out["after"]["overall"] == accuracy
        config = json.loads((out / "config.json").read_text())
        assert config["reward"]["functions"] == ["run_rewards_t30:half"]
        assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["reward"] == 0.5
