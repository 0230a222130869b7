"""`DomainMixingSampler`: a DataLoader sampler that draws prompts by per-domain proportions.

Draws happen chunk by chunk (one chunk = one batch of prompts, the generation batch), each chunk
under the proportions current at that moment, so a mixer can change them between batches;
nothing is precomputed for an epoch. Within a domain, rows are drawn without replacement until the
domain is exhausted, then reshuffled; when that happens inside a chunk, the rows the chunk already
holds go to the end of the new pass, so no row appears twice in one chunk while its domain has
unused rows. A chunk that draws more rows of a domain than it has must repeat some; the first such
chunk warns (`RepeatedRowWarning`). The per-domain passes run across epochs: an epoch is ``num_samples`` prompts, not
one pass over the data.

Without proportions and without a strategy that has a mix part, the sampler draws from all rows
as one pool (the data's own domain distribution, like ``RandomSampler``) until `set_proportions`
is called. ``quota="exact"`` gives each chunk exactly the largest-remainder quotas of the target
proportions instead of independent draws.

Two layouts:

- ``layout="grpo"`` reproduces TRL's ``RepeatSampler``: each prompt repeated ``num_generations``
  times in a row, each chunk of ``batch_size`` prompts repeated ``repeat_count`` times, the same
  stream on every rank (the host shards batches itself).
- ``layout="shard"`` gives each of ``num_replicas`` ranks different rows of one global draw
  (Lightning, plain DDP): rank ``r`` gets positions ``r, r + R, ...`` of each global chunk of
  ``batch_size * R`` prompts.

Resume: `state_dict` stores the random state, the per-domain passes, the rows of every chunk drawn
so far in the epoch, how many indices were yielded and a fingerprint of the data (row count,
domain labels, prompt keys). A restored sampler re-yields the logged chunks and then draws on:
hosts that re-iterate and skip the consumed batches (``resume="replay"``, HF Trainer / accelerate)
and hosts that expect the stream to go on where it stopped (``resume="continue"``) both get the
uninterrupted run's stream, also when proportions or a pre-rollout filter changed mid-epoch. A
state saved after the last index of an epoch resumes with the next epoch in both modes. Calling
``iter()`` again mid-epoch without a restore abandons the rest of that epoch and starts the next
one. A state saved for other data (rows added, removed, reordered or relabelled) is refused.

Pre-rollout selection: with a strategy that has a ``pre_select`` part, the mixer still chooses
the domain and the filter chooses within it, skipping prompts it predicts to be useless.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Hashable, Iterator, Mapping, Sequence
from operator import length_hint
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from dataflex_callbacks.config.params import check_bool, check_choice, check_int
from dataflex_callbacks.config.proportions import check_proportions
from dataflex_callbacks.errors import ConfigError, StateError, check_state
from dataflex_callbacks.sampling._block_drawer import BlockDrawer, largest_remainder_quotas
from dataflex_callbacks.sampling._sampler_data import (
    data_change,
    data_fingerprint,
    domain_labels,
    read_labels,
    row_domains,
    row_keys,
)
from dataflex_callbacks.sampling._sampler_setup import (
    TooFewPromptsError,
    checked_quota,
    checked_strategy,
    drawn_domains,
    draws_pooled,
    filter_labels,
    mixing_strategy,
    replicas,
)
from dataflex_callbacks.sampling._sampler_state import (
    STATE_KEYS,
    SavedDraws,
    check_draw_settings,
    check_saved_rows,
    read_saved_draws,
)
from dataflex_callbacks.strategy.strategy import Strategy

__all__ = ["DomainMixingSampler", "domain_labels", "largest_remainder_quotas"]


class DomainMixingSampler(Sampler[int]):
    """Sample dataset rows so that each batch follows per-domain proportions (or the data's own mix).

    Args:
        dataset: map-style dataset whose rows carry a domain label (or pass ``labels``).
        labels: per-row domain labels, instead of reading them from ``dataset``.
        domain_key: name of the domain column. A one-pool sampler (see ``mixing``) given
            ``mixing=False`` or a ``strategy`` accepts a dataset without it (all rows: domain `NO_DOMAIN`,
            ``"all"``, the domain under which rollouts without domains are recorded).
        domains: the domains to draw from, in order (default: the strategy's mix domains if it has
            them, else the sorted labels). Each must have rows; rows of other domains are never drawn.
        proportions: initial proportions ``{domain: p}`` (or a list in domain order); giving them
            turns mixing on (see ``mixing``). Ignored when a strategy with a mix part drives the sampler.
        batch_size: prompts per chunk (per rank in ``layout="shard"``); proportions are read once
            per chunk, and a chunk never holds a row twice while its domain has unused rows.
        num_generations: consecutive repeats of each prompt (GRPO group size), ``layout="grpo"``.
        repeat_count: repeats of each chunk (TRL's ``num_iterations * steps_per_generation``),
            ``layout="grpo"``.
        num_samples: prompts per epoch (default: rows of the drawn domains), rounded down to
            whole chunks.
        layout: ``"grpo"`` (same stream on every rank) or ``"shard"`` (rank-disjoint rows).
        num_replicas, rank: for ``layout="shard"`` (default: torch.distributed's, else 1 and 0).
        strategy: a `Strategy`; with a mix part its target proportions drive the draws and the
            sampler reports what it drew back to it (``strategy.observe_sampled``); with a
            ``pre_select`` part its filter skips prompts within the chosen domain (or the pool).
        seed: random seed, an int ``>= 0``; the stream is a function of seed and the proportions used.
        resume: ``"replay"`` or ``"continue"`` (see module docstring).
        prompt_key_column: column naming each prompt for a pre-rollout filter (default: ``prompt_key``,
            else ``prompt``, else the row index: `row_prompt_key`'s rule, which adapters share).
        prompt_labels: each row's domain, for the pre-rollout filter to predict prompts it has not
            seen from their domain (its ``domain_prior``). A one-pool sampler uses its domain labels
            for this by default (`NO_DOMAIN` for data without a domain column); with per-domain
            draws the draw already fixes the domain and a domain prior would skip candidates of the
            chosen domain at random, so the default is no prior.
        mixing: ``True``: draw each prompt's domain by the proportions (uniform unless given), then a
            row of it. ``False``: draw from all rows of ``domains`` as one pool, so each domain keeps
            its share of the data (``RandomSampler``'s distribution; a skipped prompt is replaced from
            any domain). ``None`` (default): mixing when ``proportions`` are given or ``strategy`` has a
            mix part, else one pool until the first `set_proportions` call.
        quota: ``None`` (default): the strategy's ``mix.quota`` (``"exact"`` for a DataFlex-RL mix
            block, else ``"independent"``). ``"independent"``: each prompt's domain is an independent draw from the
            proportions, so a batch's shares vary around the target. ``"exact"``: every chunk holds
            exactly `largest_remainder_quotas` (target, chunk size) prompts of each domain (the
            global chunk of ``batch_size * num_replicas`` in ``layout="shard"``), in random positions;
            as DataFlex-RL's replay buffer fills its batches. Needs mixing.
    """

    def __init__(
        self,
        dataset: Any = None,
        *,
        labels: Sequence[str] | None = None,
        domain_key: str = "domain",
        domains: Sequence[str] | None = None,
        proportions: Mapping[str, float] | Sequence[float] | None = None,
        batch_size: int = 8,
        num_generations: int = 1,
        repeat_count: int = 1,
        num_samples: int | None = None,
        layout: str = "grpo",
        num_replicas: int | None = None,
        rank: int | None = None,
        strategy: Strategy | None = None,
        seed: int = 0,
        resume: str = "replay",
        prompt_key_column: str | None = None,
        prompt_labels: Sequence[str] | None = None,
        mixing: bool | None = None,
        quota: str | None = None,
    ) -> None:
        self.strategy = strategy = checked_strategy(strategy)
        self._mixer = mixing_strategy(strategy)  # a strategy whose mix part sets the targets, else None
        self._mixing_option = None if mixing is None else check_bool("mixing", mixing)
        pooled = draws_pooled(strategy, self._mixing_option, proportions)
        self.quota = checked_quota(quota, strategy, pooled)
        self.seed = check_int("seed", seed, low=0)
        # A pool needs no domains; a plain sampler without the column is more likely a wrong domain_key.
        optional = pooled and (self._mixing_option is False or strategy is not None)
        labels, self.domain_key = read_labels(dataset, labels, domain_key, optional=optional)
        present = sorted(set(labels))
        self.domains = drawn_domains(domains, present, strategy)
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.num_generations = check_int("num_generations", num_generations, low=1)
        self.repeat_count = check_int("repeat_count", repeat_count, low=1)
        self.layout = check_choice("layout", layout, ("grpo", "shard"))
        self.resume = check_choice("resume", resume, ("replay", "continue"))
        self.num_replicas, self.rank = replicas(num_replicas, rank)
        if self._mixer is not None:
            self._mixer.bind_domains(self.domains)
        if strategy is not None:  # what a skipped prompt saves, for the pre-rollout filter's metrics
            strategy.set_completions_per_prompt(self.num_generations)
        codes, domain_of_row, self._domain_sizes = row_domains(labels, present, self.domains)
        self._size_epoch(num_samples)
        self._proportions = self._uniform() if proportions is None else check_proportions(proportions, self.domains)
        self._proportions_array = self._as_array(self._proportions)
        self._strategy_target: tuple[dict[str, float], np.ndarray] | None = None  # last target seen, its array
        self.epoch = 0
        # Prompt keys are only needed by a pre-rollout filter; reading them can be costly.
        skips = strategy is not None and strategy.skips_prompts
        self._keys = row_keys(dataset, len(labels), prompt_key_column) if skips else None
        self.prompt_key_column = prompt_key_column
        filter_prior, while_pooled = filter_labels(prompt_labels, labels, pooled)
        self._fingerprint = data_fingerprint(dataset, present, codes, prompt_key_column, self._keys)
        self._drawer = BlockDrawer(
            self.domains,
            domain_of_row,
            self._domain_sizes,
            pooled=pooled,
            quota=self.quota,
            seed=self.seed,
            strategy=strategy,
            keys=self._keys,
            prompt_labels=filter_prior,
            labels_while_pooled=while_pooled,
            shard=self.layout == "shard",
        )
        self._start_epoch_log(array("q"), resumed=False, skip=0, position=0)

    def _size_epoch(self, num_samples: int | None) -> None:
        """``num_samples`` (default: rows of the drawn domains), ``draw_size`` and ``chunks_per_epoch``."""
        total = int(self._domain_sizes.sum())
        self.num_samples = check_int("num_samples", num_samples, low=1) if num_samples is not None else total
        self.draw_size = self.batch_size * (self.num_replicas if self.layout == "shard" else 1)
        self.chunks_per_epoch = self.num_samples // self.draw_size
        if self.chunks_per_epoch == 0:
            # The core names the concept; a host adapter re-raises it in its own settings (prompts_* attributes).
            raise TooFewPromptsError(self.num_samples, self.draw_size, shard=self.layout == "shard")

    def _start_epoch_log(self, rows: array, *, resumed: bool, skip: int, position: int) -> None:
        """Set the epoch's log of drawn rows and where the next ``__iter__`` starts (a restore, or a fresh start)."""
        # Rows of every chunk drawn in the current epoch, flat (chunks are draw_size long): a typed
        # array, not a list of lists, so the garbage collector never scans an epoch's worth of lists.
        self._epoch_rows = rows
        self._resumed = resumed
        self._pending_skip = skip
        # Indices yielded in this epoch = _position_base + _chunk_length - (items left in _chunk_iter).
        self._position_base, self._chunk_length = position, 0
        self._chunk_iter: Iterator[int] = iter(())

    def _uniform(self) -> dict[str, float]:
        return {d: 1.0 / len(self.domains) for d in self.domains}

    def _as_array(self, proportions: Mapping[str, float]) -> np.ndarray:
        return np.array([proportions[d] for d in self.domains], dtype=np.float64)

    def _mix_target(self) -> dict[str, float] | None:
        """The mix part's target proportions (None: no mix part, the sampler's own proportions count)."""
        return None if self._mixer is None else self._mixer.target_proportions

    @property
    def target_proportions(self) -> dict[str, float]:
        """Proportions the next chunk will be drawn with (a one-pool sampler: each domain's share of the rows)."""
        target = self._mix_target()
        if target is not None:
            return dict(target)
        if self.pooled:
            total = int(self._domain_sizes.sum())
            return {d: int(c) / total for d, c in zip(self.domains, self._domain_sizes.tolist(), strict=True)}
        return dict(self._proportions)

    @property
    def prompt_keys(self) -> list[Hashable] | None:
        """Each row's prompt key as the pre-rollout filter sees it (None without a filter: keys are not read)."""
        return self._keys

    @property
    def prompt_labels(self) -> Sequence[str] | None:
        """Each row's domain as the pre-rollout filter's prior sees it (None: no prior; see ``prompt_labels``)."""
        return self._drawer.prompt_labels

    @property
    def pooled(self) -> bool:
        """True while the sampler draws from all rows as one pool (no proportions, no mix part)."""
        return self._drawer.pooled

    @property
    def sizes(self) -> np.ndarray:
        """``(K,)`` rows of each domain in ``domains``."""
        return self._domain_sizes.copy()

    def _target_array(self) -> np.ndarray:
        """The next chunk's proportions over ``domains`` (a pooled drawer reads none); the same array object while
        they do not change."""
        target = self._mix_target()
        if target is None:
            return self._proportions_array
        if self._strategy_target is None or target != self._strategy_target[0]:
            self._strategy_target = (target, self._as_array(target))
        return self._strategy_target[1]

    def set_proportions(self, proportions: Mapping[str, float] | Sequence[float]) -> None:
        """Change the proportions for the following chunks (validated: known domains, >= 0, sum 1).

        A one-pool sampler built without proportions (``mixing=None``) starts mixing by domain here.
        """
        if self._mixer is not None:
            raise ConfigError("this sampler follows its strategy's mixer; change the strategy, not the sampler")
        checked = check_proportions(proportions, self.domains, "set_proportions")
        if self.pooled:
            if self._mixing_option is False:
                raise ConfigError(
                    "this sampler draws from one pool (mixing=False), so it has no proportions to set; "
                    "build it with mixing=True (or proportions={...}) to mix by domain"
                )
            self._drawer.start_mixing()  # the draw now fixes the domain: no domain prior (see prompt_labels)
        self._proportions = checked
        self._proportions_array = self._as_array(self._proportions)

    def actual_proportions(self, recent: bool = False) -> dict[str, float]:
        """Share of each domain among prompts drawn (since the start, or over the last few chunks)."""
        counts = np.sum(list(self.drawn_recent), axis=0) if recent and self.drawn_recent else self.drawn_total
        n = counts.sum()
        return {d: float(counts[i] / n) if n else 0.0 for i, d in enumerate(self.domains)}

    @property
    def drawn_total(self) -> np.ndarray:
        """``(K,)`` prompts drawn per domain since the start."""
        return self._drawer.drawn_total()

    @property
    def drawn_recent(self) -> deque[list[int]]:
        """Per-domain counts of the last few chunks (lists of K ints), oldest first."""
        return self._drawer.drawn_recent()

    def set_epoch(self, epoch: int) -> None:
        """Compatibility with DistributedSampler users; the stream already advances every epoch."""

    def _layout(self, rows: list[int] | np.ndarray) -> list[int]:
        """The indices one chunk of drawn rows (array or list) yields, in the configured layout."""
        if self.layout == "shard":
            rows = rows[self.rank :: self.num_replicas]
            return rows.tolist() if isinstance(rows, np.ndarray) else rows
        if self.num_generations == 1 and self.repeat_count == 1:
            return rows.tolist() if isinstance(rows, np.ndarray) else rows
        repeated = np.repeat(np.asarray(rows, dtype=np.int64), self.num_generations)
        return (np.tile(repeated, self.repeat_count) if self.repeat_count > 1 else repeated).tolist()

    def __iter__(self) -> Iterator[int]:
        while True:
            # After a resume, the chunks drawn before saving are re-yielded from the log as they were.
            replay = self._epoch_rows if self._resumed else array("q")
            skip = self._pending_skip if self._resumed else 0
            self._resumed, self._pending_skip, self._epoch_rows = False, 0, array("q")
            self._position_base, self._chunk_length, self._chunk_iter = 0, 0, iter(())
            epoch_rows, draw, target, size = self._epoch_rows, self._drawer.draw, self._target_array, self.draw_size
            replayed = len(replay) // size
            plain = self.layout == "grpo" and self.num_generations == 1 and self.repeat_count == 1
            for c in range(self.chunks_per_epoch):
                rows: list[int] | np.ndarray
                if c < replayed:
                    rows = replay[c * size : (c + 1) * size].tolist()
                else:
                    rows = draw(target(), size)
                if isinstance(rows, list):
                    epoch_rows.extend(rows)
                else:
                    epoch_rows.frombytes(rows.astype(np.int64, copy=False).tobytes())
                indices = rows if plain and isinstance(rows, list) else self._layout(rows)
                length = len(indices)
                if skip:
                    first = skip - self._position_base
                    if first >= length:
                        self._position_base += length
                        continue
                    if first > 0:
                        indices = indices[first:]
                # `position` reads these three while the chunk is being consumed.
                self._chunk_length, self._chunk_iter = length, iter(indices)
                yield from self._chunk_iter
                self._position_base += length
                self._chunk_length = 0
            self.epoch += 1
            self._epoch_rows, self._position_base = array("q"), 0
            if skip < len(self):
                return
            # The restored epoch had been fully consumed: go on with the next one in this iterator.

    def __len__(self) -> int:
        """Indices one epoch yields (``layout="grpo"``: each prompt ``num_generations * repeat_count`` times)."""
        per_chunk = (
            self.batch_size if self.layout == "shard" else self.batch_size * self.num_generations * self.repeat_count
        )
        return self.chunks_per_epoch * per_chunk

    @property
    def position(self) -> int:
        """Indices yielded so far in the current epoch."""
        return self._position_base + self._chunk_length - length_hint(self._chunk_iter)

    # ------------------------------------------------------------ state

    def _draw_config(self) -> dict[str, Any]:
        """The settings a saved state must have been drawn with."""
        return {
            "domains": list(self.domains),
            "seed": self.seed,
            "draw_size": self.draw_size,
            "layout": self.layout,
            "num_generations": self.num_generations,
            "repeat_count": self.repeat_count,
            "chunks_per_epoch": self.chunks_per_epoch,
            "quota": self.quota,
        }

    def state_dict(self) -> dict[str, Any]:
        """Random state, per-domain passes, counts, the rows of every chunk drawn in this epoch, a data fingerprint.

        Only Python ints, floats, strings, bools and lists / dicts of them, so a checkpoint holding
        it loads with ``torch.load(..., weights_only=True)``. Reading it does not change the sampler.
        """
        # Counts of the chunks served so far, as if only those had been drawn; the sampler is left as it is.
        draws = self._drawer.state_dict()
        fingerprint = {**self._fingerprint, "domain_rows": dict(self._fingerprint["domain_rows"])}
        return {
            **self._draw_config(),
            "data": fingerprint,
            "pooled": draws["pooled"],
            "epoch": self.epoch,
            "rng": draws["rng"],
            "perm": draws["perm"],
            "pointers": draws["pointers"],
            "drawn_total": draws["drawn_total"],
            "drawn_recent": draws["drawn_recent"],
            "epoch_rows": [
                self._epoch_rows[i : i + self.draw_size].tolist()
                for i in range(0, len(self._epoch_rows), self.draw_size)
            ],
            "uniforms": draws["uniforms"],
            "position": self.position,
            "proportions": dict(self._proportions),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore; the next ``__iter__`` continues the interrupted epoch exactly (see ``resume``).

        Refused, with what changed, when the state was saved with other draw settings or for other
        data (rows added, removed, reordered or relabelled). A state that is not this sampler's is a
        `StateError`.
        """
        state = check_state(state, STATE_KEYS, "DomainMixingSampler")
        # The data first: a changed row count also changes the epoch length, and that is the news.
        change = data_change(state["data"], self._fingerprint)
        if change is not None:
            raise StateError(
                f"DomainMixingSampler.load_state_dict: the state was saved for different data: "
                f"{change}. Resume on the same dataset (same rows, same order, same domain labels), "
                "or start this sampler fresh instead of loading the state"
            )
        check_draw_settings(state, self._draw_config())  # a host adapter re-raises it naming its own settings
        pooled = self._saved_pooling(state["pooled"])
        saved = read_saved_draws(state)
        proportions = check_proportions(state["proportions"], self.domains, "saved sampler proportions")
        block_of_row, sizes, _ = self._drawer.blocks_for(pooled)
        check_saved_rows(
            saved,
            block_of_row,
            sizes,
            domains=self.domains,
            draw_size=self.draw_size,
            chunks_per_epoch=self.chunks_per_epoch,
            epoch_length=len(self),
        )
        # Everything checked: restore.
        self._restore(pooled, saved, proportions)

    def _saved_pooling(self, pooled: Any) -> bool:
        """Whether the saved state drew from one pool; refused when this sampler cannot continue it."""
        if pooled != self.pooled:
            # Built without proportions (one pool until set_proportions): adopt a state saved after the switch.
            adopt = self.pooled and pooled is False and self._mixing_option is None and self._mixer is None
            if not adopt:
                raise ConfigError(
                    f"sampler state was saved {'from one pool' if pooled else 'mixing by domain'}, "
                    f"this sampler {'draws from one pool' if self.pooled else 'mixes by domain'}; "
                    "resume with the same proportions / mixing setting"
                )
        return bool(pooled)

    def _restore(self, pooled: bool, saved: SavedDraws, proportions: dict[str, float]) -> None:
        """Continue from a checked saved state."""
        self._drawer.restore(pooled, saved)
        self.epoch = saved.epoch
        self._proportions = proportions
        self._proportions_array = self._as_array(self._proportions)
        # A fully consumed epoch is closed on the next iter() in both modes; "continue" also skips
        # what was yielded of a partial epoch, "replay" leaves skipping to the host.
        position = saved.position
        skip = position if self.resume == "continue" or position >= len(self) else 0
        self._start_epoch_log(array("q", saved.epoch_rows.tobytes()), resumed=True, skip=skip, position=position)
