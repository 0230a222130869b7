"""load_prompt_dataset on local files, and its missing-column errors."""

import json

import pytest

pytest.importorskip("datasets")

from dataflex_callbacks.recipes.tasks import load_prompt_dataset  # noqa: E402
from dataflex_callbacks.recipes.tasks.loading import DatasetColumnError, DatasetError, load_prompt_table  # noqa: E402
from dataflex_callbacks.rollout.batch import NO_DOMAIN  # noqa: E402

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
    data = load_prompt_dataset(
        _write(tmp_path, kind), prompt_column="question", answer_column="solution", domain_key="topic"
    )
    assert data.column_names == ["prompt", "answer", "domain", "prompt_key"]
    assert data["prompt"] == [r["question"] for r in ROWS]
    assert data["answer"] == [r["solution"] for r in ROWS]  # answers become text
    assert data["domain"] == [r["topic"] for r in ROWS]


def test_rows_without_a_domain_column_are_in_the_library_s_no_domain(tmp_path):
    data = load_prompt_dataset(_write(tmp_path, "jsonl"), "question", "solution")
    assert set(data["domain"]) == {NO_DOMAIN}


def test_a_domain_column_is_read_without_domain_key_as_every_host_reads_it(tmp_path):
    path = tmp_path / "with_domain.jsonl"
    path.write_text(
        "\n".join(json.dumps({"prompt": r["question"], "answer": r["solution"], "domain": r["topic"]}) for r in ROWS)
        + "\n"
    )
    data, column = load_prompt_table(path)
    assert column == "domain" and data["domain"] == [r["topic"] for r in ROWS]
    data, column = load_prompt_table(_write(tmp_path, "jsonl"), "question", "solution")
    assert column is None and set(data["domain"]) == {NO_DOMAIN}


@pytest.mark.parametrize(
    "columns",
    [
        dict(prompt_column="prompt", answer_column="solution"),
        dict(prompt_column="question", answer_column="answer"),
        dict(prompt_column="question", answer_column="solution", domain_key="domain"),
    ],
)
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


def _lines(tmp_path, *lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


GOOD = json.dumps({"prompt": "what is 1+1?", "answer": "2"})


@pytest.mark.parametrize(
    "lines, message",
    [
        (
            (GOOD, '{"prompt": "x" "answer": "1"}', GOOD),
            r"line 2, column \d+ is not valid JSON \(Expecting ',' delimiter\)",
        ),
        ((GOOD, GOOD, '{"prompt": "x", "answer": '), r"line 3, column \d+ is not valid JSON"),
        ((GOOD, "[1, 2]"), "line 2 holds a JSON list, not an object"),
        (("", "   "), "no rows"),
    ],
)
def test_malformed_jsonl_names_the_line_and_the_cause(tmp_path, lines, message):
    with pytest.raises(DatasetError, match=message):
        load_prompt_dataset(_lines(tmp_path, *lines))


@pytest.mark.parametrize("name", ["data.jsonl", "data.json", "data.csv", "data.parquet"])
def test_an_empty_file_is_refused_by_name(tmp_path, name):
    path = tmp_path / name
    path.write_text("")
    with pytest.raises(DatasetError, match=f"{name}' is empty"):
        load_prompt_dataset(path)


def test_a_json_file_that_is_not_one_document_is_read_as_lines(tmp_path):
    data = load_prompt_dataset(_lines(tmp_path, GOOD, GOOD, name="data.json"))
    assert data["prompt"] == ["what is 1+1?"] * 2
    with pytest.raises(DatasetError, match="line 2"):
        load_prompt_dataset(_lines(tmp_path, GOOD, "{oops", name="bad.json"))
    (tmp_path / "items.json").write_text(json.dumps([{"prompt": "a", "answer": "1"}, 7]))
    with pytest.raises(DatasetError, match="item 1 of the JSON list is a int"):
        load_prompt_dataset(tmp_path / "items.json")


CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1?"}]


@pytest.mark.parametrize(
    "good, bad, shown",
    [
        ("text", 7, "7 of type int"),
        ("text", None, "None of type NoneType"),
        ("text", "  ", "'  ' of type str"),
        (CHAT, [{"role": "user"}], "of type list"),  # a message without content
    ],
)
def test_a_value_that_is_not_a_prompt_names_its_row(tmp_path, good, bad, shown):
    rows = [{"prompt": good, "answer": "2"}, {"prompt": good, "answer": "2"}, {"prompt": bad, "answer": "3"}]
    path = _lines(tmp_path, *(json.dumps(r) for r in rows))
    with pytest.raises(DatasetError, match=r"1 row\(s\) that are not a prompt \(first: row 2, ") as error:
        load_prompt_dataset(path)
    assert shown in str(error.value)


def test_chat_prompts_are_prompts_in_one_form_per_file(tmp_path):
    path = _lines(
        tmp_path, json.dumps({"prompt": CHAT, "answer": "2"}), json.dumps({"prompt": CHAT[1:], "answer": "2"})
    )
    assert load_prompt_dataset(path)["prompt"] == [CHAT, CHAT[1:]]
    mixed = _lines(tmp_path, json.dumps({"prompt": CHAT, "answer": "2"}), GOOD, name="mixed.jsonl")
    with pytest.raises(DatasetError, match="mixes forms .line 1 is a list of chat messages, line 2 is text"):
        load_prompt_dataset(mixed)


def test_a_row_without_a_domain_is_refused(tmp_path):
    rows = [{"q": "a", "a": "1", "topic": "x"}, {"q": "b", "a": "2", "topic": None}]
    path = _lines(tmp_path, *(json.dumps(r) for r in rows))
    with pytest.raises(DatasetError, match=r"domain column 'topic' .* 1 empty \(null\) value\(s\) \(first: row 1\)"):
        load_prompt_dataset(path, "q", "a", domain_key="topic")
