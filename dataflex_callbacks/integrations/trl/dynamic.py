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

Round 0 comes from TRL's sampler (the adapter's `DomainMixingSampler` when the strategy has a
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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host import Candidates
from dataflex_callbacks.rollout.batch import NO_DOMAIN
from dataflex_callbacks.sampling.dynamic_sampling import SignalGroupBuffer, SignalGroups
from dataflex_callbacks.strategy import Strategy

from .sampling import row_key
from .train_data import is_stream

LEFT_PADDED = ("prompt_ids", "prompt_mask")
"""Per-row keys of TRL's batch dict that are left-padded (prompts)."""

RIGHT_PADDED = (
    "completion_ids",
    "completion_mask",
    "tool_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "advantages",
)
"""Per-row keys that are right-padded when they are per token (completions), or stacked when per row."""

RECOMPUTED = ("num_items_in_batch",)
"""Keys rebuilt for the rows kept (the adapter's `write_decision` recomputes them)."""

PAD_ID_KEYS = ("prompt_ids", "completion_ids")

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


class PromptStream:
    """A seeded, resumable stream of train rows for further rounds: each pass a fresh shuffle of the dataset.

    A map-style dataset is read by index, each pass a permutation ``randperm(size)`` seeded from
    ``(seed, pass)``. A ``datasets.IterableDataset`` (streaming) is read in order through its own
    buffered shuffle, seeded from ``seed`` and reshuffled every pass (``set_epoch``), independent of
    the iteration TRL's dataloader makes of it. The state is the pass and the rows consumed in it; a
    resumed stream re-reads its pass and skips those rows, so it continues exactly.

    With a ``pre_select`` part, each candidate is generated with its keep probability
    (`Strategy.accept_from`, the loop the mixing sampler runs; the stream is its
    `dataflex_callbacks.host.PromptSource`), and skipped ones are counted by the part.

    Args:
        dataset: the train dataset (map-style, or a ``datasets.IterableDataset``).
        seed: the run's seed (``args.seed``).
        strategy: the `Strategy` whose ``pre_select`` part judges the candidates, or None (no skipping).
        prompt_key_column: the column naming each prompt for the filter (None: `sampling.row_key`'s rule).
        domain_key: the column holding each prompt's domain for the filter's prior; rows without it are in
            `NO_DOMAIN`, as in the sampler of round 0.
    """

    STREAM_SHUFFLE_BUFFER = 1000
    """Rows a streamed pass shuffles among (``datasets.IterableDataset.shuffle``'s default buffer)."""

    def __init__(
        self,
        dataset: Any,
        seed: int,
        strategy: Strategy | None = None,
        prompt_key_column: str | None = None,
        domain_key: str | None = None,
    ):
        self.dataset, self.seed = dataset, int(seed)
        self.streaming = is_stream(dataset)
        self.size = None if self.streaming else len(dataset)
        if self.size == 0:
            raise ConfigError("dynamic_sampling draws further prompts from the train dataset, which is empty")
        self.epoch, self.position = 0, 0
        self.strategy = strategy if strategy is not None and strategy.skips_prompts else None
        self.prompt_key_column = prompt_key_column
        self.domain_key = domain_key
        self._rng = np.random.Generator(np.random.PCG64(self.seed * 1_000_003 + 104_729))
        self._rows: Iterator | None = None  # the streamed pass being read
        self._ahead: list = []  # rows read from the streamed pass but not yet consumed
        self._offered: list = []  # the candidates offered last (see `offer`)
        self._taken: list = []  # the rows the draw in progress accepted so far

    def _permutation(self) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + 7_919 + self.epoch)
        return torch.randperm(self.size, generator=generator)

    def _label(self, row: Mapping[str, Any]) -> str:
        return str(row[self.domain_key]) if self.domain_key is not None and self.domain_key in row else NO_DOMAIN

    def _candidates(self, count: int) -> list:
        """Up to ``count`` next rows of the current pass, not consumed (fewer where the pass ends)."""
        if not self.streaming:
            indices = self._permutation()[self.position : self.position + min(self.size - self.position, count)]
            return [self.dataset[i] for i in indices.tolist()]
        if self._rows is None:
            self._open_pass()
        while len(self._ahead) < count:
            row = next(self._rows, None)
            if row is None:
                break
            self._ahead.append(row)
        if not self._ahead:  # the pass has ended: the next one starts
            if self.position == 0:
                raise ConfigError(
                    "dynamic_sampling draws further prompts from the train dataset, a stream that yields no rows"
                )
            self.epoch, self.position = self.epoch + 1, 0
            self._open_pass()
            return self._candidates(count)
        return self._ahead[:count]

    def _open_pass(self) -> None:
        """Start reading pass ``epoch`` of the stream, skipping the ``position`` rows already consumed."""
        source = self.dataset.shuffle(seed=self.seed * 1_000_003 + 7_919, buffer_size=self.STREAM_SHUFFLE_BUFFER)
        source.set_epoch(self.epoch)
        self._rows, self._ahead = iter(source), []
        for _ in range(self.position):
            next(self._rows, None)

    def _consume(self, count: int) -> None:
        self.position += count
        if self.streaming:
            del self._ahead[:count]
        elif self.position == self.size:
            self.epoch, self.position = self.epoch + 1, 0

    def draw(self, count: int) -> list:
        """The next ``count`` rows (a new pass starts when one ends)."""
        if self.strategy is not None:
            self._taken = []
            self.strategy.accept_from(self, count, self._rng)
            return self._taken
        rows: list = []
        while len(rows) < count:
            candidates = self._candidates(count - len(rows))
            rows += candidates
            self._consume(len(candidates))
        return rows

    def offer(self, need: int) -> Candidates:
        """`dataflex_callbacks.host.PromptSource`: the next rows of the pass, a window of ``max(2 * need, 8)``."""
        self._offered = self._candidates(max(2 * need, 8))
        return Candidates(
            keys=[row_key(r, self.prompt_key_column) for r in self._offered],
            labels=[self._label(r) for r in self._offered],
        )

    def take(self, accepted: np.ndarray, considered: int) -> None:
        """`dataflex_callbacks.host.PromptSource`: keep the accepted rows, consume the ``considered`` ones."""
        self._taken += [self._offered[i] for i in accepted.tolist()]
        self._consume(considered)

    def state_dict(self) -> dict:
        return {
            "size": self.size,
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = None if state["size"] is None else int(state["size"])
        if saved != self.size:
            described = "a stream" if saved is None else f"{saved} rows"
            here = "a stream" if self.size is None else f"{self.size} rows"
            raise ConfigError(
                f"dynamic_sampling: the checkpoint's prompt stream is over {described}, this train "
                f"dataset is {here}; resume with the same dataset"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._rows, self._ahead = None, []  # a streamed pass is re-read from its start and skipped to `position`
        if state.get("rng") is not None:
            self._rng.bit_generator.state = state["rng"]


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
        accelerator, pad_id = trainer.accelerator, _pad_id(trainer)
        local = slice(accelerator.process_index * len(inputs), (accelerator.process_index + 1) * len(inputs))
        buffer.start_step(wanted, step=int(trainer.state.global_step))
        round_index, generated = 0, 0
        fillers: list[tuple[int, int, list]] = []  # (round, first row, rows) of zero-signal groups, for a short step
        while True:
            _check_keys(output)
            rows = _row_payload(*_all_ranks(accelerator, inputs, output, pad_id), rewards_per_func)
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
        inputs, output, rewards_per_func = _assemble(rows, pad_id=pad_id)
        # Every rank assembled the same global batch; it keeps its block of rows (rewards and signal stay global).
        return inputs[local], {key: value[local] for key, value in output.items()}, rewards_per_func, signal, taken

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """The buffer (carried groups with their rows) and the prompt stream's position."""
        return {"buffer": self.buffer.state_dict(), "stream": None if self.stream is None else self.stream.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self._pending_stream = restore_stream(self.stream, state.get("stream"))


def open_stream(
    trainer, strategy: Strategy, prompt_key_column: str | None, domain_key: str | None, pending: dict | None
) -> PromptStream:
    """The seeded `PromptStream` over ``trainer``'s train dataset, at the ``pending`` saved position if one is given."""
    stream = PromptStream(
        trainer.train_dataset,
        trainer.args.seed,
        strategy=strategy,
        prompt_key_column=prompt_key_column,
        domain_key=domain_key,
    )
    if pending is not None:
        stream.load_state_dict(pending)
    return stream


def restore_stream(stream: PromptStream | None, state: Mapping[str, Any] | None) -> dict | None:
    """Load a saved stream position into ``stream``; before the stream is open, return it for `open_stream`."""
    if state is None:
        return None
    if stream is None:
        return dict(state)
    stream.load_state_dict(state)
    return None


# ---------------------------------------------------------------- rows in and out of the buffer


def _check_keys(output: Mapping[str, Any]) -> None:
    unknown = sorted(set(output) - set(LEFT_PADDED) - set(RIGHT_PADDED) - set(RECOMPUTED))
    if unknown:
        raise ConfigError(
            NOT_SUPPORTED.format(
                what=f"TRL batches with the keys {unknown} (multimodal or tool inputs)",
                fix="drop the dynamic_sampling part for this model or dataset",
            )
        )


def _all_ranks(accelerator, inputs: list, output: Mapping[str, Any], pad_id: int) -> tuple[list, dict]:
    """The rows of every rank, in global order: per-token tensors padded to one width (prompts on the left)."""
    if accelerator.num_processes == 1:
        return inputs, dict(output)
    from accelerate.utils import gather_object

    gathered = {}
    for key, value in output.items():
        if key in RECOMPUTED:
            continue
        if value.dim() == 2:
            value = accelerator.pad_across_processes(
                value, dim=1, pad_index=pad_id if key in PAD_ID_KEYS else 0, pad_first=key in LEFT_PADDED
            )
        gathered[key] = accelerator.gather(value)
    return gather_object(list(inputs)), gathered


def _row_payload(inputs: list, output: Mapping[str, Any], rewards_per_func: torch.Tensor) -> list[dict]:
    """One dict per row: its dataset row, its ``(F,)`` rewards and its slice of every per-row tensor."""
    # One copy per key, split into row views (not one copy per row): TRL may reuse its tensors after this.
    rows = {key: value.clone().unbind(0) for key, value in output.items() if key not in RECOMPUTED}
    rewards = rewards_per_func.clone().unbind(0)
    return [
        {"input": row, "rewards": rewards[i], "tensors": {key: value[i] for key, value in rows.items()}}
        for i, row in enumerate(inputs)
    ]


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


def _pad_id(trainer) -> int:
    pad = getattr(trainer, "pad_token_id", None)
    if pad is None:
        pad = trainer.processing_class.pad_token_id
    return int(pad)


def _stack(values: list[torch.Tensor], left: bool, pad: float) -> torch.Tensor:
    """Rows of one key: ``(N,)`` when they are scalars, else ``(N, width)`` padded on the ``left`` or right."""
    if values[0].dim() == 0:
        return torch.stack(values)
    if left:  # pad_sequence pads on the right (its padding_side needs torch >= 2.6)
        return torch.nn.utils.rnn.pad_sequence(
            [value.flip(0) for value in values], batch_first=True, padding_value=pad
        ).flip(1)
    return torch.nn.utils.rnn.pad_sequence(values, batch_first=True, padding_value=pad)


def _assemble(rows: list[dict], pad_id: int) -> tuple[list, dict, torch.Tensor]:
    """TRL's batch dict from row payloads of several rounds: ``(inputs, output, rewards_per_func (N, F))``."""
    inputs = [row["input"] for row in rows]
    rewards = torch.stack([row["rewards"] for row in rows])
    keys = rows[0]["tensors"].keys()
    output = {}
    for key in keys:
        pad = pad_id if key in PAD_ID_KEYS else 0
        output[key] = _stack([row["tensors"][key] for row in rows], left=key in LEFT_PADDED, pad=pad)
    return inputs, output, rewards
