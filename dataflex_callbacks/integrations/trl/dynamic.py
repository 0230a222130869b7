"""Dynamic sampling in TRL's GRPOTrainer: generate further rounds until the step holds B signal groups.

`DynamicSampling` runs inside the adapter's wrapper of ``_generate_and_score_completions``.
TRL scored its generation batch (round 0); while fewer than B groups carry signal (B = the
groups of TRL's generation batch, ``generation_batch_size // num_generations``) and fewer than
``max_rounds`` rounds were generated, it draws B further prompts, repeats each
``num_generations`` times (``RepeatSampler``'s layout), and calls TRL's own
``_generate_and_score_completions`` on them. Each round goes to a core `SignalGroupBuffer`,
which keeps the signal groups (`dataflex_callbacks.sampling.dynamic_sampling.signal_rows`). The batch
TRL then trains on is rebuilt from exactly B groups, the carried ones first: prompts of
different rounds are left-padded and completions right-padded to common widths, with masks 0
on the padding. Each row keeps the advantage TRL gave it in its own round.

When ``max_rounds`` ends a step short of B, the step trains on the signal groups in hand and
fills the batch with zero-signal groups (round 0's first), masked out of the loss; the metric
``dataflex/dynamic/short`` is then 1. ``DynamicSampling.may_generate``, when set, can end the
rounds the same way (``dataflex compare`` stops at a completions budget with it).

The rounds share the adapter's round driver (`rounds`: the prompt stream, the rows of a round, the assembled batch)
with rollout allocation. Round 0 comes from TRL's sampler (the adapter's `DomainMixingSampler` when the strategy has a
``pre_select`` part; over a streaming dataset, TRL's stream, filtered by `streaming`). Further
rounds come from a seeded stream over the train dataset (`PromptStream`: a fresh permutation per
pass, seeded by ``args.seed``; a ``datasets.IterableDataset`` is read in order through its own
seeded shuffle), independent of TRL's sampler, whose stream stays as it would be without dynamic
sampling. A ``pre_select`` filter
skips prompts in that stream too, and it observes every generated round (not only the groups
trained), so its history and its adaptive keep rate see all the groups it paid for. The stream's
position and generator, and the buffer (carried groups with their rows), go into the checkpoint.

Several processes: every round is judged on the rewards gathered from all ranks, and the rows of
every rank are gathered into the buffer's payload, so every rank takes the same decisions and the
same number of rounds, and assembles the same B groups; each then keeps its contiguous block of
rows (TRL's layout), so shapes are the same on every rank.

Supported: any number of processes; any strategy without a ``mix`` part; text prompts (standard or
conversational); ``steps_per_generation``, ``num_iterations``, gradient accumulation, ``beta``.
The rest is refused by `check_dynamic_sampling` with a line naming the setting, before anything trains
(`trainer_settings.check_trl_strategy`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer, SignalGroups

from .rounds import PromptStream, assemble, open_stream, pad_id, restore_stream, round_rows

NOT_SUPPORTED = "dynamic_sampling in the TRL adapter does not support {what} yet; {fix}"


def check_dynamic_sampling(settings, strategy) -> None:
    """Refuse, with one line naming the setting, what the TRL dynamic-sampling loop does not support yet.

    ``settings``: the trainer's `trainer_settings.TrainerSettings`, or None for the rules on the strategy alone.
    """
    if strategy.mix_enabled:
        raise ConfigError(
            NOT_SUPPORTED.format(
                what="a strategy with a mix part",
                fix="drop the mix part (pre_select works), or the dynamic_sampling part",
            )
        )
    if settings is not None and settings.environment_factories:
        raise ConfigError(NOT_SUPPORTED.format(what="environment_factories", fix="drop the dynamic_sampling part"))


class DynamicSampling:
    """The TRL side of dynamic sampling: rounds, the `SignalGroupBuffer`, and TRL's batch rebuilt from B groups.

    Args:
        strategy: the bound strategy (its ``select`` part judges groups, its ``dynamic_sampling`` part sets
            ``max_rounds``, ``carry_over`` and ``max_age``).
    """

    def __init__(self, strategy):
        self.strategy = strategy
        self.buffer = SignalGroupBuffer(strategy)
        self.stream: PromptStream | None = None
        self._pending_stream: dict | None = None
        self.last: SignalGroups | None = None
        self.may_generate: Callable[[int], bool] | None = None
        """``may_generate(generated)``: asked before each further round with the completions (all processes) the
        step generated so far; False ends the step's rounds as ``max_rounds`` does. Must answer alike on every rank."""

    def bind(self, trainer, domain_key: str | None = None, prompt_key_column: str | None = None) -> None:
        """Open the prompt stream over the trainer's train dataset (its settings are checked by `check_trl_strategy`).

        ``domain_key`` and ``prompt_key_column`` name each prompt's domain and key for a ``pre_select`` filter.
        """
        self.stream = open_stream(trainer, self.strategy, prompt_key_column, domain_key, self._pending_stream)
        self._pending_stream = None

    @staticmethod
    def num_groups(trainer) -> int:
        """B: the groups of TRL's generation batch, all processes together."""
        return trainer.args.generation_batch_size // trainer.num_generations

    def generate(
        self,
        trainer,
        score_round: Callable,
        inputs: list,
        output: dict,
        rewards_per_func: torch.Tensor,
        judge_batch: Callable,
    ) -> tuple[list, dict, torch.Tensor, torch.Tensor, SignalGroups]:
        """Run the rounds of one step, starting from TRL's scored batch; return what the step trains on.

        Args:
            trainer: the TRL GRPOTrainer.
            score_round: ``score_round(inputs) -> (output, rewards_per_func (N, F))``, TRL's own scoring.
            inputs: round 0's ``N`` dataset rows (each prompt ``num_generations`` times in a row).
            output: TRL's batch dict for round 0.
            rewards_per_func: ``(N, F)`` round 0's rewards, one column per reward function.
            judge_batch: ``judge_batch(inputs, output, rewards_per_func) -> RolloutBatch``, the global batch
                the buffer judges.

        Returns:
            ``(inputs, output, rewards_per_func, signal, taken)``: the ``N`` rows TRL trains on (B groups), their
            batch dict and ``(N, F)`` rewards, ``(N,)`` bool signal rows (False on zero-signal groups filling a
            short step), and the buffer's `SignalGroups`.
        """
        buffer, generations = self.buffer, trainer.num_generations
        wanted = self.num_groups(trainer)
        accelerator, pad = trainer.accelerator, pad_id(trainer)
        local = slice(accelerator.process_index * len(inputs), (accelerator.process_index + 1) * len(inputs))
        buffer.start_step(wanted, step=int(trainer.state.global_step))
        round_index, generated = 0, 0
        fillers: list[tuple[int, int, list]] = []  # (round, first row, rows) of zero-signal groups, for a short step
        while True:
            rows = round_rows(trainer, inputs, output, rewards_per_func, "dynamic_sampling")
            judged = judge_batch(inputs, output, rewards_per_func)
            signal = buffer.add(judged, payload=rows)  # a pre_select filter observes every round here
            # A short step fills up with the earliest zero-signal groups: at most `wanted` of them are ever used.
            zero = (~signal.cpu()).view(-1, generations)[:, 0].nonzero().flatten().tolist()[: wanted - len(fillers)]
            fillers += [(round_index, g * generations, rows[g * generations : (g + 1) * generations]) for g in zero]
            generated += len(rows)
            if not buffer.should_generate_more():
                break
            if self.may_generate is not None and not self.may_generate(generated):
                break
            round_index += 1
            prompts = self.stream.draw(wanted)
            inputs = [row for row in prompts for _ in range(generations)][local]  # RepeatSampler's layout
            output, rewards_per_func = score_round(inputs)
        taken = buffer.take()
        self.last = taken
        groups = _ordered_groups(taken, fillers, wanted, generations)
        rows = [row for _, row_group in groups for row in row_group]
        signal = torch.tensor([flag for flag, row_group in groups for _ in row_group], dtype=torch.bool)
        inputs, output, rewards_per_func = assemble(rows, pad_id=pad)
        # Every rank assembled the same global batch; it keeps its block of rows (rewards and signal stay global).
        return inputs[local], {key: value[local] for key, value in output.items()}, rewards_per_func, signal, taken

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """The buffer (carried groups with their rows) and the prompt stream's position."""
        return {"buffer": self.buffer.state_dict(), "stream": None if self.stream is None else self.stream.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self._pending_stream = restore_stream(self.stream, state.get("stream"))


# ---------------------------------------------------------------- a step's groups


def _ordered_groups(taken: SignalGroups, fillers: list, wanted: int, generations: int) -> list[tuple[bool, list]]:
    """The step's groups as ``(carries_signal, rows)``: carried first, then this step's by (round, row).

    A short step adds zero-signal groups (earliest rounds first) until it holds ``wanted`` groups.
    """
    sizes = taken.group_sizes.tolist()
    starts = list(itertools.accumulate([0, *sizes]))[:-1]  # each group's first row
    carried, fresh = [], []
    for start, size in zip(starts, sizes, strict=True):
        rows = taken.payload[start : start + size]
        round_index = int(taken.source_round[start])
        if round_index < 0:
            carried.append((True, rows))
        else:
            fresh.append(((round_index, int(taken.source_rows[start])), True, rows))
    missing = wanted - len(sizes)
    if missing > 0:
        fresh += [((round_index, first), False, rows) for round_index, first, rows in fillers[:missing]]
    fresh.sort(key=lambda item: item[0])
    return carried + [(flag, rows) for _, flag, rows in fresh]
