"""`DataFlexGRPOTrainer`: TRL's GRPOTrainer with a data strategy built in (drop-in subclass)."""

from __future__ import annotations

from typing import Any, Optional

from trl import GRPOTrainer

from .callback import DataFlexCallback


class DataFlexGRPOTrainer(GRPOTrainer):
    """A ``trl.GRPOTrainer`` that applies a DataFlex strategy; every GRPOTrainer argument works unchanged.

    Equivalent to a stock ``GRPOTrainer`` plus ``attach(trainer, strategy)``; the callback is
    available as ``trainer.dataflex``.

    Args:
        strategy: a `Strategy`, preset name (``"difffilter"``), config dict or YAML path.
        selection_reward: reward function name the strategy scores on (None: weighted sum).
        domain_column: dataset column holding each prompt's domain.
        prompt_key_column: dataset column with a stable prompt id (None: the ``prompt_key`` column if
            present, else the prompt).
        record_decisions: keep every decision in ``trainer.dataflex.history``.
        *args, **kwargs: passed to ``trl.GRPOTrainer``.
    """

    def __init__(
        self,
        *args,
        strategy: Any,
        selection_reward: Optional[str] = None,
        domain_column: str = "domain",
        prompt_key_column: Optional[str] = None,
        record_decisions: bool = False,
        **kwargs,
    ):
        self.dataflex = DataFlexCallback(
            strategy,
            selection_reward=selection_reward,
            domain_column=domain_column,
            prompt_key_column=prompt_key_column,
            record_decisions=record_decisions,
        )
        callbacks = list(kwargs.pop("callbacks", None) or [])
        kwargs["callbacks"] = callbacks + [self.dataflex]
        super().__init__(*args, **kwargs)
        self.dataflex.bind(self)

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
