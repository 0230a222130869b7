"""`DataFlexGRPOTrainer`: TRL's GRPOTrainer with a data strategy built in, on `DataFlexTrainerMixin`.

The mixin is the trainer side every TRL host shares (`rloo.DataFlexRLOOTrainer` uses it too): it
takes the strategy or a callback, refuses a second strategy, and routes TRL's methods to the callback.
"""

from __future__ import annotations

import inspect
from typing import Any

from trl import GRPOTrainer

from dataflex_callbacks.config.fields import field_defaults
from dataflex_callbacks.errors import ConfigError, HostError, WrongHostError
from dataflex_callbacks.host import as_strategy

from .callback import DataFlexCallback
from .compat import check_trl_trainer
from .options import AdapterOptions
from .streaming import stream_train_dataloader


class DataFlexTrainerMixin:
    """The DataFlex part of a TRL trainer subclass: ``class DataFlexXTrainer(DataFlexTrainerMixin, XTrainer)``.

    Set `callback_class` to the callback serving ``XTrainer``. The strategy and the callback's
    options are taken from the keyword arguments, the rest go to ``XTrainer``; the callback is
    ``trainer.dataflex``.

    Args:
        strategy: a `Strategy`, preset name (``"difffilter"``), config dict or YAML path. May be left
            out when a callback of `callback_class` is passed in ``callbacks=[...]``: that callback is used.
        **kwargs: the adapter's options, `options.AdapterOptions` (``selection_reward``,
            ``domain_key``, ``prompt_key_column``, ``record_decisions``, ``strict``), go to the
            callback; ``*args`` and the other keyword arguments to the TRL trainer.
    """

    callback_class: type[DataFlexCallback] = DataFlexCallback
    """The callback built from ``strategy=``; one passed in ``callbacks=[...]`` must serve the same host."""

    def __init__(self, *args, strategy: Any = None, **kwargs):
        check_trl_trainer(type(self), self.callback_class.host_class, after=DataFlexTrainerMixin)
        options = AdapterOptions.take(kwargs)
        _check_host_arguments(type(self), self.callback_class.host_class, kwargs)
        callbacks = list(kwargs.pop("callbacks", None) or [])
        self.dataflex = _the_callback(self, strategy, callbacks, options)
        if self.dataflex not in callbacks:
            callbacks.append(self.dataflex)
        kwargs["callbacks"] = callbacks
        super().__init__(*args, **kwargs)
        self.dataflex.bind(self)

    def add_callback(self, callback):
        """Add a TrainerCallback; a second `DataFlexCallback` is refused (one strategy per trainer)."""
        is_dataflex = isinstance(callback, DataFlexCallback) or (
            isinstance(callback, type) and issubclass(callback, DataFlexCallback)
        )
        if is_dataflex and callback is not getattr(self, "dataflex", None):
            name = type(self).__name__
            raise ConfigError(
                f"dataflex: this {name} already applies strategy {self.dataflex.strategy.name!r}; a second "
                f"DataFlexCallback would never be attached. Give the strategy once, as {name}(..., strategy=...)."
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

    def get_train_dataloader(self):
        # Over a streaming dataset a pre_select part filters TRL's stream here (see streaming.py); TRL attaches no
        # sampler to a stream.
        return stream_train_dataloader(self, super().get_train_dataloader, self.dataflex)

    def _get_train_sampler(self, dataset=None):
        # A strategy with a mix or pre_select part draws prompts through a DomainMixingSampler here
        # (see DataFlexCallback.train_sampler); any other strategy keeps TRL's RepeatSampler.
        return self.dataflex.train_sampler(self, super()._get_train_sampler, dataset)


class DataFlexGRPOTrainer(DataFlexTrainerMixin, GRPOTrainer):
    """A ``trl.GRPOTrainer`` that applies a DataFlex strategy; every GRPOTrainer argument works unchanged.

    Equivalent to a stock ``GRPOTrainer`` plus ``attach(trainer, strategy)``; the callback is
    available as ``trainer.dataflex``. Arguments: `DataFlexTrainerMixin`'s (``strategy`` and the
    `options.AdapterOptions`), the rest go to ``trl.GRPOTrainer``.
    """

    callback_class = DataFlexCallback


def _the_callback(trainer: DataFlexTrainerMixin, strategy: Any, callbacks: list, options: dict) -> DataFlexCallback:
    """The trainer's one DataFlex callback: the one in ``callbacks`` if the user passed one, else a new one.

    A callback passed in ``callbacks=[...]`` together with ``strategy=`` is accepted when both hold
    the same strategy config (and the ``options`` given, `AdapterOptions`, agree with the callback's);
    otherwise the two strategies are an error.
    A callback for another host (a `DataFlexCallback` on an RLOO trainer) is refused.
    """
    name, callback_class = type(trainer).__name__, trainer.callback_class
    given = [cb for cb in callbacks if isinstance(cb, DataFlexCallback)]
    if any(isinstance(cb, type) and issubclass(cb, DataFlexCallback) for cb in callbacks):
        raise ConfigError(
            f"dataflex: callbacks=[{callback_class.__name__}] passes the class; pass strategy=... to "
            f"{name} instead (it builds the callback)."
        )
    if len(given) > 1:
        raise ConfigError(
            f"dataflex: callbacks=[...] holds {len(given)} DataFlexCallbacks; a trainer applies one "
            f"strategy: keep one, or pass strategy=... to {name} and none in callbacks."
        )
    if not given:
        if strategy is None:
            raise ConfigError(
                f"dataflex: {name} needs strategy=... (preset name, config dict, YAML path or Strategy), "
                f"e.g. {name}(..., strategy='difffilter')."
            )
        return callback_class(strategy, **options)
    callback = given[0]
    check_callback_host(callback, trainer, callback_class)
    if callback.attached:
        raise HostError(
            f"dataflex: this {type(callback).__name__} is already attached to another trainer; create a new one."
        )
    if strategy is not None:
        wanted = as_strategy(strategy)
        if wanted is not callback.strategy and wanted.config != callback.strategy.config:
            raise ConfigError(
                f"dataflex: {name} got strategy={wanted.name!r} and a {type(callback).__name__} with strategy "
                f"{callback.strategy.name!r} in callbacks=[...]: two different strategies. Give the strategy once: "
                f"{name}(..., strategy=...) without the callback, or keep the callback and drop strategy=."
            )
    defaults = field_defaults(AdapterOptions)
    for option, value in options.items():
        held = getattr(callback.options, option)
        if value != defaults[option] and value != held:
            raise ConfigError(
                f"dataflex: {name} got {option}={value!r} but the {type(callback).__name__} in callbacks=[...] has "
                f"{option}={held!r}; set it in one place (on the callback, or on the trainer without a callback)."
            )
    return callback


def _check_host_arguments(trainer_class: type, host_class: type, kwargs: dict[str, Any]) -> None:
    """Refuse a keyword argument that neither the adapter nor the TRL trainer takes, naming both sets of options.

    TRL's own ``TypeError`` would name only its trainer, while the argument was meant for the adapter
    as often (a misspelt or pre-release option name).
    """
    parameters = inspect.signature(host_class.__init__).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        AdapterOptions.check_names(
            kwargs, f"{trainer_class.__name__}(...)", parameters, f"{host_class.__name__}'s own arguments"
        )


def check_callback_host(callback: DataFlexCallback, trainer, wanted: type) -> None:
    """Refuse a callback in ``callbacks=[...]`` that serves another TRL trainer; the error names ``wanted``."""
    if not isinstance(trainer, callback.host_class):
        raise WrongHostError(
            f"dataflex: callbacks=[...] holds a {type(callback).__name__}, which is for "
            f"trl.{callback.host_class.__name__}; this {type(trainer).__name__} needs "
            f"{wanted.__name__}(strategy, ...), "
            "or no callback and the strategy given once (strategy=... on a DataFlex trainer, or "
            "attach(trainer, strategy))."
        )
