"""The TRL adapter's one round driver (`integrations/trl/rounds.py`): shared by dynamic sampling and allocation, with
public names, and its refusals name the part the user wrote."""

import ast
from pathlib import Path

import pytest
import torch

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.integrations.trl.rounds import check_keys

ADAPTER = Path(__file__).resolve().parents[3] / "dataflex_callbacks" / "integrations" / "trl"


@pytest.mark.parametrize("part", ["dynamic_sampling", "allocation"])
def test_a_batch_the_rounds_cannot_reassemble_is_refused_naming_the_part(part):
    with pytest.raises(ConfigError, match=rf"^{part} in the TRL adapter .* \['pixel_values'\].* drop the {part} part"):
        check_keys({"prompt_ids": torch.zeros(1, 1), "pixel_values": torch.zeros(1)}, part)
    other = "allocation" if part == "dynamic_sampling" else "dynamic_sampling"
    with pytest.raises(ConfigError) as error:
        check_keys({"pixel_values": torch.zeros(1)}, part)
    assert other not in str(error.value)


def private_imports(module: str) -> list[str]:
    """The ``_names`` a module of the adapter imports from a sibling module."""
    tree = ast.parse((ADAPTER / f"{module}.py").read_text())
    return [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
        if alias.name.startswith("_")
    ]


def test_the_round_parts_share_the_driver_by_public_names():
    assert private_imports("allocation") == [] and private_imports("dynamic") == []
    for module in ("allocation", "dynamic"):
        imported = [
            node.module
            for node in ast.walk(ast.parse((ADAPTER / f"{module}.py").read_text()))
            if isinstance(node, ast.ImportFrom) and node.level == 1
        ]
        assert "rounds" in imported and ("dynamic" not in imported or module == "dynamic")
