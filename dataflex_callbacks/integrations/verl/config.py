"""The top-level ``dataflex:`` block of a verl Hydra config, validated at trainer start.

The block is a strategy config in either form the core accepts (see
`dataflex_callbacks.build_strategy`): the DataFlex-RL single-mechanism block, unchanged::

    dataflex:
      mechanism: select
      scorer: {name: group_solve_rate}
      actuator: {name: threshold_band, params: {low: 0.2, high: 0.8}}

or the composable form (``select`` / ``reweight`` / ``mix`` / ``pre_select``), or a preset name
or YAML path under ``strategy``::

    dataflex:
      strategy: difffilter

Adapter keys, accepted in every form: ``enable`` (default true), ``seed`` (the prompt sampler's
seed; default ``data.seed``) and ``quota`` (the mixing sampler's ``"independent"`` or ``"exact"``
per-batch domain counts, see `DomainMixingSampler`).

DataFlex-RL's mix scripts also set ``trainer.v1.sampler.custom_sampler.path=pkg://dataflex_verl...``
(its replay buffer, which filled each batch with exact per-domain quotas). That module does not
exist here; `drop_reference_sampler` clears those lines with a warning, and the trainer then
mixes in the prompt dataloader with ``quota="exact"`` unless ``quota`` says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dataflex_callbacks import Strategy, build_strategy
from dataflex_callbacks.config import check_block_alone, host_options
from dataflex_callbacks.config.fields import QUOTAS
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import grpo_fields

from .fields import check_loss_agg_mode
from .host import SYNC_HOST

logger = logging.getLogger("dataflex_callbacks.integrations.verl")

ADAPTER_KEYS = ("enable", "seed", "quota")
HOST = "verl's v1 trainer"
HOST_FIELDS = grpo_fields(domains=True)
# verl re-samples itself (DAPO recipe); docs/dynamic_sampling.md says how a dataflex block combines with it.
DYNAMIC_SAMPLING_REFUSAL = (
    "verl config 'dataflex': dynamic_sampling is done by verl itself in this adapter: remove the dynamic_sampling "
    "part and set algorithm.filter_groups.enable=true with algorithm.filter_groups.metric (and max_num_gen_batches "
    "or max_inflight_gen_batches, as in verl's DAPO recipe); a dataflex select part then runs after verl's filter, "
    "on the groups verl trains on (docs/dynamic_sampling.md)"
)
# verl's asynchronous ReplayBuffer trains a group as soon as its uid is finished: the pilot's, before a commit joins it.
ASYNC_MODES = ("dataflex_colocate_async", "dataflex_separate_async")
ALLOCATION_ASYNC_REFUSAL = (
    "verl config 'dataflex': allocation runs in trainer.v1.trainer_mode=dataflex_sync only, not {mode}: there verl's "
    "ReplayBufferAsync samples a prompt's group as soon as its first submission (the pilot) is finished "
    "(verl/trainer/ppo/v1/replay_buffer.py, wait_for_sampleable), while rollouts for later steps run on, so the commit "
    "cannot join its group first; set trainer.v1.trainer_mode=dataflex_sync, or remove the allocation part"
)
# DataFlex-RL's replay buffer, named by its mix scripts; the package is not installed with this library.
REFERENCE_SAMPLER_PACKAGE = "dataflex_verl"
_warned_reference_sampler = False


def dataflex_block(config: Any) -> dict | None:
    """The ``dataflex`` block of a verl config as a plain dict (None when absent or empty)."""
    block = config.get("dataflex", None) if hasattr(config, "get") else None
    if block is None:
        return None
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(block, DictConfig):
            block = OmegaConf.to_container(block, resolve=True)
    except ImportError:  # pragma: no cover - verl always ships omegaconf
        pass
    if isinstance(block, str):
        return {"strategy": block}
    if not isinstance(block, Mapping):
        raise ConfigError(
            f"verl config 'dataflex' must be a mapping (a strategy config) or a preset name; got {block!r}"
        )
    return dict(block) or None


def adapter_options(block: dict) -> dict:
    """Take this adapter's keys (`ADAPTER_KEYS`) out of a ``dataflex:`` block (in place), checked; errors name the key.

    ``enable`` (default true: build the strategy) and ``seed`` (the prompt sampler's seed, default
    ``data.seed``) are the core's `HOST_KEYS`, type-checked there so every host reads a verl file
    alike; ``quota`` (the mixing sampler's per-batch domain counts) is this adapter's alone.
    """
    null_seed = block.get("seed", 0) is None  # here a null seed means data.seed's
    if null_seed:
        del block["seed"]
    options = host_options(block)
    if null_seed:
        options["seed"] = None
    if "quota" in block:
        options["quota"] = block.pop("quota")
        if options["quota"] is not None and options["quota"] not in QUOTAS:
            raise ConfigError(f"dataflex.quota must be one of {', '.join(QUOTAS)}; got {options['quota']!r}")
    return {key: options[key] for key in ADAPTER_KEYS if key in options}


def strategy_from_verl_config(config: Any) -> tuple[Strategy | None, dict]:
    """``(strategy or None, adapter options)`` from a verl config; errors name the bad key.

    Returns ``(None, options)`` when the block is absent or ``enable: false``.
    """
    block = dataflex_block(config)
    if block is None:
        return None, {}
    try:
        check_block_alone(config)
    except ConfigError as error:
        raise ConfigError(f"verl config: {error}") from error
    options = adapter_options(block)
    if not options.get("enable", True):
        return None, options
    try:  # the core reads the rest of the block as every host does (its 'strategy' key alone, or a strategy)
        strategy = build_strategy({"dataflex": block})
    except ConfigError as error:
        raise ConfigError(f"verl config 'dataflex': {error}") from error
    if strategy.config.dynamic_sampling is not None:
        raise ConfigError(DYNAMIC_SAMPLING_REFUSAL)
    if strategy.allocates_rollouts:
        check_allocation(config, strategy)
    return strategy, options


def check_allocation(config: Any, strategy: Strategy) -> None:
    """Refuse, in one line naming the setting, an ``allocation`` part the sync trainer's pilot-and-commit rounds
    (`allocation.VerlAllocation`) cannot run: an asynchronous trainer mode, an allocator that needs more than a pilot
    and one commit into groups of G (`SYNC_HOST`'s declared abilities), verl's own DAPO group filter beside it, a
    ``pre_select`` part with a pilot of 1, a pilot of G or more."""
    mode = _select(config, "trainer.v1.trainer_mode")
    if mode in ASYNC_MODES:
        raise ConfigError(ALLOCATION_ASYNC_REFUSAL.format(mode=mode))
    needs = strategy.allocation_needs
    refusal = SYNC_HOST.allocation.refusal(needs)
    if refusal is not None:
        raise ConfigError(
            f"verl config 'dataflex': allocation {needs.name!r} is not run by verl's dataflex_sync trainer ({refusal}; "
            "it runs a pilot and one commit per prompt into groups of actor_rollout_ref.rollout.n): use 'screen' "
            "with refill: true (e.g. the screen_greso preset), or run it in your own loop (strategy.allocation_rounds)"
        )
    if _select(config, "algorithm.filter_groups.enable"):
        raise ConfigError(
            "verl config 'dataflex': allocation screens prompts itself, and verl's DAPO filter would refill evicted "
            "groups with prompts that skip the pilot; set algorithm.filter_groups.enable=false or remove the "
            "allocation part"
        )
    group_size = _select(config, "actor_rollout_ref.rollout.n")
    try:  # checked on a copy: a pilot of G or more is a ParamError naming the fix
        pilot = strategy.allocation_first_round(None if group_size is None else int(group_size))
    except ConfigError as error:
        raise ConfigError(f"verl config 'dataflex' with actor_rollout_ref.rollout.n={group_size}: {error}") from error
    if strategy.skips_prompts and pilot is not None and pilot < 2:
        raise ConfigError(
            "verl config 'dataflex': a pre_select part with an allocation pilot of 1 completion (pre_select learns "
            "which prompts to skip from the pilots' reward variance, and one completion never varies); use pilot >= 2 "
            "or drop pre_select"
        )


def check_verl_config(config: Any) -> tuple[Strategy | None, dict]:
    """`strategy_from_verl_config` plus every rule the trainer applies to the config before training.

    `DataFlexPPOTrainer` calls it when built, ``dataflex validate`` on a verl file (or ``--host
    verl``). Besides the block's own checks it refuses ``dataflex.quota`` without a mix part, a
    part needing a field verl's trainer does not provide, and an
    ``actor_rollout_ref.actor.loss_agg_mode`` the adapter does not know.
    """
    strategy, options = strategy_from_verl_config(config)
    if options.get("quota") is not None and not getattr(strategy, "mix_enabled", False):
        raise ConfigError(
            "dataflex.quota sets the per-batch domain counts of a mix part, and this strategy has "
            "none; remove dataflex.quota or add a mix part"
        )
    if strategy is not None:
        strategy.check_host(HOST_FIELDS, host=HOST)
        loss_agg_mode = _select(config, "actor_rollout_ref.actor.loss_agg_mode")
        if loss_agg_mode is not None:  # a file may leave it to verl's default
            check_loss_agg_mode(loss_agg_mode)
    return strategy, options


def _mentions_reference_package(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    module = value.removeprefix("pkg://").replace("/", ".")
    return module == REFERENCE_SAMPLER_PACKAGE or module.startswith(REFERENCE_SAMPLER_PACKAGE + ".")


def drop_reference_sampler(config: Any) -> bool:
    """Clear ``trainer.v1.sampler.custom_sampler`` when it names DataFlex-RL's replay buffer; True if cleared.

    verl would otherwise fail with "No module named 'dataflex_verl'" while building its replay
    buffer. The reference's buffer filled each batch with exact per-domain quotas; here the ``mix``
    part draws the prompts themselves through `DomainMixingSampler` (``quota="exact"`` for the
    same batch composition), so verl's own replay buffer is the right one. Warns once per
    process, naming the lines to delete.
    """
    global _warned_reference_sampler
    sampler = _select(config, "trainer.v1.sampler.custom_sampler")
    if sampler is None or not _mentions_reference_package(sampler.get("path", None)):
        return False
    path, name = sampler.get("path"), sampler.get("name", None)
    from omegaconf import DictConfig, open_dict, read_write

    if isinstance(sampler, DictConfig):
        with read_write(sampler), open_dict(sampler):
            sampler["path"], sampler["name"] = None, None
    else:
        sampler["path"], sampler["name"] = None, None
    if not _warned_reference_sampler:
        _warned_reference_sampler = True
        logger.warning(
            "dataflex: ignoring trainer.v1.sampler.custom_sampler.path=%s (name=%s), DataFlex-RL's replay buffer: "
            "this adapter mixes domains in the prompt dataloader (DomainMixingSampler, exact per-domain quotas per "
            "batch as that buffer had; dataflex.quota=independent for independent draws) and uses verl's own "
            "replay buffer. Delete the two 'trainer.v1.sampler.custom_sampler.*' lines to silence this warning",
            path,
            name,
        )
    return True


def _select(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        node = node.get(part, None) if hasattr(node, "get") else None
        if node is None:
            return None
    return node
