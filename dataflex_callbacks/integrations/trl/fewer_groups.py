"""Steps of fewer groups in TRL's GRPOTrainer: a prompt ``pre_select`` skips is not replaced (``refill: false``).

With ``refill`` on (the default) TRL's sampler is replaced by a `DomainMixingSampler` that draws a replacement for
every skipped prompt, so a step generates as much as without the filter. With ``refill: false`` TRL's own sampler
draws the step's B prompts (the baseline's stream) and `FewerGroups`, inside the adapter's wrapper of
``_generate_and_score_completions``:

1. runs the ``pre_select`` acceptance rule once over the B drawn prompts (`Strategy.accept_prompts`, one uniform each,
   seeded from ``(args.seed, global_step)``, identical on every rank) and keeps K of them: at least one (TRL builds its
   batch from generated rows), and K * G a multiple of the processes (each takes an equal share), the first skipped
   prompts taking the missing places;
2. generates only the K kept prompts' G completions, by TRL's own scoring, so their rewards, advantages (every
   ``scale_rewards``) and old log-probs are those of a step whose batch is these K groups;
3. fills TRL's fixed shapes (B * G rows) with copies of generated rows (`pad`), masked out of the loss (keep False,
   weight 0): they cost a forward and backward pass of the policy, no generation, and no reward call;
4. normalises the loss as the strategy's ``fewer_groups_loss`` says. ``full`` (the default): the K groups make a full
   update (`STEP_SCALE_KEY`, read by the callback's loss):

===========================  ====================================================================================
loss_type (aggregation)      normaliser of the step with fillers
===========================  ====================================================================================
grpo, sapo, luspo, dr_grpo   TRL's per-row normaliser, times ``R / K_rows`` over the generation batch (R: its rows,
(row-normalised)             K_rows: its rows kept, every process): the step's loss is the mean over its kept rows,
                             however TRL's shuffle spreads the fillers over micro-batches and processes
dapo, cispo, vespo           ``num_items_in_batch`` recounted over kept tokens only (as for any dropped row)
bnpo                         TRL's own: each micro-batch's kept tokens. Exact when a generation batch is one
                             micro-batch per process; otherwise a micro-batch of fillers only adds nothing (use dapo)
===========================  ====================================================================================

``batch``: the loss over TRL's whole batch, the fillers counting as groups without signal (zero advantage): with
``beta = 0`` plain GRPO's update on the same drawn prompts when the groups not generated carry no signal. Row-normalised
losses keep TRL's normaliser over every row (scale 1); dapo, cispo and vespo count each filler with the mean length of
the step's generated completions (`FILLER_TOKENS_KEY`, added to ``num_items_in_batch``); bnpo is refused (its
normaliser is each micro-batch's unmasked tokens, which a filler has none of).

The completions a step generated are logged as ``dataflex/pre_select/step_generated`` (K * G, every process), which
`dataflex run` and `dataflex compare`'s budget count (`recipes.completion_accounting.GENERATED_KEYS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.rollout.batch import NO_DOMAIN, RolloutBatch
from dataflex_callbacks.rollout.decision import Decision

from .sampling import row_key

STEP_SCALE_KEY = "dataflex_step_scale"
"""0-dim entry of TRL's batch dict: the row-normalised loss's ``R / K_rows`` of its generation batch."""

FILLER_TOKENS_KEY = "dataflex_filler_tokens"
"""0-dim entry of TRL's batch dict: with ``fewer_groups_loss: batch``, the tokens the fillers count for in
``num_items_in_batch`` (every process); 0 with ``full``."""

NOT_SUPPORTED = "pre_select.refill=false in the TRL adapter does not support {what}; {fix}"


def check_fewer_groups(settings, strategy, host) -> None:
    """Refuse, in one line naming the setting, what a step of fewer groups cannot run (``settings`` None: the rules on
    the strategy alone)."""
    if strategy.refills_prompts:
        return
    refusals = (
        (not host.supports_fewer_groups, f"the {host.trainer_name}", "use DataFlexGRPOTrainer"),
        (strategy.mix_enabled, "a mix part (its sampler refills by domain)", "drop the mix part"),
        (strategy.config.dynamic_sampling is not None, "a dynamic_sampling part (it refills)", "drop it"),
        (strategy.allocates_rollouts, "an allocation part (its screening refills)", "drop it"),
        (settings is not None and settings.environment_factories, "environment_factories", "drop them"),
    )
    for refused, what, fix in refusals:
        if refused:
            raise ConfigError(NOT_SUPPORTED.format(what=what, fix=f"{fix}, or set pre_select.refill to true"))


def check_fewer_groups_loss(settings, strategy) -> None:
    """Refuse ``fewer_groups_loss: batch`` with TRL's ``bnpo`` loss, whose per-micro-batch normaliser counts only
    unmasked tokens, so a filler cannot count in it."""
    if strategy.config.fewer_groups_loss == "batch" and settings is not None and settings.loss_type == "bnpo":
        raise ConfigError(
            "fewer_groups_loss: batch cannot count the fillers of a step of fewer groups in loss_type='bnpo' (its "
            "normaliser is each micro-batch's unmasked tokens); use loss_type='dapo' (the whole batch's tokens), "
            "or fewer_groups_loss: full"
        )


class FewerGroups:
    """Skip without refilling: choose the kept prompts of TRL's drawn batch, pad TRL's batch, spread the decision.

    Args:
        strategy: the bound strategy; its ``pre_select`` part has ``refill: false``.
    """

    def __init__(self, strategy):
        self.strategy = strategy
        self.domain_key: str | None = None
        self.prompt_key_column: str | None = None
        self._kept: torch.Tensor | None = None  # (B,) bool, the step's kept prompts, between choose and spread

    def bind(self, trainer, domain_key: str | None, prompt_key_column: str | None, stream: bool = False) -> None:
        """Remember the columns naming a prompt and its domain; a skipped prompt saves ``num_generations``.

        ``stream``: the train dataset is an iterable one, refused (TRL's own sampler draws the step's prompts).
        """
        if stream:
            raise ConfigError(
                NOT_SUPPORTED.format(
                    what="a streamed train dataset",
                    fix="load the data as a datasets.Dataset, or set pre_select.refill to true",
                )
            )
        self.domain_key, self.prompt_key_column = domain_key, prompt_key_column
        self.strategy.set_completions_per_prompt(trainer.num_generations)

    def choose(self, trainer, inputs: list) -> list:
        """This rank's rows of the kept prompts (each ``num_generations`` times), from TRL's drawn ``inputs``."""
        accelerator, generations = trainer.accelerator, trainer.num_generations
        rows = _gathered_inputs(accelerator, inputs)
        drawn = rows[::generations]
        keys = [row_key(row, self.prompt_key_column) for row in drawn]
        labels = [self._domain(row) for row in drawn]
        rng = np.random.default_rng([int(trainer.args.seed), int(trainer.state.global_step), 0xF3])
        accepted = self.strategy.accept_prompts(keys, len(drawn), rng, labels=labels).accepted
        kept = np.zeros(len(drawn), dtype=bool)
        kept[accepted] = True
        processes = accelerator.num_processes
        for index in np.flatnonzero(~kept):  # at least one group; K * G rows split evenly over processes
            if kept.any() and (int(kept.sum()) * generations) % processes == 0:
                break
            kept[index] = True
        self.strategy.record_prompt_draws([keys[i] for i in np.flatnonzero(kept)], int((~kept).sum()))
        self._kept = torch.from_numpy(kept)
        chosen = [row for i in np.flatnonzero(kept) for row in rows[i * generations : (i + 1) * generations]]
        per_rank = len(chosen) // processes
        return chosen[accelerator.process_index * per_rank : (accelerator.process_index + 1) * per_rank]

    def step_metrics(self, trainer: Any) -> dict[str, float]:
        """The chosen step's ``pre_select/step_*``: completions generated and groups kept (every process)."""
        assert self._kept is not None  # chosen this step
        generated = int(self._kept.sum()) * trainer.num_generations
        return {"pre_select/step_generated": float(generated), "pre_select/step_groups": float(self._kept.sum())}

    def _domain(self, row: Mapping[str, Any]) -> str:
        return str(row[self.domain_key]) if self.domain_key is not None and self.domain_key in row else NO_DOMAIN


def pad_rows(output: dict, local_rows: int) -> None:
    """Fill this rank's ``output`` (its generated rows) up to TRL's ``local_rows`` with copies of its first row,
    advantage 0 (in place); `fill_rows` masks them out of the loss."""
    generated = output["completion_mask"].shape[0]
    extra = local_rows - generated
    for key, value in output.items():
        if not isinstance(value, torch.Tensor):
            if value is None:
                continue
            raise ConfigError(
                NOT_SUPPORTED.format(what=f"TRL batches with the non-tensor key {key!r}", fix="drop that input")
            )
        if value.dim() >= 1 and value.shape[0] == generated:
            output[key] = torch.cat([value, value[:1].expand(extra, *value.shape[1:])])
    output["advantages"][generated:] = 0


def fill_rows(
    trainer: Any, output: dict, local_rows: int, decision: Decision, batch: RolloutBatch, loss: str = "full"
) -> tuple[Decision, RolloutBatch, torch.Tensor]:
    """Fill TRL's fixed batch with masked rows around the rows a step generated, and lay its decision out on it.

    ``output`` holds this rank's generated rows (an equal share of the ``R`` rows of every rank, which ``decision``
    and ``batch`` cover, in global order); it is padded to ``local_rows`` (`pad_rows`), so each rank's block is its
    real rows then its fillers. Fillers get keep False, weight 0, reward 0 and groups of ``num_generations`` of
    their own; `STEP_SCALE_KEY` and `FILLER_TOKENS_KEY` are set as the strategy's ``fewer_groups_loss`` (``loss``:
    ``full`` or ``batch``) says (the module's docstring). Returns the padded decision, batch and ``(N,)`` rewards.
    """
    pad_rows(output, local_rows)
    processes = trainer.accelerator.num_processes
    total, generated = local_rows * processes, int(batch.rewards.shape[0])
    real = torch.arange(generated)
    index = (real // (generated // processes)) * local_rows + real % (generated // processes)

    def put(values: torch.Tensor) -> torch.Tensor:
        out = values.new_zeros((total, *values.shape[1:]))
        out[index.to(values.device)] = values
        return out

    padded = dataclasses.replace(
        decision,
        keep=put(decision.keep),
        weights=put(decision.weights),
        token_keep=None if decision.token_keep is None else put(decision.token_keep),
        response_weights=None if decision.response_weights is None else put(decision.response_weights),
    )
    assert batch.group_ids is not None  # the adapter's batches are grouped
    group_ids = torch.arange(total) // trainer.num_generations + int(batch.group_ids.max()) + 1
    group_ids[index] = batch.group_ids.cpu()
    padded_batch = RolloutBatch(
        rewards=put(batch.rewards),
        group_ids=group_ids,
        completion_mask=None if batch.completion_mask is None else put(batch.completion_mask),
    )
    kept_rows, device = int(padded.keep.sum()), output["advantages"].device
    filler_tokens = 0.0
    if loss == "full":
        scale = total / kept_rows if kept_rows else 0.0
    else:  # "batch": every row counts, a filler as a generated completion of the step's mean length
        scale = 1.0
        if batch.completion_mask is not None and generated:
            filler_tokens = float(batch.completion_mask.sum()) * (total - generated) / generated
    output[STEP_SCALE_KEY] = torch.tensor(scale, device=device)
    output[FILLER_TOKENS_KEY] = torch.tensor(filler_tokens, device=device)
    return padded, padded_batch, put(batch.rewards)


def _gathered_inputs(accelerator, inputs: list) -> list:
    if accelerator.num_processes == 1:
        return list(inputs)
    from accelerate.utils import gather_object

    return gather_object(list(inputs))
