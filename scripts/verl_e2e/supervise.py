"""Run a command (verl's ``main_ppo``) and end it, non-zero, soon after its vLLM engine fails or dies.

    python supervise.py [--grace SECONDS] -- COMMAND...

Why: verl's driver and trainer workers wait for the vLLM engine without a time limit, and Ray watches
its own actors, not the processes vLLM starts inside them. When a vLLM worker process dies (the OOM
killer, a kill) or fails a call (a weight sync that raises: vLLM returns the error to the engine core,
verl's sender waits for an answer that never comes), the run hangs until an outer timeout, with the
worker's error buried in the middle of the log.

How: COMMAND runs with its output passed through, line by line. The engine has failed when

* a line of its output is an ``ERROR`` log line of a vLLM engine core or worker process (Ray prefixes
  their lines with ``(Worker pid=N)`` / ``(EngineCore pid=N)``), or
* a process under COMMAND whose title starts with ``VLLM::`` (vLLM names its engine core and worker
  processes so), seen alive for `MIN_LIFE_S`, is gone while COMMAND still runs (checked every second).

If COMMAND is still running `--grace` seconds later (a run that ends normally stops its vLLM processes
only as it exits), the supervisor prints what failed, when, and the engine's error lines, kills COMMAND
and every process under it (the driver and the Ray cluster it started) and exits 1. Otherwise it exits
with COMMAND's own code. An engine error is taken as fatal: an RL step whose weight sync or generation
failed has nothing correct to go on with.
"""

from __future__ import annotations

import argparse
import collections
import re
import signal
import subprocess
import sys
import threading
import time

import psutil

WATCHED_PREFIX = "VLLM::"
MIN_LIFE_S = 5.0
POLL_S = 1.0
ERROR_WORDS = ("Error", "Traceback", "error:", "Killed", "died")
ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours its process prefixes
ENGINE_ERROR = re.compile(r"\((?:Worker|EngineCore)[\w-]* pid=\d+\)\s+ERROR\b")


class EngineWatch:
    """COMMAND's output, kept for the failure message, and the first engine error line seen in it."""

    def __init__(self) -> None:
        self.tail: collections.deque = collections.deque(maxlen=400)
        self.errors: list[str] = []  # the engine's error lines, from the first on (at most 200)
        self.first_error_at: float | None = None

    def read(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
            line = ANSI_CODE.sub("", raw.decode(errors="replace").rstrip("\n"))
            self.tail.append(line)
            if ENGINE_ERROR.search(line) and len(self.errors) < 200:
                if self.first_error_at is None:
                    self.first_error_at = time.monotonic()
                self.errors.append(line)


def _running(process: psutil.Process) -> bool:
    """Alive and not a zombie (a killed process its parent has not reaped yet is dead)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _title(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()).strip()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def _error_lines(watch: EngineWatch, limit: int = 40) -> list[str]:
    """The engine's first error lines, or else the run's last traceback, or its last lines naming an error."""
    if watch.errors:
        exceptions = [line for line in watch.errors if re.search(r"\b\w+(?:Error|Exception): ", line)]
        return (
            ["exceptions raised:"]
            + list(dict.fromkeys(exceptions))[:10]
            + ["its first error lines:"]
            + watch.errors[:limit]
        )
    lines = list(watch.tail)
    starts = [i for i, line in enumerate(lines) if "Traceback" in line]
    if starts:
        return lines[starts[-1] :][-limit:]
    return [line for line in lines if any(word in line for word in ERROR_WORDS)][-limit:]


def _kill_tree(root: psutil.Process) -> None:
    """SIGKILL ``root`` and everything under it (Ray's processes are the driver's descendants)."""
    try:
        processes = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def supervise(command: list[str], grace: float) -> int:
    started = time.monotonic()
    # Same process group as the supervisor: whoever stops the supervisor's group stops the run too.
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watch = EngineWatch()
    reader = threading.Thread(target=watch.read, args=(child.stdout,), daemon=True)
    reader.start()
    root = psutil.Process(child.pid)
    seen: dict[int, tuple[str, float]] = {}  # pid -> (title, first seen)
    death: tuple[int, str, float] | None = None
    while child.poll() is None:
        now = time.monotonic()
        try:
            alive = {p.pid: p for p in root.children(recursive=True) if _running(p)}
        except psutil.NoSuchProcess:
            break
        for pid, process in alive.items():
            if pid not in seen:
                title = _title(process)
                if title.startswith(WATCHED_PREFIX):
                    seen[pid] = (title, now)
        if death is None and watch.first_error_at is not None:
            death = (0, "the vLLM engine (an ERROR line in its output)", watch.first_error_at)
            print(f"[supervise] the vLLM engine logged an error; the run has {grace:.0f} s to end", flush=True)
        if death is None:
            for pid, (title, first_seen) in seen.items():
                if pid not in alive and now - first_seen >= MIN_LIFE_S:
                    death = (pid, title, now)  # a normal end stops them too, just before it exits: no word yet
                    break
        elif now - death[2] >= grace:
            _kill_tree(root)
            child.wait()
            reader.join(timeout=5)
            _report(
                f"stopped the run: {_what(death)} {death[2] - started:.0f} s into the run and the run was still "
                f"waiting {grace:.0f} s later (verl's driver never hears of a failed vLLM engine)",
                watch,
            )
            return 1
        time.sleep(POLL_S)
    code = child.wait()
    reader.join(timeout=5)
    if code != 0 and (death is not None or watch.first_error_at is not None):
        if death is None:
            death = (0, "the vLLM engine (an ERROR line in its output)", watch.first_error_at)
        _report(f"the run ended (exit {code}) {time.monotonic() - death[2]:.0f} s after {_what(death)}", watch)
    return code


def _what(death: tuple[int, str, float]) -> str:
    pid, title, _ = death
    return f"{title} (pid {pid}) died" if pid else f"{title} failed"


def _report(headline: str, watch: EngineWatch) -> None:
    print(f"[supervise] {headline}. The engine's error:", flush=True)
    for line in _error_lines(watch) or [
        "(none in the run's output; see Ray's logs under /tmp/ray/session_latest/logs)"
    ]:
        print(f"[supervise]   {line[:300]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--grace",
        type=float,
        default=20.0,
        help="seconds a run may go on after a vLLM process died before it is stopped (default 20)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: supervise.py [--grace S] -- COMMAND...")
    return supervise(command, args.grace)


if __name__ == "__main__":
    sys.exit(main())
