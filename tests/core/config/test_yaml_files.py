"""Every YAML file the library reads refuses duplicate keys and alias bombs, naming the file and the line (issue 46)."""

import time

import pytest

from dataflex_callbacks import ConfigError, build_strategy
from dataflex_callbacks.config import load_config
from dataflex_callbacks.config._yaml_files import MAX_EXPANDED_VALUES, read_yaml_file

TWO_SELECTS = (
    "select:\n  scorer: reward\n  selector: topk_fraction\n"
    "select:\n  scorer: advantage_magnitude\n  selector: topk_fraction\n"
)


def alias_bomb(levels: int = 9) -> str:
    """About 1 KB of nested aliases that expand to 9**levels values (the billion-laughs pattern)."""
    text = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    previous = "a"
    for index in range(1, levels):
        name = f"l{index}"
        text += f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    return text + f"select: *{previous}\n"


@pytest.mark.parametrize(
    "content, line, key",
    [
        (TWO_SELECTS, 4, "select"),
        ("select: {scorer: reward, scorer: token_entropy, selector: topk_fraction}\n", 1, "scorer"),
        ("dataflex:\n  strategy: topk\ntrainer: {total_epochs: 1}\ndataflex: {strategy: difffilter}\n", 4, "dataflex"),
        ("mix:\n  mixer: static\n  domains: [a, b]\n  domains: [c]\n", 4, "domains"),
    ],
)
def test_a_key_given_twice_is_refused_naming_it_and_its_lines(tmp_path, content, line, key):
    path = tmp_path / "twice.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    message = str(info.value)
    assert f"line {line}: key {key!r} is given twice" in message and "twice.yaml" in message


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert path.stat().st_size < 1024
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="expand to more than 100,000 values"):
        build_strategy(str(path))
    assert time.perf_counter() - start < 1.0


def test_an_alias_that_holds_itself_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("select: &s {scorer: reward, selector: [*s]}\n")
    with pytest.raises(ConfigError, match="line 1: an alias refers to the value that holds it"):
        load_config(str(path))


def test_ordinary_aliases_and_merge_keys_are_read_as_yaml_means_them(tmp_path):
    """A merge brings keys in that the mapping may override: that is no duplicate."""
    path = tmp_path / "verl.yaml"
    path.write_text(
        "defaults: &defaults {scorer: reward, selector: topk_fraction}\n"
        "trainer: {total_epochs: 1}\n"
        "dataflex:\n  select:\n    <<: *defaults\n    scorer: advantage_magnitude\n"
    )
    assert load_config(str(path))["select"]["scorer"]["name"] == "advantage_magnitude"
    assert read_yaml_file(path)["defaults"] == {"scorer": "reward", "selector": "topk_fraction"}


def test_a_file_just_under_the_bound_is_read(tmp_path):
    path = tmp_path / "wide.yaml"
    path.write_text("row: &row [" + ", ".join(["1"] * 99) + "]\nrows: [" + ", ".join(["*row"] * 900) + "]\n")
    assert len(read_yaml_file(path)["rows"]) == 900
    assert 900 * 100 < MAX_EXPANDED_VALUES


def test_the_presets_and_a_dataflex_rl_block_still_read(tmp_path):
    path = tmp_path / "reference.yaml"
    path.write_text(
        "dataflex:\n  mechanism: select\n  scorer: {name: reward}\n  actuator: {name: gfpo}\n  warmup_step: 0\n"
    )
    assert load_config(str(path))["select"]["selector"]["params"] == {"k": 8}
    assert load_config("difffilter")["name"] == "difffilter"
