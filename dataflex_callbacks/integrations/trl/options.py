"""The TRL adapter's options (`AdapterOptions`): one definition for every way a strategy goes into TRL."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from dataflex_callbacks.config.fields import config_field
from dataflex_callbacks.errors import ParamError


@dataclass(frozen=True)
class AdapterOptions:
    """The TRL adapter's options, each written once here with its default and help.

    Give them as keyword arguments wherever the strategy goes in: ``attach(trainer, strategy,
    **options)``, ``DataFlexGRPOTrainer(..., strategy=..., **options)`` (RLOO and async alike) or
    ``DataFlexCallback(strategy, **options)``; the callback keeps them as ``callback.options``.
    ``field_help(AdapterOptions, "strict")`` reads a field's help.
    """

    selection_reward: str | None = config_field(
        None,
        help='reward function the strategy scores on, by name (`"accuracy"`); '
        "`None` = TRL's weighted sum of all reward functions. An unknown name is an error listing the "
        "trainer's reward functions.",
    )
    domain_key: str | None = config_field(
        None,
        help="dataset column with each prompt's domain (per-domain reward metrics, mixing). `None`: the strategy "
        "config's `domain_key` when it sets one (so a DataFlex-RL YAML means the same column as in verl and "
        'Lightning), else `"domain"`. Giving both with different names is an error.',
    )
    prompt_key_column: str | None = config_field(
        None,
        help="dataset column with a stable prompt id (default: the `prompt_key` column if present, else the "
        "prompt); the mixing sampler and the rollout batch use the same key",
    )
    record_decisions: bool = config_field(
        False,
        help="keep every decision in `callback.decisions` (on CPU), for tests and analysis; the asynchronous "
        "callback also keeps each consumed sample's staleness in `callback.consumed_staleness`",
    )
    strict: bool = config_field(
        True,
        help="on `resume_from_checkpoint`, refuse a checkpoint saved with a different strategy config; "
        "`strict=False` restores only the mixing and pre-rollout state (and starts a fresh prompt stream "
        "if the saved one does not fit)",
    )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option's name, in declaration order."""
        return tuple(option.name for option in dataclasses.fields(cls))

    @classmethod
    def check_names(cls, given: Mapping[str, Any], where: str, also: Collection[str] = (), also_text: str = "") -> None:
        """Refuse, naming the valid options, a name in ``given`` that is no option; ``where`` names the call.

        ``also``: further names the call takes (a TRL trainer's own arguments), described by ``also_text``.
        """
        unknown = [name for name in given if name not in cls.names() and name not in also]
        if unknown:
            raise ParamError(
                f"dataflex: {where} got an unknown option {unknown[0]!r}; the options are "
                f"{', '.join(cls.names())} (AdapterOptions)" + (f" and {also_text}" if also else ""),
                param=unknown[0],
            )

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The options among a trainer's keyword arguments, taken out of ``kwargs`` (the rest go to TRL)."""
        return {name: kwargs.pop(name) for name in cls.names() if name in kwargs}

    def updated(self, given: Mapping[str, Any], where: str) -> AdapterOptions:
        """These options with those in ``given`` changed (each name checked, see `check_names`)."""
        self.check_names(given, where)
        return dataclasses.replace(self, **given)
