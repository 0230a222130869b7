"""How `DomainMixingSampler` reads its arguments: the strategy, one pool or draws by domain, the quota, the
domains, the replicas, the pre-rollout filter's labels, and a data set too small for one batch.

Each check raises the error a user acts on (`ArgumentError` for a wrong type, `ConfigError` for a value that
cannot work), in the order the sampler's constructor runs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dataflex_callbacks._distributed import world_size_and_rank
from dataflex_callbacks.config.fields import QUOTAS
from dataflex_callbacks.config.params import check_choice, check_int
from dataflex_callbacks.config.proportions import check_domains
from dataflex_callbacks.errors import ConfigError, check_argument
from dataflex_callbacks.strategy.strategy import Strategy


class TooFewPromptsError(ConfigError):
    """One batch needs more distinct prompts than the sampler has; a host adapter re-raises it in its own settings.

    Attributes: ``prompts_available`` (``num_samples``) and ``prompts_needed`` (one batch's prompts, all ranks').
    """

    def __init__(self, prompts_available: int, prompts_needed: int, shard: bool) -> None:
        super().__init__(
            f"the sampler has {prompts_available} prompt(s) to draw from (num_samples) but one batch "
            f"needs {prompts_needed} distinct prompts (batch_size{' x num_replicas' if shard else ''}); lower "
            "batch_size or add rows (raise num_samples)"
        )
        self.prompts_available, self.prompts_needed, self.shard = prompts_available, prompts_needed, shard

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.prompts_available, self.prompts_needed, self.shard)


def checked_strategy(strategy: Any) -> Strategy | None:
    """``strategy`` if it is a `Strategy` or None, else an `ArgumentError` naming how to build one."""
    if strategy is None:
        return None
    return check_argument(
        strategy,
        Strategy,
        "strategy",
        "DomainMixingSampler",
        "a Strategy or None",
        "Build one with build_strategy(preset | dict | YAML path)",
    )


def mixing_strategy(strategy: Strategy | None) -> Strategy | None:
    """``strategy`` when its mix part chooses the domains (its target proportions drive the draws), else None."""
    return strategy if strategy is not None and strategy.mix_enabled else None


def draws_pooled(strategy: Strategy | None, mixing: bool | None, proportions: Any) -> bool:
    """Whether the sampler starts drawing from one pool: ``mixing`` False, or None without proportions and
    without a mix part (see ``DomainMixingSampler(mixing=...)``)."""
    mixer = mixing_strategy(strategy)
    if mixing is False and mixer is not None:
        raise ConfigError(
            f"mixing=False asks for one pool, but strategy {mixer.name!r} has a mix part that "
            "chooses domains; drop mixing=False, or use a strategy without a mix part"
        )
    return (mixer is None and proportions is None) if mixing is None else not mixing


def checked_quota(quota: str | None, strategy: Strategy | None, pooled: bool) -> str:
    """The batch split: ``quota``, else the mix part's ``mix.quota``, else ``"independent"``."""
    mixer = mixing_strategy(strategy)
    if quota is None:  # the strategy's mix.quota, else independent draws
        mix = None if mixer is None else mixer.config.mix
        quota = "independent" if mix is None else mix.quota
    quota = check_choice("quota", quota, QUOTAS)
    if pooled and quota == "exact":
        raise ConfigError(
            "quota='exact' splits each batch among domains by proportions, but this sampler draws "
            "from one pool (no proportions, no mix part, or mixing=False); pass proportions={...} "
            "or mixing=True, or a strategy with a mix part"
        )
    return quota


def drawn_domains(domains: Any, present: list[str], strategy: Strategy | None) -> list[str]:
    """The domains to draw from, in order: ``domains``, else the mix part's, else the labels ``present`` (sorted).

    Each must have rows (a `ConfigError` names those without).
    """
    mixer = mixing_strategy(strategy)
    if domains is None and mixer is not None and mixer.domains is not None:
        domains = mixer.domains  # the config's domain order wins over the sorted labels
    if isinstance(domains, (str, Mapping)) or (domains is not None and not hasattr(domains, "__iter__")):
        domains = check_domains(domains, "DomainMixingSampler domains")  # one name is one domain; others refused
    drawn = [str(d) for d in domains] if domains is not None else present
    check_domains(drawn, "DomainMixingSampler domains")
    empty = [d for d in drawn if d not in present]
    if empty:
        raise ConfigError(
            f"domain(s) {empty} have no rows in the dataset; domains with rows: {present}; "
            "remove them from the domain list or add data for them"
        )
    return drawn


def replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)`` for ``layout="shard"``: those given, else torch.distributed's, else 1 and 0."""
    if num_replicas is None or rank is None:
        world_size, own_rank = world_size_and_rank()
        num_replicas = num_replicas if num_replicas is not None else world_size
        rank = rank if rank is not None else own_rank
    check_int("num_replicas", num_replicas, low=1)
    if not 0 <= rank < num_replicas:
        raise ConfigError(f"rank must be in [0, num_replicas={num_replicas}); got {rank}")
    return int(num_replicas), int(rank)


def filter_labels(
    prompt_labels: Sequence[Any] | None, labels: list[str], pooled: bool
) -> tuple[list[str] | None, bool]:
    """The pre-rollout filter's per-row domains, and whether they are the one pool's default (dropped once the
    draws go by domain; see ``DomainMixingSampler(prompt_labels=...)``)."""
    if prompt_labels is not None and len(prompt_labels) != len(labels):
        raise ConfigError(f"prompt_labels has {len(prompt_labels)} entries but the dataset has {len(labels)} rows")
    while_pooled = prompt_labels is None and pooled
    if while_pooled:  # one pool: the domain tells the filter about unseen prompts
        prompt_labels = labels
    return (None if prompt_labels is None else [str(v) for v in prompt_labels]), while_pooled
