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
        # Sampled pass@1 under the user's reward and threshold too (k samples per prompt), and it is the headline:
        # every held-out prompt of data that is not the testbed's.
        sampled = held_out["sampled_pass_at_1"]
        assert sampled["k"] == 4 and sampled["before"] == sampled["after"] == {"digit": accuracy, "overall": accuracy}
        headline = held_out["headline"]
        assert (headline["metric"], headline["levels"], headline["rows"]) == ("sampled_pass_at_1", None, 2)
        assert headline["before"] == headline["after"] == accuracy
        config = json.loads((out / "config.json").read_text())
        assert config["reward"]["functions"] == ["run_rewards_t30:half"]
        assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["reward"] == 0.5


def test_run_prints_its_model_and_learning_rate_first_and_fills_the_per_domain_series_from_the_users_reward(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "run_rewards_t38.py").write_text(
        "def by_domain(prompts, completions, domain, **columns):\n"
        "    return [0.25 if d == 'digit' else 0.75 for d in domain]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "run_rewards_t38", raising=False)
    out = tmp_path / "run"
    argv = ["run", "--strategy", "none", "--steps", "2", "--prompts-per-step", "4", "--num-generations", "2"]
    argv += ["--suite", "toy", "--n-train", "4", "--n-test", "1", "--domains", "digit,echo"]
    assert main([*argv, "--reward", "run_rewards_t38:by_domain", "--output-dir", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]  # the model and its rate before anything else
    assert first == (
        "dataflex run: model: the toy suite's random-initialised tiny model (--suite toy); learning rate 0.003 "
        "(this model's default; set --learning-rate to change it)"
    )
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for step in metrics:  # 4 prompts of 2 domains per step, scored per domain by the user's reward
        assert step["mix/actual/digit"] + step["mix/actual/echo"] == pytest.approx(1.0)
        for domain, value in (("digit", 0.25), ("echo", 0.75)):
            assert step[f"reward/{domain}"] == (value if step[f"mix/actual/{domain}"] > 0 else None)
    assert any(step["mix/actual/digit"] > 0 for step in metrics) and any(
        step["mix/actual/echo"] > 0 for step in metrics
    )


def test_run_flags_a_reward_that_scores_nothing_and_counts_no_signal_group(tmp_path, monkeypatch, capsys):
    (tmp_path / "run_rewards_none_t38.py").write_text(
        "def nothing(prompts, completions, **columns):\n    return [None] * len(completions)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "run_rewards_none_t38", raising=False)
    out = tmp_path / "run"
    argv = ["run", "--strategy", "none", "--steps", "2", "--prompts-per-step", "2", "--num-generations", "2"]
    argv += ["--suite", "toy", "--n-train", "2", "--n-test", "1", "--domains", "digit"]
    assert main([*argv, "--reward", "run_rewards_none_t38:nothing", "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert "dataflex run: warning: the reward (run_rewards_none_t38:nothing) scored none of the 8" in err
    config = json.loads((out / "config.json").read_text())
    assert (config["signal_groups_trained"], config["unscored_completions"]) == (0, 8)
