"""verl plugin entry point: registers the DataFlex trainers when verl loads its plugins.

verl 0.9.1 calls every ``verl.plugins`` entry point on ``import verl`` (driver and Ray workers,
filtered by ``VERL_USE_EXTERNAL_PLUGINS``: ``auto``, ``none`` or a comma list of entry-point
names) and logs a failing plugin only at DEBUG level. ``register`` therefore logs its own
failures at WARNING, so a broken install is visible instead of surfacing later as
"Unknown trainer 'dataflex_sync'".

Registration is deferred until ``verl.trainer.ppo.v1.trainer_base`` is imported: importing the v1
trainer stack costs seconds and needs verl's ``verl-core`` extras (TransferQueue, fastapi, ...),
and ``import verl`` runs in every Ray worker, most of which never build a trainer. The trainer
registry lives in that module, so anything that can look a trainer up has imported it first.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys

logger = logging.getLogger("dataflex_callbacks.integrations.verl")

TRAINER_BASE = "verl.trainer.ppo.v1.trainer_base"
TRAINER_NAMES = ("dataflex_sync", "dataflex_mix_sync", "dataflex_colocate_async", "dataflex_separate_async")


def register_trainers() -> None:
    """Register the DataFlex trainers under `TRAINER_NAMES` (``trainer.TRAINERS``) beside verl's own (idempotent)."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer

    from .trainer import TRAINERS

    for name in TRAINER_NAMES:
        if TRAINER_REGISTRY.get(name) is not TRAINERS[name]:
            register_trainer(name)(TRAINERS[name])


def _register_logged() -> bool:
    try:
        register_trainers()
    except Exception:  # reported, not swallowed: verl itself would only log this at DEBUG
        logger.warning(
            "dataflex: could not register the verl trainers %s; trainer.v1.trainer_mode=dataflex_sync "
            "will not be available. Cause:",
            ", ".join(TRAINER_NAMES),
            exc_info=True,
        )
        return False
    return True


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Runs the trainer registration right after verl's trainer registry module is executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TRAINER_BASE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            _remove_hook()
            _register_logged()

        loader.exec_module = exec_module
        return spec


_HOOK = _RegisterAfterImport()


def _remove_hook() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def register() -> None:
    """Entry point of the ``verl.plugins`` group (``dataflex = ...plugin:register``)."""
    try:
        if TRAINER_BASE in sys.modules:
            _register_logged()
        elif _HOOK not in sys.meta_path:
            sys.meta_path.insert(0, _HOOK)
    except Exception:
        logger.warning("dataflex: the verl plugin failed to load", exc_info=True)


# verl's loader calls ``entry_point.load()``, which imports this module and resolves the attribute
# without calling it, so the module registers itself on import.
register()
