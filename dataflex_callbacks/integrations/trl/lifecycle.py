"""`StrategyCallback`: what the synchronous and the asynchronous TRL callbacks share, written once.

The strategy and the adapter's options, binding to one trainer only, the mix part's domains, the
run summary, and the checkpoint round trip (the strategy's state in ``checkpoint-<step>/STATE_FILE``,
beside what each callback adds: `StrategyCallback.checkpoint_parts` / `StrategyCallback.restore_parts`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from dataflex_callbacks.errors import HostError
from dataflex_callbacks.host import as_strategy, checkpoint_state, read_state_file, restore_strategy
from dataflex_callbacks.metrics import RunSummary

from .options import AdapterOptions

STATE_FILE = "dataflex_strategy.pt"
"""File name of the strategy (and sampler) state inside each ``checkpoint-<step>`` folder."""


class StrategyCallback(TrainerCallback):
    """The base of the TRL callbacks (`callback.DataFlexCallback`, `async_grpo.DataFlexAsyncCallback`).

    Args:
        strategy: a `Strategy`, a preset name, a config dict or a YAML path.
        **options: the adapter's options, `AdapterOptions`; kept as ``self.options``.
    """

    trainer_name = "DataFlexGRPOTrainer"
    """The DataFlex trainer class for this host, named in error messages."""

    def __init__(self, strategy: Any, **options: Any):
        self.options = AdapterOptions().updated(options, f"{type(self).__name__}(...)")
        self.strategy = as_strategy(strategy)
        self.domain_key = self.options.domain_key  # the column; resolved against the config's domain_key in bind()
        self.decisions: list[dict[str, Any]] = []
        self.trainer: Any = None
        self.sampler: Any = None  # the DomainMixingSampler choosing prompts, once one is built
        self.summary = RunSummary()  # what the strategy kept, printed at train end

    @property
    def attached(self) -> bool:
        """True once the callback is bound to a trainer (by `attach` or a DataFlex trainer)."""
        return self.trainer is not None

    def refuse_other_trainer(self, trainer: Any) -> None:
        """A callback serves one trainer: binding it to a second is a `HostError`."""
        if self.trainer is not None and self.trainer is not trainer:
            raise HostError(
                f"dataflex: this {type(self).__name__} is already attached to another trainer; create a new one."
            )

    def bind_mix_domains(self, domains: Sequence[str]) -> None:
        """Give a mix part that has no domains of its own the domains the train data holds."""
        if self.strategy.mix_enabled and self.strategy.domains is None:
            self.strategy.bind_domains(domains)

    # ------------------------------------------------------------------ checkpoints
    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Write `save_state` into the checkpoint folder TRL has just written (main process only)."""
        if state.is_world_process_zero:
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            if os.path.isdir(folder):
                self.save_state(folder)
        return control

    def checkpoint_parts(self) -> dict[str, Any]:
        """What the callback saves beside the strategy (a subclass adds its sampler, its buffers)."""
        return {}

    def restore_parts(self, saved: Mapping[str, Any], folder: str) -> None:
        """Restore what `checkpoint_parts` saved (called after the strategy is restored)."""

    def save_state(self, folder: str) -> str:
        """Write the strategy's state and `checkpoint_parts` into a checkpoint folder; returns the file's path."""
        path = os.path.join(folder, STATE_FILE)
        torch.save(checkpoint_state(self.strategy, **self.checkpoint_parts()), path)
        return path

    def load_state(self, folder: str, weights_only: bool = True) -> bool:
        """Restore what `save_state` wrote; False (with a warning) when the folder has none.

        The file is read with ``torch.load(weights_only=True)``, the safe loading TRL and torch use
        by default; ``weights_only=False`` reads a trusted file written by an older version that
        stored numpy values.
        """
        saved = read_state_file(folder, STATE_FILE, weights_only=weights_only, saved_by="the DataFlex adapter")
        if saved is None:
            return False
        restore_strategy(
            self.strategy,
            saved,
            source=folder,
            strict=self.options.strict,
            writer=f"{self.trainer_name} or attach()",
            strict_setting=f"{self.trainer_name}(..., strict=False) or attach(trainer, strategy, strict=False)",
        )
        self.restore_parts(saved, folder)
        return True

    def load_optimizer_and_scheduler(self, trainer: Any, original: Callable, checkpoint: str | None) -> None:
        """Wraps ``_load_optimizer_and_scheduler``: the one trainer hook that receives the resume checkpoint."""
        original(checkpoint)
        if checkpoint is not None:
            self.load_state(checkpoint)
