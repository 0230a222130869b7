"""`dataflex compare` and its processes: workers die with a killed parent, one comparison per folder."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")
pytest.importorskip("trl")

from dataflex_callbacks.recipes.cli import main  # noqa: E402
from dataflex_callbacks.recipes.compare.grid import LOCK_FILE, FolderLock  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _alive(process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def start_two_runs(tmp_path):
    """`dataflex compare --jobs 2` in its own process, returned once both runs train in their workers.

    Two strategies x one seed with a budget far longer than any test: ``(process, folder, args)``.
    """
    folder = tmp_path / "cmp"
    args = [
        "compare",
        "--strategies",
        "baseline,ar",
        "--seeds",
        "0",
        "--budget",
        "steps:2000",
        "--jobs",
        "2",
        "--eval-points",
        "0",
        "--no-progress",
        "--output-dir",
        str(folder),
    ]
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    parent = subprocess.Popen(
        [sys.executable, "-m", "dataflex_callbacks", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    runs = folder / "runs"
    # Both runs have started training when their run folders exist (created after the data checks).
    while not (runs.is_dir() and len(list(runs.iterdir())) == 2):
        if parent.poll() is not None or time.monotonic() > deadline:
            parent.kill()
            pytest.fail(f"the runs did not start (exit {parent.poll()}): {parent.stderr.read()[-3000:]}")
        time.sleep(0.5)
    return parent, folder, args


@pytest.mark.slow
def test_kill_9_of_compare_leaves_no_worker_and_a_second_compare_is_refused(tmp_path, capsys):
    parent, folder, args = start_two_runs(tmp_path)
    descendants = []
    try:
        time.sleep(2.0)
        descendants = psutil.Process(parent.pid).children(recursive=True)
        workers = [p for p in descendants if "spawn_main" in _cmdline(p)]
        assert len(workers) == 2, [_cmdline(p) for p in descendants]

        # The folder is locked: a second comparison on it is refused at once, with one line.
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "another `dataflex compare`" in err and str(parent.pid) in err

        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in descendants) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [(p.pid, _cmdline(p)) for p in descendants if _alive(p)]
        assert not left, f"processes left running after kill -9 of dataflex compare: {left}"
        # The kernel released the dead comparison's lock: a resume may start.
        FolderLock(str(folder)).acquire().release()
        assert (folder / LOCK_FILE).exists()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for process in descendants:
            if _alive(process):
                process.kill()


@pytest.mark.slow
def test_a_killed_worker_ends_compare_within_a_minute_naming_the_runs_it_interrupted(tmp_path):
    parent, folder, _ = start_two_runs(tmp_path)
    runs = folder / "runs"
    try:
        workers = [p for p in psutil.Process(parent.pid).children(recursive=True) if "spawn_main" in _cmdline(p)]
        assert len(workers) == 2, [_cmdline(p) for p in workers]
        workers[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = parent.wait(timeout=60)
        ended_after = time.monotonic() - killed
        err = parent.stderr.read()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert code == 1 and ended_after < 60, (code, ended_after, err[-2000:])
    # The error is the one line of our own; multiprocessing's resource tracker may still warn after it, at exit,
    # about semaphores the killed worker held (the pool's queue locks).
    errors = [line for line in err.splitlines() if line.startswith("dataflex: error:")]
    assert len(errors) == 1, err[-2000:]
    last = errors[0]
    assert last.startswith("dataflex: error: a worker process of dataflex compare died (killed by SIGKILL)"), err[
        -2000:
    ]
    assert "Traceback" not in err and "run the same command again" in last, err[-2000:]
    assert all(run.name in last for run in runs.iterdir()), (last, [run.name for run in runs.iterdir()])
