"""`dataflex compare --reward module:function` and `compare(...)` from Python: the user's reward trains and scores."""

import csv
import json
import sys

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.errors import DataFlexError  # noqa: E402
from dataflex_callbacks.recipes.cli import main  # noqa: E402
from dataflex_callbacks.recipes.compare import CompareInputError  # noqa: E402
from dataflex_callbacks.recipes.options import SUITE_DEFAULTS  # noqa: E402

REWARDS = """
CALLS = []

def exact(prompts, completions, answer, **columns):
    CALLS.append(len(completions))
    return [1.0 if c.strip() == str(a) else 0.0 for c, a in zip(completions, answer)]

def always_one(prompts, completions, **columns):
    return [1.0] * len(completions)

NOT_A_FUNCTION = 3
"""
# Tiny: 2 strategies x 1 seed x 2 steps of 2 prompts x 2 completions, 2 held-out prompts per domain.
TINY = [
    "--strategies",
    "baseline,difffilter",
    "--seeds",
    "0",
    "--budget",
    "steps:2",
    "--eval-points",
    "0",
    "--no-progress",
    "--prompts-per-step",
    "2",
    "--num-generations",
    "2",
    "--n-train",
    "4",
    "--n-test",
    "2",
    "--suite",
    "toy",
    "--domains",
    "digit,echo",
]
TINY_OPTIONS = dict(prompts_per_step=2, num_generations=2, suite="toy", n_train=4, n_test=2, domains=["digit", "echo"])


@pytest.fixture
def rewards_here(tmp_path, monkeypatch):
    """A `user_rewards_t30.py` in the current directory, which is not on sys.path (as for the `dataflex` script)."""
    (tmp_path / "user_rewards_t30.py").write_text(REWARDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("user_rewards_t30", None)
    sys.modules.pop("my_methods_t30", None)


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("user_rewards_t30.exact", "not an import path"),
        ("no_such_module_t30:exact", "no module named 'no_such_module_t30'"),
        ("user_rewards_t30:missing", "has no attribute 'missing'"),
        ("user_rewards_t30:NOT_A_FUNCTION", "not a function"),
    ],
)
def test_a_bad_reward_is_one_line_exit_2_and_writes_nothing(rewards_here, capsys, spec, expected):
    folder = rewards_here / "cmp"
    assert main(["compare", "--reward", spec, "--output-dir", str(folder)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("dataflex: error: ") and "\n" not in error and expected in error and spec in error
    assert "module:function" in error or "PYTHONPATH" in error
    assert not folder.exists()


def test_reward_weights_must_match_the_rewards(rewards_here, capsys):
    folder = rewards_here / "cmp"
    assert (
        main(
            ["compare", "--reward", "user_rewards_t30:exact", "--reward-weights", "1,0.5", "--output-dir", str(folder)]
        )
        == 2
    )
    assert "2 weight(s) for 1 --reward function(s)" in capsys.readouterr().err
    assert not folder.exists()


def test_a_callable_no_worker_can_import_is_refused_with_jobs_2(tmp_path):
    from dataflex_callbacks.recipes.compare import compare

    with pytest.raises(CompareInputError, match="jobs=1") as caught:
        compare(
            ["baseline", "difffilter"],
            reward_funcs=[lambda prompts, completions, **kw: [1.0] * len(prompts)],
            jobs=2,
            output_dir=str(tmp_path / "cmp"),
        )
    assert isinstance(caught.value, DataFlexError)
    assert not (tmp_path / "cmp").exists()


def test_one_reward_path_from_python_is_one_function_not_its_letters(tmp_path):
    from dataflex_callbacks.recipes.compare import compare

    with pytest.raises(CompareInputError, match="--reward 'nocolon' is not an import path"):
        compare(["baseline", "difffilter"], reward_funcs="nocolon", output_dir=str(tmp_path / "cmp"))
    assert not (tmp_path / "cmp").exists()


def test_a_scorer_path_in_a_strategy_file_imports_from_the_current_directory(rewards_here):
    from dataflex_callbacks import build_strategy

    (rewards_here / "my_methods_t30.py").write_text(
        "from dataflex_callbacks.components.scorers import GroupSolveRateScorer\n\n"
        "class MyScorer(GroupSolveRateScorer):\n    pass\n"
    )
    strategy = build_strategy(
        {
            "select": {
                "scorer": "my_methods_t30:MyScorer",
                "selector": {"name": "threshold_band", "low": 0.0, "high": 1.0},
            }
        }
    )
    assert "my_methods_t30:MyScorer" in repr(strategy)


def test_the_users_reward_trains_and_scores_and_python_equals_the_cli(rewards_here, capsys):
    from dataflex_callbacks.recipes.compare import compare
    from dataflex_callbacks.recipes.options import import_reward

    import_reward("user_rewards_t30:exact")  # from the current directory, as the command does
    user_rewards_t30 = sys.modules["user_rewards_t30"]
    # From Python, in process: the function object itself, and a threshold no row reaches.
    results = compare(
        ["baseline", "difffilter"],
        reward_funcs=[user_rewards_t30.always_one],
        reward_threshold=2.0,
        seeds=1,
        budget="steps:2",
        eval_points=0,
        progress=False,
        jobs=1,
        output_dir=str(rewards_here / "py"),
        **TINY_OPTIONS,
    )
    assert [r["accuracy_after_overall"] for r in results.runs] == [0.0, 0.0]
    assert set(results.differences) == {"difffilter"}
    # From the shell, the same grid with the path: every held-out completion reaches 1.0 under always_one.
    assert (
        main(
            [
                "compare",
                *TINY,
                "--reward",
                "user_rewards_t30:always_one",
                "--jobs",
                "1",
                "--output-dir",
                str(rewards_here / "cli"),
            ]
        )
        == 0
    )
    cli_rows = _rows(rewards_here / "cli" / "results.csv")
    assert [float(r["accuracy_after_overall"]) for r in cli_rows] == [1.0, 1.0]

    # The same grid and reward from both: the same results.csv figures (run_dir and wall time aside).
    user_rewards_t30.CALLS.clear()
    results = compare(
        ["baseline", "difffilter"],
        reward_funcs=["user_rewards_t30:exact", "user_rewards_t30:always_one"],
        reward_weights=[1.0, 0.5],
        seeds=1,
        budget="steps:2",
        eval_points=0,
        progress=False,
        output_dir=str(rewards_here / "py2"),
        **TINY_OPTIONS,
    )
    assert user_rewards_t30.CALLS  # trained and scored with the user's function
    assert (
        main(
            [
                "compare",
                *TINY,
                "--reward",
                "user_rewards_t30:exact,user_rewards_t30:always_one",
                "--reward-weights",
                "1,0.5",
                "--jobs",
                "2",
                "--output-dir",
                str(rewards_here / "cli2"),
            ]
        )
        == 0
    )  # workers import it from the same directory
    config = json.loads((rewards_here / "cli2" / "runs" / "baseline-seed0" / "config.json").read_text())
    assert config["reward"]["weights"] == [1.0, 0.5]
    metrics = (rewards_here / "cli2" / "runs" / "baseline-seed0" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(metrics[0])["reward"] >= 0.5  # always_one adds its weighted 0.5 to every completion
    python_rows = _rows(rewards_here / "py2" / "results.csv")
    shell_rows = _rows(rewards_here / "cli2" / "results.csv")
    skip = {"run_dir", "wall_seconds", "generation_seconds", "update_seconds"}  # the paths and the wall-clock times
    assert [{k: v for k, v in r.items() if k not in skip} for r in python_rows] == [
        {k: v for k, v in r.items() if k not in skip} for r in shell_rows
    ]
    assert [r["accuracy_after_overall"] for r in results.runs] == [
        float(r["accuracy_after_overall"]) for r in python_rows
    ]


def test_an_eval_dataset_is_the_held_out_set_and_every_dataset_row_trains(rewards_here, capsys):
    from dataflex_callbacks.recipes.compare import compare

    train, held_out = rewards_here / "train.jsonl", rewards_here / "eval.jsonl"
    train.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(6)))
    held_out.write_text("".join(f'{{"prompt": "{i}+2=", "answer": "{i + 2}"}}\n' for i in range(3)))
    assert main(["compare", "--eval-dataset", str(held_out), "--output-dir", str(rewards_here / "bad")]) == 2
    assert "--eval-dataset" in capsys.readouterr().err and not (rewards_here / "bad").exists()

    results = compare(
        ["baseline", "none"],
        train_dataset=str(train),
        eval_dataset=str(held_out),
        reward_funcs=["user_rewards_t30:exact"],
        seeds=1,
        budget="steps:1",
        eval_points=0,
        progress=False,
        output_dir=str(rewards_here / "own"),
        prompts_per_step=2,
        num_generations=2,
    )
    report = (rewards_here / "own" / "report.md").read_text()
    assert "held-out set: 3 prompts" in report and f"from {held_out}" in report
    assert "a held-out completion (greedy or sampled) is correct when `user_rewards_t30:exact` gives it at least 1" in (
        report
    )
    for run in results.runs:
        config = json.loads((rewards_here / "own" / "runs" / f"{run['strategy']}-seed0" / "config.json").read_text())
        assert (config["n_train_rows"], config["n_test_rows"]) == (6, 3)
        assert config["reward"]["functions"] == ["user_rewards_t30:exact"]
        assert config["reward"]["held_out_rule"] == "first reward >= 1.0"


# --------------------------------------------------------------------------- issue 38, section 2

BAD_REWARDS = """
import math


def nothing(prompts, completions, **columns):
    return [None] * len(completions)


def not_a_number(prompts, completions, **columns):
    return [math.nan] * len(completions)


def returns_none(prompts, completions, **columns):
    return None


def returns_a_float(prompts, completions, **columns):
    return 0.5


def returns_text(prompts, completions, **columns):
    return ["good"] * len(completions)


def bad_in_training(prompts, completions, **columns):
    # Held-out scoring passes only the columns; TRL's training call adds trainer_state.
    return "high" if "trainer_state" in columns else [1.0] * len(completions)


def no_kwargs(prompts, completions):
    return [1.0] * len(completions)


class Scorer:
    def __call__(self, prompts, completions, **columns):
        return [1.0] * len(completions)
"""


@pytest.fixture
def bad_rewards(rewards_here):
    (rewards_here / "bad_rewards_t38.py").write_text(BAD_REWARDS)
    yield rewards_here
    sys.modules.pop("bad_rewards_t38", None)


ONE_RUN = dict(seeds=1, budget="steps:1", eval_points=0, progress=False, **TINY_OPTIONS)


def test_one_strategy_as_a_string_is_one_strategy_not_its_letters(tmp_path):
    from dataflex_callbacks.recipes.compare import compare

    with pytest.raises(CompareInputError, match="'nosuchpreset_t38'"):
        compare("nosuchpreset_t38", output_dir=str(tmp_path / "cmp"), **ONE_RUN)
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize(
    "name, shown",
    [
        ("returns_none", "None"),
        ("returns_a_float", "0.5"),
        ("returns_text", "'good'"),
        ("bad_in_training", "'high'"),
    ],
)
def test_a_reward_returning_the_wrong_type_is_one_dataflex_error_naming_it(bad_rewards, name, shown):
    from dataflex_callbacks.recipes.compare import compare

    with pytest.raises(DataFlexError) as caught:
        compare(
            ["none"], reward_funcs=[f"bad_rewards_t38:{name}"], output_dir=str(bad_rewards / name), jobs=1, **ONE_RUN
        )
    message = str(caught.value)
    assert f"bad_rewards_t38:{name}" in message and shown in message
    assert "a list of floats or None, one per completion" in message


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("bad_rewards_t38:no_kwargs", "**kwargs"),
        ("bad_rewards_t38:Scorer", "instance"),
    ],
)
def test_a_reward_that_cannot_take_trl_s_call_is_refused_before_training(bad_rewards, capsys, spec, expected):
    folder = bad_rewards / "cmp"
    assert main(["compare", *TINY, "--reward", spec, "--output-dir", str(folder)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("dataflex: error: ") and spec in error and expected in error
    assert not folder.exists()


@pytest.mark.parametrize("name", ["nothing", "not_a_number"])
def test_a_reward_that_scores_nothing_is_flagged_and_counts_no_signal_group(bad_rewards, name):
    from dataflex_callbacks.recipes.compare import compare
    from dataflex_callbacks.recipes.compare.cli import summary_lines

    options = {**ONE_RUN, "budget": "steps:2"}
    results = compare(
        ["none"], reward_funcs=[f"bad_rewards_t38:{name}"], output_dir=str(bad_rewards / "cmp"), **options
    )
    (run,) = results.runs
    assert run["signal_groups"] == 0 and run["completions_per_signal_group"] is None
    report = (bad_rewards / "cmp" / "report.md").read_text()
    flagged = [line for line in report.splitlines() if line.startswith("> **Warning:**") and "scored none" in line]
    assert len(flagged) == 1 and f"bad_rewards_t38:{name}" in flagged[0] and "None or NaN" in flagged[0]
    console = summary_lines(results.settings, results.outcome)
    assert any(line.startswith("warning: ") and "scored none" in line for line in console)


def test_the_users_reward_fills_the_per_domain_series_and_the_report_names_the_learning_rate(rewards_here):
    from dataflex_callbacks.recipes.compare import compare

    results = compare(
        ["none"],
        reward_funcs=["user_rewards_t30:always_one"],
        output_dir=str(rewards_here / "cmp"),
        **{**ONE_RUN, "budget": "steps:2"},
    )
    metrics = [json.loads(line) for line in (rewards_here / "cmp" / "runs" / "none-seed0" / "metrics.jsonl").open()]
    for step in metrics:
        shares = [step["mix/actual/digit"], step["mix/actual/echo"]]
        assert sum(shares) == pytest.approx(1.0) and all(0.0 <= s <= 1.0 for s in shares)
        for domain in ("digit", "echo"):  # the user's reward, per domain sampled in the step (None: not sampled)
            assert step[f"reward/{domain}"] == (1.0 if step[f"mix/actual/{domain}"] > 0 else None)
    (record,) = results.outcome.records
    assert all(sum(p["sampled"].values()) == pytest.approx(1.0) for p in record["proportions"])
    report = (rewards_here / "cmp" / "report.md").read_text()
    assert "- learning rate: 0.003" in report


def test_resuming_on_changed_data_or_settings_is_refused_naming_what_changed(rewards_here):
    from dataflex_callbacks.recipes.compare import compare

    data = rewards_here / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(8)))
    options = dict(
        train_dataset=str(data),
        reward_funcs=["user_rewards_t30:exact"],
        seeds=1,
        budget="steps:1",
        eval_points=0,
        progress=False,
        output_dir=str(rewards_here / "cmp"),
        prompts_per_step=2,
        num_generations=2,
        n_test=2,
    )
    compare(["none"], **options)
    with data.open("a") as handle:
        handle.write('{"prompt": "9+1=", "answer": "10"}\n')
    with pytest.raises(CompareInputError) as caught:
        compare(["none", "baseline"], **options)
    message = str(caught.value)
    assert str(data) in message and "sha256" in message and "--overwrite" in message
    data.write_text("".join(f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(8)))  # as it was
    testbed_rate = SUITE_DEFAULTS["testbed"]["learning_rate"]
    with pytest.raises(CompareInputError, match=f"learning_rate: {testbed_rate!r} -> 0.001"):  # the testbed model's
        compare(["none"], **options, learning_rate=1e-3)
    results = compare(["none", "baseline"], **options)  # the same inputs resume
    assert results.outcome.reused == ["none-seed0"]


def test_the_fingerprint_of_a_model_folder_changes_with_its_files(tmp_path):
    from dataflex_callbacks.recipes.compare.settings import input_fingerprint

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "model" / "weights.bin").write_bytes(b"\0" * 100)
    before = input_fingerprint(str(tmp_path / "model"))
    assert before == input_fingerprint(str(tmp_path / "model"))
    (tmp_path / "model" / "weights.bin").write_bytes(b"\1" * 100)
    assert input_fingerprint(str(tmp_path / "model")) != before
    assert input_fingerprint("some-org/hub-model") == "some-org/hub-model"  # not a local path: its name


INSTANCES = """
class Exact:
    def __call__(self, prompts, completions, answer, **columns):
        return [1.0 if c.strip() == str(a) else 0.0 for c, a in zip(completions, answer)]

exact = Exact()
"""


def test_a_module_level_reward_instance_reaches_the_workers_by_the_name_that_holds_it(rewards_here):
    import importlib

    from dataflex_callbacks.recipes.compare.settings import CompareSettings
    from dataflex_callbacks.recipes.options import RunOptions

    (rewards_here / "instances_t46.py").write_text(INSTANCES)
    sys.path.insert(0, str(rewards_here))
    try:
        module = importlib.import_module("instances_t46")
        base = RunOptions(reward=[module.exact], **TINY_OPTIONS)
        settings = CompareSettings(strategies=["none"], seeds=[0], budget=_budget(), base=base, jobs=2)
        # `instances_t46:Exact` would import the class, which the workers cannot call as a reward.
        assert settings.base.reward == ["instances_t46:exact"]
        unnamed = RunOptions(reward=[module.Exact()], **TINY_OPTIONS)
        with pytest.raises(CompareInputError) as caught:
            CompareSettings(strategies=["none"], seeds=[0], budget=_budget(), base=unnamed, jobs=2)
        message = str(caught.value)
        assert "'instances_t46:<Exact instance>'" in message and "module-level name" in message
        assert "'module:exact'" in message
    finally:
        sys.path.remove(str(rewards_here))
        sys.modules.pop("instances_t46", None)


def _budget():
    from dataflex_callbacks.recipes.compare.budget import Budget

    return Budget.parse("steps:1")
