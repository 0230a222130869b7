"""`dataflex compare` refuses every strategy the TRL adapter would refuse before anything trains or is written,
and says on the console when a run's first steps scored every completion 0."""

import re

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402
from dataflex_callbacks.recipes.compare import CompareInputError, CompareSettings  # noqa: E402
from dataflex_callbacks.recipes.compare.budget import Budget  # noqa: E402
from dataflex_callbacks.recipes.compare.grid import build_strategies  # noqa: E402
from dataflex_callbacks.recipes.options import RunOptions  # noqa: E402

TINY = ["--suite", "toy", "--n-train", "4", "--n-test", "2", "--domains", "digit,echo", "--prompts-per-step", "2"]
ONE_RUN = ["--seeds", "0", "--budget", "steps:1", "--eval-points", "0", "--jobs", "1", "--no-progress"]

SCREEN_PILOT_1_SKIPPING = "pre_select: skip_zero_variance\nallocation: {name: screen, params: {pilot: 1}}\n"
ADAPTIVE_SKIPPING = "pre_select: skip_zero_variance\nallocation: {name: adaptive, params: {reuse: true}}\n"

# (strategies, further flags, the refused strategy, what its line names): every refusal a compare's settings reach
# (one process, TRL's defaults; the rest of check_trl_strategy's rules need a trainer setting compare never makes).
REFUSALS = [
    ("baseline,{adaptive}", [], "{adaptive}", "allocation 'adaptive' with a pre_select part"),
    ("baseline,screen", ["--num-generations", "2"], "screen", "'pilot' must be below the group size (2)"),
    ("baseline,screen+dump_ucb", [], "screen+dump_ucb", "allocation in the TRL adapter does not support a strategy"),
    ("baseline,dapo+dump_ucb", [], "dapo+dump_ucb", "dynamic_sampling in the TRL adapter does not support"),
    ("baseline,{pilot1}", [], "{pilot1}", "pre_select part with a pilot of 1"),
]


@pytest.mark.parametrize("strategies, flags, refused, named", REFUSALS)
def test_a_refused_strategy_stops_the_comparison_before_anything_trains(
    tmp_path, capsys, strategies, flags, refused, named
):
    pilot1, adaptive = tmp_path / "pilot1.yaml", tmp_path / "adaptive.yaml"
    pilot1.write_text(SCREEN_PILOT_1_SKIPPING)
    adaptive.write_text(ADAPTIVE_SKIPPING)
    strategies, refused = (
        strategies.format(pilot1=pilot1, adaptive=adaptive),
        refused.format(pilot1=pilot1, adaptive=adaptive),
    )
    folder = tmp_path / "cmp"
    args = ["compare", "--strategies", strategies, *TINY, *ONE_RUN, *flags, "--output-dir", str(folder)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"- {refused}: the TRL adapter refuses it: " in err and named in err and "nothing was written" in err
    assert err.splitlines()[1].startswith("  - ") and len(err.splitlines()) == 2  # the head, then one line each
    assert not folder.exists()  # no folder, lock, compare.json or run: the baseline did not train first


def test_every_refused_strategy_is_named_on_its_own_line():
    settings = CompareSettings(
        strategies=["baseline", "screen", "difffilter", "screen+dump_ucb", "nosuchpreset"],
        seeds=[0],
        budget=Budget.parse("steps:1"),
        base=RunOptions(suite="toy", num_generations=2),
    )
    with pytest.raises(CompareInputError) as caught:
        build_strategies(settings)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("3 of 5 strategies cannot train with these settings")
    assert [line.split(":")[0] for line in lines[1:]] == ["  - screen", "  - screen+dump_ucb", "  - nosuchpreset"]
    assert "invalid strategy 'nosuchpreset'" in lines[3]


def test_the_strategies_that_train_pass_with_their_settings():
    settings = CompareSettings(
        strategies=["baseline", "screen", "dapo", "none"], seeds=[0], budget=Budget.parse("steps:1"), base=RunOptions()
    )
    built = build_strategies(settings)
    assert list(built) == ["baseline", "screen", "dapo", "none"] and built["none"] is None


ZERO_REWARD = "def zero(prompts, completions, **columns):\n    return [0.0 for _ in completions]\n"


def test_a_run_whose_reward_never_pays_is_named_on_the_console(tmp_path, capsys, monkeypatch):
    (tmp_path / "zero_rewards_h2.py").write_text(ZERO_REWARD)
    monkeypatch.chdir(tmp_path)
    args = ["compare", "--strategies", "baseline", *TINY, "--num-generations", "2", "--reward", "zero_rewards_h2:zero"]
    one_run = ["--seeds", "1", "--budget", "steps:5", "--eval-points", "0", "--jobs", "1", "--no-progress"]
    assert main([*args, *one_run, "--output-dir", str(tmp_path / "cmp")]) == 0
    err = capsys.readouterr().err
    assert re.search(r"dataflex: warning: baseline-seed\d+: every reward of the first 5 steps was 0 or None", err)
    assert "prompts' format" in err


@pytest.mark.parametrize("strategies, flags, refused, named", REFUSALS)
def test_dataflex_run_refuses_the_same_strategies_before_its_folder_is_written(
    tmp_path, capsys, strategies, flags, refused, named
):
    pilot1, adaptive = tmp_path / "pilot1.yaml", tmp_path / "adaptive.yaml"
    pilot1.write_text(SCREEN_PILOT_1_SKIPPING)
    adaptive.write_text(ADAPTIVE_SKIPPING)
    refused = refused.format(pilot1=pilot1, adaptive=adaptive)
    folder = tmp_path / "run"
    args = ["run", "--strategy", refused, *TINY, "--steps", "1", "--no-progress", "--output-dir", str(folder), *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"strategy {refused!r} cannot train with these settings: " in err and named in err
    assert len(err.splitlines()) == 1 and not folder.exists()
