"""`dataflex compare --executor ray`: every grid run as a Ray task, on this machine or on a cluster (`--address`).

Each task trains one run with `execute_run`, which writes `runs/<name>/result.json` atomically, so
the folder, the resume and the report are those of `--jobs N`. A task takes one GPU where the
cluster has GPUs (1/`runs_per_gpu` of one), one CPU otherwise, and reports its steps to a small
actor that the progress bar reads.

A task whose worker process dies (killed, out of memory, its node lost) is retried once by Ray
(`max_retries=1`, system failures only); a second death makes its run fail with `WorkerDiedError`
naming it, once the other runs have finished. An exception raised by a run itself is not retried:
it stops the grid, as with `--jobs N`. Finished runs are kept either way, and the same command
resumes the others.

Without an address a local Ray instance is started with `jobs` CPUs (and this machine's GPUs) and
stopped at the end; a Ray already initialised in this process is used as it is. With an address
the comparison joins that cluster, whose nodes must have dataflex-callbacks installed and see the
output folder, the data and the reward modules at the same paths (a shared filesystem): every task
works in the folder the comparison was started from.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..run_inputs import first_line
from .results import execute_run
from .settings import RAY_MISSING, CompareInputError
from .workers import WorkerDiedError, prepare_run_process

RETRIES = 1  # Ray reruns a task whose worker process died this many times, then reports it failed
POLL_SECONDS = 0.5


class ProgressBoard:
    """What each run last reported it has spent of its budget (`GenerationLedger.progress`); a Ray actor that the
    tasks write to and the comparison reads."""

    def __init__(self):
        self.spent: dict[str, int] = {}

    def report(self, name: str, spent: int) -> None:
        self.spent[name] = max(spent, self.spent.get(name, 0))

    def read(self) -> dict[str, int]:
        return dict(self.spent)


def import_ray():
    """The `ray` module; `CompareInputError` naming the install command when it is missing."""
    try:
        import ray
    except ImportError:
        raise CompareInputError(RAY_MISSING) from None
    return ray


def start_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Join the Ray cluster at `address`, or start a local one with `num_cpus` CPUs; True when this call started Ray.

    A Ray already initialised in this process (a notebook's, a test's) is used as it is. Workers get
    the current directory on PYTHONPATH, Ray's own logs stay out of the console and the dashboard is off.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    python_path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        address=address,
        num_cpus=None if address else num_cpus,
        runtime_env={"env_vars": {"PYTHONPATH": python_path, "HF_HUB_DISABLE_TELEMETRY": "1"}},
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    return True


def _train_on_ray(settings, run, fewer_per_step: bool, board, folder: str) -> dict:
    """One grid run in a Ray worker (the body of the task), in the folder the comparison started from."""
    if not os.path.isdir(folder):
        import socket

        raise CompareInputError(
            f"run {run.name} cannot start on Ray node {socket.gethostname()}: it has no folder {folder!r}, where the "
            "comparison was started; Ray nodes must share that folder (and the data, rewards and --output-dir) "
            "at the same path, e.g. on a network filesystem"
        )
    os.chdir(folder)  # relative --output-dir, --dataset and reward modules resolve as on the comparison's machine
    prepare_run_process()  # as in the worker processes of --jobs N

    def report(spent: int) -> None:
        board.report.remote(run.name, spent)  # not awaited: progress must not slow the run

    return execute_run(settings, run, fewer_per_step, on_step=report)


def run_on_ray(settings, pending, fewer_per_step, advance, finish, note: Callable[[str], None] | None = None) -> None:
    """Run `pending` grid runs as Ray tasks; `advance(name, spent)` (what the run has spent of its
    budget, `GenerationLedger.progress`) and `finish(run, record)` hear of them, as with
    `workers.run_parallel`. Raises `WorkerDiedError` naming the runs whose worker died twice."""
    ray = import_ray()
    started_here = start_ray(settings.ray_address, settings.jobs)
    try:
        _run_tasks(ray, settings, pending, fewer_per_step, advance, finish, note)
    finally:
        if started_here:
            ray.shutdown()


def _run_tasks(ray, settings, pending, fewer_per_step, advance, finish, note) -> None:
    resources = ray.cluster_resources()
    gpus = resources.get("GPU", 0)
    if gpus:
        options = {"num_cpus": 1, "num_gpus": 1 / settings.runs_per_gpu}
        share = "one GPU per run" if settings.runs_per_gpu == 1 else f"up to {settings.runs_per_gpu} runs per GPU"
    else:
        options = {"num_cpus": 1}
        share = "one CPU per run (no GPU in the cluster)"
    if note is not None:
        note(f"runs placed by Ray on {resources.get('CPU', 0):g} CPUs and {gpus:g} GPUs, {share}")
    train = ray.remote(max_retries=RETRIES, retry_exceptions=False)(_train_on_ray).options(**options)
    board = ray.remote(num_cpus=0)(ProgressBoard).remote()
    here = os.getcwd()
    tasks = {train.remote(settings, run, fewer_per_step[run.strategy], board, here): run for run in pending}
    remaining = list(tasks)
    died: dict[str, str] = {}
    try:
        while remaining:
            done, remaining = ray.wait(remaining, num_returns=len(remaining), timeout=POLL_SECONDS)
            for name, spent in ray.get(board.read.remote()).items():
                advance(name, spent)
            for task in done:
                try:
                    record = ray.get(task)
                except ray.exceptions.RayTaskError as error:  # the run raised: not retried, stops the grid
                    cause = getattr(error, "cause", None)
                    raise (cause if isinstance(cause, Exception) else error) from error
                except ray.exceptions.RayError as error:  # its worker or node died on the try and the retry
                    died[tasks[task].name] = first_line(error)
                    continue
                finish(tasks[task], record)
    except BaseException:
        for task in remaining:
            try:
                ray.cancel(task, force=True)
            except Exception:  # already finished or gone: nothing to stop
                pass
        raise
    if died:
        reasons = "; ".join(f"{name}: {reason}" for name, reason in sorted(died.items()))
        raise WorkerDiedError(
            f"the Ray worker of run(s) {', '.join(sorted(died))} died on the first try and on the retry ({reasons}); "
            f"the other runs finished and are kept in {settings.output_dir}: run the same command again to retry "
            "them (if memory ran out, use fewer runs per node or --runs-per-gpu 1)"
        )
