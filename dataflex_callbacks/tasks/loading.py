"""Load a user prompt dataset (hub name or local jsonl/json/parquet/csv file) into the suite's columns."""

from __future__ import annotations

import os

from .suite import prompt_key

_LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class DatasetColumnError(ValueError):
    """A requested column is not in the dataset; the message lists the available columns."""


def _load_raw(name_or_path: str, split: str):
    from datasets import load_dataset

    path = os.fspath(name_or_path)
    extension = os.path.splitext(path)[1].lower()
    if os.path.isfile(path):
        if extension not in _LOCAL_FORMATS:
            raise ValueError(
                f"cannot read {path!r}: unsupported file type {extension or '(none)'}; "
                f"use one of {sorted(_LOCAL_FORMATS)}"
            )
        # A single local file is one split, whatever `split` names.
        return load_dataset(_LOCAL_FORMATS[extension], data_files=path, split="train")
    if extension in _LOCAL_FORMATS:
        raise FileNotFoundError(f"dataset file {path!r} does not exist")
    return load_dataset(path, split=split)


def load_prompt_dataset(name_or_path, prompt_column: str = "prompt", answer_column: str = "answer",
                        domain_column: str | None = None, split: str = "train", default_domain: str = "default"):
    """Load prompts and answers from a hub dataset name or a local jsonl/json/parquet/csv file.

    Returns a `datasets.Dataset` with the suite's columns: `prompt`, `answer` (as text),
    `domain` (from `domain_column`, else `default_domain`) and `prompt_key`. Other columns are
    dropped. Raises `DatasetColumnError` naming the available columns when a column is missing.
    Hub names go through `datasets.load_dataset` (downloaded, or read from the local cache when offline).
    """
    raw = _load_raw(name_or_path, split)
    available = list(raw.column_names)
    for role, column in (("prompt", prompt_column), ("answer", answer_column), ("domain", domain_column)):
        if column is not None and column not in available:
            raise DatasetColumnError(
                f"{role} column {column!r} not found in {os.fspath(name_or_path)!r}; "
                f"available columns: {', '.join(available)} (set --{role}-column)"
            )
    prompts = list(raw[prompt_column])
    answers = ["" if a is None else str(a) for a in raw[answer_column]]
    if domain_column is not None:
        domains = [str(d) for d in raw[domain_column]]
    else:
        domains = [default_domain] * len(prompts)

    from datasets import Dataset

    keys = [prompt_key(d, p if isinstance(p, str) else repr(p)) for d, p in zip(domains, prompts)]
    return Dataset.from_dict({"prompt": prompts, "answer": answers, "domain": domains, "prompt_key": keys})
