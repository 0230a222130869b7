"""Every published DataFlex-RL `dataflex:` block loads (bare, wrapped, as a file, inside a verl config).

The blocks live in ``reference_blocks/`` as data. Each must build with `build_strategy` and pass
`dataflex validate` (the CLI's own entry point), and reference-form blocks must take the
reference plugin's defaults where the library's own defaults differ.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dataflex_callbacks import ConfigError, build_strategy
from dataflex_callbacks.config import load_config
from dataflex_callbacks.recipes.cli import main as dataflex_cli

HERE = Path(__file__).parents[1] / "reference_blocks"
BLOCKS = yaml.safe_load((HERE / "blocks.yaml").read_text())
UNSUPPORTED = yaml.safe_load((HERE / "unsupported.yaml").read_text())
VERL_BASE = yaml.safe_load((HERE / "verl_base.yaml").read_text())


def verl_config(entry: dict) -> dict:
    """A full verl config carrying the block, with the trainer keys the reference scripts set beside it."""
    config = copy.deepcopy(VERL_BASE)
    config["trainer"]["v1"] = {"trainer_mode": entry["trainer_mode"]}
    if entry["trainer_mode"] == "dataflex_mix_sync":
        config["trainer"]["v1"]["sampler"] = {
            "custom_sampler": {"path": "pkg://dataflex_verl.replay_buffer", "name": "DataFlexMixReplayBuffer"}
        }
    config["dataflex"] = copy.deepcopy(entry["block"])
    return config


def validate(path: Path, capsys) -> tuple[int, str]:
    code = dataflex_cli(["validate", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_collection_is_complete():
    assert len(BLOCKS) >= 30
    assert {entry["block"]["mechanism"] for entry in BLOCKS.values()} == {"select", "reweight", "mix"}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_block_builds_bare_wrapped_and_inside_a_verl_config(name):
    block = BLOCKS[name]["block"]
    strategy = build_strategy(copy.deepcopy(block))
    assert build_strategy({"dataflex": copy.deepcopy(block)}).config == strategy.config
    assert build_strategy(verl_config(BLOCKS[name])).config == strategy.config
    if block["mechanism"] == "mix":
        assert strategy.mix_enabled and strategy.domains == block["domains"]
    assert strategy.domain_key == block.get("domain_key")  # None when the block leaves the column to the host


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_block_passes_dataflex_validate_as_a_file(name, tmp_path, capsys):
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(BLOCKS[name]["block"]))
    full = tmp_path / "verl.yaml"
    full.write_text(yaml.safe_dump(verl_config(BLOCKS[name]), sort_keys=False))
    for path in (bare, full):
        code, output = validate(path, capsys)
        assert code == 0, output
        assert build_strategy(path).config == build_strategy(BLOCKS[name]["block"]).config


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_distillation_blocks_fail_clearly(name, tmp_path, capsys):
    entry = UNSUPPORTED[name]
    with pytest.raises(ConfigError, match=entry["error"]):
        build_strategy(entry["block"])
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump({**verl_config({"trainer_mode": "dataflex_sync", "block": entry["block"]})}))
    code, output = validate(path, capsys)
    assert code == 2 and entry["error"] in output and "Traceback" not in output
    assert len(output.strip().splitlines()) == 1


def test_a_verl_config_without_a_dataflex_block_is_refused_clearly(tmp_path, capsys):
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(VERL_BASE))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['actor_rollout_ref', 'algorithm'.*'dataflex:'"):
        build_strategy(path)
    code, output = validate(path, capsys)
    assert code == 2 and "dataflex:" in output


def test_strategy_keys_beside_a_dataflex_block_are_refused():
    with pytest.raises(ConfigError, match="beside it"):
        load_config({"dataflex": BLOCKS["readme_select"]["block"], "mix": {"mixer": "static"}})
    with pytest.raises(ConfigError, match="empty"):
        load_config({"dataflex": None, "trainer": {}})
    assert load_config({"dataflex": "difffilter", "trainer": {"nnodes": 1}})["name"] == "difffilter"


# ---------------------------------------------------------------- the reference's defaults


def resolved(block: dict) -> dict:
    return load_config(block)


@pytest.mark.parametrize(
    "actuator, part, key, expected",
    [
        ({"name": "gfpo", "params": {"metric": "efficiency"}}, "select", "selector", {"k": 8, "metric": "efficiency"}),
        ({"name": "advantage_reweight"}, "reweight", "reweighter", {"alpha": 0.5}),
        ({"name": "per_advantage"}, "reweight", "reweighter", {"alpha": 0.5}),
        ({"name": "gfpo", "params": {"k": 2}}, "select", "selector", {"k": 2}),  # given values win
    ],
)
def test_reference_form_takes_the_reference_defaults(actuator, part, key, expected):
    mechanism = part
    scorer = "token_prob" if actuator["name"] == "advantage_reweight" else "reward_difficulty"
    config = resolved({"mechanism": mechanism, "scorer": {"name": scorer}, "actuator": actuator})
    assert config[part][key]["params"] == expected


@pytest.mark.parametrize(
    "mixer, expected",
    [
        ("reward_gap", {"temperature": 1.0}),
        ("dump_ucb", {"temperature": 1.0, "c": 1.0}),
        ("tscl", {"temperature": 1.0}),
        ("static", {}),
    ],
)
def test_reference_form_mix_takes_the_reference_schedule_and_row_window(mixer, expected):
    mix = resolved({"mechanism": "mix", "scorer": "reward_difficulty", "actuator": mixer, "domains": ["a", "b"]})["mix"]
    assert mix["mixer"]["params"] == expected
    assert (mix["warmup_steps"], mix["update_every"], mix["window"], mix["window_unit"]) == (0, 1, 50, "rows")
    strategy = build_strategy(
        {"mechanism": "mix", "scorer": "reward_difficulty", "actuator": mixer, "domains": ["a", "b"]}
    )
    for name, value in expected.items():
        assert getattr(strategy.mixing.mixer, name) == value


def test_strategy_builds_the_row_window_of_a_reference_mix_block():
    strategy = build_strategy(BLOCKS["readme_mix"]["block"])
    assert strategy.mixing.tracker.window_unit == "rows" and strategy.mixing.update_every == 5


def test_library_presets_keep_the_library_defaults():
    assert load_config("gfpo")["select"]["selector"]["params"]["k"] == 3
    assert load_config("ar")["reweight"]["reweighter"]["params"]["alpha"] == 0.3
    assert load_config("per")["reweight"]["reweighter"]["params"]["alpha"] == 0.6
    mix = load_config("reward_gap")["mix"]
    assert mix["mixer"]["params"] == {} and (mix["update_every"], mix["window_unit"]) == (5, "steps")
    assert build_strategy("reward_gap").mixing.mixer.temperature == 0.1
    composable = load_config({"select": {"scorer": "reward", "selector": "gfpo"}})
    assert composable["select"]["selector"]["params"] == {}  # the composable form is the library's own
