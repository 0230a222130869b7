"""Load a user prompt dataset (hub name or local jsonl/json/parquet/csv file) into the suite's columns.

Bad data fails here with one line that names the file, the row (or JSONL line) and the fix:
an empty file, a JSONL line that is not a JSON object, a prompt that is not text or a list of
chat messages, a row without a domain.
"""

from __future__ import annotations

import json
import os

from dataflex_callbacks.errors import InputError
from dataflex_callbacks.host import DEFAULT_DOMAIN_KEY
from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .suite import prompt_key

_LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class DatasetError(InputError):
    """The dataset cannot be used as given (empty, malformed, bad prompt or domain values); the message says where."""


class DatasetFileMissing(InputError, FileNotFoundError):
    """A local dataset path that does not exist."""


class DatasetColumnError(DatasetError):
    """A requested column is not in the dataset; the message lists the available columns."""


def _check_prompt_forms(rows, prompt_column: str, path: str, unit: str) -> None:
    """Refuse a file whose prompts mix text and chat-message lists (Arrow cannot hold both in one column)."""
    first: dict[str, int] = {}
    for number, row in rows:
        value = row.get(prompt_column) if isinstance(row, dict) else None
        form = "text" if isinstance(value, str) else "a list of chat messages" if isinstance(value, list) else None
        if form is not None:
            first.setdefault(form, number)
        if len(first) == 2:
            (form_a, at_a), (form_b, at_b) = sorted(first.items(), key=lambda item: item[1])
            raise DatasetError(
                f"dataset file {path!r}: prompt column {prompt_column!r} mixes forms ({unit} {at_a} is "
                f"{form_a}, {unit} {at_b} is {form_b}); write every prompt in one form"
            )


def _check_json_lines(path: str, prompt_column: str | None = None) -> None:
    """Raise `DatasetError` naming the first line of a JSON-lines file that is not a JSON object."""
    rows = 0
    parsed = []
    with open(path, encoding="utf-8", errors="strict") as handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError as error:
                    reason = getattr(error, "msg", str(error))
                    column = getattr(error, "colno", None)
                    where = f"line {number}" + (f", column {column}" if column else "")
                    raise DatasetError(
                        f"dataset file {path!r}: {where} is not valid JSON ({reason}); "
                        "fix or remove that line (one JSON object per line)"
                    ) from None
                if not isinstance(value, dict):
                    raise DatasetError(
                        f"dataset file {path!r}: line {number} holds a JSON {type(value).__name__}, "
                        'not an object; write one object per line, e.g. {"prompt": ..., "answer": ...}'
                    )
                rows += 1
                if prompt_column is not None:
                    parsed.append((number, {prompt_column: value.get(prompt_column)}))
        except UnicodeDecodeError as error:
            raise DatasetError(
                f"dataset file {path!r} is not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8"
            ) from None
    if rows == 0:
        raise DatasetError(f"dataset file {path!r} has no rows (only blank lines); add one JSON object per line")
    if prompt_column is not None:
        _check_prompt_forms(parsed, prompt_column, path, "line")


def _check_local_file(path: str, extension: str, prompt_column: str | None = None) -> None:
    """Refuse an empty local file, and a JSON/JSONL file whose text is malformed, before `datasets` reads it."""
    if os.path.getsize(path) == 0:
        raise DatasetError(f"dataset file {path!r} is empty; it needs at least 2 rows with a prompt and an answer")
    if extension == ".jsonl":
        _check_json_lines(path, prompt_column)
    elif extension == ".json":
        try:
            with open(path, encoding="utf-8") as handle:
                value = json.load(handle)
        except ValueError:
            _check_json_lines(path, prompt_column)  # not one JSON document: it must be JSON lines; name the bad line
            return
        if isinstance(value, (list, dict)) and not value:
            raise DatasetError(f"dataset file {path!r} holds an empty JSON {type(value).__name__}; it needs rows")
        if isinstance(value, list) and not all(isinstance(row, dict) for row in value):
            first = next(i for i, row in enumerate(value) if not isinstance(row, dict))
            raise DatasetError(
                f"dataset file {path!r}: item {first} of the JSON list is a "
                f"{type(value[first]).__name__}, not an object with a prompt and an answer"
            )
        if isinstance(value, list) and prompt_column is not None:
            _check_prompt_forms(enumerate(value), prompt_column, path, "item")


def is_chat_prompt(value) -> bool:
    """True for a conversational prompt: a non-empty list of `{"role": str, "content": str}` messages."""
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
        )
    )


def _check_prompts(prompts: list, column: str, source: str) -> None:
    bad = [i for i, p in enumerate(prompts) if not ((isinstance(p, str) and p.strip()) or is_chat_prompt(p))]
    if bad:
        first = bad[0]
        value = prompts[first]
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise DatasetError(
            f"prompt column {column!r} of {source!r} has {len(bad)} row(s) that are not a prompt (first: row {first}, "
            f"{shown} of type {type(value).__name__}); a prompt is non-empty text or a list of chat messages "
            '[{"role": ..., "content": ...}]: fix those rows or choose --prompt-column'
        )


def _check_domains(domains: list, column: str, source: str) -> None:
    bad = [i for i, d in enumerate(domains) if d is None or (isinstance(d, str) and not d.strip())]
    if bad:
        raise DatasetError(
            f"domain column {column!r} of {source!r} has {len(bad)} empty (null) value(s) (first: row {bad[0]}); "
            "give every row a domain, or leave out --domain-key to put all rows in one domain"
        )


def _load_raw(name_or_path: str, split: str, prompt_column: str | None = None):
    from datasets import load_dataset

    path = os.fspath(name_or_path)
    extension = os.path.splitext(path)[1].lower()
    if os.path.isfile(path):
        if extension not in _LOCAL_FORMATS:
            raise InputError(
                f"cannot read {path!r}: unsupported file type {extension or '(none)'}; "
                f"use one of {sorted(_LOCAL_FORMATS)}"
            )
        _check_local_file(path, extension, prompt_column)
        # A single local file is one split, whatever `split` names.
        return load_dataset(_LOCAL_FORMATS[extension], data_files=path, split="train")
    if extension in _LOCAL_FORMATS:
        raise DatasetFileMissing(f"dataset file {path!r} does not exist")
    return load_dataset(path, split=split)


def dataset_domain_key(columns, domain_key: str | None = None) -> str | None:
    """The column a dataset's domains are read from: `domain_key` when given, else `domain` when the data has
    that column (the one default of every host, docs/guarantees.md "Domains"), else None (one domain)."""
    if domain_key is not None:
        return domain_key
    return DEFAULT_DOMAIN_KEY if DEFAULT_DOMAIN_KEY in list(columns) else None


def load_prompt_dataset(
    name_or_path,
    prompt_column: str = "prompt",
    answer_column: str = "answer",
    domain_key: str | None = None,
    split: str = "train",
    default_domain: str = NO_DOMAIN,
):
    """`load_prompt_table`'s dataset:
    the prompts and answers of a hub dataset or a local file, in the suite's columns."""
    return load_prompt_table(name_or_path, prompt_column, answer_column, domain_key, split, default_domain)[0]


def load_prompt_table(
    name_or_path,
    prompt_column: str = "prompt",
    answer_column: str = "answer",
    domain_key: str | None = None,
    split: str = "train",
    default_domain: str = NO_DOMAIN,
):
    """Load prompts and answers from a hub dataset name or a local jsonl/json/parquet/csv file.

    Returns a `datasets.Dataset` with the suite's columns: `prompt`, `answer` (as text),
    `domain` (from the column `domain_key`; when None, from a `domain` column if the data has one, as
    every host reads it, else `default_domain`: `NO_DOMAIN`) and `prompt_key`. Other columns are
    dropped. A prompt is non-empty text or a list of chat messages (`[{"role": ..., "content": ...}]`).
    Raises `DatasetColumnError` naming the available columns when a column is missing, and
    `DatasetError` naming the file and row (or JSONL line) for an empty or malformed file, a
    value that is not a prompt, or a row without a domain. Hub names go through
    `datasets.load_dataset` (downloaded, or read from the local cache when offline).
    Returns ``(dataset, column)``: ``column`` is the one domains were read from, or None when every row
    is in `default_domain`.
    """
    source = os.fspath(name_or_path)
    raw = _load_raw(name_or_path, split, prompt_column)
    if len(raw) == 0:
        raise DatasetError(f"dataset {source!r} has no rows; it needs at least 2 rows with a prompt and an answer")
    available = list(raw.column_names)
    for role, column, flag in (
        ("prompt", prompt_column, "--prompt-column"),
        ("answer", answer_column, "--answer-column"),
        ("domain", domain_key, "--domain-key"),
    ):
        if column is not None and column not in available:
            raise DatasetColumnError(
                f"{role} column {column!r} not found in {os.fspath(name_or_path)!r}; "
                f"available columns: {', '.join(available)} (set {flag})"
            )
    domain_key = dataset_domain_key(available, domain_key)
    prompts = list(raw[prompt_column])
    _check_prompts(prompts, prompt_column, source)
    answers = ["" if a is None else str(a) for a in raw[answer_column]]
    if domain_key is not None:
        domains = list(raw[domain_key])
        _check_domains(domains, domain_key, source)
        domains = [str(d) for d in domains]
    else:
        domains = [default_domain] * len(prompts)

    from datasets import Dataset

    keys = [prompt_key(d, p if isinstance(p, str) else repr(p)) for d, p in zip(domains, prompts, strict=True)]
    dataset = Dataset.from_dict({"prompt": prompts, "answer": answers, "domain": domains, "prompt_key": keys})
    return dataset, domain_key
