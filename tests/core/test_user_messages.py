"""What a user reads: the train-start line, and warnings that name the host's step, the user's line and
the strategy's file.
"""

import warnings

import torch

from dataflex_callbacks import RolloutBatch, build_strategy
from dataflex_callbacks.errors import DroppedAllWarning
from dataflex_callbacks.host import decide

torch.set_num_threads(1)


def equal_reward_batch() -> RolloutBatch:
    """Two groups whose responses all score alike: diffband keeps nothing."""
    return RolloutBatch(
        torch.tensor([1.0, 1.0, 0.0, 0.0]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        completion_mask=torch.ones(4, 3),
        advantages=torch.zeros(4),
    )


def dropped_all_warnings(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if w.category is DroppedAllWarning]


# ---------------------------------------------------------------- the train-start line


def test_summary_line_names_the_strategy_its_parts_and_the_domains():
    line = build_strategy("diffband").summary_line(["math", "code", "math"])
    assert line == (
        "dataflex: strategy 'diffband': select group_reward_variance -> threshold_band(low=0, high=inf); "
        "domains: code, math"
    )
    assert "reweight token_prob -> advantage_reweight(alpha=0.3)" in build_strategy("ar").summary_line([])
    mixing = build_strategy("dump_ucb").summary_line(["a", "b"])
    assert "mix dump_ucb" in mixing and "first 10 steps" in mixing
    assert "dynamic_sampling(max_rounds=4)" in build_strategy("dapo").summary_line([])
    assert (
        build_strategy("baseline")
        .summary_line([])
        .endswith("no parts (plain training); domains: none (one pool of prompts)")
    )
    assert build_strategy("baseline").summary_line(None).endswith("domains: not known before the first batch")


def test_summary_line_names_the_domain_column_it_read_or_its_absence():
    strategy = build_strategy("diffband")
    assert strategy.summary_line(["b", "a"], "topic").endswith("domains (column 'topic'): a, b")
    assert strategy.summary_line([], "domain").endswith("domains: none (no 'domain' column: one pool of prompts)")
    assert strategy.summary_line(None, "domain").endswith("domains (column 'domain'): not known before the first batch")


def test_summary_line_says_a_pre_rollout_filter_warms_up_until_it_first_skips():
    strategy = build_strategy("greso")
    line = strategy.summary_line(["a"])
    assert "pre_select skip_zero_variance (warming up" in line and "pre_select/* metrics read 0" in line
    strategy.pre_select.record_draws(["p1"], skipped=3)
    assert "(acting: 3 prompts skipped so far)" in strategy.summary_line(["a"])


# ---------------------------------------------------------------- warnings


def test_warnings_name_the_hosts_step():
    strategy = build_strategy("diffband")
    found = dropped_all_warnings(lambda: decide(strategy, equal_reward_batch(), 0, host_step=1))
    assert [w.message.step for w in found] == [1] and "step 1:" in str(found[0].message)
    plain = build_strategy("diffband")
    assert [w.message.step for w in dropped_all_warnings(lambda: plain.apply(equal_reward_batch(), 4))] == [4]


def test_a_warning_from_the_host_contract_points_at_the_callers_line():
    strategy = build_strategy("diffband")
    found = dropped_all_warnings(lambda: decide(strategy, equal_reward_batch(), 0))
    assert found and found[0].filename == __file__, found[0].filename


def test_a_strategy_read_from_a_file_is_named_after_the_file(tmp_path):
    path = tmp_path / "my_band.yaml"
    path.write_text("select:\n  scorer: group_reward_variance\n  selector: {name: threshold_band, low: 0}\n")
    strategy = build_strategy(str(path))
    assert strategy.name == "my_band"
    found = dropped_all_warnings(lambda: strategy.apply(equal_reward_batch(), 0))
    assert "strategy 'my_band'" in str(found[0].message)
    named = tmp_path / "named.yaml"
    named.write_text("name: wide_band\nselect: {scorer: group_reward_variance, selector: threshold_band}\n")
    assert build_strategy(str(named)).name == "wide_band"
