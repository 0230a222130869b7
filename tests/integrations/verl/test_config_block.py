"""verl reads its ``dataflex:`` block through the core's reader: one check for the 'strategy' key, one message."""

from pathlib import Path

import pytest

from dataflex_callbacks import ConfigError
from dataflex_callbacks.config import load_config
from dataflex_callbacks.integrations.verl.config import strategy_from_verl_config

PACKAGE = Path(__file__).resolve().parents[3] / "dataflex_callbacks"
BAD_BLOCKS = [{"strategy": "difffilter", "select": {}}, {"strategy": None}, {"strategy": {"dataflex": "difffilter"}}]


@pytest.mark.parametrize("block", BAD_BLOCKS, ids=["strategy-with-keys", "null-strategy", "nested-dataflex"])
def test_verl_refuses_a_block_with_the_cores_message(block):
    with pytest.raises(ConfigError) as core:
        load_config({"dataflex": dict(block)})
    with pytest.raises(ConfigError) as verl:
        strategy_from_verl_config({"dataflex": dict(block)})
    assert str(verl.value) == f"verl config 'dataflex': {core.value}"


def test_the_strategy_key_check_is_written_once():
    holders = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if "names a whole strategy" in p.read_text()]
    assert holders == [Path("config/_loading.py")]


def test_verl_reads_the_strategy_key_and_a_plain_block_alike():
    by_key, _ = strategy_from_verl_config({"dataflex": {"strategy": "difffilter", "seed": 3}})
    plain, _ = strategy_from_verl_config({"dataflex": "difffilter"})
    assert by_key.config == plain.config
