"""The verl adapter refuses a dynamic_sampling part (pointing to verl's own DAPO filter); it runs an allocation part in
the sync trainer mode and refuses it, in one line naming why, where its pilot-and-commit rounds cannot run."""

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


def test_allocation_runs_in_the_sync_mode_and_is_refused_in_one_line_where_it_cannot():
    from dataflex_callbacks.integrations.verl.config import strategy_from_verl_config

    def check(block, **sections):
        return strategy_from_verl_config(OmegaConf.create({"dataflex": block, **sections}))

    strategy, _ = check(
        {"strategy": "screen_greso"},
        trainer={"v1": {"trainer_mode": "dataflex_sync"}},
        actor_rollout_ref={"rollout": {"n": 4}},
    )
    assert strategy.allocates_rollouts and strategy.skips_prompts
    pilot_of_one = {
        "allocation": {"name": "screen", "params": {"pilot": 1}},
        "pre_select": {"name": "skip_zero_variance"},
    }
    refused = [
        (
            "not dataflex_colocate_async",
            {"strategy": "screen"},
            {"trainer": {"v1": {"trainer_mode": "dataflex_colocate_async"}}},
        ),
        ("groups differ in size", {"strategy": "adaptive"}, {}),
        ("drawn prompts commit), where the host fills each step", {"strategy": "screen_fewer"}, {}),
        (
            "algorithm.filter_groups.enable=false",
            {"strategy": "screen"},
            {"algorithm": {"filter_groups": {"enable": True}}},
        ),
        ("use pilot >= 2", pilot_of_one, {}),
        ("rollout.n=2", {"strategy": "screen"}, {"actor_rollout_ref": {"rollout": {"n": 2}}}),
    ]
    for expected, block, sections in refused:
        with pytest.raises(ConfigError) as info:
            check(block, **sections)
        message = str(info.value)
        assert "\n" not in message and expected in message, (expected, message)
