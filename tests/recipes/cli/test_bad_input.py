"""Bad input to `dataflex run` / `dataflex compare`, as a user meets it: exit code 2, exactly one line on
stderr (no traceback), no model loaded and no output folder left behind.

Every case passes `--model <missing folder>`: the model is read last, after every other input is checked, so
a check that came too late would report the missing folder instead of the bad input. Only the output folder's
write test comes after the model: those cases train the toy suite's model, which is built, not read.
The cases call the CLI's `main` in this process (a subprocess each cost 4-5 s of imports, 2.5 minutes for the
table); one case of each command also runs as the user's own process (`python -m dataflex_callbacks`), where
anything a library prints to the real stderr at import or start-up would show as a second line.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def dataflex_process(args, cwd, timeout=600):
    """`python -m dataflex_callbacks ARGS` in a process of its own, from `cwd`."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    return subprocess.run(
        [sys.executable, "-m", "dataflex_callbacks", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def dataflex(args, cwd):
    """`dataflex ARGS` in this process, as the console script calls `main`, from `cwd`: code, stdout, stderr."""
    stdout, stderr, previous = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(args)
            except SystemExit as exit:  # argparse's own errors
                code = exit.code
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(args, code, stdout.getvalue(), stderr.getvalue())


def assert_one_line_error(result, expected, folder):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("dataflex: error: "), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "cannot load model" not in result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert not folder.exists(), f"a failed start left {sorted(p.name for p in folder.rglob('*'))}"
    assert result.stdout == ""


@pytest.fixture
def files(tmp_path):
    """Broken inputs a careless user writes."""

    def jsonl(name, rows):
        path = tmp_path / name
        path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
        return str(path)

    good = [{"prompt": f"echo {i}", "answer": str(i), "topic": "a" if i % 2 else "b"} for i in range(40)]
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "mix_elsewhere.yaml").write_text("mix:\n  mixer: reward_gap\n  domains: [algebra, geometry]\n")
    return {
        "empty": str(tmp_path / "empty.jsonl"),
        "blank": jsonl("blank.jsonl", ["", "  "]),
        "malformed": jsonl("malformed.jsonl", [good[0], '{"prompt": "echo 1" "answer": "1"}', good[2]]),
        "not_objects": jsonl("list.jsonl", [good[0], "[1, 2]"]),
        "int_prompts": jsonl("int_prompts.jsonl", [{"prompt": i, "answer": str(i)} for i in range(40)]),
        "null_prompt": jsonl("null_prompt.jsonl", [*good[:5], {"prompt": None, "answer": "1"}]),
        "null_domain": jsonl("null_domain.jsonl", [*good[:5], {"prompt": "echo 9", "answer": "9", "topic": None}]),
        "few_rows": jsonl("few.jsonl", good[:6]),
        "good": jsonl("good.jsonl", good),
        "a_file": str(tmp_path / "a_file"),
        "mix_elsewhere": str(tmp_path / "mix_elsewhere.yaml"),
    }


RUN_CASES = {
    # numbers: one validation layer for every numeric option
    "negative seed": (["--seed", "-1"], ["--seed", "-1"]),
    "seed too large": (["--seed", str(2**32)], ["--seed", str(2**32)]),
    "learning rate nan": (["--learning-rate", "nan"], ["--learning-rate", "nan"]),
    "learning rate inf": (["--learning-rate", "inf"], ["--learning-rate", "inf"]),
    "negative learning rate": (["--learning-rate", "-1"], ["--learning-rate", "-1"]),
    "negative completion length": (["--max-completion-length", "-3"], ["--max-completion-length", "-3"]),
    "zero steps": (["--steps", "0"], ["--steps", "0"]),
    "one generation": (["--num-generations", "1"], ["--num-generations"]),
    "negative prompts per step": (["--prompts-per-step", "-2"], ["--prompts-per-step"]),
    "unreadable number": (["--steps", "ten"], ["--steps", "'ten'", "--help"]),
    # data
    "empty dataset": (["--dataset", "{empty}"], ["empty.jsonl", "empty"]),
    "blank lines only": (["--dataset", "{blank}"], ["no rows"]),
    "malformed jsonl": (["--dataset", "{malformed}"], ["malformed.jsonl", "line 2", "not valid JSON", "delimiter"]),
    "jsonl line not an object": (["--dataset", "{not_objects}"], ["line 2", "list"]),
    "integer prompts": (["--dataset", "{int_prompts}"], ["prompt column 'prompt'", "row 0", "int"]),
    "null prompt": (["--dataset", "{null_prompt}"], ["row 5", "None"]),
    "null domain": (["--dataset", "{null_domain}", "--domain-key", "topic"], ["domain column 'topic'", "row 5"]),
    "mix domains not in the data": (["--strategy", "{mix_elsewhere}"], ["algebra", "geometry", "mix.domains"]),
    # a run that would train nothing (0 optimizer steps) is an error, naming the fix
    "fewer built-in rows than one step": (
        ["--n-train", "1", "--domains", "add2,sub3"],
        ["2 usable row(s)", "--n-train", "--prompts-per-step"],
    ),
    "fewer dataset rows than one step": (["--dataset", "{few_rows}"], ["--prompts-per-step", "add rows"]),
    # the testbed's levels supply a fixed number of distinct prompts per split
    "more training rows than a level holds": (["--n-train", "1000", "--domains", "add2"], ["--n-train 1000", "'add2'"]),
    "a million training rows": (["--n-train", "1000000", "--domains", "add2"], ["--n-train 1000000", "'add2'"]),
    "more held-out rows than a level holds": (["--n-test", "500", "--domains", "mul1x2"], ["--n-test 500", "'mul1x2'"]),
    "a domain named twice": (["--domains", "add2,sub3,add2"], ["--domains", "'add2'", "twice"]),
    # output folder
    "output under a file": (["--output-dir", "{a_file}/run"], ["is a file", "--output-dir"]),
    "output folder is a file": (["--output-dir", "{a_file}"], ["is a file", "--output-dir"]),
}


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_run_bad_input_is_one_line_and_exit_2(case, files, tmp_path):
    args, expected = RUN_CASES[case]
    out = tmp_path / "out"
    args = [a.format(**files) for a in args]
    if "--output-dir" not in args:
        args += ["--output-dir", str(out)]
    result = dataflex(["run", "--no-progress", "--model", str(tmp_path / "no-model"), *args], tmp_path)
    assert_one_line_error(result, [e.format(**files) for e in expected], out)


@pytest.mark.parametrize("command, case", [("run", "malformed jsonl"), ("compare", "zero jobs")])
def test_bad_input_in_the_users_own_process_is_one_line_and_exit_2(command, case, files, tmp_path):
    args, expected = (RUN_CASES if command == "run" else COMPARE_CASES)[case]
    out = tmp_path / "out"
    args = [a.format(**files) for a in args] + ["--output-dir", str(out)]
    budget = ["--budget", "steps:1"] if command == "compare" else []
    result = dataflex_process(
        [command, "--no-progress", *budget, "--model", str(tmp_path / "no-model"), *args], tmp_path
    )
    assert_one_line_error(result, [e.format(**files) for e in expected], out)


def test_run_output_folder_that_cannot_be_created(tmp_path):
    out = Path("/proc/dataflex-cannot-write/run")  # refused even to root
    result = dataflex(["run", "--no-progress", "--suite", "toy", "--output-dir", str(out)], tmp_path)
    assert_one_line_error(result, ["cannot write to --output-dir", "No such file"], out)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_run_output_folder_not_writable(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = dataflex(
            ["run", "--no-progress", "--suite", "toy", "--output-dir", str(locked / "run")],
            tmp_path,
        )
        assert_one_line_error(result, ["cannot write to --output-dir", "Permission denied"], locked / "run")
    finally:
        locked.chmod(0o700)


COMPARE_CASES = {
    "negative seed": (["--seeds", "0,-1"], ["--seeds", "-1"]),
    "seed too large": (["--seeds", f"0,{2**32}"], ["--seeds", str(2**32)]),
    "one seed too large": (["--seeds", "99999999999"], ["--seeds", "99999999999"]),
    "seed count too large": (["--num-seeds", "1001"], ["--num-seeds 1001", "from 1 to 1000"]),
    "seeds and a seed count": (["--seeds", "1", "--num-seeds", "2"], ["--seeds 1", "--num-seeds 2", "not both"]),
    "a backwards seed range": (["--seeds", "13-11"], ["--seeds", "'13-11'", "11-13"]),
    "learning rate nan": (["--learning-rate", "nan"], ["--learning-rate", "nan"]),
    "negative eval points": (["--eval-points", "-1"], ["--eval-points", "-1"]),
    "zero jobs": (["--jobs", "0"], ["--jobs", "0"]),
    "malformed jsonl": (["--dataset", "{malformed}"], ["line 2", "not valid JSON"]),
    "fewer rows than one step": (["--dataset", "{few_rows}"], ["--prompts-per-step"]),
    "mix domains not in the data": (["--strategies", "baseline,{mix_elsewhere}"], ["algebra", "mix.domains"]),
    "output under a file": (["--output-dir", "{a_file}/cmp"], ["is a file", "--output-dir"]),
    "more training rows than a level holds": (["--n-train", "1000", "--domains", "add2"], ["--n-train 1000", "'add2'"]),
    "a domain named twice": (["--domains", "add2,add2"], ["--domains", "'add2'", "twice"]),
}


@pytest.mark.parametrize("case", list(COMPARE_CASES))
def test_compare_bad_input_is_one_line_and_exit_2(case, files, tmp_path):
    args, expected = COMPARE_CASES[case]
    out = tmp_path / "cmp"
    args = [a.format(**files) for a in args]
    if "--output-dir" not in args:
        args += ["--output-dir", str(out)]
    result = dataflex(
        ["compare", "--no-progress", "--budget", "steps:1", "--model", str(tmp_path / "no-model"), *args], tmp_path
    )
    assert_one_line_error(result, expected, out)
