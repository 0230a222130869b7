"""load_prompt_dataset on local files, and its missing-column errors."""

import json

import pytest

pytest.importorskip("datasets")

from dataflex_callbacks.tasks import load_prompt_dataset  # noqa: E402
from dataflex_callbacks.tasks.loading import DatasetColumnError  # noqa: E402

ROWS = [{"question": f"what is {i}+1?", "solution": str(i + 1), "topic": "add" if i % 2 else "inc"} for i in range(6)]


def _write(tmp_path, kind):
    import pandas as pd

    path = tmp_path / f"data.{kind}"
    if kind == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    elif kind == "parquet":
        pd.DataFrame(ROWS).to_parquet(path)
    else:
        pd.DataFrame(ROWS).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "csv"])
def test_loads_local_files(tmp_path, kind):
    data = load_prompt_dataset(_write(tmp_path, kind), prompt_column="question", answer_column="solution",
                               domain_column="topic")
    assert data.column_names == ["prompt", "answer", "domain", "prompt_key"]
    assert data["prompt"] == [r["question"] for r in ROWS]
    assert data["answer"] == [r["solution"] for r in ROWS]  # answers become text
    assert data["domain"] == [r["topic"] for r in ROWS]


def test_default_domain(tmp_path):
    data = load_prompt_dataset(_write(tmp_path, "jsonl"), "question", "solution")
    assert set(data["domain"]) == {"default"}


@pytest.mark.parametrize("columns", [
    dict(prompt_column="prompt", answer_column="solution"),
    dict(prompt_column="question", answer_column="answer"),
    dict(prompt_column="question", answer_column="solution", domain_column="domain"),
])
def test_missing_column_names_the_available_ones(tmp_path, columns):
    with pytest.raises(DatasetColumnError, match="available columns: question, solution, topic"):
        load_prompt_dataset(_write(tmp_path, "jsonl"), **columns)


def test_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_prompt_dataset(tmp_path / "missing.jsonl")
    other = tmp_path / "data.txt"
    other.write_text("x")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_prompt_dataset(other)
