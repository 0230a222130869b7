"""`dataflex run --strategy skip --dataset data.jsonl` on a file without a domain column skips as with one domain."""

import json

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402

pytestmark = pytest.mark.slow

SHORT = [
    "--steps",
    "6",
    "--no-progress",
    "--prompts-per-step",
    "8",
    "--num-generations",
    "2",
    "--n-test",
    "2",
    "--eval-max-new-tokens",
    "2",
]


def write_jsonl(path, domain=None):
    # Answers the tiny model never writes: every group scores 0, so every prompt is one to skip.
    rows = [{"prompt": f"Spell the word number {i}:", "answer": f"zzz{i}"} for i in range(24)]
    if domain is not None:
        rows = [{**row, "topic": domain} for row in rows]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def skipped_per_step(tmp_path, name, *extra):
    folder = tmp_path / name
    assert main(["run", *SHORT, "--strategy", "skip", "--output-dir", str(folder), *extra]) == 0
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [m["dataflex/pre_select/skipped_prompts"] for m in metrics]


def test_a_local_jsonl_without_a_domain_column_skips_as_one_domain(tmp_path):
    without = skipped_per_step(tmp_path, "none", "--dataset", str(write_jsonl(tmp_path / "plain.jsonl")))
    one = skipped_per_step(
        tmp_path, "one", "--dataset", str(write_jsonl(tmp_path / "topic.jsonl", "spelling")), "--domain-key", "topic"
    )
    assert len(without) == 6 and without[-1] > 0, without
    assert without == one
