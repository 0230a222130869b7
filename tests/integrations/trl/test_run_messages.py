"""What a TRL user reads: one line naming the strategy at train start, warnings in TRL's step numbers at
their own line.
"""

import warnings

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
    assert lines[0].endswith("domains (column 'domain'): add, echo, mul")


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
