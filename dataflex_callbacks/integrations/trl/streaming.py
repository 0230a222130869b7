"""A pre-rollout filter over a streaming train dataset (``datasets.IterableDataset``) in TRL's trainers.

TRL cannot attach a sampler to a stream: its ``get_train_dataloader`` shuffles the stream (a
buffered shuffle seeded by ``args.seed``) and reorders it into ``RepeatSampler``'s layout
(``repeat_iterable_dataset``). With a ``pre_select`` part, `stream_train_dataloader` builds the
same dataloader from a `FilteredStream`: each prompt leaving the shuffle is generated with the
filter's keep probability (`dataflex_callbacks.host.accept_prompts`, the rule of the mixing
sampler), else skipped and counted (``pre_select/skipped_prompts``), and an epoch replaces the
prompts it skipped from the next (reshuffled) pass, so it yields as many prompts as the stream has
rows, as the mixing sampler does for a map-style dataset. The filter decides when the dataloader
reads a prompt, after the shuffle buffer, so it judges with the history of the rollouts observed
so far.

A ``mix`` part needs random access (it draws from the rows of a chosen domain) and is refused
(`train_data.check_stream`); dynamic sampling reads its further rounds from the stream itself
(`dynamic.PromptStream`).

Resuming over a stream: HF Trainer replays the stream's first batches to skip them, and the
filter decides those again with its restored history, so the prompts after a resume are drawn
like a fresh continuation, not bit-identical to an uninterrupted run (a map-style dataset's
sampler resumes exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from dataflex_callbacks.rollout.batch import NO_DOMAIN
from dataflex_callbacks.strategy import Strategy

from .sampling import row_key
from .train_data import is_stream


class StreamFilter:
    """Keep a streamed prompt with the pre-rollout filter's keep probability; count what it skips.

    The stream decides one prompt at a time, as the dataloader reads it, so it applies the core's
    acceptance rule (`Strategy.accept_prompts`) to each row rather than the
    loop over candidates (`Strategy.accept_from`); `FilteredStream` replaces the
    prompts it skips.

    Args:
        strategy: the `Strategy`, with a ``pre_select`` part.
        seed: the run's seed (``args.seed``); the same on every process, so every process keeps the same prompts.
        prompt_key_column: the column naming each prompt (None: `sampling.row_key`'s rule).
        domain_key: the column holding each prompt's domain (rows without it are in `NO_DOMAIN`).
    """

    def __init__(
        self, strategy: Strategy, seed: int, prompt_key_column: str | None = None, domain_key: str | None = None
    ):
        self.strategy, self.prompt_key_column, self.domain_key = strategy, prompt_key_column, domain_key
        self._rng = np.random.Generator(np.random.PCG64(int(seed) * 1_000_003 + 271_828))

    def __call__(self, row: Mapping[str, Any]) -> bool:
        key = row_key(row, self.prompt_key_column)
        label = str(row[self.domain_key]) if self.domain_key is not None and self.domain_key in row else NO_DOMAIN
        passed = self.strategy.accept_prompts([key], 1, self._rng, labels=[label])
        kept = len(passed.accepted) == 1
        self.strategy.record_prompt_draws([key] if kept else [], passed.skipped)
        return kept


class FilteredStream:
    """The prompts TRL generates from over a stream with a pre-rollout filter: the shuffled stream, filtered.

    Every epoch (one iteration of `rows`) reads one pass of the stream and yields the rows the filter
    keeps, then tops up from the following passes until it has yielded as many rows as the pass
    had: skipped prompts are replaced, as the mixing sampler replaces them, so an epoch is never
    empty (every filter keeps a prompt with at least its ``min_keep`` > 0). Each pass is reshuffled
    (``set_epoch``).

    Args:
        dataset: the train stream (``datasets.IterableDataset``).
        seed: the shuffle's seed (``args.seed``, as TRL's own shuffle of a stream).
        shuffle: whether to shuffle (TRL's ``shuffle_dataset``).
        accept: the `StreamFilter`.
    """

    def __init__(self, dataset: Any, seed: int, shuffle: bool, accept: StreamFilter):
        self.dataset, self.accept = dataset, accept
        self.source = dataset.shuffle(seed=int(seed)) if shuffle else dataset
        self.passes = 0  # passes of the stream started so far

    def _next_pass(self):
        self.source.set_epoch(self.passes)
        self.passes += 1
        return iter(self.source)

    def rows(self) -> Iterator[dict]:
        """One epoch of kept rows (see the class docstring)."""
        read = kept = 0
        for row in self._next_pass():
            read += 1
            if self.accept(row):
                kept += 1
                yield row
        while kept < read:
            for row in self._next_pass():
                if self.accept(row):
                    kept += 1
                    yield row
                    if kept >= read:
                        return


def stream_train_dataloader(trainer, original: Callable, callback) -> Any:
    """Wraps ``get_train_dataloader``: over a stream with a ``pre_select`` part, TRL's dataloader over a
    `FilteredStream`; anything else is TRL's own."""
    from datasets import IterableDataset
    from trl.trainer.utils import repeat_iterable_dataset

    strategy = callback.strategy
    dataset = trainer.train_dataset
    if not is_stream(dataset) or not strategy.skips_prompts:
        return original()
    strategy.set_completions_per_prompt(trainer.num_generations)  # what a skipped prompt would have cost
    args = trainer.args
    accept = StreamFilter(strategy, args.seed, callback.options.prompt_key_column, callback.domain_key)
    filtered = FilteredStream(dataset, args.seed, getattr(trainer, "shuffle_dataset", True), accept)
    callback.stream_filter = filtered
    stream = IterableDataset.from_generator(filtered.rows, features=dataset.features)
    stream = repeat_iterable_dataset(
        stream,
        mini_repeat_count=trainer.num_generations,
        batch_size=args.generation_batch_size // trainer.num_generations,
        repeat_count=trainer.num_iterations * args.steps_per_generation,
    )
    return trainer._get_dataloader(
        dataset=stream,
        description="Training",
        batch_size=trainer._train_batch_size * args.steps_per_generation,
        sampler_fn=trainer._get_train_sampler,
        is_training=True,
    )
