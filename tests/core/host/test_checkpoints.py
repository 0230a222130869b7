"""One checkpoint schema and one strictness policy for every host (`dataflex_callbacks.host.checkpoints`)."""

import pytest
import torch

from dataflex_callbacks import ConfigError, RolloutBatch, build_strategy
from dataflex_callbacks.errors import StateError
from dataflex_callbacks.host import checkpoint_state, load_state_file, read_state_file, restore_strategy

MIX = {"mix": {"mixer": "reward_gap", "domains": ["a", "b"], "warmup_steps": 0, "update_every": 1}}
CHANGED_MIX = {"mix": {"mixer": "reward_gap", "domains": ["a", "b"], "warmup_steps": 0, "update_every": 2}}


def trained(config):
    """A strategy whose mixing state moved away from a fresh one."""
    strategy = build_strategy(config)
    for step in range(3):
        rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]).roll(step)
        strategy.apply(
            RolloutBatch(
                rewards=rewards, group_ids=torch.arange(8) // 2, domains=["a", "a", "a", "a", "b", "b", "b", "b"]
            ),
            step,
            sync=False,
        )
    return strategy


def test_the_schema_round_trips_through_safe_loading_with_the_hosts_parts(tmp_path):
    strategy = trained(MIX)
    state = checkpoint_state(strategy, sampler={"position": 3}, rng=None)
    assert set(state) == {"strategy", "config", "sampler", "rng"} and state["config"] == strategy.config.to_dict()
    torch.save(state, tmp_path / "dataflex.pt")
    loaded = read_state_file(str(tmp_path), "dataflex.pt")
    fresh = build_strategy(MIX)
    assert restore_strategy(fresh, loaded, source="here")["sampler"] == {"position": 3}
    assert fresh.mixing.metrics() == strategy.mixing.metrics() and fresh.mixing.metrics()


def test_a_changed_config_is_refused_naming_the_hosts_setting_unless_strict_is_off():
    state = checkpoint_state(trained(MIX))
    with pytest.raises(
        ConfigError, match=r"cannot resume from ckpt-2: .*changed: mix.*\(here: Trainer\(strict=False\)\)"
    ):
        restore_strategy(build_strategy(CHANGED_MIX), state, source="ckpt-2", strict_setting="Trainer(strict=False)")
    with pytest.raises(ConfigError, match=r"this host has no such setting"):
        restore_strategy(build_strategy(CHANGED_MIX), state, source="ckpt-2")
    relaxed = build_strategy(CHANGED_MIX)
    restore_strategy(relaxed, state, source="ckpt-2", strict=False)
    assert relaxed.mixing.metrics() == trained(MIX).mixing.metrics() != build_strategy(CHANGED_MIX).mixing.metrics()


@pytest.mark.parametrize("state", [[1, 2, 3], {"sampler": {}}, {"strategy": "not a dict"}])
def test_what_is_not_a_strategy_state_is_a_state_error_naming_the_checkpoint(state):
    with pytest.raises(StateError, match=r"ckpt-9 is not a DataFlex strategy state.*written by my trainer"):
        restore_strategy(build_strategy(MIX), state, source="ckpt-9", writer="my trainer")


def test_a_damaged_strategy_state_is_a_state_error_naming_the_checkpoint():
    state = checkpoint_state(trained(MIX))
    del state["strategy"]["config"]
    with pytest.raises(StateError, match=r"cannot resume from ckpt-4: .*lacks key"):
        restore_strategy(build_strategy(MIX), state, source="ckpt-4")


def test_a_folder_without_the_file_warns_and_a_file_safe_loading_refuses_names_the_way_out(tmp_path):
    import numpy as np

    with pytest.warns(UserWarning, match=r"has no dataflex.pt \(saved without my adapter\?\)"):
        assert read_state_file(str(tmp_path), "dataflex.pt", saved_by="my adapter") is None
    torch.save({"strategy": {}, "legacy": np.arange(3)}, tmp_path / "old.pt")
    with pytest.raises(StateError, match=r"weights_only=True.*weights_only=False"):
        load_state_file(str(tmp_path / "old.pt"))
    assert load_state_file(str(tmp_path / "old.pt"), weights_only=False)["legacy"].tolist() == [0, 1, 2]
