"""The worker processes of a parallel comparison (``--jobs N``): one run each, dying with the process that started them.

Workers are spawned (a fresh interpreter, never a fork of a process holding torch threads), use
one CPU thread each, report each finished step through a queue for the progress bar, and exit as
soon as the comparison process is gone, even when it was killed with SIGKILL. The other way round,
a worker that dies (the OOM killer, a kill) ends the comparison at once with `WorkerDiedError`,
naming the runs it interrupted; finished runs stay in the folder, and the same command resumes.

On a machine with CUDA GPUs each worker sees its own GPU (`CUDA_VISIBLE_DEVICES`, set in the
worker before torch initialises CUDA): `plan_devices` places at most `runs_per_gpu` runs on a GPU
and caps `jobs` at GPUs x `runs_per_gpu`. Without a GPU, workers train on the CPU, one thread each.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dataflex_callbacks.errors import DataFlexError

from .results import execute_run

if TYPE_CHECKING:
    from .settings import CompareSettings, GridRun


class WorkerDiedError(DataFlexError, RuntimeError):
    """A worker process of `dataflex compare --jobs N` died without finishing its run."""


_progress_queue = None
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_CHECK_SECONDS = 1.0


@dataclass(frozen=True)
class DevicePlan:
    """Where the workers of `--jobs N` train: `devices[i]` is worker i's `CUDA_VISIBLE_DEVICES` ([] on the CPU)."""

    workers: int
    devices: tuple[str, ...] = ()
    runs_per_gpu: int = 1
    capped_from: int | None = None  # the --jobs asked for, when more than the GPUs can take

    def placement(self) -> str | None:
        """The console line naming the GPUs the runs use, or None on the CPU."""
        if not self.devices:
            return None
        used = list(dict.fromkeys(self.devices))
        most = max(self.devices.count(gpu) for gpu in used)
        per_gpu = "one run per GPU" if most == 1 else f"up to {most} runs per GPU"
        return f"runs placed on GPU{'s' if len(used) > 1 else ''} {','.join(used)}, {per_gpu}"

    def cap_warning(self) -> str | None:
        """The warning for a --jobs the GPUs cannot take, or None."""
        if self.capped_from is None:
            return None
        gpus = len(set(self.devices))
        return (
            f"--jobs {self.capped_from} is more than the {gpus} GPU(s) x --runs-per-gpu {self.runs_per_gpu} "
            f"can train at once; running {self.workers} at once (raise --runs-per-gpu to share a GPU between "
            "runs, if they fit in its memory)"
        )


def plan_devices(jobs: int, gpus: Sequence[str], runs_per_gpu: int = 1) -> DevicePlan:
    """Place `jobs` workers on the GPUs `gpus` (CUDA_VISIBLE_DEVICES entries), at most `runs_per_gpu` on each.

    Workers go round the GPUs (0, 1, 2, 0, 1, 2, ...), so each GPU holds one run before any holds
    two. Without GPUs every worker trains on the CPU and `jobs` is kept.
    """
    if not gpus:
        return DevicePlan(workers=jobs)
    slots = [str(gpu) for _ in range(runs_per_gpu) for gpu in gpus]
    workers = min(jobs, len(slots))
    return DevicePlan(
        workers=workers,
        devices=tuple(slots[:workers]),
        runs_per_gpu=runs_per_gpu,
        capped_from=jobs if jobs > len(slots) else None,
    )


def visible_gpus() -> list[str]:
    """The CUDA GPUs this process may use, as `CUDA_VISIBLE_DEVICES` entries ([] without CUDA).

    A `CUDA_VISIBLE_DEVICES` already set (e.g. "2,3") is kept: workers get its entries, not 0 and 1.
    """
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()][:count]
    return [str(index) for index in range(count)]


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


def prepare_run_process() -> None:
    """Set up a process that trains grid runs (a `--jobs` worker, a Ray task): one CPU thread per run (the
    jobs set how many run at once) and no hub access unless the user's environment says otherwise."""
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _init_worker(queue, parent_pid: int | None = None, devices=None) -> None:
    global _progress_queue
    if devices is not None:
        # Before torch: CUDA reads it once, when torch first initialises CUDA in this process.
        os.environ["CUDA_VISIBLE_DEVICES"] = devices.get(timeout=60)
    if parent_pid is not None:
        die_with_parent(parent_pid)
    prepare_run_process()
    _progress_queue = queue


def _execute_in_worker(settings: CompareSettings, run: GridRun, fewer_per_step: bool) -> dict:
    def report(spent: int) -> None:
        _progress_queue.put((run.name, spent))

    return execute_run(settings, run, fewer_per_step, on_step=report)


def _exit_reason(code: int) -> str:
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run_parallel(
    settings,
    pending,
    fewer_per_step,
    advance,
    finish,
    gpus: Sequence[str] | None = None,
    on_warning: Callable[[str], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> None:
    """Run `pending` grid runs in `settings.jobs` spawned workers;
    `advance(name, spent)` (what the run has spent of its
    budget, `GenerationLedger.progress`) and `finish(run, record)` hear of them.

    `gpus` (default: `visible_gpus()`) are placed by `plan_devices`; `note(line)` hears where the runs
    train and `on_warning(message)` of a --jobs capped to the GPUs.
    """
    import multiprocessing
    import queue as queue_module
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    plan = plan_devices(settings.jobs, visible_gpus() if gpus is None else gpus, settings.runs_per_gpu)
    if plan.cap_warning() and on_warning is not None:
        on_warning(plan.cap_warning())
    workers = min(plan.workers, len(pending))
    # spawn: a fresh interpreter per worker, never a fork of a process that holds torch threads.
    context = multiprocessing.get_context("spawn")
    progress = context.Queue()
    devices = None
    if plan.devices:
        devices = context.Queue()  # one entry per worker: each takes its GPU as it starts
        for device in plan.devices[:workers]:
            devices.put(device)
        if note is not None:
            note(replace(plan, devices=plan.devices[:workers]).placement())
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(progress, os.getpid(), devices)
    ) as pool:
        futures = {pool.submit(_execute_in_worker, settings, run, fewer_per_step[run.strategy]): run for run in pending}
        remaining = set(futures)
        processes = []  # the workers, kept to read a dead one's exit code (the pool forgets them when it breaks)
        try:
            while remaining:
                processes = list((getattr(pool, "_processes", None) or {}).values()) or processes
                done, remaining = wait(remaining, timeout=0.5, return_when=FIRST_COMPLETED)
                while True:
                    try:
                        name, spent = progress.get_nowait()
                    except queue_module.Empty:
                        break
                    advance(name, spent)
                for future in done:
                    finish(futures[future], future.result())  # a failed run raises here; finished ones are kept
        except BrokenProcessPool:
            interrupted = sorted(
                futures[future].name
                for future in futures
                if future.cancelled() or not future.done() or future.exception() is not None
            )
            import signal

            for process in processes:
                process.join(timeout=5)
            # The pool terminates the other workers (SIGTERM) once one has died: that is not the cause.
            codes = sorted(
                {process.exitcode for process in processes if process.exitcode not in (None, 0, -signal.SIGTERM)}
            )
            how = ", ".join(_exit_reason(code) for code in codes) or "no exit code seen"
            raise WorkerDiedError(
                f"a worker process of dataflex compare died ({how}) with runs unfinished: {', '.join(interrupted)}; "
                f"finished runs are kept in {settings.output_dir}: run the same command again to resume the others "
                "(if memory ran out, use fewer --jobs)"
            ) from None
        except BaseException as error:
            for future in remaining:
                future.cancel()
            if not isinstance(error, Exception):  # Ctrl-C: stop the runs in progress instead of waiting for them
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.terminate()
            raise
