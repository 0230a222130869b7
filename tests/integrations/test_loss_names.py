"""Each adapter declares its host's loss names (`HostDeclaration.losses`, `host.register_host`) onto the core's
aggregations."""

from __future__ import annotations

import pytest

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import AGGREGATIONS, ROW_NORMALISED, host_losses, loss_aggregation

pytest.importorskip("trl")
pytest.importorskip("lightning")

ADAPTERS = {
    "trl": "dataflex_callbacks.integrations.trl",
    "trl-rloo": "dataflex_callbacks.integrations.trl",
    "lightning": "dataflex_callbacks.integrations.lightning",
    "verl": "dataflex_callbacks.integrations.verl",
    "verl-async": "dataflex_callbacks.integrations.verl",
}


@pytest.fixture(scope="module", autouse=True)
def adapters():
    import importlib

    for module in ADAPTERS.values():
        importlib.import_module(module)


@pytest.mark.parametrize("host", sorted(ADAPTERS))
def test_every_adapters_loss_names_map_onto_the_cores_aggregations(host):
    losses = host_losses(host)
    assert set(losses.kinds.values()) <= set(AGGREGATIONS)
    for name, kind in losses.kinds.items():
        assert loss_aggregation(host, name) == kind


def test_the_row_normalised_losses_of_each_host():
    assert host_losses("trl").names_of(*ROW_NORMALISED) == ("grpo", "sapo", "luspo", "dr_grpo")
    assert host_losses("verl").names_of(*ROW_NORMALISED) == (
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    )
    assert all(name == kind for name, kind in host_losses("lightning").kinds.items())
    assert loss_aggregation("trl-rloo", "rloo") == "sequence_mean"
    with pytest.raises(ConfigError, match=r"unknown verl loss_agg_mode 'mean-of-means'.*'token-mean'.*loss_agg_mode"):
        loss_aggregation("verl", "mean-of-means")
