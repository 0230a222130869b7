"""`compare(..., train=my_train)` / `dataflex compare --train module:function`: a user's own training loop as a run.

The training function here is a real, tiny GRPO loop of its own (no host framework): a softmax policy over 4
answers per prompt, groups of completions sampled from it, rewards 1 for the right answer, group-normalised
advantages, and the strategy's decision (``run.strategy.apply``) masking and weighting the update. It counts its own
generations into ``generated.json`` in the run folder, so the library's counts are checked against it.
"""

from __future__ import annotations

import csv
import json
import sys

import pytest

from dataflex_callbacks.errors import DataFlexError
from dataflex_callbacks.recipes.compare import CompareInputError, compare
from dataflex_callbacks.recipes.compare.training_run import TrainingRunError

LOOP = """
import json, os
import torch
from dataflex_callbacks import RolloutBatch

PROMPTS, ANSWERS, GROUP, PER_STEP = 24, 4, 4, 6


def held_out(logits, correct):
    probs = torch.softmax(logits, dim=1)[torch.arange(PROMPTS), correct]
    return float(probs[: PROMPTS // 2].mean()), float(probs[PROMPTS // 2 :].mean())


def train(run, log_before=True, log_after=True, overrun=0):
    gen = torch.Generator().manual_seed(run.seed)
    correct = torch.randint(0, ANSWERS, (PROMPTS,), generator=gen)
    logits = torch.zeros(PROMPTS, ANSWERS)
    if log_before:
        even, odd = held_out(logits, correct)
        run.log(accuracy=(even + odd) / 2, step=0, even=even, odd=odd)
    generated, step = 0, 0
    extra = overrun
    while not run.budget_spent() or extra > 0:
        if run.budget_spent():
            extra -= 1
        prompts = torch.randint(0, PROMPTS, (PER_STEP,), generator=gen)
        probs = torch.softmax(logits[prompts], dim=1).repeat_interleave(GROUP, dim=0)
        answers = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        rewards = (answers == correct[prompts].repeat_interleave(GROUP)).float()
        grouped = rewards.view(-1, GROUP)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
        lengths = 1 + answers  # an answer's length in tokens
        mask = torch.arange(ANSWERS + 1).unsqueeze(0) < lengths.unsqueeze(1)
        batch = RolloutBatch(rewards, group_ids=torch.arange(PER_STEP).repeat_interleave(GROUP),
                             completion_mask=mask, advantages=advantages,
                             domains=["even" if int(p) % 2 == 0 else "odd" for p in prompts.repeat_interleave(GROUP)])
        decision = run.strategy.apply(batch, step)
        generated += rewards.numel()
        weight = decision.weights if decision.weights is not None else decision.keep.float()
        weight = weight if weight.dim() == 1 else weight.mean(1)
        rows = prompts.repeat_interleave(GROUP)
        update = torch.zeros_like(logits)
        update.index_put_((rows, answers), 0.5 * weight * advantages, accumulate=True)
        logits += update
        step += 1
    with open(os.path.join(run.output_dir, "generated.json"), "w") as handle:
        json.dump({"completions": generated, "steps": step}, handle)
    if log_after:
        even, odd = held_out(logits, correct)
        run.log(accuracy=(even + odd) / 2, step=step, even=even, odd=odd)


def no_log_after(run):
    train(run, log_after=False)


def no_log_before(run):
    train(run, log_before=False)


def overrun(run):
    train(run, overrun=3)
"""

BUDGET = "completions:240"


@pytest.fixture
def loop_module(tmp_path, monkeypatch):
    """A folder holding ``user_loop.py`` (the training functions above), made the working directory."""
    (tmp_path / "user_loop.py").write_text(LOOP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("user_loop", None)
    yield tmp_path
    sys.modules.pop("user_loop", None)


def _rows(folder) -> list[dict]:
    with open(folder / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    return [{k: v for k, v in row.items() if k not in ("wall_seconds", "run_dir") and "_s" not in k} for row in rows]


def test_compare_counts_what_the_loop_generated_and_pairs_the_runs(loop_module):
    results = compare(
        ["baseline", "diffband"],
        seeds=2,
        budget=BUDGET,
        train="user_loop:train",
        output_dir=str(loop_module / "cmp"),
        progress=False,
    )
    assert len(results.runs) == 4
    for row in results.runs:
        own = json.loads(
            (loop_module / "cmp" / "runs" / f"{row['strategy']}-seed{row['seed']}" / "generated.json").read_text()
        )
        assert row["completions"] == own["completions"] >= 240
        assert row["steps"] == own["steps"]
        assert row["headline_metric"] == "logged_accuracy"
        assert row["signal_groups"] is not None and row["completion_tokens"] > 0
    assert results.runs[0]["accuracy_before_even"] is not None
    paired = results.differences["diffband"]
    assert paired["seeds"] == [0, 1] and len(paired["differences"]) == 2
    report = (loop_module / "cmp" / "report.md").read_text()
    assert "Paired difference to the baseline `baseline`" in report
    assert "user_loop:train" in report and "Verdict" in report
    # diffband drops the zero-signal groups the loop generated: it keeps less than everything.
    kept = {row["strategy"]: row["kept_frac"] for row in results.runs}
    assert kept["baseline"] == 1.0 and kept["diffband"] < 1.0


def test_command_line_gives_the_python_results_and_a_changed_function_is_refused(loop_module, capsys):
    from dataflex_callbacks.recipes.cli import main

    compare(
        ["baseline", "diffband"],
        seeds=2,
        budget=BUDGET,
        train="user_loop:train",
        output_dir=str(loop_module / "py"),
        progress=False,
    )
    args = [
        "compare",
        "--strategies",
        "baseline,diffband",
        "--num-seeds",
        "2",
        "--budget",
        BUDGET,
        "--train",
        "user_loop:train",
        "--jobs",
        "1",
        "--no-progress",
    ]
    assert main([*args, "--output-dir", str(loop_module / "cli")]) == 0
    assert _rows(loop_module / "cli") == _rows(loop_module / "py")
    # The same command resumes every run...
    assert main([*args, "--output-dir", str(loop_module / "cli")]) == 0
    assert "0 runs computed, 4 reused" in capsys.readouterr().out
    # ...until the function changes: then it is refused, naming the function and --overwrite.
    (loop_module / "user_loop.py").write_text(LOOP.replace("0.5 * weight", "0.7 * weight"))
    sys.modules.pop("user_loop", None)
    assert main([*args, "--output-dir", str(loop_module / "cli")]) == 2
    error = capsys.readouterr().err
    assert "user_loop:train sha256:" in error and "train.source" in error and "--overwrite" in error


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("user_loop:no_log_after", "logged no evaluation after training"),
        ("user_loop:no_log_before", "logged no evaluation before training"),
    ],
)
def test_a_run_without_its_evaluations_fails_naming_the_fix(loop_module, function, message):
    with pytest.raises(TrainingRunError, match=message) as error:
        compare(
            ["baseline"], seeds=1, budget=BUDGET, train=function, output_dir=str(loop_module / "cmp"), progress=False
        )
    assert "run.log(accuracy=" in str(error.value)
    assert not (loop_module / "cmp" / "runs" / "baseline-seed0" / "result.json").exists()


def test_a_function_that_never_binds_the_strategy_fails(loop_module):
    def idle(run):
        run.log(accuracy=0.5, step=0)

    with pytest.raises(TrainingRunError, match="decided on no batch"):
        compare(["baseline"], seeds=1, budget=BUDGET, train=idle, output_dir=str(loop_module / "cmp"), progress=False)


def test_a_run_past_its_budget_is_flagged(loop_module):
    results = compare(
        ["baseline", "diffband"],
        seeds=1,
        budget=BUDGET,
        train="user_loop:overrun",
        output_dir=str(loop_module / "cmp"),
        progress=False,
    )
    assert all(row["overshoot"] > 24 for row in results.runs)
    report = (loop_module / "cmp" / "report.md").read_text()
    assert "did not spend the budget they are compared at" in report
    assert "more than one step's (24)" in report


def test_trl_options_with_a_training_function_are_refused_in_one_error(loop_module, capsys):
    with pytest.raises(CompareInputError, match="learning_rate, model, reward_funcs") as error:
        compare(
            ["baseline"],
            train="user_loop:train",
            model="m",
            reward_funcs=["x:y"],
            learning_rate=1e-3,
            output_dir=str(loop_module / "cmp"),
        )
    assert isinstance(error.value, DataFlexError)
    from dataflex_callbacks.recipes.cli import main

    code = main(
        [
            "compare",
            "--strategies",
            "baseline",
            "--train",
            "user_loop:train",
            "--learning-rate",
            "0.001",
            "--num-generations",
            "4",
            "--output-dir",
            str(loop_module / "cmp"),
        ]
    )
    assert code == 2
    error = capsys.readouterr().err
    assert "TRL run options would do nothing: --num-generations, --learning-rate;" in error
    assert not (loop_module / "cmp").exists()


def test_strategies_whose_generation_the_library_cannot_count_are_refused(loop_module):
    with pytest.raises(CompareInputError, match="2 of 3 strategies") as error:
        compare(
            ["baseline", "dapo", "screen"], train="user_loop:train", output_dir=str(loop_module / "cmp"), progress=False
        )
    assert "dapo: its dynamic_sampling part" in str(error.value)
    assert "screen: its allocation part" in str(error.value)
    assert not (loop_module / "cmp").exists()


def test_a_function_no_path_names_is_refused_for_worker_processes(loop_module):
    with pytest.raises(CompareInputError, match="cannot reach the 2 worker processes"):
        compare(["baseline"], train=lambda run: None, jobs=2, output_dir=str(loop_module / "cmp"))


def test_worker_processes_and_ray_give_the_results_of_one_process(loop_module):
    ray = pytest.importorskip("ray")
    common = dict(seeds=2, budget=BUDGET, train="user_loop:train", progress=False)
    compare(["baseline", "diffband"], output_dir=str(loop_module / "one"), **common)
    compare(["baseline", "diffband"], jobs=2, output_dir=str(loop_module / "jobs"), **common)
    assert _rows(loop_module / "jobs") == _rows(loop_module / "one")
    try:
        compare(["baseline", "diffband"], jobs=2, executor="ray", output_dir=str(loop_module / "ray"), **common)
    finally:
        ray.shutdown()
    assert _rows(loop_module / "ray") == _rows(loop_module / "one")


def test_the_report_says_what_a_training_functions_runs_measured(loop_module):
    compare(
        ["baseline", "diffband"],
        seeds=2,
        budget=BUDGET,
        train="user_loop:train",
        output_dir=str(loop_module / "cmp"),
        progress=False,
    )
    report = (loop_module / "cmp" / "report.md").read_text()
    # What the TRL runs measure, and dataflex did not here: its own greedy/sampled evaluation, timed apart.
    for wrong in (
        "Per domain: greedy accuracy",
        "--eval-samples",
        "greedy overall",
        "Training seconds exclude held-out evaluation",
        "`--eval-points`",
        "TRL's",
    ):
        assert wrong not in report, wrong
    assert "Per domain: the accuracy your training function logged (run.log)" in report
    assert "Per domain, logged accuracy" in report
    assert "Training seconds are the wall time of your training function from its call to each run.log" in report
    assert "Each curve has the points your training function logged" in report


@pytest.mark.parametrize("points", ["0", "49"])
def test_an_explicit_eval_points_with_a_training_function_is_refused(loop_module, capsys, points):
    from dataflex_callbacks.recipes.cli import main
    from dataflex_callbacks.recipes.compare import Budget, CompareSettings

    args = ["compare", "--strategies", "baseline", "--train", "user_loop:train", "--eval-points", points]
    assert main([*args, "--output-dir", str(loop_module / "cmp")]) == 2
    assert "TRL run options would do nothing: --eval-points;" in capsys.readouterr().err
    assert not (loop_module / "cmp").exists()
    with pytest.raises(CompareInputError, match="eval_points"):
        compare(["baseline"], train="user_loop:train", eval_points=int(points), output_dir=str(loop_module / "py"))
    with pytest.raises(CompareInputError, match="--eval-points"):
        CompareSettings(
            strategies=["baseline"],
            seeds=[0],
            budget=Budget.parse(BUDGET),
            train="user_loop:train",
            eval_points=int(points),
            output_dir=str(loop_module / "settings"),
        )
    # Not given, it is resolved where it is used: none for a function's runs, the default for TRL runs.
    settings = CompareSettings(
        strategies=["baseline"], seeds=[0], budget=Budget.parse(BUDGET), output_dir=str(loop_module / "trl")
    )
    assert settings.eval_points == 49
