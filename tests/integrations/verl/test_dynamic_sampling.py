"""The verl adapter refuses a dynamic_sampling part (pointing to verl's own DAPO filter) and an allocation part (naming
the verl lines that block it)."""

import pytest

pytest.importorskip("verl", reason="verl tests run in .venv-verl (scripts/test_verl.sh)")

from omegaconf import OmegaConf  # noqa: E402

from dataflex_callbacks.errors import ConfigError  # noqa: E402


def test_dynamic_sampling_is_refused_with_verl_filter_groups_named():
    from dataflex_callbacks.integrations.verl.config import strategy_from_verl_config

    config = OmegaConf.create(
        {
            "dataflex": {
                "select": {
                    "scorer": "group_reward_variance",
                    "selector": {"name": "threshold_band", "low": 0.0, "high": float("inf")},
                },
                "dynamic_sampling": {"max_rounds": 3},
            }
        }
    )
    with pytest.raises(ConfigError) as info:
        strategy_from_verl_config(config)
    message = str(info.value)
    assert "\n" not in message
    assert "algorithm.filter_groups" in message and "max_num_gen_batches" in message
    assert "select part then runs after verl's filter" in message
    # Without the part the same block builds.
    del config.dataflex.dynamic_sampling
    strategy, _ = strategy_from_verl_config(config)
    assert strategy.select is not None


def test_allocation_is_refused_naming_the_verl_lines_that_block_it():
    from dataflex_callbacks.integrations.verl.config import strategy_from_verl_config

    with pytest.raises(ConfigError) as info:
        strategy_from_verl_config(OmegaConf.create({"dataflex": {"strategy": "screen"}}))
    message = str(info.value)
    assert "\n" not in message and "agent_loop_tq.py:123" in message and "remove the allocation part" in message
