"""What `DomainMixingSampler` reads from a dataset: domain labels, each row's domain, prompt keys, null checks,
a fingerprint.

The fingerprint (row count, rows per label, a digest of the labels and of the prompt keys) lets a
restored sampler refuse a state saved for other data; `data_change` says what changed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset as TorchIterableDataset

from dataflex_callbacks.errors import ArgumentError, ConfigError
from dataflex_callbacks.rollout.batch import NO_DOMAIN
from dataflex_callbacks.rollout.prompt_keys import KEY_COLUMNS, hashable_key, row_prompt_key


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def _null_rows(values: Sequence[Any]) -> list[int]:
    return [i for i, v in enumerate(values) if _is_null(v)]


def _refuse_nulls(rows: list[int], column: str, what: str) -> None:
    if rows:
        shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
        raise ConfigError(
            f"{len(rows)} row(s) have a null {what} in column {column!r} (row {shown}); give every "
            f"row a value, or drop those rows first (e.g. dataset.filter(lambda row: row[{column!r}] "
            "is not None))"
        )


def _column(dataset: Any, column: str) -> list[Any]:
    """All values of a column as a list (``datasets`` >= 4 returns a lazy column, slow to iterate)."""
    values = dataset[column]
    return values if isinstance(values, list) else list(values[:])


def labels_from(values: Sequence[Any], column: str) -> list[str]:
    """``values`` as domain labels (strings); a null one is refused with its row."""
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
        cls.__name__ == "IterableDataset" for cls in type(dataset).__mro__
    )
    if iterable or (hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__")):
        raise ConfigError(
            f"DomainMixingSampler needs a map-style dataset with random access; got a {type(dataset).__name__} "
            "(iterable). For streaming data, mix with datasets.interleave_datasets(per_domain_datasets, "
            "probabilities=[...]) instead, or load the data as a datasets.Dataset"
        )
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        shown = repr(dataset) if isinstance(dataset, (int, float, bool)) else f"a {type(dataset).__name__}"
        raise ArgumentError(
            f"DomainMixingSampler: argument 'dataset' must be a map-style dataset (len(dataset) and "
            f"dataset[i]: a datasets.Dataset, a list of dicts); got {shown}. Pass the dataset whose "
            "rows carry the domain, or the rows' domain labels as labels=[...]"
        )
    columns = getattr(dataset, "column_names", None)
    if columns is not None:
        if domain_key not in columns:
            if not required:
                return None
            raise ConfigError(
                f"dataset has no domain column {domain_key!r}; its columns are {list(columns)}; "
                "pass domain_key=<the column holding the domain label>"
            )
        return labels_from(_column(dataset, domain_key), domain_key)
    values = []
    for i in range(len(dataset)):
        row = dataset[i]
        if not isinstance(row, Mapping) or domain_key not in row:
            if i == 0 and not required:
                return None
            have = list(row) if isinstance(row, Mapping) else type(row).__name__
            raise ConfigError(
                f"dataset row {i} has no domain field {domain_key!r}; it has {have}; "
                "pass domain_key=<the field holding the domain label>"
            )
        values.append(row[domain_key])
    return labels_from(values, domain_key)


def read_labels(
    dataset: Any, labels: Sequence[Any] | None, domain_key: str, *, optional: bool
) -> tuple[list[str], str | None]:
    """Each row's domain label, and the column it was read from (None: ``labels`` were given).

    ``optional``: data without the ``domain_key`` column is one pool, every row in `NO_DOMAIN` (a
    one-pool sampler needs no domains; for any other, a missing column is more likely a wrong
    ``domain_key``). An empty dataset is refused.
    """
    column = None
    if labels is None:
        if dataset is None:
            raise ConfigError("DomainMixingSampler needs a dataset or labels=[...]")
        read = domain_labels(dataset, domain_key, required=not optional)
        if read is None:  # one pool over data without a domain column: every row in NO_DOMAIN
            read = [NO_DOMAIN] * len(dataset)
        else:
            column = domain_key
    else:
        if isinstance(labels, (str, Mapping)) or not (hasattr(labels, "__len__") and hasattr(labels, "__iter__")):
            raise ArgumentError(
                f"DomainMixingSampler: argument 'labels' must be a list of per-row domain labels; "
                f"got {labels!r:.80}. Pass one label per row, or the dataset whose rows carry them"
            )
        read = labels_from(list(labels), "labels")
    if not read:
        raise ConfigError("DomainMixingSampler got an empty dataset")
    return read, column


def row_domains(labels: list[str], present: list[str], domains: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes (N,), domain_of_row (N,), domain_sizes (K,))``, int64: each row's label as an index into
    ``present`` (the sorted labels, for the fingerprint) and into ``domains`` (-1: a row of a domain not
    drawn), and the rows of each of the ``K`` domains."""
    codes_of = {label: i for i, label in enumerate(present)}
    codes = np.fromiter(map(codes_of.__getitem__, labels), dtype=np.int64, count=len(labels))
    domain_of_code = np.array([domains.index(p) if p in domains else -1 for p in present], dtype=np.int64)
    domain_of_row = domain_of_code[codes]
    sizes = np.bincount(domain_of_row[domain_of_row >= 0], minlength=len(domains)).astype(np.int64)
    return codes, domain_of_row, sizes


def row_keys(dataset: Any, n: int, prompt_key_column: str | None = None) -> list[Any]:
    """Each row's prompt key: ``prompt_key_column`` if given, else the rule the adapters use (`row_prompt_key`).

    A null key (None / NaN) is refused with its row.
    """
    if dataset is None:
        return list(range(n))
    columns = getattr(dataset, "column_names", None)
    column = prompt_key_column
    if column is not None:
        if columns is not None and column not in columns:
            raise ConfigError(
                f"prompt_key_column {column!r} is not a column of the dataset; its columns are {list(columns)}"
            )
        values = _column(dataset, column) if columns is not None else [dataset[i][column] for i in range(n)]
        _refuse_nulls(_null_rows(values), column, "prompt key")
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


def data_fingerprint(
    dataset: Any, present: list[str], codes: np.ndarray, prompt_key_column: str | None, keys_read: list[Any] | None
) -> dict[str, Any]:
    """Row count, rows per label, a digest of every row's label and (when readable cheaply) of its prompt key."""
    counts = np.bincount(codes, minlength=len(present)).tolist()
    labels = _digest("\x1f".join(present).encode(), codes.astype("<i8").tobytes())
    keys = None
    columns = getattr(dataset, "column_names", None)
    source = prompt_key_column
    if source is None:
        source = next((c for c in KEY_COLUMNS if c in (columns or ())), None)
    if columns is not None and source is not None:
        if source not in columns:
            raise ConfigError(
                f"prompt_key_column {source!r} is not a column of the dataset; its columns are {list(columns)}"
            )
        keys = _arrow_key_digest(dataset, source)
    if keys is None and keys_read is not None:  # read for the pre-rollout filter anyway
        keys = _digest(repr(keys_read).encode())
    return {
        "rows": int(codes.shape[0]),
        "domain_rows": dict(zip(present, counts, strict=True)),
        "labels": labels,
        "keys": keys,
    }


def data_change(saved: Any, mine: Mapping[str, Any]) -> str | None:
    """What differs between the data a state was saved for and this sampler's data; None if nothing."""
    if not isinstance(saved, Mapping):
        return f"its data fingerprint is malformed ({type(saved).__name__})"
    changes = []
    rows = saved.get("rows")
    if rows != mine["rows"]:
        delta = mine["rows"] - rows if isinstance(rows, int) else None
        what = f"{abs(delta)} row(s) {'added' if delta > 0 else 'removed'}" if delta else "the row count differs"
        changes.append(f"{what} ({rows} rows then, {mine['rows']} now)")
    domain_rows = saved.get("domain_rows")
    saved_rows: Mapping[str, Any] = domain_rows if isinstance(domain_rows, Mapping) else {}
    for label in sorted(set(saved_rows) | set(mine["domain_rows"])):
        then, now = saved_rows.get(label, 0), mine["domain_rows"].get(label, 0)
        if then != now:
            changes.append(f"domain {label!r} had {then} rows, has {now}")
    if not changes and saved.get("labels") != mine["labels"]:
        changes.append("the rows carry different domain labels (rows reordered or relabelled)")
    if not changes and None not in (saved.get("keys"), mine["keys"]) and saved.get("keys") != mine["keys"]:
        changes.append("the prompts differ (rows reordered or edited, or another prompt key column)")
    return "; ".join(changes) or None
