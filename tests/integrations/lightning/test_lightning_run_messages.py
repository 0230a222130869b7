"""A Lightning user reads one line at train start naming the strategy, its parts and the domains the sampler
draws from.
"""

import pytest

from dataflex_callbacks.integrations.lightning import DataFlexCallback
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer

pytestmark = pytest.mark.slow


def strategy_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("dataflex: strategy")]


def test_train_start_prints_the_strategy_its_parts_and_the_sampler_domains(capsys):
    toy_trainer([DataFlexCallback(STRATEGY)], max_steps=1).fit(ToyGRPO(toy_rows()))
    lines = strategy_lines(capsys.readouterr().out)
    assert len(lines) == 1, lines
    assert "select group_solve_rate -> threshold_band(low=0, high=1)" in lines[0]
    assert "reweight advantage_magnitude -> softmax(temperature=0.5)" in lines[0] and "mix reward_gap" in lines[0]
    assert lines[0].endswith("domains (column 'domain'): easy, hard, mid")


def test_without_a_sampler_the_domains_are_not_known_at_train_start(capsys):
    toy_trainer([DataFlexCallback("diffband")], max_steps=1).fit(ToyGRPO(toy_rows(), use_sampler=False))
    assert strategy_lines(capsys.readouterr().out) == [
        "dataflex: strategy 'diffband': select group_reward_variance -> threshold_band(low=0, high=inf); "
        "domains: not known before the first batch"
    ]
