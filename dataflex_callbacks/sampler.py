"""`DomainMixingSampler`: a DataLoader sampler that draws prompts by per-domain proportions.

Draws happen chunk by chunk (one chunk = one batch of prompts, the generation batch), each chunk
under the proportions current at that moment, so a mixer can change them between batches;
nothing is precomputed for an epoch. Within a domain, rows are drawn without replacement until the
domain is exhausted, then reshuffled; when that happens inside a chunk, the rows the chunk already
holds go to the end of the new pass, so no row appears twice in one chunk while its domain has
unused rows. The per-domain passes run across epochs: an epoch is ``num_samples`` prompts, not
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

import hashlib
import math
import warnings
from array import array
from collections import deque
from operator import length_hint
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np
from torch.utils.data import IterableDataset as TorchIterableDataset
from torch.utils.data import Sampler

from .batch import NO_DOMAIN
from .config_fields import QUOTAS
from .errors import ConfigError, StateError, check_state
from .history import KEY_COLUMNS, hashable_key, row_prompt_key
from .host import accept_prompts
from .params import check_bool, check_choice, check_int
from .proportions import check_domains, check_proportions

if TYPE_CHECKING:  # pragma: no cover
    from .strategy import Strategy

RECENT_CHUNKS = 20  # chunks in the "recent" actual-proportion window
UNIFORM_BLOCK = 4096  # uniforms drawn per generator call
SMALL_CHUNK = 32  # chunks up to this many prompts are drawn ahead, several at a time
PREFETCH_CHUNKS = 64  # small chunks drawn in one vectorised step while the proportions stay the same
POOL_LABEL = NO_DOMAIN  # earlier name of NO_DOMAIN, the domain of every row of data without a domain column
TIE_TOLERANCE = 1e-9  # quota remainders this close count as equal (float noise, e.g. 0.1 * 30)
STATE_KEYS = ("domains", "seed", "draw_size", "layout", "num_generations", "repeat_count", "chunks_per_epoch",
              "epoch", "rng", "perm", "pointers", "drawn_total", "drawn_recent", "epoch_rows", "position",
              "proportions")
OLD_STATE_DEFAULTS = {"quota": "independent"}  # draw settings that states of earlier versions lack


def largest_remainder_quotas(proportions: Sequence[float], n: int) -> np.ndarray:
    """Per-domain counts that sum to ``n`` and follow ``proportions`` as closely as whole numbers can.

    Hamilton's (largest-remainder) rule, as DataFlex-RL's replay buffer fills a batch: each domain
    gets ``floor(n * p_d)``, and the ``n - sum(floors)`` prompts left go one each to the domains with
    the largest remainders ``n * p_d - floor(n * p_d)``. Equal remainders (within 1e-9, so float
    noise cannot break a tie) go to the domain listed first; a domain with proportion 0 gets none.

    Args:
        proportions: ``(K,)`` non-negative, summing to 1 (renormalised here).
        n: batch size, ``>= 0``.

    Returns:
        ``(K,)`` int64 counts summing to ``n``.
    """
    p = np.asarray(proportions, dtype=np.float64)
    scaled = n * p / p.sum()
    counts = np.floor(scaled + TIE_TOLERANCE).astype(np.int64)
    remainder = np.where(p > 0, np.round(np.maximum(scaled - counts, 0.0) / TIE_TOLERANCE) * TIE_TOLERANCE, -1.0)
    left = n - int(counts.sum())
    if left > 0:
        order = np.lexsort((np.arange(p.shape[0]), -remainder))  # largest remainder first, then domain order
        counts[order[:left]] += 1
    return counts


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def _null_rows(values: Sequence) -> list[int]:
    return [i for i, v in enumerate(values) if _is_null(v)]


def _refuse_nulls(rows: list[int], column: str, what: str) -> None:
    if rows:
        shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
        raise ConfigError(f"{len(rows)} row(s) have a null {what} in column {column!r} (row {shown}); give every "
                          f"row a value, or drop those rows first (e.g. dataset.filter(lambda row: row[{column!r}] "
                          "is not None))")


def _column(dataset: Any, column: str) -> list:
    """All values of a column as a list (``datasets`` >= 4 returns a lazy column, slow to iterate)."""
    values = dataset[column]
    return values if isinstance(values, list) else list(values[:])


def _labels_from(values: Sequence, column: str) -> list[str]:
    labels = [str(v) for v in values]
    if "None" in labels or "nan" in labels:  # what str() makes of a null; the strings themselves are fine
        _refuse_nulls(_null_rows(values), column, "domain label")
    return labels


def _digest(*parts: bytes) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def _arrow_key_digest(dataset: Any, column: str) -> str | None:
    """Digest of a ``datasets.Dataset`` column straight from its Arrow data (fast); None when not Arrow-backed.

    Refuses null keys (the column is read anyway). The digest is independent of chunking and of how
    the dataset was built, and follows its row order (select / shuffle views included).
    """
    if not callable(getattr(dataset, "with_format", None)):
        return None
    try:
        import pyarrow as pa

        values = dataset.with_format("arrow")[column]
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if not isinstance(values, pa.Array):
            return None
    except Exception:  # not an Arrow-backed dataset after all: no key digest
        return None
    if values.null_count:
        _refuse_nulls(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False)).tolist(), column, "prompt")
    if pa.types.is_floating(values.type):
        import pyarrow.compute as pc

        _refuse_nulls(np.flatnonzero(pc.is_nan(values).to_numpy(zero_copy_only=False)).tolist(), column, "prompt")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pa.schema([("key", values.type)])) as writer:
        writer.write_batch(pa.record_batch([values], names=["key"]))
    return _digest(sink.getvalue().to_pybytes())


def domain_labels(dataset: Any, domain_key: str, *, required: bool = True) -> list[str] | None:
    """Per-row domain labels of a map-style dataset (``datasets.Dataset``, list of dicts, ...).

    A null label (None / NaN) is refused with its row. ``required=False`` returns None instead of
    failing when the dataset has no ``domain_key`` column at all (a one-pool sampler needs no domains).
    """
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
            if not required:
                return None
            raise ConfigError(f"dataset has no domain column {domain_key!r}; its columns are {list(columns)}; "
                              "pass domain_key=<the column holding the domain label>")
        return _labels_from(_column(dataset, domain_key), domain_key)
    values = []
    for i in range(len(dataset)):
        row = dataset[i]
        if not isinstance(row, Mapping) or domain_key not in row:
            if i == 0 and not required:
                return None
            have = list(row) if isinstance(row, Mapping) else type(row).__name__
            raise ConfigError(f"dataset row {i} has no domain field {domain_key!r}; it has {have}; "
                              "pass domain_key=<the field holding the domain label>")
        values.append(row[domain_key])
    return _labels_from(values, domain_key)


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
        key_column: column naming each prompt for a pre-rollout filter (default: ``prompt_key``,
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

    def __init__(self, dataset: Any = None, *, labels: Sequence[str] | None = None, domain_key: str = "domain",
                 domains: Sequence[str] | None = None, proportions: Mapping[str, float] | None = None,
                 batch_size: int = 8, num_generations: int = 1, repeat_count: int = 1, num_samples: int | None = None,
                 layout: str = "grpo", num_replicas: int | None = None, rank: int | None = None,
                 strategy: "Strategy | None" = None, seed: int = 0, resume: str = "replay",
                 key_column: str | None = None, prompt_labels: Sequence[str] | None = None,
                 mixing: bool | None = None, quota: str | None = None):
        self.strategy = strategy
        self._mixing = strategy is not None and strategy.mix_enabled  # the strategy's mixer sets the targets
        self._mixing_option = mixing = None if mixing is None else check_bool("mixing", mixing)
        if mixing is False and self._mixing:
            raise ConfigError(f"mixing=False asks for one pool, but strategy {strategy.name!r} has a mix part that "
                              "chooses domains; drop mixing=False, or use a strategy without a mix part")
        pooled = (not self._mixing and proportions is None) if mixing is None else not mixing
        if quota is None:  # the strategy's mix.quota, else independent draws
            quota = strategy.config["mix"].get("quota", "independent") if self._mixing else "independent"
        self.quota = check_choice("quota", quota, QUOTAS)
        if pooled and self.quota == "exact":
            raise ConfigError("quota='exact' splits each batch among domains by proportions, but this sampler draws "
                              "from one pool (no proportions, no mix part, or mixing=False); pass proportions={...} "
                              "or mixing=True, or a strategy with a mix part")
        self.seed = check_int("seed", seed, low=0)
        if labels is None:
            if dataset is None:
                raise ConfigError("DomainMixingSampler needs a dataset or labels=[...]")
            # A pool needs no domains; a plain sampler without the column is more likely a wrong domain_key.
            optional = pooled and (mixing is False or strategy is not None)
            labels = domain_labels(dataset, domain_key, required=not optional)
            if labels is None:  # one pool over data without a domain column: every row in NO_DOMAIN
                labels = [NO_DOMAIN] * len(dataset)
        else:
            labels = _labels_from(list(labels), "labels")
        if not labels:
            raise ConfigError("DomainMixingSampler got an empty dataset")
        if domains is None and self._mixing and strategy.domains is not None:
            domains = strategy.domains  # the config's domain order wins over the sorted labels
        present = sorted(set(labels))
        self.domains = [str(d) for d in domains] if domains is not None else present
        check_domains(self.domains, "DomainMixingSampler domains")
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
        if self._mixing:
            strategy.bind_domains(self.domains)
        self._pre_select = getattr(strategy, "pre_select", None)
        if self._pre_select is not None:
            self._pre_select.num_generations = self.num_generations

        # Rows as codes over all labels present (for the fingerprint), then as indices into self.domains.
        codes_of = {label: i for i, label in enumerate(present)}
        codes = np.fromiter(map(codes_of.__getitem__, labels), dtype=np.int64, count=len(labels))
        domain_of_code = np.array([self.domains.index(p) if p in self.domains else -1 for p in present], dtype=np.int64)
        self._domain_of_row = domain_of_code[codes]  # (N,) index into self.domains, -1: never drawn
        self._domain_sizes = np.bincount(self._domain_of_row[self._domain_of_row >= 0],
                                         minlength=len(self.domains)).astype(np.int64)
        total = int(self._domain_sizes.sum())
        self.num_samples = check_int("num_samples", num_samples, low=1) if num_samples is not None else total
        self.draw_size = self.batch_size * (self.num_replicas if self.layout == "shard" else 1)
        self.chunks_per_epoch = self.num_samples // self.draw_size
        if self.chunks_per_epoch == 0:
            # The core names the concept; a host adapter re-raises it in its own settings (prompts_* attributes).
            error = ConfigError(f"the sampler has {self.num_samples} prompt(s) to draw from (num_samples) but one batch "
                                f"needs {self.draw_size} distinct prompts (batch_size"
                                f"{' x num_replicas' if self.layout == 'shard' else ''}); lower batch_size or add "
                                "rows (raise num_samples)")
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
        # Prompt keys are only needed by a pre-rollout filter; reading them can be costly.
        self._keys = self._row_keys(dataset, len(labels), key_column) if self._pre_select is not None else None
        self.key_column = key_column
        if prompt_labels is not None and len(prompt_labels) != len(labels):
            raise ConfigError(f"prompt_labels has {len(prompt_labels)} entries but the dataset has {len(labels)} rows")
        self._prompt_labels_default = prompt_labels is None and pooled
        if self._prompt_labels_default:  # one pool: the domain tells the filter about unseen prompts
            prompt_labels = labels
        self._prompt_labels = None if prompt_labels is None else [str(v) for v in prompt_labels]
        self._fingerprint = self._data_fingerprint(dataset, present, codes, key_column)
        self._build_blocks(pooled)  # shuffles every block: the stream's first use of the generator
        # Rows of every chunk drawn in the current epoch, flat (chunks are draw_size long): a typed
        # array, not a list of lists, so the garbage collector never scans an epoch's worth of lists.
        self._epoch_rows = array("q")
        self._resumed = False
        self._pending_skip = 0
        # Indices yielded in this epoch = _position_base + _chunk_length - (items left in _chunk_iter).
        self._position_base, self._chunk_length, self._chunk_iter = 0, 0, iter(())

    # ------------------------------------------------------------ configuration

    def _blocks_for(self, pooled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(block of each row (N,), block sizes (B,), block offsets (B,))``: one block per domain, or one pool."""
        block_of_row = np.where(self._domain_of_row >= 0, 0, -1) if pooled else self._domain_of_row
        sizes = np.array([self._domain_sizes.sum()]) if pooled else self._domain_sizes
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        return block_of_row, sizes.astype(np.int64), offsets.astype(np.int64)

    def _set_blocks(self, pooled: bool, perm: np.ndarray | None = None) -> None:
        """Switch the draw structure; with ``perm`` None, rows in index order (to be shuffled)."""
        self._pooled = pooled
        self._block_of_row, self._sizes, self._offsets = self._blocks_for(pooled)
        self._sizes_list, self._offsets_list = self._sizes.tolist(), self._offsets.tolist()
        if perm is None:
            order = np.argsort(self._block_of_row, kind="stable")
            perm = order[self._block_of_row[order] >= 0]  # rows of domains not being drawn never are
        self._perm = np.asarray(perm, dtype=np.int64)  # rows grouped by block; each block is shuffled per pass
        self._pointers = [0] * len(self._sizes_list)  # next unread position in each block

    def _build_blocks(self, pooled: bool) -> None:
        self._set_blocks(pooled)
        for k in range(len(self._sizes_list)):
            self._shuffle_domain(k)

    def _data_fingerprint(self, dataset: Any, present: list[str], codes: np.ndarray, key_column: str | None) -> dict:
        """Row count, rows per label, a digest of every row's label and (when readable cheaply) of its prompt key."""
        counts = np.bincount(codes, minlength=len(present)).tolist()
        labels = _digest("\x1f".join(present).encode(), codes.astype("<i8").tobytes())
        keys = None
        columns = getattr(dataset, "column_names", None)
        source = key_column if key_column is not None else next((c for c in KEY_COLUMNS if c in (columns or ())), None)
        if columns is not None and source is not None:
            if source not in columns:
                raise ConfigError(f"key_column {source!r} is not a column of the dataset; "
                                  f"its columns are {list(columns)}")
            keys = _arrow_key_digest(dataset, source)
        if keys is None and self._keys is not None:  # read for the pre-rollout filter anyway
            keys = _digest(repr(self._keys).encode())
        return {"rows": int(codes.shape[0]), "domain_rows": dict(zip(present, counts)), "labels": labels, "keys": keys}

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
        """Each row's prompt key: ``key_column`` if given, else the rule the adapters use (`row_prompt_key`).

        A null key (None / NaN) is refused with its row.
        """
        if dataset is None:
            return list(range(n))
        columns = getattr(dataset, "column_names", None)
        if key_column is not None:
            if columns is not None and key_column not in columns:
                raise ConfigError(f"key_column {key_column!r} is not a column of the dataset; its columns are {list(columns)}")
            values = _column(dataset, key_column) if columns is not None else [dataset[i][key_column] for i in range(n)]
            _refuse_nulls(_null_rows(values), key_column, "prompt key")
            return [hashable_key(v) for v in values]
        if columns is not None:
            source = next((c for c in KEY_COLUMNS if c in columns), None)
            if source is None:
                return list(range(n))
            values = _column(dataset, source)
            _refuse_nulls(_null_rows(values), source, "prompt")
            return [hashable_key(v) for v in values]
        keys = []
        for i in range(n):
            row = dataset[i]
            source = next((c for c in KEY_COLUMNS if hasattr(row, "keys") and c in row), None)
            if source is not None and _is_null(row[source]):
                _refuse_nulls([i], source, "prompt")
            keys.append(row_prompt_key(row, i))
        return keys

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
                raise ConfigError("this sampler draws from one pool (mixing=False), so it has no proportions to set; "
                                  "build it with mixing=True (or proportions={...}) to mix by domain")
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

    # ------------------------------------------------------------ drawing
    # Rows are drawn from "blocks": one per domain when mixing, one for all rows when pooled.

    def _shuffle_domain(self, k: int) -> None:
        """Start a new pass over block ``k``: shuffle it in place."""
        start = self._offsets_list[k]
        self._rng.shuffle(self._perm[start:start + self._sizes_list[k]])  # in place on the view
        self._pointers[k] = 0

    def _new_pass(self, k: int, avoid: list[np.ndarray] | list[int]) -> None:
        """Start a new pass over block ``k`` mid-chunk; rows in ``avoid`` (already in the chunk) go to its end.

        Moving them back (a stable partition) keeps the new pass a uniform shuffle of the other rows,
        so the chunk gets no row twice while the block has rows it does not hold yet.
        """
        self._shuffle_domain(k)
        if len(avoid):
            block = self._perm[self._offsets_list[k]:self._offsets_list[k] + self._sizes_list[k]]
            used = np.isin(block, np.concatenate(avoid) if isinstance(avoid[0], np.ndarray) else avoid)
            if used.any():
                block[:] = np.concatenate([block[~used], block[used]])

    def _take(self, k: int, count: int) -> np.ndarray:
        """The next ``count`` rows of block ``k``, reshuffling the block whenever it runs out."""
        taken = []
        while count > 0:
            if self._pointers[k] == self._sizes_list[k]:
                self._new_pass(k, taken)
            start = self._offsets_list[k] + self._pointers[k]
            size = min(count, self._sizes_list[k] - self._pointers[k])
            taken.append(self._perm[start:start + size].copy())
            self._pointers[k] += size
            count -= size
        return np.concatenate(taken)

    def _take_filtered(self, k: int, need: int) -> tuple[np.ndarray, int]:
        """``need`` rows of block ``k`` that pass the pre-rollout filter, and how many were skipped."""
        taken: list[int] = []
        in_chunk: set[int] = set()
        skipped = 0
        while len(taken) < need:
            if self._pointers[k] == self._sizes_list[k]:
                self._new_pass(k, taken)
            begin = self._offsets_list[k] + self._pointers[k]
            window = min(self._sizes_list[k] - self._pointers[k], max(2 * (need - len(taken)), 8))
            candidates = self._perm[begin:begin + window]
            rows = candidates.tolist()
            labels = None if self._prompt_labels is None else [self._prompt_labels[r] for r in rows]
            # After a wrap-around the chunk's own rows come back at the end of the new pass: while the
            # domain has rows the chunk does not hold yet, a row is not taken twice (no prompt twice in
            # one generation batch, none on two ranks in one step).
            repeat = None
            if in_chunk and len(in_chunk) < self._sizes_list[k]:
                repeat = np.fromiter((r in in_chunk for r in rows), dtype=bool, count=len(rows))
            passed = accept_prompts(self._pre_select, [self._keys[r] for r in rows], need - len(taken), self._rng,
                                    labels=labels, exclude=repeat)
            chosen = candidates[passed.accepted].tolist()
            taken.extend(chosen)
            in_chunk.update(chosen)
            skipped += passed.skipped
            self._pointers[k] += passed.considered
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

    def _quota_layout(self, proportions: np.ndarray, n: int) -> np.ndarray:
        """``(n,)`` block ids, each block ``largest_remainder_quotas`` times; cached per proportions object."""
        if self._quota_of[0] is not proportions or self._quota_of[1] != n:
            quotas = largest_remainder_quotas(proportions, n)
            self._quota_of = (proportions, n, np.repeat(np.arange(quotas.shape[0]), quotas))
        return self._quota_of[2]

    def _choose(self, proportions: np.ndarray, uniforms: np.ndarray, n: int) -> np.ndarray:
        """The block of each draw of ``len(uniforms) // n`` chunks of ``n``: one uniform per draw either way.

        ``quota="independent"``: each draw inverts the cumulative proportions. ``quota="exact"``: each
        chunk is the quota layout in the random order that sorting its uniforms gives.
        """
        if self.quota == "exact" and not self._pooled:
            return self._quota_layout(proportions, n)[uniforms.reshape(-1, n).argsort(axis=1)].ravel()
        return self._cumulative(proportions).searchsorted(uniforms, side="right")

    def _domain_counts(self, rows: np.ndarray, block_counts: np.ndarray) -> list[int]:
        """Draws per domain of one chunk: the block counts, or (pooled) counted from the rows."""
        if self._pooled:
            return np.bincount(self._domain_of_row[rows], minlength=len(self.domains)).tolist()
        return block_counts.tolist()

    def _draw_chunk(self, proportions: np.ndarray, n: int):
        """``n`` dataset rows (a list for small chunks, drawn ahead in blocks; else an array): blocks
        by ``proportions``, rows without replacement within a block. A small chunk whose block would
        run a domain out takes the general path, which reshuffles; both read the same uniforms."""
        if n <= SMALL_CHUNK and self._pre_select is None:
            rows = self._next_ahead(proportions, n)
            if rows is not None:
                return rows
        chosen = self._choose(proportions, self._uniforms(n), n)
        counts = np.bincount(chosen, minlength=len(self._sizes_list))
        order = chosen.argsort(kind="stable")  # positions of block 0's draws, then block 1's, ...
        rows = np.empty(n, dtype=np.int64)
        pointers = np.array(self._pointers, dtype=np.int64)
        end = pointers + counts
        if self._pre_select is not None:
            taken, skipped = zip(*(self._take_filtered(k, int(c)) for k, c in enumerate(counts) if c))
            rows[order] = np.concatenate(taken)
            self._pre_select.record_draws([self._keys[r] for r in rows.tolist()], sum(skipped))
        elif (end <= self._sizes).all():
            # The j-th draw of block k takes the row at pointer_k + j of k's shuffled block.
            base = self._offsets + pointers - (np.cumsum(counts) - counts)
            rows[order] = self._perm[np.arange(n) + np.repeat(base, counts)]
            self._pointers = end.tolist()
        else:  # some block runs out inside this chunk
            rows[order] = np.concatenate([self._take(k, int(c)) for k, c in enumerate(counts) if c])
        self._book(self._domain_counts(rows, counts))
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
        chosen = self._choose(proportions, self._uniforms(chunks * n), n)
        counts = np.bincount(chosen, minlength=len(self._sizes_list))
        pointers = np.array(self._pointers, dtype=np.int64)
        if not (pointers + counts <= self._sizes).all():
            self._uniform_pos -= chunks * n  # not drawn after all: the per-chunk path reshuffles as needed
            return None
        order = chosen.argsort(kind="stable")
        base = self._offsets + pointers - (np.cumsum(counts) - counts)
        rows = np.empty(chunks * n, dtype=np.int64)
        rows[order] = self._perm[np.arange(chunks * n) + np.repeat(base, counts)]
        self._pointers = (pointers + counts).tolist()
        domains = self._domain_of_row[rows] if self._pooled else chosen  # what the bookkeeping counts
        self._ahead = {"proportions": proportions, "rows": rows.tolist(), "chosen": chosen, "domains": domains,
                       "chunks": chunks, "pos": 0, "booked": 0, "n": n}
        return self._ahead

    def _unbooked(self) -> tuple[list[int], list[list[int]]]:
        """Draws per domain of the served chunks of the drawn-ahead block not counted yet: the total over
        them, and each chunk's counts (only the last `RECENT_CHUNKS`). Reads the block, changes nothing."""
        ahead, k = self._ahead, len(self.domains)
        if ahead is None or ahead["booked"] == ahead["pos"]:
            return [0] * k, []
        n = ahead["n"]
        served = ahead["pos"] - ahead["booked"]
        chosen = ahead["domains"][ahead["booked"] * n:ahead["pos"] * n]
        recent = min(served, RECENT_CHUNKS)
        tail = chosen[(served - recent) * n:].reshape(recent, n) + k * np.arange(recent)[:, None]
        per_chunk = np.bincount(tail.ravel(), minlength=recent * k).reshape(recent, k).tolist()
        return np.bincount(chosen, minlength=k).tolist(), per_chunk

    def _booked_counts(self) -> tuple[list[int], list[list[int]]]:
        """``(drawn_total, drawn_recent)`` with every served chunk counted, as new lists; changes nothing."""
        total, chunks = self._unbooked()
        recent = [list(c) for c in self._drawn_recent] + chunks
        return [t + c for t, c in zip(self._drawn_total, total)], recent[-RECENT_CHUNKS:]

    def _book_served(self) -> None:
        """Count the served chunks of the drawn-ahead block that are not counted yet."""
        ahead = self._ahead
        if ahead is None or ahead["booked"] == ahead["pos"]:
            return
        if self._mixing:  # the strategy is told chunk by chunk (every chunk is booked as it is served)
            n, k = ahead["n"], len(self.domains)
            chosen = ahead["domains"][ahead["booked"] * n:ahead["pos"] * n]
            for c in range(ahead["pos"] - ahead["booked"]):
                self._book(np.bincount(chosen[c * n:(c + 1) * n], minlength=k).tolist())
        else:  # totals in one count; per-chunk counts only for the recent window
            total, chunks = self._unbooked()
            for d, c in enumerate(total):
                self._drawn_total[d] += c
            self._drawn_recent.extend(chunks)
        ahead["booked"] = ahead["pos"]

    def _unserved(self) -> tuple[list[int], int]:
        """Block pointers and uniform position as if only the served chunks of the drawn-ahead block were drawn."""
        pointers, position = list(self._pointers), self._uniform_pos
        ahead = self._ahead
        if ahead is not None and ahead["pos"] < ahead["chunks"]:
            unserved = ahead["chosen"][ahead["pos"] * ahead["n"]:]
            for d, c in enumerate(np.bincount(unserved, minlength=len(pointers)).tolist()):
                pointers[d] -= c
            position -= unserved.shape[0]
        return pointers, position

    def _rollback_ahead(self) -> None:
        """Undo the unserved chunks of the drawn-ahead block (pointers and uniforms)."""
        self._book_served()
        self._pointers, self._uniform_pos = self._unserved()
        self._ahead = None

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
                "chunks_per_epoch": self.chunks_per_epoch, "quota": self.quota}

    def state_dict(self) -> dict:
        """Random state, per-domain passes, counts, the rows of every chunk drawn in this epoch, a data fingerprint.

        Only Python ints, floats, strings, bools and lists / dicts of them, so a checkpoint holding
        it loads with ``torch.load(..., weights_only=True)``. Reading it does not change the sampler.
        """
        # Counts of the chunks served so far, as if only those had been drawn; the sampler is left as it is.
        drawn_total, drawn_recent = self._booked_counts()
        pointers, uniform_pos = self._unserved()
        fingerprint = {**self._fingerprint, "domain_rows": dict(self._fingerprint["domain_rows"])}
        return {**self._draw_config(), "data": fingerprint, "pooled": self._pooled, "epoch": self.epoch,
                "rng": self._rng.bit_generator.state, "perm": self._perm.tolist(), "pointers": pointers,
                "drawn_total": drawn_total, "drawn_recent": drawn_recent,
                "epoch_rows": [self._epoch_rows[i:i + self.draw_size].tolist()
                               for i in range(0, len(self._epoch_rows), self.draw_size)],
                "uniforms": self._uniform_buffer[uniform_pos:].tolist(), "position": self.position,
                "proportions": dict(self._proportions)}

    def _data_change(self, saved: Any) -> str | None:
        """What differs between the data a state was saved for and this sampler's data; None if nothing."""
        mine = self._fingerprint
        if not isinstance(saved, Mapping):
            return f"its data fingerprint is malformed ({type(saved).__name__})"
        changes = []
        rows = saved.get("rows")
        if rows != mine["rows"]:
            delta = mine["rows"] - rows if isinstance(rows, int) else None
            what = f"{abs(delta)} row(s) {'added' if delta > 0 else 'removed'}" if delta else "the row count differs"
            changes.append(f"{what} ({rows} rows then, {mine['rows']} now)")
        saved_rows = saved.get("domain_rows") if isinstance(saved.get("domain_rows"), Mapping) else {}
        for label in sorted(set(saved_rows) | set(mine["domain_rows"])):
            then, now = saved_rows.get(label, 0), mine["domain_rows"].get(label, 0)
            if then != now:
                changes.append(f"domain {label!r} had {then} rows, has {now}")
        if not changes and saved.get("labels") != mine["labels"]:
            changes.append("the rows carry different domain labels (rows reordered or relabelled)")
        if not changes and None not in (saved.get("keys"), mine["keys"]) and saved.get("keys") != mine["keys"]:
            changes.append("the prompts differ (rows reordered or edited, or another prompt key column)")
        return "; ".join(changes) or None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore; the next ``__iter__`` continues the interrupted epoch exactly (see ``resume``).

        Refused, with what changed, when the state was saved with other draw settings or for other
        data (rows added, removed, reordered or relabelled); a state of an earlier version without a
        data fingerprint loads with a warning. A state that is not this sampler's is a `StateError`.
        """
        state = check_state(state, STATE_KEYS, "DomainMixingSampler")
        # The data first: a changed row count also changes the epoch length, and that is the news.
        if "data" in state:
            change = self._data_change(state["data"])
            if change is not None:
                raise StateError(f"DomainMixingSampler.load_state_dict: the state was saved for different data: "
                                 f"{change}. Resume on the same dataset (same rows, same order, same domain labels), "
                                 "or start this sampler fresh instead of loading the state")
        else:
            warnings.warn("DomainMixingSampler.load_state_dict: the state has no data fingerprint (saved by an earlier "
                          "version), so a changed dataset cannot be detected; only its row layout is checked",
                          stacklevel=2)
        for key, mine in self._draw_config().items():
            saved = state.get(key, OLD_STATE_DEFAULTS.get(key))
            if key == "domains" and isinstance(saved, (list, tuple)):
                saved = [str(d) for d in saved]
            if saved != mine:
                error = ConfigError(f"sampler state was saved with {key}={saved!r}, this sampler has {mine!r}; "
                                    "resume with the same sampler configuration")
                # A host adapter re-raises it naming its own settings for `key`.
                error.sampler_setting, error.saved, error.current = key, saved, mine
                raise error
        pooled = state.get("pooled", False)
        if pooled != self._pooled:
            # Built without proportions (one pool until set_proportions): adopt a state saved after the switch.
            adopt = self._pooled and pooled is False and self._mixing_option is None and not self._mixing
            if not adopt:
                raise ConfigError(f"sampler state was saved {'from one pool' if pooled else 'mixing by domain'}, "
                                  f"this sampler {'draws from one pool' if self._pooled else 'mixes by domain'}; "
                                  "resume with the same proportions / mixing setting")
        try:
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = state["rng"]
            perm = np.asarray(state["perm"], dtype=np.int64)
            uniforms = np.asarray(state.get("uniforms", []), dtype=np.float64)
            pointers = [int(p) for p in state["pointers"]]
            drawn_total = [int(c) for c in state["drawn_total"]]
            drawn_recent = [[int(c) for c in counts] for counts in state["drawn_recent"]]
            epoch_rows = np.asarray([int(r) for rows in state["epoch_rows"] for r in rows], dtype=np.int64)
            epoch, position = int(state["epoch"]), int(state["position"])
            if not isinstance(state["proportions"], Mapping):
                raise TypeError(f"proportions is a {type(state['proportions']).__name__}")
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:
            raise StateError(f"DomainMixingSampler.load_state_dict: the state is malformed ({type(error).__name__}: "
                             f"{error}); load a dict returned by DomainMixingSampler.state_dict()") from error
        proportions = check_proportions(state["proportions"], self.domains, "saved sampler proportions")
        block_of_row, sizes, _ = self._blocks_for(pooled)
        self._check_layout(perm, pointers, drawn_total, drawn_recent, epoch_rows, position, uniforms,
                           block_of_row, sizes)
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

    def _check_layout(self, perm, pointers, drawn_total, drawn_recent, epoch_rows, position, uniforms,
                      block_of_row, sizes) -> None:
        """Refuse a state whose rows do not fit this dataset (also for states without a fingerprint)."""
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
        elif epoch_rows.size and (epoch_rows.min() < 0 or epoch_rows.max() >= n_rows
                                  or (block_of_row[epoch_rows] < 0).any()):
            problem = "its rows drawn this epoch are not rows this sampler draws"
        elif not 0 <= position <= len(self):
            problem = f"its position {position} is outside the epoch of {len(self)} indices"
        elif uniforms.ndim != 1 or not ((uniforms >= 0) & (uniforms < 1)).all():
            problem = "its buffered random numbers are malformed"
        if problem is not None:
            raise StateError(f"DomainMixingSampler.load_state_dict: the state does not fit this sampler's data: "
                             f"{problem}. Resume on the same dataset, or start this sampler fresh")
