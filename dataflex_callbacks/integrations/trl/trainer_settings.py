"""Every strategy the TRL adapter refuses for its trainer's settings, checked by one function before anything trains.

`check_trl_strategy` holds the rules: the callback runs it when it is built (on the strategy alone, what
``dataflex validate --host trl`` checks) and when it binds a trainer (`TrainerSettings.of`), and
``dataflex compare`` runs it on every strategy with the settings its runs will train with
(`TrainerSettings`, from the run's options) before it writes a folder, so a strategy the adapter would
refuse is named before the others train. The rules that read the train dataset (its columns, its size)
run when the trainer is built, and ``dataflex compare`` checks its data itself (``check_data``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import acts_before_rollout, grpo_fields

from .allocation import check_allocation
from .dynamic import check_dynamic_sampling
from .fewer_groups import check_fewer_groups, check_fewer_groups_loss


@dataclass(frozen=True)
class TrainerSettings:
    """The settings of a TRL trainer that decide whether it can run a strategy; `of` reads them from a trainer.

    Args:
        num_generations: completions per prompt (``GRPOConfig.num_generations``).
        num_processes: training processes (``accelerator.num_processes``).
        shuffle_dataset: ``GRPOConfig.shuffle_dataset``; False asks for the dataset's order.
        environment_factories: whether the trainer rolls out through TRL's ``environment_factories``.
        config_name: the trainer's config class, as messages name it (``"GRPOConfig"``).
        loss_type: ``GRPOConfig.loss_type`` (None: not known).
    """

    num_generations: int
    num_processes: int = 1
    shuffle_dataset: bool = True
    environment_factories: bool = False
    config_name: str = "GRPOConfig"
    loss_type: str | None = None

    @classmethod
    def of(cls, trainer: Any) -> TrainerSettings:
        """The settings of a built TRL ``GRPOTrainer`` or ``RLOOTrainer``."""
        return cls(
            num_generations=int(trainer.num_generations),
            num_processes=int(trainer.accelerator.num_processes),
            shuffle_dataset=getattr(trainer, "shuffle_dataset", True) is not False,
            environment_factories=getattr(trainer, "environment_factories", None) is not None,
            config_name=type(trainer.args).__name__,
            loss_type=getattr(trainer, "loss_type", None),
        )


def check_trl_strategy(strategy: Any, host: type, settings: TrainerSettings | None = None) -> None:
    """Refuse, in one line naming the part and the setting to change, a strategy the TRL ``host`` cannot run.

    Args:
        strategy: a built `Strategy`.
        host: the callback class serving the trainer (`callback.DataFlexCallback`, `rloo.DataFlexRLOOCallback`):
            its ``supports_dynamic_sampling``, ``trainer_name`` and ``host_class``.
        settings: the trainer's settings; None checks the rules on the strategy alone.

    Raises:
        ConfigError: the first rule the strategy breaks.
    """
    if strategy.config.dynamic_sampling is not None:
        if not host.supports_dynamic_sampling:
            raise ConfigError(
                f"dynamic_sampling is not supported by the TRL adapter's {host.trainer_name} yet; "
                "remove the dynamic_sampling part or use the core SignalGroupBuffer in your own "
                "loop (docs/dynamic_sampling.md)"
            )
        check_dynamic_sampling(settings, strategy)
    if strategy.allocates_rollouts:
        if not host.supports_dynamic_sampling:
            raise ConfigError(
                f"allocation is not supported by the TRL adapter's {host.trainer_name} yet; remove the "
                "allocation part, or use DataFlexGRPOTrainer or strategy.allocation_rounds in your own loop "
                "(docs/allocation.md)"
            )
        check_allocation(settings, strategy)
    check_fewer_groups(settings, strategy, host)
    check_fewer_groups_loss(settings, strategy)
    strategy.check_host(grpo_fields(domains=True), host=f"the TRL {host.host_class.__name__}")
    if settings is not None:
        check_shuffle(settings, strategy)


def check_shuffle(settings: TrainerSettings, strategy: Any) -> None:
    """Refuse ``shuffle_dataset=False`` with a strategy that draws its own prompts, instead of ignoring it.

    ``shuffle_dataset=False`` asks TRL for the dataset's order (a curriculum). A ``mix`` part draws
    domains by proportions and a ``pre_select`` part skips prompts, so neither can keep that order.
    """
    if acts_before_rollout(strategy) and not settings.shuffle_dataset:
        raise ConfigError(
            f"dataflex: {settings.config_name}(shuffle_dataset=False) asks for the dataset's order, but "
            f"strategy {strategy.name!r} chooses prompts before rollout (mix: by domain proportions; pre_select: "
            "skipping prompts), which draws them at random and cannot keep that order. Set shuffle_dataset=True, or "
            "drop the strategy's mix / pre_select part to keep the dataset order"
        )
