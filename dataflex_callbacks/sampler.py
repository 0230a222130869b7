"""`DomainMixingSampler`: a DataLoader sampler that draws prompts by per-domain proportions.

Draws happen chunk by chunk (one chunk = one batch of prompts), each chunk under the proportions
current at that moment, so a mixer can change them between batches; nothing is precomputed for
an epoch. Within a domain, rows are drawn without replacement until the domain is exhausted,
then reshuffled.

Two layouts:

- ``layout="grpo"`` reproduces TRL's ``RepeatSampler``: each prompt repeated ``num_generations``
  times in a row, each chunk of ``batch_size`` prompts repeated ``repeat_count`` times, the same
  stream on every rank (the host shards batches itself).
- ``layout="shard"`` gives each of ``num_replicas`` ranks different rows of one global draw
  (Lightning, plain DDP).

Resume: `state_dict` stores the random state, the rows of every chunk drawn so far in the epoch
and how many indices were yielded. A restored sampler re-yields the logged chunks and then draws on:
hosts that re-iterate and skip the consumed batches (``resume="replay"``, HF Trainer) and hosts
that expect the stream to go on where it stopped (``resume="continue"``) both get the
uninterrupted run's stream, also when proportions or a pre-rollout filter changed mid-epoch.

Pre-rollout selection: with a strategy that has a ``pre_select`` part, the mixer still chooses
the domain and the filter chooses within it, skipping prompts it predicts to be useless.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np
from torch.utils.data import Sampler

from .errors import ConfigError
from .history import KEY_COLUMNS, hashable_key, row_prompt_key
from .params import check_choice, check_int
from .proportions import check_proportions

if TYPE_CHECKING:  # pragma: no cover
    from .strategy import Strategy

RECENT_CHUNKS = 20


def domain_labels(dataset: Any, domain_key: str) -> list[str]:
    """Per-row domain labels of a map-style dataset (``datasets.Dataset``, list of dicts, ...)."""
    type_name = type(dataset).__name__
    if type_name == "IterableDataset" or (hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__")):
        raise ConfigError(
            "DomainMixingSampler needs a map-style dataset with random access; got an IterableDataset. "
            "For streaming data, mix with datasets.interleave_datasets(per_domain_datasets, probabilities=[...])"
        )
    columns = getattr(dataset, "column_names", None)
    if columns is not None:
        if domain_key not in columns:
            raise ConfigError(f"dataset has no domain column {domain_key!r}; its columns are {list(columns)}; set domain_key")
        return [str(v) for v in dataset[domain_key]]
    labels = []
    for i in range(len(dataset)):
        row = dataset[i]
        if not isinstance(row, Mapping) or domain_key not in row:
            have = list(row) if isinstance(row, Mapping) else type(row).__name__
            raise ConfigError(f"dataset row {i} has no domain field {domain_key!r}; it has {have}; set domain_key")
        labels.append(str(row[domain_key]))
    return labels


class DomainMixingSampler(Sampler[int]):
    """Sample dataset rows so that each batch follows per-domain proportions.

    Args:
        dataset: map-style dataset whose rows carry a domain label (or pass ``labels``).
        labels: per-row domain labels, instead of reading them from ``dataset``.
        domain_key: name of the domain column.
        domains: the domains to mix, in order (default: sorted labels). Each must have rows.
        proportions: initial proportions ``{domain: p}`` (default uniform).
        batch_size: prompts per chunk; proportions are read once per chunk.
        num_generations: consecutive repeats of each prompt (GRPO group size), ``layout="grpo"``.
        repeat_count: repeats of each chunk (TRL's ``num_iterations * steps_per_generation``).
        num_samples: prompts per epoch (default: dataset length), rounded down to whole chunks.
        layout: ``"grpo"`` (same stream on every rank) or ``"shard"`` (rank-disjoint rows).
        num_replicas, rank: for ``layout="shard"`` (default: torch.distributed's, else 1 and 0).
        strategy: a `Strategy` with a mix part; its target proportions drive the draws and the
            sampler reports what it drew back to it.
        seed: random seed; the stream is a function of seed and the proportions used.
        resume: ``"replay"`` or ``"continue"`` (see module docstring).
    """

    def __init__(self, dataset: Any = None, *, labels: Sequence[str] | None = None, domain_key: str = "domain",
                 domains: Sequence[str] | None = None, proportions: Mapping[str, float] | None = None,
                 batch_size: int = 8, num_generations: int = 1, repeat_count: int = 1, num_samples: int | None = None,
                 layout: str = "grpo", num_replicas: int | None = None, rank: int | None = None,
                 strategy: "Strategy | None" = None, seed: int = 0, resume: str = "replay"):
        if labels is None:
            if dataset is None:
                raise ConfigError("DomainMixingSampler needs a dataset or labels=[...]")
            labels = domain_labels(dataset, domain_key)
        labels = [str(v) for v in labels]
        if not labels:
            raise ConfigError("DomainMixingSampler got an empty dataset")
        present = sorted(set(labels))
        self.domains = list(domains) if domains is not None else present
        empty = [d for d in self.domains if d not in present]
        if empty:
            raise ConfigError(f"domain(s) {empty} have no rows in the dataset; domains with rows: {present}")
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.num_generations = check_int("num_generations", num_generations, low=1)
        self.repeat_count = check_int("repeat_count", repeat_count, low=1)
        self.layout = check_choice("layout", layout, ("grpo", "shard"))
        self.resume = check_choice("resume", resume, ("replay", "continue"))
        self.num_replicas, self.rank = self._replicas(num_replicas, rank)
        self.seed = int(seed)
        self.strategy = strategy
        if strategy is not None and strategy.mix_enabled:
            strategy.bind_domains(self.domains)
        if strategy is not None and strategy.prompt_filter is not None:
            strategy.prompt_filter.num_generations = self.num_generations

        index = {d: i for i, d in enumerate(self.domains)}
        rows = np.array([index.get(label, -1) for label in labels], dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        order = order[rows[order] >= 0]  # rows of domains not being mixed are never drawn
        self.sizes = np.bincount(rows[rows >= 0], minlength=len(self.domains)).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self._rows_by_domain = order.astype(np.int64)
        total = int(self.sizes.sum())
        self.num_samples = check_int("num_samples", num_samples, low=1) if num_samples is not None else total
        draw = self.batch_size * (self.num_replicas if self.layout == "shard" else 1)
        self.chunks_per_epoch = self.num_samples // draw
        if self.chunks_per_epoch == 0:
            raise ConfigError(f"num_samples={self.num_samples} is smaller than one chunk of {draw} prompts; lower batch_size")

        self._proportions = self._uniform() if proportions is None else check_proportions(proportions, self.domains)
        self.epoch = 0
        self.drawn_total = np.zeros(len(self.domains), dtype=np.int64)
        self.drawn_recent: deque = deque(maxlen=RECENT_CHUNKS)
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self._perm = self._rows_by_domain.copy()
        self._pointers = np.zeros(len(self.domains), dtype=np.int64)
        self._keys = self._row_keys(dataset, len(labels))
        self._shuffle_all()
        self._epoch_rows: list[np.ndarray] = []  # rows of each chunk drawn in the current epoch
        self._position = 0  # indices yielded in the current epoch
        self._resumed = False

    # ------------------------------------------------------------ configuration

    @staticmethod
    def _replicas(num_replicas, rank):
        if num_replicas is None or rank is None:
            import torch.distributed as dist

            initialised = dist.is_available() and dist.is_initialized()
            num_replicas = num_replicas if num_replicas is not None else (dist.get_world_size() if initialised else 1)
            rank = rank if rank is not None else (dist.get_rank() if initialised else 0)
        if not 0 <= rank < num_replicas:
            raise ConfigError(f"rank must be in [0, num_replicas={num_replicas}); got {rank}")
        return int(num_replicas), int(rank)

    @staticmethod
    def _row_keys(dataset: Any, n: int) -> list:
        """Each row's prompt key, by the rule the host adapters use (`row_prompt_key`)."""
        columns = getattr(dataset, "column_names", None)
        if columns is not None:
            for column in KEY_COLUMNS:
                if column in columns:
                    return [hashable_key(v) for v in dataset[column]]
            return list(range(n))
        if dataset is None:
            return list(range(n))
        return [row_prompt_key(dataset[i], i) for i in range(n)]

    def _uniform(self) -> dict[str, float]:
        return {d: 1.0 / len(self.domains) for d in self.domains}

    @property
    def target_proportions(self) -> dict[str, float]:
        """Proportions the next chunk will be drawn with."""
        if self.strategy is not None and self.strategy.target_proportions is not None:
            return dict(self.strategy.target_proportions)
        return dict(self._proportions)

    def set_proportions(self, proportions: Mapping[str, float]) -> None:
        """Change the proportions for the following chunks (validated: known domains, >= 0, sum 1)."""
        if self.strategy is not None and self.strategy.mix_enabled:
            raise ConfigError("this sampler follows its strategy's mixer; change the strategy, not the sampler")
        self._proportions = check_proportions(proportions, self.domains, "set_proportions")

    def actual_proportions(self, recent: bool = False) -> dict[str, float]:
        """Share of each domain among prompts drawn (since the start, or over the last few chunks)."""
        counts = np.sum(list(self.drawn_recent), axis=0) if recent and self.drawn_recent else self.drawn_total
        n = counts.sum()
        return {d: float(counts[i] / n) if n else 0.0 for i, d in enumerate(self.domains)}

    def set_epoch(self, epoch: int) -> None:
        """Compatibility with DistributedSampler users; the stream already advances every epoch."""

    # ------------------------------------------------------------ drawing

    def _shuffle_all(self) -> None:
        for k in range(len(self.domains)):
            self._shuffle_domain(k)

    def _shuffle_domain(self, k: int) -> None:
        start, size = self.offsets[k], self.sizes[k]
        self._perm[start:start + size] = self._perm[start:start + size][self._rng.permutation(size)]
        self._pointers[k] = 0

    def _draw_chunk(self, proportions: np.ndarray, n: int) -> np.ndarray:
        """``n`` dataset rows: domains by ``proportions``, rows without replacement within a domain."""
        cumulative = np.cumsum(proportions)
        cumulative /= cumulative[-1]
        cumulative[-1] = 1.0
        chosen = np.searchsorted(cumulative, self._rng.random(n), side="right")
        counts = np.bincount(chosen, minlength=len(self.domains))
        prompt_filter = self.strategy.prompt_filter if self.strategy is not None else None
        if prompt_filter is not None:
            rows = np.empty(n, dtype=np.int64)
            skipped = 0
            for k in np.flatnonzero(counts):
                taken, skip_k = self._take_filtered(int(k), int(counts[k]), prompt_filter)
                rows[chosen == k] = taken
                skipped += skip_k
            prompt_filter.record_draws([self._keys[r] for r in rows.tolist()], skipped)
        elif np.all(self._pointers + counts <= self.sizes):
            order = np.argsort(chosen, kind="stable")
            starts = np.cumsum(counts) - counts
            rank = np.empty(n, dtype=np.int64)
            rank[order] = np.arange(n) - starts[chosen[order]]
            rows = self._perm[self.offsets[chosen] + self._pointers[chosen] + rank]
            self._pointers += counts
        else:  # some domain runs out inside this chunk: go row by row, reshuffling as needed
            rows = np.empty(n, dtype=np.int64)
            for i, k in enumerate(chosen):
                if self._pointers[k] == self.sizes[k]:
                    self._shuffle_domain(k)
                rows[i] = self._perm[self.offsets[k] + self._pointers[k]]
                self._pointers[k] += 1
        self.drawn_total += counts
        self.drawn_recent.append(counts)
        if self.strategy is not None and self.strategy.mix_enabled:
            self.strategy.observe_sampled({d: int(c) for d, c in zip(self.domains, counts)})
        return rows

    def _take_filtered(self, k: int, need: int, prompt_filter) -> tuple[np.ndarray, int]:
        """``need`` rows of domain ``k`` that pass the pre-rollout filter, and how many were skipped."""
        taken: list[int] = []
        skipped = 0
        while len(taken) < need:
            if self._pointers[k] == self.sizes[k]:
                self._shuffle_domain(k)
            begin = self.offsets[k] + self._pointers[k]
            window = int(min(self.sizes[k] - self._pointers[k], max(2 * (need - len(taken)), 8)))
            candidates = self._perm[begin:begin + window]
            keep_probability = prompt_filter.keep_probability([self._keys[r] for r in candidates.tolist()])
            accepted = np.flatnonzero(self._rng.random(window) < keep_probability)[: need - len(taken)]
            used = int(accepted[-1]) + 1 if len(taken) + len(accepted) == need else window
            taken.extend(candidates[accepted].tolist())
            skipped += used - len(accepted)
            self._pointers[k] += used
        return np.asarray(taken, dtype=np.int64), skipped

    def _layout(self, rows: np.ndarray) -> np.ndarray:
        if self.layout == "shard":
            return rows[self.rank::self.num_replicas]
        repeated = np.repeat(rows, self.num_generations)
        return np.tile(repeated, self.repeat_count)

    def __iter__(self) -> Iterator[int]:
        chunk = self.batch_size * (self.num_replicas if self.layout == "shard" else 1)
        replay = self._epoch_rows if self._resumed else []
        skip = self._position if (self._resumed and self.resume == "continue") else 0
        self._resumed, self._epoch_rows, self._position = False, [], 0
        for c in range(self.chunks_per_epoch):
            # After a resume, the chunks drawn before saving are re-yielded from the log as they were.
            rows = replay[c] if c < len(replay) else self._draw_chunk(self._next_proportions(), chunk)
            self._epoch_rows.append(rows)
            for index in self._layout(rows).tolist():
                self._position += 1
                if self._position > skip:
                    yield index
        self.epoch += 1
        self._epoch_rows = []

    def _next_proportions(self) -> np.ndarray:
        target = self.target_proportions
        return np.array([target[d] for d in self.domains], dtype=np.float64)

    def __len__(self) -> int:
        per_chunk = self.batch_size if self.layout == "shard" else self.batch_size * self.num_generations * self.repeat_count
        return self.chunks_per_epoch * per_chunk

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict:
        """Random state, per-domain passes, counts, and the rows of every chunk drawn in this epoch."""
        return {"domains": list(self.domains), "seed": self.seed, "batch_size": self.batch_size, "epoch": self.epoch,
                "rng": self._rng.bit_generator.state, "perm": self._perm.tolist(), "pointers": self._pointers.tolist(),
                "drawn_total": self.drawn_total.tolist(), "drawn_recent": [c.tolist() for c in self.drawn_recent],
                "epoch_rows": [r.tolist() for r in self._epoch_rows], "position": self._position,
                "proportions": dict(self._proportions)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore; the next ``__iter__`` continues the interrupted epoch exactly (see ``resume``)."""
        for key, mine in (("domains", self.domains), ("seed", self.seed), ("batch_size", self.batch_size)):
            if (list(state[key]) if key == "domains" else state[key]) != mine:
                raise ConfigError(f"sampler state was saved with {key}={state[key]!r}, this sampler has {mine!r}; "
                                  "resume with the same sampler configuration")
        self._rng.bit_generator.state = state["rng"]
        self._perm = np.asarray(state["perm"], dtype=np.int64)
        self._pointers = np.asarray(state["pointers"], dtype=np.int64)
        self.drawn_total = np.asarray(state["drawn_total"], dtype=np.int64)
        self.drawn_recent = deque((np.asarray(c, dtype=np.int64) for c in state["drawn_recent"]), maxlen=RECENT_CHUNKS)
        self._epoch_rows = [np.asarray(r, dtype=np.int64) for r in state["epoch_rows"]]
        self._position = int(state["position"])
        self.epoch = int(state["epoch"])
        self._proportions = dict(state["proportions"])
        self._resumed = True
