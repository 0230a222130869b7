"""`attach`: plug a data strategy into a stock TRL trainer (``GRPOTrainer``, ``RLOOTrainer`` or ``AsyncGRPOTrainer``)
in one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataflex_callbacks.errors import ConfigError, HostError

from .callback import HOOKS, DataFlexCallback
from .compat import check_trl_trainer
from .rloo import DataFlexRLOOCallback
from .streaming import stream_train_dataloader
from .trainer import check_callback_host


def is_async_trainer(trainer) -> bool:
    """Whether ``trainer`` is TRL's ``AsyncGRPOTrainer`` (by class name first: a synchronous run never imports it)."""
    if not any(cls.__name__ == "AsyncGRPOTrainer" for cls in type(trainer).__mro__):
        return False
    from .async_host import is_async_trainer as check

    return check(trainer)


def attach_async(trainer, strategy: Any, **options):
    """`attach` for TRL's ``AsyncGRPOTrainer``: a `async_grpo.DataFlexAsyncCallback` bound to it;
    returns the callback."""
    from .async_grpo import DataFlexAsyncCallback

    own = getattr(trainer, "dataflex", None)
    if isinstance(own, DataFlexAsyncCallback) and own.attached:
        raise HostError(
            f"dataflex: this {type(trainer).__name__} already applies strategy {own.strategy.name!r}; "
            "attach() is for a stock AsyncGRPOTrainer. Give the strategy once."
        )
    if strategy is None:
        raise ConfigError(
            "dataflex: attach(trainer, strategy) needs a strategy (preset name, dict, YAML path or Strategy)."
        )
    callback = DataFlexAsyncCallback(strategy, **options)
    callback.bind(trainer)
    trainer.add_callback(callback)
    _wrap_method(trainer, "get_train_dataloader", callback.train_dataloader)
    _wrap_method(trainer, "_load_optimizer_and_scheduler", callback.load_optimizer_and_scheduler)
    return callback


HOST_CALLBACKS: tuple[type[DataFlexCallback], ...] = (DataFlexCallback, DataFlexRLOOCallback)
"""The callback of each TRL trainer the adapter supports; `callback_for` picks by ``host_class``."""


def callback_for(trainer) -> type[DataFlexCallback]:
    """The callback class serving ``trainer``: the one whose ``host_class`` it is an instance of.

    A trainer no callback serves gets `DataFlexCallback`, whose ``bind`` names the supported trainers.
    """
    return next((cls for cls in HOST_CALLBACKS if isinstance(trainer, cls.host_class)), DataFlexCallback)


def attach(
    trainer, strategy: Any = None, *, callback_class: type[DataFlexCallback] | None = None, **options
) -> DataFlexCallback:
    """Plug a data strategy into an existing TRL ``GRPOTrainer``, ``RLOOTrainer`` or ``AsyncGRPOTrainer``;
    returns the callback.

    On an ``AsyncGRPOTrainer`` it binds a `async_grpo.DataFlexAsyncCallback` (``options``: its arguments).

    ``attach(trainer, "difffilter")`` adds the callback for the trainer's host (`callback_for`:
    `DataFlexCallback` for GRPO, `DataFlexRLOOCallback` for RLOO); if one was already passed in
    ``callbacks=[...]``, that one is bound (``strategy`` and ``options``, when given, replace its
    own: `DataFlexCallback.reconfigure`). ``options`` are the adapter's, `options.AdapterOptions`
    (``selection_reward``, ``domain_key``, ``strict``, ...). ``callback_class`` names the callback
    to build for a trainer of your own.
    """
    if callback_class is None and is_async_trainer(trainer):
        return attach_async(trainer, strategy, **options)
    callback_class = callback_for(trainer) if callback_class is None else callback_class
    check_trl_trainer(type(trainer), callback_class.host_class)
    own = getattr(trainer, "dataflex", None)
    if isinstance(own, DataFlexCallback) and own.attached:
        host = own.host_class.__name__
        raise HostError(
            f"dataflex: this {type(trainer).__name__} already applies strategy {own.strategy.name!r}; attach() is for "
            f"a stock {host}. Give the strategy once: {own.trainer_name}(..., strategy=...) or "
            f"attach({host}(...), ...)."
        )
    existing = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, DataFlexCallback)]
    if len(existing) > 1:
        raise ConfigError("dataflex: the trainer has several DataFlexCallbacks; keep one (one strategy per trainer).")
    if existing:
        callback = existing[0]
        check_callback_host(callback, trainer, callback_class)
        if callback.attached:
            raise HostError("dataflex: this trainer already has an attached DataFlexCallback; attach it only once.")
        callback.reconfigure(strategy, **options)
    else:
        if strategy is None:
            raise ConfigError(
                "dataflex: attach(trainer, strategy) needs a strategy (preset name, dict, YAML path or Strategy)."
            )
        callback = callback_class(strategy, **options)
        trainer.add_callback(callback)
    callback.bind(trainer)
    for name, hook in HOOKS.items():
        _wrap_method(trainer, name, getattr(callback, hook))
    # Over a streaming dataset a pre_select part filters TRL's stream (streaming.py).
    _wrap_method(
        trainer, "get_train_dataloader", lambda host, original: stream_train_dataloader(host, original, callback)
    )
    return callback


def _wrap_method(trainer, name: str, hook: Callable) -> None:
    original = getattr(trainer, name)

    def wrapped(*args, **kwargs):
        return hook(trainer, original, *args, **kwargs)

    wrapped.__name__ = name
    wrapped.__doc__ = hook.__doc__
    setattr(trainer, name, wrapped)
