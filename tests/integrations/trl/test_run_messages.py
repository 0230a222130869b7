"""What a TRL user reads: one line naming the strategy at train start, warnings in TRL's step numbers at
their own line.
"""

import warnings

import pytest

from dataflex_callbacks.errors import DroppedAllWarning
from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer, attach


def constant_reward(completions, **kwargs):
    """Every completion scores 1: every group has equal rewards, which diffband drops."""
    return [1.0 for _ in completions]


def test_train_start_prints_the_strategy_its_parts_and_the_domains(make_trainer, capsys):
    trainer = make_trainer(cls=DataFlexGRPOTrainer, max_steps=1, trainer_kwargs={"strategy": "greso"})
    trainer.train()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dataflex: strategy")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("dataflex: strategy 'greso': pre_select skip_zero_variance (warming up")
    assert lines[0].endswith(
        "domains (column 'domain'): add, echo, mul; selects on reward function 'parity_reward' (the trainer's only one)"
    )


def test_attach_prints_the_line_too(make_trainer, capsys):
    trainer = make_trainer(max_steps=1)
    attach(trainer, "diffband")
    trainer.train()
    assert (
        "dataflex: strategy 'diffband': select group_reward_variance -> threshold_band(low=0, high=inf); "
        "domains (column 'domain'): add, echo, mul"
    ) in capsys.readouterr().out


def test_a_warning_names_trls_step_and_the_users_train_line(make_trainer):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer, max_steps=2, reward_funcs=[constant_reward], trainer_kwargs={"strategy": "diffband"}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    dropped = [w for w in caught if w.category is DroppedAllWarning]
    assert len(dropped) == 1
    first_logged = next(e["step"] for e in trainer.state.log_history if "dataflex/dropped_all" in e)
    assert dropped[0].message.step == first_logged == 1 and "step 1:" in str(dropped[0].message)
    assert dropped[0].filename == __file__, f"{dropped[0].filename}:{dropped[0].lineno}"


# ---------------------------------------------------------------- the reward the strategy selects on, at train start
def train_start_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("dataflex: strategy")]
    assert len(lines) == 1, lines
    return lines[0]


def test_train_start_names_the_selection_reward(make_trainer, reward_functions, capsys):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        max_steps=1,
        reward_funcs=[reward_functions["parity_reward"], reward_functions["digit_reward"]],
        trainer_kwargs={"strategy": "diffband", "selection_reward": "digit_reward"},
    )
    trainer.train()
    line = train_start_line(capsys.readouterr().out)
    assert line.endswith("; selects on reward function 'digit_reward' (selection_reward='digit_reward')"), line


def test_train_start_names_the_weighted_sum_and_its_weights(make_trainer, reward_functions, capsys):
    trainer = make_trainer(
        max_steps=1,
        reward_funcs=[reward_functions["parity_reward"], reward_functions["digit_reward"]],
        reward_weights=[1.0, 0.5],
    )
    attach(trainer, "diffband")
    trainer.train()
    line = train_start_line(capsys.readouterr().out)
    assert line.endswith(
        "; selects on the weighted sum of the reward functions 1 * parity_reward + 0.5 * digit_reward "
        "(TRL's reward_weights; selection_reward=<name> selects on one)"
    ), line


# ---------------------------------------------------------------- the summary at train end
def train_end_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("dataflex: train end")]


def test_train_end_summarises_a_run_that_kept_nothing(make_trainer, capsys):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer, max_steps=3, reward_funcs=[constant_reward], trainer_kwargs={"strategy": "diffband"}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedAllWarning)
        trainer.train()
    lines = train_end_lines(capsys.readouterr().out)
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "dataflex: train end: strategy 'diffband': 3 steps, 3 kept nothing, mean kept fraction 0.00, "
        "0 signal groups trained (of 3 groups); no step trained anything"
    ), lines[0]


def test_train_end_summary_agrees_with_the_logged_metrics(make_trainer, capsys):
    trainer = make_trainer(max_steps=4)
    attach(trainer, "diffband")
    trainer.train()
    lines = train_end_lines(capsys.readouterr().out)
    assert len(lines) == 1, lines
    kept = [entry["dataflex/kept_frac"] for entry in trainer.state.log_history if "dataflex/kept_frac" in entry]
    dropped = sum(
        entry["dataflex/dropped_all"] for entry in trainer.state.log_history if "dataflex/dropped_all" in entry
    )
    # One group of 4 per step; diffband keeps exactly the groups whose rewards differ.
    assert lines[0] == (
        f"dataflex: train end: strategy 'diffband': 4 steps, {int(dropped)} kept nothing, mean kept fraction "
        f"{sum(kept) / 4:.2f}, {round(sum(kept))} signal groups trained (of 4 groups)"
    )


# ---------------------------------------------------------------- no None in the logs of a step that trains nothing
def test_a_step_that_trains_nothing_logs_no_none(make_trainer, capfd):
    pytest.importorskip("tensorboard", reason="report_to='tensorboard' needs tensorboard (pip install tensorboard)")
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        max_steps=2,
        reward_funcs=[constant_reward],
        report_to=["tensorboard"],
        trainer_kwargs={"strategy": "diffband"},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedAllWarning)
        trainer.train()
    steps = [entry for entry in trainer.state.log_history if "dataflex/dropped_all" in entry]
    assert [entry["dataflex/dropped_all"] for entry in steps] == [1.0, 1.0]
    assert all(value is not None for entry in steps for value in entry.values()), steps
    assert "clip_ratio/region_mean" in steps[0]  # what TRL measured on no token is still there
    captured = capfd.readouterr()
    assert 'log a value of "None"' not in captured.out + captured.err
