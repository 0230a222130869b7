"""The worker processes of a parallel comparison (``--jobs N``): one run each, dying with the process that started them.

Workers are spawned (a fresh interpreter, never a fork of a process holding torch threads), use
one CPU thread each, report each finished step through a queue for the progress bar, and exit as
soon as the comparison process is gone, even when it was killed with SIGKILL. The other way round,
a worker that dies (the OOM killer, a kill) ends the comparison at once with `WorkerDiedError`,
naming the runs it interrupted; finished runs stay in the folder, and the same command resumes.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from dataflex_callbacks.errors import DataFlexError

from .results import execute_run


class WorkerDiedError(DataFlexError, RuntimeError):
    """A worker process of `dataflex compare --jobs N` died without finishing its run."""


_progress_queue = None
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_CHECK_SECONDS = 1.0


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit as soon as `parent_pid` (the process that started it) is gone, even after SIGKILL.

    On Linux the kernel sends SIGKILL on the parent's death (`prctl(PR_SET_PDEATHSIG)`); everywhere,
    a daemon thread checks once a second that the parent is still the same process.
    """
    import signal

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the watchdog below still applies
            pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_SECONDS)
            if os.getppid() != parent_pid:  # re-parented: the compare process is gone
                os._exit(1)

    threading.Thread(target=watch, name="dataflex-parent-watchdog", daemon=True).start()


def _init_worker(queue, parent_pid: int | None = None) -> None:
    global _progress_queue
    if parent_pid is not None:
        die_with_parent(parent_pid)
    import torch

    torch.set_num_threads(1)  # one core per run; --jobs sets how many run at once
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    _progress_queue = queue


def _execute_in_worker(settings: CompareSettings, run: GridRun, pre_select: bool) -> dict:
    def report(step: int) -> None:
        _progress_queue.put((run.name, step))

    return execute_run(settings, run, pre_select, on_step=report)



def _exit_reason(code: int) -> str:
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run_parallel(settings, pending, pre_select, advance, finish) -> None:
    """Run `pending` grid runs in `settings.jobs` spawned workers; `advance(name, step)` and `finish(run, record)` hear of them."""
    import multiprocessing
    import queue as queue_module
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    # spawn: a fresh interpreter per worker, never a fork of a process that holds torch threads.
    context = multiprocessing.get_context("spawn")
    progress = context.Queue()
    with ProcessPoolExecutor(max_workers=min(settings.jobs, len(pending)), mp_context=context,
                             initializer=_init_worker, initargs=(progress, os.getpid())) as pool:
        futures = {pool.submit(_execute_in_worker, settings, run, pre_select[run.strategy]): run for run in pending}
        remaining = set(futures)
        processes = []  # the workers, kept to read a dead one's exit code (the pool forgets them when it breaks)
        try:
            while remaining:
                processes = list((getattr(pool, "_processes", None) or {}).values()) or processes
                done, remaining = wait(remaining, timeout=0.5, return_when=FIRST_COMPLETED)
                while True:
                    try:
                        name, step = progress.get_nowait()
                    except queue_module.Empty:
                        break
                    advance(name, step)
                for future in done:
                    finish(futures[future], future.result())  # a failed run raises here; finished ones are kept
        except BrokenProcessPool:
            interrupted = sorted(futures[future].name for future in futures
                                 if future.cancelled() or not future.done() or future.exception() is not None)
            import signal

            for process in processes:
                process.join(timeout=5)
            # The pool terminates the other workers (SIGTERM) once one has died: that is not the cause.
            codes = sorted({process.exitcode for process in processes
                            if process.exitcode not in (None, 0, -signal.SIGTERM)})
            how = ", ".join(_exit_reason(code) for code in codes) or "no exit code seen"
            raise WorkerDiedError(
                f"a worker process of dataflex compare died ({how}) with runs unfinished: {', '.join(interrupted)}; "
                f"finished runs are kept in {settings.output_dir}: run the same command again to resume the others "
                "(if memory ran out, use fewer --jobs)") from None
        except BaseException as error:
            for future in remaining:
                future.cancel()
            if not isinstance(error, Exception):  # Ctrl-C: stop the runs in progress instead of waiting for them
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.terminate()
            raise
