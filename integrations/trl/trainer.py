"""`DataFlexGRPOTrainer`: TRL's GRPOTrainer with a data strategy built in (drop-in subclass)."""

from __future__ import annotations

from typing import Any, Optional

from trl import GRPOTrainer

from dataflex_callbacks import Strategy, build_strategy

from .callback import DataFlexCallback


class DataFlexGRPOTrainer(GRPOTrainer):
    """A ``trl.GRPOTrainer`` that applies a DataFlex strategy; every GRPOTrainer argument works unchanged.

    Equivalent to a stock ``GRPOTrainer`` plus ``attach(trainer, strategy)``; the callback is
    available as ``trainer.dataflex``.

    Args:
        strategy: a `Strategy`, preset name (``"difffilter"``), config dict or YAML path. May be left
            out when a `DataFlexCallback` is passed in ``callbacks=[...]``: that callback is used.
        selection_reward: reward function name the strategy scores on (None: weighted sum).
        domain_column: dataset column holding each prompt's domain (None: the config's
            ``domain_key``, else ``"domain"``).
        prompt_key_column: dataset column with a stable prompt id (None: the ``prompt_key`` column if
            present, else the prompt).
        record_decisions: keep every decision in ``trainer.dataflex.history``.
        strict: refuse to resume from a checkpoint saved with a different strategy config
            (``False``: restore only the mixing and pre-rollout state).
        *args, **kwargs: passed to ``trl.GRPOTrainer``.
    """

    def __init__(
        self,
        *args,
        strategy: Any = None,
        selection_reward: Optional[str] = None,
        domain_column: Optional[str] = None,
        prompt_key_column: Optional[str] = None,
        record_decisions: bool = False,
        strict: bool = True,
        **kwargs,
    ):
        options = dict(selection_reward=selection_reward, domain_column=domain_column,
                       prompt_key_column=prompt_key_column, record_decisions=record_decisions, strict=strict)
        callbacks = list(kwargs.pop("callbacks", None) or [])
        self.dataflex = _the_callback(strategy, callbacks, options)
        if self.dataflex not in callbacks:
            callbacks.append(self.dataflex)
        kwargs["callbacks"] = callbacks
        super().__init__(*args, **kwargs)
        self.dataflex.bind(self)

    def add_callback(self, callback):
        """Add a TrainerCallback; a second `DataFlexCallback` is refused (one strategy per trainer)."""
        is_dataflex = isinstance(callback, DataFlexCallback) or callback is DataFlexCallback
        if is_dataflex and callback is not getattr(self, "dataflex", None):
            raise ValueError(
                f"dataflex: this DataFlexGRPOTrainer already applies strategy {self.dataflex.strategy.name!r}; a second "
                "DataFlexCallback would never be attached. Give the strategy once, as DataFlexGRPOTrainer(..., strategy=...)."
            )
        super().add_callback(callback)

    def _calculate_rewards(self, *args, **kwargs):
        return self.dataflex.calculate_rewards(self, super()._calculate_rewards, *args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        return self.dataflex.score_completions(self, super()._generate_and_score_completions, inputs)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self.dataflex.per_token_logps(self, super()._get_per_token_logps_and_entropies, *args, **kwargs)

    def _compute_loss(self, model, inputs):
        return self.dataflex.compute_loss(self, super()._compute_loss, model, inputs)

    def _load_optimizer_and_scheduler(self, checkpoint):
        return self.dataflex.load_optimizer_and_scheduler(self, super()._load_optimizer_and_scheduler, checkpoint)

    def _get_train_sampler(self, dataset=None):
        # A strategy with a mix or pre_select part draws prompts through a DomainMixingSampler here
        # (see DataFlexCallback.train_sampler); any other strategy keeps TRL's RepeatSampler.
        return self.dataflex.train_sampler(self, super()._get_train_sampler, dataset)


_OPTION_DEFAULTS = dict(selection_reward=None, domain_column=None, prompt_key_column=None, record_decisions=False,
                        strict=True)


def _the_callback(strategy: Any, callbacks: list, options: dict) -> DataFlexCallback:
    """The trainer's one `DataFlexCallback`: the one in ``callbacks`` if the user passed one, else a new one.

    A callback passed in ``callbacks=[...]`` together with ``strategy=`` is accepted when both hold
    the same strategy config (and the options agree); otherwise the two strategies are an error.
    """
    given = [cb for cb in callbacks if isinstance(cb, DataFlexCallback)]
    if any(cb is DataFlexCallback for cb in callbacks):
        raise ValueError("dataflex: callbacks=[DataFlexCallback] passes the class; pass strategy=... to "
                         "DataFlexGRPOTrainer instead (it builds the callback).")
    if len(given) > 1:
        raise ValueError(f"dataflex: callbacks=[...] holds {len(given)} DataFlexCallbacks; a trainer applies one "
                         "strategy: keep one, or pass strategy=... to DataFlexGRPOTrainer and none in callbacks.")
    if not given:
        if strategy is None:
            raise ValueError("dataflex: DataFlexGRPOTrainer needs strategy=... (preset name, config dict, YAML path "
                             "or Strategy), e.g. DataFlexGRPOTrainer(..., strategy='difffilter').")
        return DataFlexCallback(strategy, **options)
    callback = given[0]
    if callback.attached:
        raise RuntimeError("dataflex: this DataFlexCallback is already attached to another trainer; create a new one.")
    if strategy is not None:
        wanted = strategy if isinstance(strategy, Strategy) else build_strategy(strategy)
        if wanted is not callback.strategy and wanted.config != callback.strategy.config:
            raise ValueError(
                f"dataflex: DataFlexGRPOTrainer got strategy={wanted.name!r} and a DataFlexCallback with strategy "
                f"{callback.strategy.name!r} in callbacks=[...]: two different strategies. Give the strategy once: "
                "DataFlexGRPOTrainer(..., strategy=...) without the callback, or keep the callback and drop strategy=."
            )
    for name, value in options.items():
        if value != _OPTION_DEFAULTS[name] and value != getattr(callback, name):
            raise ValueError(
                f"dataflex: DataFlexGRPOTrainer got {name}={value!r} but the DataFlexCallback in callbacks=[...] has "
                f"{name}={getattr(callback, name)!r}; set it in one place (on the callback, or on the trainer "
                "without a callback)."
            )
    return callback
