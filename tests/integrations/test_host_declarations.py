"""Each host's declaration (`register_host`) matches what its adapter refuses, and docs/architecture.md holds the
host x part table written from the declarations (the host kit's `check_host_declaration`, `check_host_decisions`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dataflex_callbacks.host import OWN_LOOP, decide, host_declaration, kept_token_mask
from dataflex_callbacks.host.table import TABLE_END, TABLE_START, builtin_allocators, host_table
from dataflex_callbacks.integrations import verl
from dataflex_callbacks.integrations.verl.config import check_verl_config
from dataflex_callbacks.integrations.verl.fields import loss_fields_from_decision, rollout_batch_from_fields
from dataflex_callbacks.testing import check_host_decisions, check_host_declaration

pytest.importorskip("trl")
pytest.importorskip("lightning")

import lightning as L  # noqa: E402

from dataflex_callbacks.integrations.hosts import load_hosts  # noqa: E402
from dataflex_callbacks.integrations.lightning import DataFlexCallback as LightningCallback  # noqa: E402
from dataflex_callbacks.integrations.trl import DataFlexCallback, DataFlexRLOOCallback  # noqa: E402
from dataflex_callbacks.integrations.trl.async_host import async_fields, check_async_strategy  # noqa: E402
from dataflex_callbacks.integrations.trl.trainer_settings import check_trl_strategy  # noqa: E402

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


class GroupModule(L.LightningModule):
    """A real LightningModule that names its group size, as docs/lightning.md's module does."""

    def __init__(self):
        super().__init__()
        self.group_size = 4


def accepts_lightning(strategy):
    callback = LightningCallback(strategy)
    callback._bind_group_size(GroupModule())  # the check the callback runs at train start, without a Trainer


def accepts_trl_async(strategy):
    check_async_strategy(strategy)
    strategy.check_host(async_fields(domains=True), host="TRL's AsyncGRPOTrainer")


def accepts_verl(strategy):
    check_verl_config({"dataflex": strategy.config.to_dict()})


def accepts_verl_async(strategy):
    check_verl_config(
        {"dataflex": strategy.config.to_dict(), "trainer": {"v1": {"trainer_mode": "dataflex_colocate_async"}}}
    )


def accepts_own_loop(strategy):
    """The core's own doors: the parts a loop drives itself, each built once."""
    if strategy.allocates_rollouts:
        strategy.bind_allocation_group_size(4)
        strategy.allocation_rounds(["a", "b"], ["math", "math"])


ADAPTER_CHECKS = {
    "trl": lambda strategy: check_trl_strategy(strategy, DataFlexCallback),
    "trl-rloo": lambda strategy: check_trl_strategy(strategy, DataFlexRLOOCallback),
    "trl-async": accepts_trl_async,
    "lightning": accepts_lightning,
    "verl": accepts_verl,
    "verl-async": accepts_verl_async,
    OWN_LOOP.key: accepts_own_loop,
}


def test_docs_architecture_holds_the_table_the_declarations_write():
    table = host_table(load_hosts(), builtin_allocators())
    text = ARCHITECTURE.read_text()
    written = text.partition(TABLE_START)[2].partition(TABLE_END)[0].strip()
    assert written == table, (
        "docs/architecture.md's host x part table differs from the hosts' declarations; regenerate it with "
        "python -m dataflex_callbacks.integrations.hosts --write docs/architecture.md"
    )


def test_every_registered_host_is_checked_here():
    assert {host.key for host in load_hosts()} == set(ADAPTER_CHECKS)


@pytest.mark.parametrize("key", sorted(ADAPTER_CHECKS))
def test_a_hosts_declaration_matches_what_its_adapter_refuses(key):
    check_host_declaration(host_declaration(key), ADAPTER_CHECKS[key])


def verl_driver(strategy, batch, step):
    """verl's path: the batch as verl's fields, the adapter's conversion, `decide`, the adapter's loss fields."""
    mask = batch.completion_mask
    last = mask.long().cumsum(dim=1) == mask.long().sum(dim=1, keepdim=True)
    scores = torch.where(last & mask, batch.rewards.unsqueeze(1), torch.zeros(()))  # the outcome on the last token
    tensors = {"response_mask": mask.long(), "token_level_scores": scores, "advantages": batch.advantages}
    tensors |= {"old_log_probs": batch.logprobs, "entropy": batch.entropies}
    uids = [f"uid-{int(g)}" for g in batch.group_ids]
    non_tensors = {"uid": uids, "data_source": batch.domains, "index": batch.prompt_keys}
    decision = decide(strategy, rollout_batch_from_fields(tensors, non_tensors), step, warn=False)
    fields = loss_fields_from_decision(decision, mask.long(), "token-mean")
    return fields["rollout_is_weights"] * fields["loss_mask"]


def own_loop_driver(strategy, batch, step):
    decision = decide(strategy, batch, step, warn=False)
    weights = decision.weights if decision.weights.dim() == 2 else decision.weights.unsqueeze(1)
    return weights * kept_token_mask(decision, batch.completion_mask)


def test_verl_trains_on_the_cores_decisions():
    assert verl.host.SYNC_HOST.key == "verl"
    check_host_decisions("verl", verl_driver)


def test_the_own_loop_driver_trains_on_the_cores_decisions():
    check_host_decisions(OWN_LOOP.key, own_loop_driver)
