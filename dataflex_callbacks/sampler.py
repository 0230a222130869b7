"""`DomainMixingSampler`: a DataLoader sampler that draws prompts by per-domain proportions.

Draws happen chunk by chunk (one chunk = one batch of prompts), each chunk under the proportions
current at that moment, so a mixer can change them between batches; nothing is precomputed for
an epoch. Within a domain, rows are drawn without replacement until the domain is exhausted,
then reshuffled. The per-domain passes run across epochs: an epoch is ``num_samples`` prompts,
not one pass over the data.

Two layouts:

- ``layout="grpo"`` reproduces TRL's ``RepeatSampler``: each prompt repeated ``num_generations``
  times in a row, each chunk of ``batch_size`` prompts repeated ``repeat_count`` times, the same
  stream on every rank (the host shards batches itself).
- ``layout="shard"`` gives each of ``num_replicas`` ranks different rows of one global draw
  (Lightning, plain DDP): rank ``r`` gets positions ``r, r + R, ...`` of each global chunk of
  ``batch_size * R`` prompts.

Resume: `state_dict` stores the random state, the per-domain passes, the rows of every chunk drawn
so far in the epoch and how many indices were yielded. A restored sampler re-yields the logged
chunks and then draws on: hosts that re-iterate and skip the consumed batches (``resume="replay"``,
HF Trainer / accelerate) and hosts that expect the stream to go on where it stopped
(``resume="continue"``) both get the uninterrupted run's stream, also when proportions or a
pre-rollout filter changed mid-epoch. A state saved after the last index of an epoch resumes
with the next epoch in both modes. Calling ``iter()`` again mid-epoch without a restore abandons
the rest of that epoch and starts the next one.

Pre-rollout selection: with a strategy that has a ``pre_select`` part, the mixer still chooses
the domain and the filter chooses within it, skipping prompts it predicts to be useless.
"""

from __future__ import annotations

from array import array
from collections import deque
from operator import length_hint
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np
from torch.utils.data import IterableDataset as TorchIterableDataset
from torch.utils.data import Sampler

from .errors import ConfigError
from .history import KEY_COLUMNS, hashable_key, row_prompt_key
from .params import check_choice, check_int
from .proportions import check_proportions

if TYPE_CHECKING:  # pragma: no cover
    from .strategy import Strategy

RECENT_CHUNKS = 20  # chunks in the "recent" actual-proportion window
UNIFORM_BLOCK = 4096  # uniforms drawn per generator call
SMALL_CHUNK = 32  # chunks up to this many prompts are drawn ahead, several at a time
PREFETCH_CHUNKS = 64  # small chunks drawn in one vectorised step while the proportions stay the same


def domain_labels(dataset: Any, domain_key: str) -> list[str]:
    """Per-row domain labels of a map-style dataset (``datasets.Dataset``, list of dicts, ...)."""
    iterable = isinstance(dataset, TorchIterableDataset) or any(
        cls.__name__ == "IterableDataset" for cls in type(dataset).__mro__)
    if iterable or (hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__")):
        raise ConfigError(
            f"DomainMixingSampler needs a map-style dataset with random access; got a {type(dataset).__name__} "
            "(iterable). For streaming data, mix with datasets.interleave_datasets(per_domain_datasets, "
            "probabilities=[...]) instead, or load the data as a datasets.Dataset"
        )
    columns = getattr(dataset, "column_names", None)
    if columns is not None:
        if domain_key not in columns:
            raise ConfigError(f"dataset has no domain column {domain_key!r}; its columns are {list(columns)}; "
                              "pass domain_key=<the column holding the domain label>")
        return [str(v) for v in dataset[domain_key]]
    labels = []
    for i in range(len(dataset)):
        row = dataset[i]
        if not isinstance(row, Mapping) or domain_key not in row:
            have = list(row) if isinstance(row, Mapping) else type(row).__name__
            raise ConfigError(f"dataset row {i} has no domain field {domain_key!r}; it has {have}; "
                              "pass domain_key=<the field holding the domain label>")
        labels.append(str(row[domain_key]))
    return labels


class DomainMixingSampler(Sampler[int]):
    """Sample dataset rows so that each batch follows per-domain proportions.

    Args:
        dataset: map-style dataset whose rows carry a domain label (or pass ``labels``).
        labels: per-row domain labels, instead of reading them from ``dataset``.
        domain_key: name of the domain column.
        domains: the domains to mix, in order (default: the strategy's mix domains if it has
            them, else the sorted labels). Each must have rows; rows of other domains are never drawn.
        proportions: initial proportions ``{domain: p}`` (default uniform); ignored when a
            strategy with a mix part drives the sampler.
        batch_size: prompts per chunk (per rank in ``layout="shard"``); proportions are read once
            per chunk.
        num_generations: consecutive repeats of each prompt (GRPO group size), ``layout="grpo"``.
        repeat_count: repeats of each chunk (TRL's ``num_iterations * steps_per_generation``),
            ``layout="grpo"``.
        num_samples: prompts per epoch (default: rows of the mixed domains), rounded down to
            whole chunks.
        layout: ``"grpo"`` (same stream on every rank) or ``"shard"`` (rank-disjoint rows).
        num_replicas, rank: for ``layout="shard"`` (default: torch.distributed's, else 1 and 0).
        strategy: a `Strategy`; with a mix part its target proportions drive the draws and the
            sampler reports what it drew back to it (``strategy.observe_sampled``); with a
            ``pre_select`` part its filter skips prompts within the chosen domain.
        seed: random seed; the stream is a function of seed and the proportions used.
        resume: ``"replay"`` or ``"continue"`` (see module docstring).
        key_column: column naming each prompt for a pre-rollout filter (default: ``prompt_key``,
            else ``prompt``, else the row index: `row_prompt_key`'s rule, which adapters share).
        prompt_labels: each row's domain, for the pre-rollout filter to predict prompts it has not
            seen from their domain (its ``domain_prior``). Give it when ``labels`` pool the rows (one
            label for all, no mix part), so that skipped prompts are replaced from any domain; with
            per-domain ``labels`` the draw already fixes the domain and a domain prior would skip
            candidates of the chosen domain at random. Default: no prior.
    """

    def __init__(self, dataset: Any = None, *, labels: Sequence[str] | None = None, domain_key: str = "domain",
                 domains: Sequence[str] | None = None, proportions: Mapping[str, float] | None = None,
                 batch_size: int = 8, num_generations: int = 1, repeat_count: int = 1, num_samples: int | None = None,
                 layout: str = "grpo", num_replicas: int | None = None, rank: int | None = None,
                 strategy: "Strategy | None" = None, seed: int = 0, resume: str = "replay",
                 key_column: str | None = None, prompt_labels: Sequence[str] | None = None):
        if labels is None:
            if dataset is None:
                raise ConfigError("DomainMixingSampler needs a dataset or labels=[...]")
            labels = domain_labels(dataset, domain_key)
        labels = [str(v) for v in labels]
        if not labels:
            raise ConfigError("DomainMixingSampler got an empty dataset")
        self.strategy = strategy
        self._mixing = strategy is not None and strategy.mix_enabled
        if domains is None and self._mixing and strategy.domains is not None:
            domains = strategy.domains  # the config's domain order wins over the sorted labels
        present = sorted(set(labels))
        self.domains = [str(d) for d in domains] if domains is not None else present
        if len(set(self.domains)) != len(self.domains):
            raise ConfigError(f"domains must be unique; got {self.domains}")
        empty = [d for d in self.domains if d not in present]
        if empty:
            raise ConfigError(f"domain(s) {empty} have no rows in the dataset; domains with rows: {present}; "
                              "remove them from the domain list or add data for them")
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.num_generations = check_int("num_generations", num_generations, low=1)
        self.repeat_count = check_int("repeat_count", repeat_count, low=1)
        self.layout = check_choice("layout", layout, ("grpo", "shard"))
        self.resume = check_choice("resume", resume, ("replay", "continue"))
        self.num_replicas, self.rank = self._replicas(num_replicas, rank)
        self.seed = int(seed)
        if self._mixing:
            strategy.bind_domains(self.domains)
        self._prompt_filter = getattr(strategy, "prompt_filter", None)
        if self._prompt_filter is not None:
            self._prompt_filter.num_generations = self.num_generations

        index = {d: i for i, d in enumerate(self.domains)}
        rows = np.array([index.get(label, -1) for label in labels], dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        order = order[rows[order] >= 0]  # rows of domains not being mixed are never drawn
        self.sizes = np.bincount(rows[rows >= 0], minlength=len(self.domains)).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self._sizes_list, self._offsets_list = self.sizes.tolist(), self.offsets.tolist()
        total = int(self.sizes.sum())
        self.num_samples = check_int("num_samples", num_samples, low=1) if num_samples is not None else total
        self.draw_size = self.batch_size * (self.num_replicas if self.layout == "shard" else 1)
        self.chunks_per_epoch = self.num_samples // self.draw_size
        if self.chunks_per_epoch == 0:
            raise ConfigError(f"num_samples={self.num_samples} is smaller than one chunk of {self.draw_size} prompts; "
                              "lower batch_size or raise num_samples")

        self._proportions = self._uniform() if proportions is None else check_proportions(proportions, self.domains)
        self._proportions_array = self._as_array(self._proportions)
        self._strategy_target: dict | None = None  # last strategy target seen, and its array
        self._strategy_array: np.ndarray | None = None
        self._cumulative_of: tuple = (None, None)
        self.epoch = 0
        # Per-domain bookkeeping as plain int lists: cheaper than numpy for a few domains per chunk.
        self._drawn_total = [0] * len(self.domains)
        self._drawn_recent: deque = deque(maxlen=RECENT_CHUNKS)  # per-chunk counts, lists of K ints
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self._perm = order.astype(np.int64)  # rows grouped by domain; each domain's block is shuffled per pass
        self._pointers = [0] * len(self.domains)  # next unread position in each domain's block
        self._uniform_buffer = np.empty(0)  # uniforms drawn ahead in blocks (one generator call per block)
        self._uniform_pos = 0  # next unused entry of the buffer
        self._ahead: dict | None = None  # small chunks drawn ahead under one proportions array
        # Prompt keys are only needed by a pre-rollout filter; reading them can be costly.
        self._keys = self._row_keys(dataset, len(labels), key_column) if self._prompt_filter is not None else None
        if prompt_labels is not None and len(prompt_labels) != len(labels):
            raise ConfigError(f"prompt_labels has {len(prompt_labels)} entries but the dataset has {len(labels)} rows")
        self._prompt_labels = None if prompt_labels is None else [str(v) for v in prompt_labels]
        for k in range(len(self.domains)):
            self._shuffle_domain(k)
        # Rows of every chunk drawn in the current epoch, flat (chunks are draw_size long): a typed
        # array, not a list of lists, so the garbage collector never scans an epoch's worth of lists.
        self._epoch_rows = array("q")
        self._resumed = False
        self._pending_skip = 0
        # Indices yielded in this epoch = _position_base + _chunk_length - (items left in _chunk_iter).
        self._position_base, self._chunk_length, self._chunk_iter = 0, 0, iter(())

    # ------------------------------------------------------------ configuration

    @staticmethod
    def _replicas(num_replicas, rank):
        if num_replicas is None or rank is None:
            import torch.distributed as dist

            initialised = dist.is_available() and dist.is_initialized()
            num_replicas = num_replicas if num_replicas is not None else (dist.get_world_size() if initialised else 1)
            rank = rank if rank is not None else (dist.get_rank() if initialised else 0)
        check_int("num_replicas", num_replicas, low=1)
        if not 0 <= rank < num_replicas:
            raise ConfigError(f"rank must be in [0, num_replicas={num_replicas}); got {rank}")
        return int(num_replicas), int(rank)

    @staticmethod
    def _row_keys(dataset: Any, n: int, key_column: str | None = None) -> list:
        """Each row's prompt key: ``key_column`` if given, else the rule the adapters use (`row_prompt_key`)."""
        if dataset is None:
            return list(range(n))
        columns = getattr(dataset, "column_names", None)
        if key_column is not None:
            if columns is not None and key_column not in columns:
                raise ConfigError(f"key_column {key_column!r} is not a column of the dataset; its columns are {list(columns)}")
            values = dataset[key_column] if columns is not None else [dataset[i][key_column] for i in range(n)]
            return [hashable_key(v) for v in values]
        if columns is not None:
            source = next((c for c in KEY_COLUMNS if c in columns), None)
            return list(range(n)) if source is None else [hashable_key(v) for v in dataset[source]]
        return [row_prompt_key(dataset[i], i) for i in range(n)]

    def _uniform(self) -> dict[str, float]:
        return {d: 1.0 / len(self.domains) for d in self.domains}

    def _as_array(self, proportions: Mapping[str, float]) -> np.ndarray:
        return np.array([proportions[d] for d in self.domains], dtype=np.float64)

    @property
    def target_proportions(self) -> dict[str, float]:
        """Proportions the next chunk will be drawn with."""
        if self._mixing and self.strategy.target_proportions is not None:
            return dict(self.strategy.target_proportions)
        return dict(self._proportions)

    def _target_array(self) -> np.ndarray:
        """The next chunk's proportions; the same array object while they do not change."""
        if not self._mixing:
            return self._proportions_array
        target = self.strategy.target_proportions
        if target != self._strategy_target:
            self._strategy_target, self._strategy_array = target, self._as_array(target)
        return self._strategy_array

    def set_proportions(self, proportions: Mapping[str, float]) -> None:
        """Change the proportions for the following chunks (validated: known domains, >= 0, sum 1)."""
        if self._mixing:
            raise ConfigError("this sampler follows its strategy's mixer; change the strategy, not the sampler")
        self._proportions = check_proportions(proportions, self.domains, "set_proportions")
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

    # ------------------------------------------------------------ drawing

    def _shuffle_domain(self, k: int) -> None:
        start = self.offsets[k]
        self._rng.shuffle(self._perm[start:start + self.sizes[k]])  # in place on the view
        self._pointers[k] = 0

    def _take(self, k: int, count: int) -> np.ndarray:
        """The next ``count`` rows of domain ``k``, reshuffling the domain whenever it runs out."""
        taken = []
        while count > 0:
            if self._pointers[k] == self._sizes_list[k]:
                self._shuffle_domain(k)
            start = self._offsets_list[k] + self._pointers[k]
            size = min(count, self._sizes_list[k] - self._pointers[k])
            taken.append(self._perm[start:start + size].copy())
            self._pointers[k] += size
            count -= size
        return np.concatenate(taken)

    def _take_filtered(self, k: int, need: int) -> tuple[np.ndarray, int]:
        """``need`` rows of domain ``k`` that pass the pre-rollout filter, and how many were skipped."""
        taken: list[int] = []
        skipped = 0
        while len(taken) < need:
            if self._pointers[k] == self._sizes_list[k]:
                self._shuffle_domain(k)
            begin = self._offsets_list[k] + self._pointers[k]
            window = min(self._sizes_list[k] - self._pointers[k], max(2 * (need - len(taken)), 8))
            candidates = self._perm[begin:begin + window]
            rows = candidates.tolist()
            labels = None if self._prompt_labels is None else [self._prompt_labels[r] for r in rows]
            keep_probability = self._prompt_filter.keep_probability([self._keys[r] for r in rows], labels)
            accepted = np.flatnonzero(self._rng.random(window) < keep_probability)[: need - len(taken)]
            used = int(accepted[-1]) + 1 if len(taken) + len(accepted) == need else window
            taken.extend(candidates[accepted].tolist())
            skipped += used - len(accepted)
            self._pointers[k] += used
        return np.asarray(taken, dtype=np.int64), skipped

    def _uniforms(self, n: int) -> np.ndarray:
        """The next ``n`` uniforms of the stream, drawn from the generator in blocks of at least 4096.

        Every path (small chunks, drawn-ahead blocks, large chunks) reads this one stream, so the
        rows drawn do not depend on which path served a chunk.
        """
        pos = self._uniform_pos
        if self._uniform_buffer.shape[0] - pos < n:
            fresh = self._rng.random(max(UNIFORM_BLOCK, n))
            self._uniform_buffer = np.concatenate([self._uniform_buffer[pos:], fresh])
            pos = 0
        self._uniform_pos = pos + n
        return self._uniform_buffer[pos:pos + n]

    def _cumulative(self, proportions: np.ndarray) -> np.ndarray:
        """Cumulative proportions, cached while ``proportions`` is the same object."""
        if self._cumulative_of[0] is not proportions:
            cumulative = np.cumsum(proportions)
            cumulative /= cumulative[-1]
            cumulative[-1] = 1.0
            self._cumulative_of = (proportions, cumulative)
        return self._cumulative_of[1]

    def _draw_chunk(self, proportions: np.ndarray, n: int):
        """``n`` dataset rows (a list for small chunks, drawn ahead in blocks; else an array): domains
        by ``proportions``, rows without replacement within a domain. A small chunk whose block would
        run a domain out takes the general path, which reshuffles; both read the same uniforms."""
        if n <= SMALL_CHUNK and self._prompt_filter is None:
            rows = self._next_ahead(proportions, n)
            if rows is not None:
                return rows
        uniforms = self._uniforms(n)
        chosen = self._cumulative(proportions).searchsorted(uniforms, side="right")
        counts = np.bincount(chosen, minlength=len(self.domains))
        order = chosen.argsort(kind="stable")  # positions of domain 0's draws, then domain 1's, ...
        rows = np.empty(n, dtype=np.int64)
        pointers = np.array(self._pointers, dtype=np.int64)
        end = pointers + counts
        if self._prompt_filter is not None:
            taken, skipped = zip(*(self._take_filtered(k, int(c)) for k, c in enumerate(counts) if c))
            rows[order] = np.concatenate(taken)
            self._prompt_filter.record_draws([self._keys[r] for r in rows.tolist()], sum(skipped))
        elif (end <= self.sizes).all():
            # The j-th draw of domain k takes the row at pointer_k + j of k's shuffled block.
            base = self.offsets + pointers - (np.cumsum(counts) - counts)
            rows[order] = self._perm[np.arange(n) + np.repeat(base, counts)]
            self._pointers = end.tolist()
        else:  # some domain runs out inside this chunk
            rows[order] = np.concatenate([self._take(k, int(c)) for k, c in enumerate(counts) if c])
        self._book(counts.tolist())
        return rows

    def _next_ahead(self, proportions: np.ndarray, n: int) -> list[int] | None:
        """The next small chunk from the drawn-ahead block, drawing a block when needed.

        A block is exactly what drawing its chunks one by one would give (same uniforms, same
        pointers), as long as the proportions stay the same object; when they change, the unserved
        rest of the block is rolled back. None when a domain would run out inside a block.
        """
        ahead = self._ahead
        if ahead is not None and (ahead["proportions"] is not proportions or ahead["pos"] == ahead["chunks"]):
            self._rollback_ahead()
            ahead = None
        if ahead is None:
            ahead = self._draw_ahead(proportions, n)
            if ahead is None:
                return None
        pos = ahead["pos"]
        ahead["pos"] = pos + 1
        if self._mixing:  # the strategy hears of every chunk as it is drawn; otherwise book lazily
            self._book_served()
        return ahead["rows"][pos * n:(pos + 1) * n]

    def _draw_ahead(self, proportions: np.ndarray, n: int) -> dict | None:
        chunks = PREFETCH_CHUNKS
        uniforms = self._uniforms(chunks * n)
        chosen = self._cumulative(proportions).searchsorted(uniforms, side="right")
        counts = np.bincount(chosen, minlength=len(self.domains))
        pointers = np.array(self._pointers, dtype=np.int64)
        if not (pointers + counts <= self.sizes).all():
            self._uniform_pos -= chunks * n  # not drawn after all: the per-chunk path reshuffles as needed
            return None
        order = chosen.argsort(kind="stable")
        base = self.offsets + pointers - (np.cumsum(counts) - counts)
        rows = np.empty(chunks * n, dtype=np.int64)
        rows[order] = self._perm[np.arange(chunks * n) + np.repeat(base, counts)]
        self._pointers = (pointers + counts).tolist()
        self._ahead = {"proportions": proportions, "rows": rows.tolist(), "chosen": chosen, "chunks": chunks,
                       "pos": 0, "booked": 0, "n": n}
        return self._ahead

    def _book_served(self) -> None:
        """Count the served chunks of the drawn-ahead block that are not counted yet."""
        ahead = self._ahead
        if ahead is None or ahead["booked"] == ahead["pos"]:
            return
        n, k = ahead["n"], len(self.domains)
        served = ahead["pos"] - ahead["booked"]
        chosen = ahead["chosen"][ahead["booked"] * n:ahead["pos"] * n]
        if self._mixing:  # the strategy is told chunk by chunk
            for c in range(served):
                self._book(np.bincount(chosen[c * n:(c + 1) * n], minlength=k).tolist())
        else:  # totals in one count; per-chunk counts only for the recent window
            total = self._drawn_total
            for d, c in enumerate(np.bincount(chosen, minlength=k).tolist()):
                total[d] += c
            recent = min(served, RECENT_CHUNKS)
            tail = chosen[(served - recent) * n:].reshape(recent, n) + k * np.arange(recent)[:, None]
            self._drawn_recent.extend(np.bincount(tail.ravel(), minlength=recent * k).reshape(recent, k).tolist())
        ahead["booked"] = ahead["pos"]

    def _rollback_ahead(self) -> None:
        """Undo the unserved chunks of the drawn-ahead block (pointers and uniforms)."""
        self._book_served()
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead["pos"] == ahead["chunks"]:
            return
        unserved = ahead["chosen"][ahead["pos"] * ahead["n"]:]
        for d, c in enumerate(np.bincount(unserved, minlength=len(self.domains)).tolist()):
            self._pointers[d] -= c
        self._uniform_pos -= unserved.shape[0]

    def _book(self, counts: list[int]) -> None:
        """Count one chunk's draws per domain, and tell the strategy."""
        total = self._drawn_total
        for k, c in enumerate(counts):
            if c:
                total[k] += c
        self._drawn_recent.append(counts)
        if self._mixing:
            self.strategy.observe_sampled(dict(zip(self.domains, counts)))

    def _layout(self, rows) -> list[int]:
        """The indices one chunk of drawn rows (array or list) yields, in the configured layout."""
        if self.layout == "shard":
            rows = rows[self.rank::self.num_replicas]
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
                    rows = replay[c * size:(c + 1) * size].tolist()
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
        per_chunk = self.batch_size if self.layout == "shard" else self.batch_size * self.num_generations * self.repeat_count
        return self.chunks_per_epoch * per_chunk

    @property
    def position(self) -> int:
        """Indices yielded so far in the current epoch."""
        return self._position_base + self._chunk_length - length_hint(self._chunk_iter)

    # ------------------------------------------------------------ state

    def _draw_config(self) -> dict:
        return {"domains": list(self.domains), "seed": self.seed, "draw_size": self.draw_size, "layout": self.layout,
                "num_generations": self.num_generations, "repeat_count": self.repeat_count,
                "chunks_per_epoch": self.chunks_per_epoch}

    def state_dict(self) -> dict:
        """Random state, per-domain passes, counts, and the rows of every chunk drawn in this epoch."""
        self._rollback_ahead()  # state as if only the chunks served so far had been drawn
        return {**self._draw_config(), "epoch": self.epoch,
                "rng": self._rng.bit_generator.state, "perm": self._perm.tolist(), "pointers": list(self._pointers),
                "drawn_total": list(self._drawn_total), "drawn_recent": [list(c) for c in self.drawn_recent],
                "epoch_rows": [self._epoch_rows[i:i + self.draw_size].tolist()
                               for i in range(0, len(self._epoch_rows), self.draw_size)],
                "uniforms": self._uniform_buffer[self._uniform_pos:].tolist(), "position": self.position,
                "proportions": dict(self._proportions)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore; the next ``__iter__`` continues the interrupted epoch exactly (see ``resume``)."""
        for key, mine in self._draw_config().items():
            saved = list(state[key]) if key == "domains" else state.get(key)
            if saved != mine:
                raise ConfigError(f"sampler state was saved with {key}={saved!r}, this sampler has {mine!r}; "
                                  "resume with the same sampler configuration")
        self._ahead = None
        self._rng.bit_generator.state = state["rng"]
        self._perm = np.asarray(state["perm"], dtype=np.int64)
        self._uniform_buffer, self._uniform_pos = np.asarray(state.get("uniforms", []), dtype=np.float64), 0
        self._pointers = [int(p) for p in state["pointers"]]
        self._drawn_total = [int(c) for c in state["drawn_total"]]
        self._drawn_recent = deque(([int(c) for c in counts] for counts in state["drawn_recent"]), maxlen=RECENT_CHUNKS)
        self._epoch_rows = array("q", (int(r) for rows in state["epoch_rows"] for r in rows))
        self.epoch = int(state["epoch"])
        self._proportions = dict(state["proportions"])
        self._proportions_array = self._as_array(self._proportions)
        position = int(state["position"])
        # A fully consumed epoch is closed on the next iter() in both modes; "continue" also skips
        # what was yielded of a partial epoch, "replay" leaves skipping to the host.
        self._pending_skip = position if self.resume == "continue" or position >= len(self) else 0
        self._resumed = True
        self._position_base, self._chunk_length, self._chunk_iter = position, 0, iter(())
