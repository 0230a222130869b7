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
from operator import length_hint
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np
from torch.utils.data import Sampler

from dataflex_callbacks._distributed import world_size_and_rank
from dataflex_callbacks.rollout.batch import NO_DOMAIN
from dataflex_callbacks.sampling._block_drawer import RECENT_CHUNKS, BlockDrawer, largest_remainder_quotas
from dataflex_callbacks.config.fields import QUOTAS
from dataflex_callbacks.errors import ArgumentError, ConfigError, StateError, check_argument, check_state
from dataflex_callbacks.config.params import check_bool, check_choice, check_int
from dataflex_callbacks.config.proportions import check_domains, check_proportions
from dataflex_callbacks.sampling.prompt_acceptance import set_group_size
from dataflex_callbacks.sampling._sampler_data import (
    labels_from,
    data_change,
    data_fingerprint,
    domain_labels,
    row_keys,
)

if TYPE_CHECKING:  # pragma: no cover
    from dataflex_callbacks.strategy.strategy import Strategy

__all__ = ["DomainMixingSampler", "domain_labels", "largest_remainder_quotas"]

STATE_KEYS = (
    "domains",
    "seed",
    "draw_size",
    "layout",
    "num_generations",
    "repeat_count",
    "chunks_per_epoch",
    "quota",
    "data",
    "pooled",
    "epoch",
    "rng",
    "perm",
    "pointers",
    "drawn_total",
    "drawn_recent",
    "epoch_rows",
    "uniforms",
    "position",
    "proportions",
)


class DomainMixingSampler(BlockDrawer, Sampler[int]):
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
        proportions: Mapping[str, float] | None = None,
        batch_size: int = 8,
        num_generations: int = 1,
        repeat_count: int = 1,
        num_samples: int | None = None,
        layout: str = "grpo",
        num_replicas: int | None = None,
        rank: int | None = None,
        strategy: "Strategy | None" = None,
        seed: int = 0,
        resume: str = "replay",
        prompt_key_column: str | None = None,
        prompt_labels: Sequence[str] | None = None,
        mixing: bool | None = None,
        quota: str | None = None,
    ):
        if strategy is not None:
            from dataflex_callbacks.strategy.strategy import (
                Strategy,
            )  # the strategy module builds components; the sampler is imported beside it

            check_argument(
                strategy,
                Strategy,
                "strategy",
                "DomainMixingSampler",
                "a Strategy or None",
                "Build one with build_strategy(preset | dict | YAML path)",
            )
        self.strategy = strategy
        self._mixing = strategy is not None and strategy.mix_enabled  # the strategy's mixer sets the targets
        self._mixing_option = mixing = None if mixing is None else check_bool("mixing", mixing)
        if mixing is False and self._mixing:
            raise ConfigError(
                f"mixing=False asks for one pool, but strategy {strategy.name!r} has a mix part that "
                "chooses domains; drop mixing=False, or use a strategy without a mix part"
            )
        pooled = (not self._mixing and proportions is None) if mixing is None else not mixing
        if quota is None:  # the strategy's mix.quota, else independent draws
            quota = strategy.config.mix.quota if self._mixing else "independent"
        self.quota = check_choice("quota", quota, QUOTAS)
        if pooled and self.quota == "exact":
            raise ConfigError(
                "quota='exact' splits each batch among domains by proportions, but this sampler draws "
                "from one pool (no proportions, no mix part, or mixing=False); pass proportions={...} "
                "or mixing=True, or a strategy with a mix part"
            )
        self.seed = check_int("seed", seed, low=0)
        self.domain_key = None  # the column the labels were read from (None: labels=[...] given)
        if labels is None:
            if dataset is None:
                raise ConfigError("DomainMixingSampler needs a dataset or labels=[...]")
            # A pool needs no domains; a plain sampler without the column is more likely a wrong domain_key.
            optional = pooled and (mixing is False or strategy is not None)
            labels = domain_labels(dataset, domain_key, required=not optional)
            if labels is None:  # one pool over data without a domain column: every row in NO_DOMAIN
                labels = [NO_DOMAIN] * len(dataset)
            else:
                self.domain_key = domain_key
        else:
            if isinstance(labels, (str, Mapping)) or not (hasattr(labels, "__len__") and hasattr(labels, "__iter__")):
                raise ArgumentError(
                    f"DomainMixingSampler: argument 'labels' must be a list of per-row domain labels; "
                    f"got {labels!r:.80}. Pass one label per row, or the dataset whose rows carry them"
                )
            labels = labels_from(list(labels), "labels")
        if not labels:
            raise ConfigError("DomainMixingSampler got an empty dataset")
        if domains is None and self._mixing and strategy.domains is not None:
            domains = strategy.domains  # the config's domain order wins over the sorted labels
        present = sorted(set(labels))
        if isinstance(domains, (str, Mapping)) or (domains is not None and not hasattr(domains, "__iter__")):
            domains = check_domains(domains, "DomainMixingSampler domains")  # one name is one domain; others refused
        self.domains = [str(d) for d in domains] if domains is not None else present
        check_domains(self.domains, "DomainMixingSampler domains")
        empty = [d for d in self.domains if d not in present]
        if empty:
            raise ConfigError(
                f"domain(s) {empty} have no rows in the dataset; domains with rows: {present}; "
                "remove them from the domain list or add data for them"
            )
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.num_generations = check_int("num_generations", num_generations, low=1)
        self.repeat_count = check_int("repeat_count", repeat_count, low=1)
        self.layout = check_choice("layout", layout, ("grpo", "shard"))
        self.resume = check_choice("resume", resume, ("replay", "continue"))
        self.num_replicas, self.rank = self._replicas(num_replicas, rank)
        if self._mixing:
            strategy.bind_domains(self.domains)
        self._pre_select = getattr(strategy, "pre_select", None)
        set_group_size(self._pre_select, self.num_generations)

        # Rows as codes over all labels present (for the fingerprint), then as indices into self.domains.
        codes_of = {label: i for i, label in enumerate(present)}
        codes = np.fromiter(map(codes_of.__getitem__, labels), dtype=np.int64, count=len(labels))
        domain_of_code = np.array([self.domains.index(p) if p in self.domains else -1 for p in present], dtype=np.int64)
        self._domain_of_row = domain_of_code[codes]  # (N,) index into self.domains, -1: never drawn
        self._domain_sizes = np.bincount(
            self._domain_of_row[self._domain_of_row >= 0], minlength=len(self.domains)
        ).astype(np.int64)
        total = int(self._domain_sizes.sum())
        self.num_samples = check_int("num_samples", num_samples, low=1) if num_samples is not None else total
        self.draw_size = self.batch_size * (self.num_replicas if self.layout == "shard" else 1)
        self.chunks_per_epoch = self.num_samples // self.draw_size
        if self.chunks_per_epoch == 0:
            # The core names the concept; a host adapter re-raises it in its own settings (prompts_* attributes).
            error = ConfigError(
                f"the sampler has {self.num_samples} prompt(s) to draw from (num_samples) but one batch "
                f"needs {self.draw_size} distinct prompts (batch_size"
                f"{' x num_replicas' if self.layout == 'shard' else ''}); lower batch_size or add "
                "rows (raise num_samples)"
            )
            error.prompts_available, error.prompts_needed = self.num_samples, self.draw_size
            raise error

        self._proportions = self._uniform() if proportions is None else check_proportions(proportions, self.domains)
        self._proportions_array = self._as_array(self._proportions)
        self._pool_array = np.ones(1)  # a pooled sampler draws its one block with probability 1
        self._strategy_target: dict | None = None  # last strategy target seen, and its array
        self._strategy_array: np.ndarray | None = None
        self._cumulative_of: tuple = (None, None)
        self._quota_of: tuple = (None, None, None)
        self.epoch = 0
        # Per-domain bookkeeping as plain int lists: cheaper than numpy for a few domains per chunk.
        self._drawn_total = [0] * len(self.domains)
        self._drawn_recent: deque = deque(maxlen=RECENT_CHUNKS)  # per-chunk counts, lists of K ints
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self._uniform_buffer = np.empty(0)  # uniforms drawn ahead in blocks (one generator call per block)
        self._uniform_pos = 0  # next unused entry of the buffer
        self._ahead: dict | None = None  # small chunks drawn ahead under one proportions array
        self._warned_repeated_rows = False  # a batch that must repeat rows warns once (`RepeatedRowWarning`)
        # Prompt keys are only needed by a pre-rollout filter; reading them can be costly.
        self._keys = row_keys(dataset, len(labels), prompt_key_column) if self._pre_select is not None else None
        self.prompt_key_column = prompt_key_column
        if prompt_labels is not None and len(prompt_labels) != len(labels):
            raise ConfigError(f"prompt_labels has {len(prompt_labels)} entries but the dataset has {len(labels)} rows")
        self._prompt_labels_default = prompt_labels is None and pooled
        if self._prompt_labels_default:  # one pool: the domain tells the filter about unseen prompts
            prompt_labels = labels
        self._prompt_labels = None if prompt_labels is None else [str(v) for v in prompt_labels]
        self._fingerprint = data_fingerprint(dataset, present, codes, prompt_key_column, self._keys)
        self._build_blocks(pooled)  # shuffles every block: the stream's first use of the generator
        # Rows of every chunk drawn in the current epoch, flat (chunks are draw_size long): a typed
        # array, not a list of lists, so the garbage collector never scans an epoch's worth of lists.
        self._epoch_rows = array("q")
        self._resumed = False
        self._pending_skip = 0
        # Indices yielded in this epoch = _position_base + _chunk_length - (items left in _chunk_iter).
        self._position_base, self._chunk_length, self._chunk_iter = 0, 0, iter(())

    @staticmethod
    def _replicas(num_replicas, rank):
        if num_replicas is None or rank is None:
            world_size, own_rank = world_size_and_rank()
            num_replicas = num_replicas if num_replicas is not None else world_size
            rank = rank if rank is not None else own_rank
        check_int("num_replicas", num_replicas, low=1)
        if not 0 <= rank < num_replicas:
            raise ConfigError(f"rank must be in [0, num_replicas={num_replicas}); got {rank}")
        return int(num_replicas), int(rank)

    def _uniform(self) -> dict[str, float]:
        return {d: 1.0 / len(self.domains) for d in self.domains}

    def _as_array(self, proportions: Mapping[str, float]) -> np.ndarray:
        return np.array([proportions[d] for d in self.domains], dtype=np.float64)

    @property
    def target_proportions(self) -> dict[str, float]:
        """Proportions the next chunk will be drawn with (a one-pool sampler: each domain's share of the rows)."""
        if self._mixing and self.strategy.target_proportions is not None:
            return dict(self.strategy.target_proportions)
        if self._pooled:
            total = int(self._domain_sizes.sum())
            return {d: int(c) / total for d, c in zip(self.domains, self._domain_sizes.tolist())}
        return dict(self._proportions)

    @property
    def prompt_keys(self) -> list | None:
        """Each row's prompt key as the pre-rollout filter sees it (None without a filter: keys are not read)."""
        return self._keys

    @property
    def pooled(self) -> bool:
        """True while the sampler draws from all rows as one pool (no proportions, no mix part)."""
        return self._pooled

    @property
    def sizes(self) -> np.ndarray:
        """``(K,)`` rows of each domain in ``domains``."""
        return self._domain_sizes.copy()

    def _target_array(self) -> np.ndarray:
        """The next chunk's proportions over the draw blocks; the same array object while they do not change."""
        if self._pooled:
            return self._pool_array
        if not self._mixing:
            return self._proportions_array
        target = self.strategy.target_proportions
        if target != self._strategy_target:
            self._strategy_target, self._strategy_array = target, self._as_array(target)
        return self._strategy_array

    def set_proportions(self, proportions: Mapping[str, float]) -> None:
        """Change the proportions for the following chunks (validated: known domains, >= 0, sum 1).

        A one-pool sampler built without proportions (``mixing=None``) starts mixing by domain here.
        """
        if self._mixing:
            raise ConfigError("this sampler follows its strategy's mixer; change the strategy, not the sampler")
        checked = check_proportions(proportions, self.domains, "set_proportions")
        if self._pooled:
            if self._mixing_option is False:
                raise ConfigError(
                    "this sampler draws from one pool (mixing=False), so it has no proportions to set; "
                    "build it with mixing=True (or proportions={...}) to mix by domain"
                )
            self._rollback_ahead()
            self._build_blocks(pooled=False)
            if self._prompt_labels_default:  # the draw now fixes the domain: no domain prior (see prompt_labels)
                self._prompt_labels = None
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
        self._book_served()
        return np.array(self._drawn_total, dtype=np.int64)

    @property
    def drawn_recent(self) -> deque:
        """Per-domain counts of the last few chunks (lists of K ints), oldest first."""
        self._book_served()
        return self._drawn_recent

    def set_epoch(self, epoch: int) -> None:
        """Compatibility with DistributedSampler users; the stream already advances every epoch."""

    def _layout(self, rows) -> list[int]:
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
            epoch_rows, draw, target, size = self._epoch_rows, self._draw_chunk, self._target_array, self.draw_size
            replayed = len(replay) // size
            plain = self.layout == "grpo" and self.num_generations == 1 and self.repeat_count == 1
            for c in range(self.chunks_per_epoch):
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
        per_chunk = (
            self.batch_size if self.layout == "shard" else self.batch_size * self.num_generations * self.repeat_count
        )
        return self.chunks_per_epoch * per_chunk

    @property
    def position(self) -> int:
        """Indices yielded so far in the current epoch."""
        return self._position_base + self._chunk_length - length_hint(self._chunk_iter)

    # ------------------------------------------------------------ state

    def _draw_config(self) -> dict:
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

    def state_dict(self) -> dict:
        """Random state, per-domain passes, counts, the rows of every chunk drawn in this epoch, a data fingerprint.

        Only Python ints, floats, strings, bools and lists / dicts of them, so a checkpoint holding
        it loads with ``torch.load(..., weights_only=True)``. Reading it does not change the sampler.
        """
        # Counts of the chunks served so far, as if only those had been drawn; the sampler is left as it is.
        drawn_total, drawn_recent = self._booked_counts()
        pointers, uniform_pos = self._unserved()
        fingerprint = {**self._fingerprint, "domain_rows": dict(self._fingerprint["domain_rows"])}
        return {
            **self._draw_config(),
            "data": fingerprint,
            "pooled": self._pooled,
            "epoch": self.epoch,
            "rng": self._rng.bit_generator.state,
            "perm": self._perm.tolist(),
            "pointers": pointers,
            "drawn_total": drawn_total,
            "drawn_recent": drawn_recent,
            "epoch_rows": [
                self._epoch_rows[i : i + self.draw_size].tolist()
                for i in range(0, len(self._epoch_rows), self.draw_size)
            ],
            "uniforms": self._uniform_buffer[uniform_pos:].tolist(),
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
        for key, mine in self._draw_config().items():
            saved = state[key]
            if key == "domains" and isinstance(saved, (list, tuple)):
                saved = [str(d) for d in saved]
            if saved != mine:
                error = ConfigError(
                    f"sampler state was saved with {key}={saved!r}, this sampler has {mine!r}; "
                    "resume with the same sampler configuration"
                )
                # A host adapter re-raises it naming its own settings for `key`.
                error.sampler_setting, error.saved, error.current = key, saved, mine
                raise error
        pooled = state["pooled"]
        if pooled != self._pooled:
            # Built without proportions (one pool until set_proportions): adopt a state saved after the switch.
            adopt = self._pooled and pooled is False and self._mixing_option is None and not self._mixing
            if not adopt:
                raise ConfigError(
                    f"sampler state was saved {'from one pool' if pooled else 'mixing by domain'}, "
                    f"this sampler {'draws from one pool' if self._pooled else 'mixes by domain'}; "
                    "resume with the same proportions / mixing setting"
                )
        try:
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = state["rng"]
            perm = np.asarray(state["perm"], dtype=np.int64)
            uniforms = np.asarray(state["uniforms"], dtype=np.float64)
            pointers = [int(p) for p in state["pointers"]]
            drawn_total = [int(c) for c in state["drawn_total"]]
            drawn_recent = [[int(c) for c in counts] for counts in state["drawn_recent"]]
            epoch_rows = np.asarray([int(r) for rows in state["epoch_rows"] for r in rows], dtype=np.int64)
            epoch, position = int(state["epoch"]), int(state["position"])
            if not isinstance(state["proportions"], Mapping):
                raise TypeError(f"proportions is a {type(state['proportions']).__name__}")
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
            raise StateError(
                f"DomainMixingSampler.load_state_dict: the state is malformed ({type(error).__name__}: "
                f"{error}); load a dict returned by DomainMixingSampler.state_dict()"
            ) from error
        proportions = check_proportions(state["proportions"], self.domains, "saved sampler proportions")
        block_of_row, sizes, _ = self._blocks_for(pooled)
        self._check_layout(
            perm, pointers, drawn_total, drawn_recent, epoch_rows, position, uniforms, block_of_row, sizes
        )
        # Everything checked: restore.
        self._set_blocks(pooled, perm)
        if not pooled and self._prompt_labels_default:  # switched to mixing: no domain prior (see prompt_labels)
            self._prompt_labels = None
        self._ahead = None
        self._rng = rng
        self._uniform_buffer, self._uniform_pos = uniforms, 0
        self._pointers = pointers
        self._drawn_total = drawn_total
        self._drawn_recent = deque(drawn_recent, maxlen=RECENT_CHUNKS)
        self._epoch_rows = array("q", epoch_rows.tobytes())
        self.epoch = epoch
        self._proportions = proportions
        self._proportions_array = self._as_array(self._proportions)
        # A fully consumed epoch is closed on the next iter() in both modes; "continue" also skips
        # what was yielded of a partial epoch, "replay" leaves skipping to the host.
        self._pending_skip = position if self.resume == "continue" or position >= len(self) else 0
        self._resumed = True
        self._position_base, self._chunk_length, self._chunk_iter = position, 0, iter(())

    def _check_layout(
        self, perm, pointers, drawn_total, drawn_recent, epoch_rows, position, uniforms, block_of_row, sizes
    ) -> None:
        """Refuse a state whose rows do not fit this dataset."""
        n_rows = block_of_row.shape[0]
        blocks = np.repeat(np.arange(sizes.shape[0]), sizes)
        problem = None
        if perm.shape != blocks.shape or (perm.size and (perm.min() < 0 or perm.max() >= n_rows)):
            problem = f"its row order covers {perm.shape[0]} rows, this dataset draws {blocks.shape[0]} of {n_rows}"
        elif (block_of_row[perm] != blocks).any() or (np.bincount(perm, minlength=n_rows) > 1).any():
            problem = "its row order puts rows in other domains than this dataset's labels do"
        elif len(pointers) != sizes.shape[0] or any(not 0 <= p <= s for p, s in zip(pointers, sizes.tolist())):
            problem = f"its pass positions {pointers} do not fit domain sizes {sizes.tolist()}"
        elif len(drawn_total) != len(self.domains) or any(len(c) != len(self.domains) for c in drawn_recent):
            problem = f"its draw counts are not over the {len(self.domains)} domains {self.domains}"
        elif epoch_rows.shape[0] % self.draw_size or epoch_rows.shape[0] > self.chunks_per_epoch * self.draw_size:
            problem = f"it logs {epoch_rows.shape[0]} rows this epoch, not whole chunks of {self.draw_size}"
        elif epoch_rows.size and (
            epoch_rows.min() < 0 or epoch_rows.max() >= n_rows or (block_of_row[epoch_rows] < 0).any()
        ):
            problem = "its rows drawn this epoch are not rows this sampler draws"
        elif not 0 <= position <= len(self):
            problem = f"its position {position} is outside the epoch of {len(self)} indices"
        elif uniforms.ndim != 1 or not ((uniforms >= 0) & (uniforms < 1)).all():
            problem = "its buffered random numbers are malformed"
        if problem is not None:
            raise StateError(
                f"DomainMixingSampler.load_state_dict: the state does not fit this sampler's data: "
                f"{problem}. Resume on the same dataset, or start this sampler fresh"
            )
