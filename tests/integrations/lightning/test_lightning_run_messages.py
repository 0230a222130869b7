"""A Lightning user reads one line at train start naming the strategy, its parts and the domains the sampler
draws from.
"""

import pytest
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer

from dataflex_callbacks.integrations.lightning import DataFlexCallback

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


def reference_summary(records: list[dict]) -> str:
    """The train-end line computed from the module's own records, one optimizer step per distinct ``step``."""
    steps: dict[int, list[dict]] = {}
    for record in records:
        steps.setdefault(record["step"], []).append(record)
    kept_fracs, empty, signal, groups = [], 0, 0, 0
    for parts in steps.values():
        keep = [k for record in parts for k in record["keep"]]
        kept_fracs.append(sum(keep) / len(keep))
        empty += not any(keep)
        for record in parts:
            for gid in sorted(set(record["group_ids"])):
                rows = [i for i, g in enumerate(record["group_ids"]) if g == gid]
                groups += 1
                signal += len({record["rewards"][i] for i in rows}) > 1 and any(record["keep"][i] for i in rows)
    return (
        f"dataflex: train end: strategy 'diffband': {len(steps)} steps, {empty} kept nothing, mean kept fraction "
        f"{sum(kept_fracs) / len(kept_fracs):.2f}, {signal} signal groups trained (of {groups} groups)"
    )


@pytest.mark.parametrize("accumulate", [1, 2])
def test_train_end_prints_a_summary_of_what_the_strategy_kept(capsys, accumulate):
    module = ToyGRPO(toy_rows())
    toy_trainer([DataFlexCallback("diffband")], max_steps=4, accumulate_grad_batches=accumulate).fit(module)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dataflex: train end")]
    assert len(lines) == 1, lines
    assert lines[0].startswith(reference_summary(module.records)), (lines[0], reference_summary(module.records))
    assert lines[0].startswith("dataflex: train end: strategy 'diffband': 4 steps")
