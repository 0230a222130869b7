"""Plan, run and resume the strategy x seed grid of a comparison.

Every run of the grid is one `dataflex run` (`runner.run_training`) with the same options except
the strategy and the seed; the seed fixes the task suite, the initial weights, the sampling order and
the noisy reward, so the runs of one seed differ only by their strategy. Each finished run leaves
`runs/<strategy>-seed<k>/result.json`, written atomically (temporary file + `os.replace`): a run
either has a complete result or none, and an interrupted comparison resumes by running only the
runs without one. A result that is unreadable or lacks a field is recomputed, with a warning.

Processes and files: every input is checked (numbers, strategies, data, output folder) before
anything is written; a comparison holds an exclusive lock on its folder (`.compare.lock`), so a
second `dataflex compare` on the same folder is refused; worker processes die with the process
that started them, even when it is killed with SIGKILL.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

from ..options import (OPTION_RULES, PER_RUN_FIELDS, NumberRule, RunOptions, check_option_number,
                       check_run_options, completion_tokens, eval_tokens)
from .budget import Budget, EvalPlan, GenerationLedger, budget_callback

COMPARE_FILE = "compare.json"
RESULT_FILE = "result.json"
RUNS_FOLDER = "runs"
LOCK_FILE = ".compare.lock"
MAX_SEED_COUNT = 1000  # `--seeds N` beyond this is a typo, not a comparison


class CompareInputError(ValueError):
    """A comparison that cannot start (bad strategy list, seeds, budget, or an output folder holding another comparison)."""


@dataclass(frozen=True)
class GridRun:
    """One cell of the grid: a strategy trained with a seed."""

    strategy: str
    seed: int

    @property
    def name(self) -> str:
        """Folder name `<strategy>-seed<k>` (a strategy file is named by its file name without extension)."""
        stem = os.path.splitext(os.path.basename(str(self.strategy)))[0] or "strategy"
        return f"{re.sub(r'[^A-Za-z0-9_.+-]', '_', stem)}-seed{self.seed}"


def _setting(default=dataclasses.MISSING, *, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class CompareSettings:
    """Settings of one `dataflex compare`; the `dataflex compare` flags take their help from these fields."""

    strategies: list[str] = _setting(help="strategy specs (preset names, YAML/JSON files, 'none'), in report order")
    seeds: list[int] = _setting(help="seeds; every strategy runs with every seed")
    budget: Budget = _setting(help="the compute every run gets: steps:N or completions:N")
    base: object = _setting(None, help="RunOptions shared by every run (model, dataset, batch shape, learning rate, "
                                       "...); its strategy, seed, steps and output folder are set per run")
    output_dir: str = _setting(os.path.join("runs", "compare"),
                               help="comparison folder (runs, report.md, results.csv, figures)")
    baseline: str | None = _setting(None, help="the strategy the others are paired against")
    jobs: int = _setting(1, help="runs trained at once, in separate processes")
    eval_points: int = _setting(4, help="held-out evaluations during each run, besides before and after, for the "
                                        "accuracy-against-completions figure")
    progress: bool = _setting(True, help="show a progress bar over the whole grid")
    command: str = _setting("", help="the command line that started the comparison (written into the report)")

    def __post_init__(self):
        if self.base is None:
            self.base = RunOptions()
        if not self.strategies:
            raise CompareInputError("no strategies to compare; pass e.g. --strategies baseline,difffilter")
        if len(set(self.strategies)) != len(self.strategies):
            raise CompareInputError(f"strategies are listed twice in {self.strategies}; list each once")
        self.seeds = [check_option_number("--seeds", seed, OPTION_RULES["seed"], CompareInputError) for seed in self.seeds]
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise CompareInputError(f"seeds must be distinct and at least one, got {self.seeds}")
        if self.baseline is None:
            self.baseline = self.strategies[0]
        if self.baseline not in self.strategies:
            raise CompareInputError(f"baseline {self.baseline!r} is not among the strategies {self.strategies}")
        self.jobs = check_option_number("--jobs", self.jobs, NumberRule(integer=True, low=1), CompareInputError)
        self.eval_points = check_option_number("--eval-points", self.eval_points, NumberRule(integer=True, low=0),
                                        CompareInputError)
        if not isinstance(self.budget, Budget):
            raise CompareInputError(f"budget must be a Budget (e.g. Budget.parse('steps:100')), got {self.budget!r}")
        if not str(self.output_dir or "").strip():
            raise CompareInputError("--output-dir must be a folder path, got an empty string")
        check_run_options(self.base, CompareInputError)
        # Resolve the token lengths here, so the runner and the evaluations along the way use the same ones.
        self.base = dataclasses.replace(self.base, max_completion_length=completion_tokens(self.base),
                                        eval_max_new_tokens=eval_tokens(self.base))

    @property
    def completions_per_step(self) -> int:
        return int(self.base.prompts_per_step) * int(self.base.num_generations)

    def grid(self) -> list[GridRun]:
        """Every (strategy, seed) pair, strategies outer."""
        return [GridRun(strategy, seed) for strategy in self.strategies for seed in self.seeds]

    def expected_steps(self) -> int:
        return self.budget.expected_steps(self.completions_per_step)

    def eval_plan(self) -> EvalPlan:
        """When a run is evaluated besides before and after: `eval_points` thresholds evenly spaced over the
        budget, in its unit (completions for a completions budget, whatever a step costs a strategy)."""
        return EvalPlan(self.budget, self.eval_points)

    def shared(self) -> dict:
        """What every run of the comparison must share; a resumed comparison must match it exactly."""
        options = {k: v for k, v in dataclasses.asdict(self.base).items() if k not in PER_RUN_FIELDS}
        return {"budget": str(self.budget), "eval_points": self.eval_points, "run_options": options}

    def shared_key(self) -> str:
        return hashlib.sha1(json.dumps(self.shared(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def run_dir(self, run: GridRun) -> str:
        return os.path.join(self.output_dir, RUNS_FOLDER, run.name)

    def options_for(self, run: GridRun, pre_select: bool = False):
        return dataclasses.replace(
            self.base, strategy=run.strategy, seed=run.seed, output_dir=self.run_dir(run), overwrite=True,
            progress=False, steps=self.budget.step_cap(self.completions_per_step, pre_select),
        )


def write_json_atomic(path: str, data) -> None:
    """Write JSON so that `path` holds either the old content or the complete new one, never a partial file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temporary, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


# Every field `_summarize` writes, with its type: a result.json missing one or holding another type is recomputed.
RESULT_FIELDS = {"strategy": str, "seed": int, "name": str, "budget": str, "shared_key": str, "run_dir": str,
                 "domains": list, "steps": int, "completions": int, "completion_tokens": int,
                 "wall_seconds": (int, float), "kept_frac": (int, float), "before": dict, "after": dict,
                 "curve": list, "proportions": list}


def result_problem(record) -> str | None:
    """What is wrong with a loaded result record (a missing field, a wrong type), or None when it is complete."""
    if not isinstance(record, dict):
        return f"it holds a JSON {type(record).__name__}, not an object"
    for key, kind in RESULT_FIELDS.items():
        if key not in record:
            return f"it lacks the field {key!r}"
        if not isinstance(record[key], kind) or isinstance(record[key], bool):
            return f"its field {key!r} is a {type(record[key]).__name__}"
    for when in ("before", "after"):
        if not isinstance(record[when].get("overall"), (int, float)):
            return f"its {when!r} accuracy has no number 'overall'"
    for point in record["curve"]:
        if not (isinstance(point, dict) and {"step", "completions", "accuracy"} <= set(point)
                and isinstance(point["accuracy"], dict)):
            return "its accuracy curve has a malformed point"
    return None


def load_result(settings: CompareSettings, run: GridRun, on_warning: Callable[[str], None] | None = None) -> dict | None:
    """The finished result of `run`, or None when it has none (or one made with other shared settings).

    A result file that cannot be read or lacks a field counts as missing (the run is recomputed);
    `on_warning` hears about it.
    """
    path = os.path.join(settings.run_dir(run), RESULT_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as handle:
            record = json.load(handle)
        problem = result_problem(record)
    except (OSError, ValueError) as error:
        problem = f"it cannot be read ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    if problem is not None:
        if on_warning is not None:
            on_warning(f"{path} is not a complete run result ({problem}); recomputing run {run.name}")
        return None
    if record.get("shared_key") != settings.shared_key():
        return None
    if record["strategy"] != run.strategy or record["seed"] != run.seed:
        if on_warning is not None:
            on_warning(f"{path} holds the run {record['strategy']!r} seed {record['seed']}, not {run.name}; recomputing it")
        return None
    return record


def _has_pre_select(strategy) -> bool:
    return strategy is not None and getattr(strategy, "pre_select", None) is not None


def check_strategies(settings: CompareSettings) -> dict[str, bool]:
    """Build every strategy once before any run starts; returns `spec -> has a pre-rollout part`."""
    return {spec: _has_pre_select(strategy) for spec, strategy in build_strategies(settings).items()}


def build_strategies(settings: CompareSettings) -> dict:
    """`spec -> built strategy (None for plain GRPO)` for every strategy; a bad one raises `CompareInputError`."""
    from dataflex_callbacks.recipes.runner import RunInputError, resolve_strategy

    found = {}
    for spec in settings.strategies:
        try:
            found[spec] = resolve_strategy(spec)
        except RunInputError as error:
            raise CompareInputError(str(error)) from error
    return found


def check_data(settings: CompareSettings, strategies: dict) -> None:
    """Load the data once and check every strategy can train on it, before any folder is written.

    Raises `CompareInputError` for unusable data (missing file or column, malformed rows, too few
    rows for one step, mix domains the data lacks).
    """
    from dataflex_callbacks.recipes.runner import RunInputError, check_trainable, load_data

    options = settings.options_for(settings.grid()[0])
    try:
        train, _, _ = load_data(options)
    except RunInputError as error:
        raise CompareInputError(str(error)) from error
    for spec, strategy in strategies.items():
        check_trainable(dataclasses.replace(options, strategy=spec), strategy, train, CompareInputError)


def _summarize(settings: CompareSettings, run: GridRun, result, ledger: GenerationLedger, curve: list[dict]) -> dict:
    domains = list(result.config.get("domains") or [])
    metrics = result.metrics
    kept = [m["kept_frac"] for m in metrics if m.get("kept_frac") is not None]
    final_step = ledger.steps or (metrics[-1]["step"] if metrics else 0)
    points = [{"step": 0, "completions": 0, "accuracy": result.eval_before}]
    points += [p for p in curve if p["step"] < final_step]
    points.append({"step": final_step, "completions": ledger.completions, "accuracy": result.eval_after})
    planned = len(settings.eval_plan().thresholds())
    proportions = []
    for m in metrics:
        target = {d: m.get(f"dataflex/mix/target/{d}") for d in domains}
        proportions.append({
            "step": m["step"],
            "sampled": {d: m.get(f"share/{d}") or 0.0 for d in domains},
            "target": target if any(v is not None for v in target.values()) else None,
        })
    signal_groups = result.config.get("signal_groups_trained")
    return {
        "strategy": run.strategy,
        "seed": run.seed,
        "name": run.name,
        "budget": str(settings.budget),
        "shared_key": settings.shared_key(),
        "run_dir": result.output_dir,
        "domains": domains,
        "steps": final_step,
        "completions": ledger.completions,
        # Completions beyond a completions budget (None for a steps budget) and one generation round's
        # completions: a run stops within one round of its budget.
        "overshoot": ledger.overshoot,
        "round_completions": ledger.round_size,
        # Intermediate evaluations planned, and how many the curve has (a step that generated more than the
        # plan's spacing serves several thresholds with one evaluation).
        "eval_points": {"planned": planned, "evaluated": len(points) - 2},
        "completion_tokens": int(round(ledger.completion_tokens)),
        # Trained signal groups and completions in zero-signal groups (runner.signal_accounting); None when the
        # run's logs could not tell them.
        "signal_groups": signal_groups,
        "zero_signal_completions": result.config.get("zero_signal_completions"),
        "completions_per_signal_group": ledger.completions / signal_groups if signal_groups else None,
        "wall_seconds": round(result.wall_seconds, 3),
        "kept_frac": sum(kept) / len(kept) if kept else 1.0,
        "before": result.eval_before,
        "after": result.eval_after,
        "curve": points,
        "proportions": proportions,
    }


def execute_run(settings: CompareSettings, run: GridRun, pre_select: bool = False,
                on_step: Callable[[int], None] | None = None) -> dict:
    """Train one grid run, write its `result.json` atomically and return the result record."""
    from dataflex_callbacks.recipes import tasks
    from dataflex_callbacks.recipes.runner import load_data, run_training

    options = settings.options_for(run, pre_select)
    _, test, reward_settings = load_data(options)
    eval_settings = dict(max_new_tokens=options.eval_max_new_tokens, seed=options.seed, **reward_settings)

    def evaluate(model, tokenizer):
        return tasks.evaluate(model, tokenizer, test, **eval_settings)

    ledger = GenerationLedger(settings.budget)
    callback = budget_callback(ledger, evaluate, settings.eval_points, on_step)
    with warnings.catch_warnings(record=True) as caught:
        # Caught, not printed: repeated by every run they would bury the progress bar. The library's own
        # warnings (e.g. a mixer whose targets the sampler does not follow) go into the report instead.
        warnings.simplefilter("always")
        result = run_training(options, callbacks=[callback])
    record = _summarize(settings, run, result, ledger, callback.curve)
    notes = {str(w.message).strip() for w in caught if str(w.message).startswith("dataflex")}
    record["notes"] = sorted(notes)
    write_json_atomic(os.path.join(settings.run_dir(run), RESULT_FILE), record)
    return record


# --------------------------------------------------------------------------- worker processes

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


# --------------------------------------------------------------------------- the grid


@dataclass
class GridOutcome:
    """Records of every grid run (grid order) and what this invocation did."""

    records: list[dict]
    computed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


class FolderLock:
    """An exclusive lock on a comparison folder (`fcntl.flock` on `.compare.lock`), held while a comparison runs.

    The kernel releases it when the holder exits, however it exits. Where `fcntl` is missing
    (Windows), comparisons are not locked.
    """

    def __init__(self, folder: str):
        self.path = os.path.join(folder, LOCK_FILE)
        self.handle = None

    def acquire(self) -> "FolderLock":
        try:
            import fcntl
        except ImportError:
            return self
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise CompareInputError(
                f"another `dataflex compare` (pid {owner}) is running in {os.path.dirname(self.path)!r}; "
                "wait for it to finish (then rerun to resume), or choose another --output-dir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self.handle = handle
        return self

    def release(self) -> None:
        if self.handle is not None:
            self.handle.close()  # closing the file releases the flock
            self.handle = None


def _read_manifest(path: str) -> dict:
    """The `shared` settings recorded in compare.json; a clear `CompareInputError` naming the file if unreadable."""
    fix = (f"delete {path!r} (the finished runs in {RUNS_FOLDER}/ are kept and reused when the settings match) "
           "or pass --overwrite")
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CompareInputError(f"{path!r} cannot be read ({type(error).__name__}: {reason}; truncated by an "
                                f"interrupted write?); {fix}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shared"), dict):
        raise CompareInputError(f"{path!r} has no 'shared' settings (not written by dataflex compare?); {fix}")
    return manifest["shared"]


def _finished_results(settings: CompareSettings) -> list[str]:
    """Run folders under runs/ that hold a complete result.json (any settings)."""
    runs = os.path.join(settings.output_dir, RUNS_FOLDER)
    found = []
    for name in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        try:
            with open(os.path.join(runs, name, RESULT_FILE)) as handle:
                if result_problem(json.load(handle)) is None:
                    found.append(name)
        except (OSError, ValueError):
            continue
    return found


def _prepare_folder(settings: CompareSettings, overwrite: bool, on_warning: Callable[[str], None] | None = None) -> None:
    """Check the folder's compare.json against these settings (refusing other settings with finished runs), then write it."""
    path = settings.output_dir
    manifest = os.path.join(path, COMPARE_FILE)
    current = json.loads(json.dumps(settings.shared(), default=str))
    if overwrite and os.path.isdir(os.path.join(path, RUNS_FOLDER)):
        shutil.rmtree(os.path.join(path, RUNS_FOLDER))
    elif os.path.exists(manifest):
        previous = _read_manifest(manifest)
        if previous != current:
            finished = _finished_results(settings)
            if finished:
                raise CompareInputError(
                    f"{path!r} holds a comparison with other settings (budget, model, data or training options) and "
                    f"{len(finished)} finished run(s); resume it with the same options, or pass --overwrite or "
                    "another --output-dir"
                )
            if on_warning is not None:  # nothing finished to keep: a failed start must not block the fixed command
                on_warning(f"{manifest} was written with other settings but no run finished; replacing it")
    write_json_atomic(manifest, {"shared": settings.shared(), "strategies": settings.strategies,
                                 "seeds": settings.seeds, "baseline": settings.baseline})


def _start(settings: CompareSettings, overwrite: bool, on_warning) -> tuple:
    """Check every input, then create and lock the folder and write compare.json; returns `(pre_select, folder, lock)`.

    Nothing is written before the checks pass; if a later step of the start fails, the folder is
    removed again when this start created it.
    """
    from dataflex_callbacks.recipes.runner import OutputFolder

    strategies = build_strategies(settings)
    check_data(settings, strategies)
    folder = OutputFolder(settings.output_dir, error=CompareInputError).create()
    lock = FolderLock(settings.output_dir)
    try:
        lock.acquire()
        _prepare_folder(settings, overwrite, on_warning)
    except BaseException:
        lock.release()
        folder.discard()
        raise
    return {spec: _has_pre_select(s) for spec, s in strategies.items()}, folder, lock


def run_grid(settings: CompareSettings, overwrite: bool = False,
             on_warning: Callable[[str], None] | None = None) -> GridOutcome:
    """Run every grid run that has no finished result yet (in `settings.jobs` processes) and return all records.

    `on_warning(message)` hears about results that are recomputed (default: `warnings.warn`).
    Raises `CompareInputError` (or the runner's `RunInputError`) before writing anything when an
    input is unusable, and when another comparison holds the folder.
    """
    if on_warning is None:
        def on_warning(message: str) -> None:
            warnings.warn(f"dataflex compare: {message}", stacklevel=3)
    started = time.perf_counter()
    pre_select, _, lock = _start(settings, overwrite, on_warning)
    try:
        return _run_started_grid(settings, pre_select, on_warning, started)
    finally:
        lock.release()


def _run_started_grid(settings: CompareSettings, pre_select: dict, on_warning, started: float) -> GridOutcome:
    grid = settings.grid()
    records: dict[str, dict] = {}
    for run in grid:
        record = load_result(settings, run, on_warning)
        if record is not None:
            records[run.name] = record
    pending = [run for run in grid if run.name not in records]
    outcome = GridOutcome(records=[], reused=[run.name for run in grid if run.name in records])

    expected = settings.expected_steps()
    bar = None
    if settings.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=expected * len(grid), initial=expected * len(outcome.reused), desc="dataflex compare",
                   unit="step", dynamic_ncols=True)
    shown: dict[str, int] = {}

    def advance(name: str, step: int) -> None:
        step = min(step, expected)
        if bar is not None and step > shown.get(name, 0):
            bar.update(step - shown.get(name, 0))
            shown[name] = step

    def finish(run: GridRun, record: dict) -> None:
        records[run.name] = record
        outcome.computed.append(run.name)
        advance(run.name, expected)
        if bar is not None:
            bar.set_postfix_str(f"runs {len(records)}/{len(grid)}")

    try:
        if settings.jobs == 1 or len(pending) <= 1:
            for run in pending:
                finish(run, execute_run(settings, run, pre_select[run.strategy],
                                        on_step=lambda step, name=run.name: advance(name, step)))
        else:
            _run_parallel(settings, pending, pre_select, advance, finish)
    finally:
        if bar is not None:
            bar.close()
    outcome.records = [records[run.name] for run in grid]
    outcome.wall_seconds = time.perf_counter() - started
    return outcome


def _run_parallel(settings, pending, pre_select, advance, finish) -> None:
    import multiprocessing
    import queue as queue_module
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # spawn: a fresh interpreter per worker, never a fork of a process that holds torch threads.
    context = multiprocessing.get_context("spawn")
    progress = context.Queue()
    with ProcessPoolExecutor(max_workers=min(settings.jobs, len(pending)), mp_context=context,
                             initializer=_init_worker, initargs=(progress, os.getpid())) as pool:
        futures = {pool.submit(_execute_in_worker, settings, run, pre_select[run.strategy]): run for run in pending}
        remaining = set(futures)
        try:
            while remaining:
                done, remaining = wait(remaining, timeout=0.5, return_when=FIRST_COMPLETED)
                while True:
                    try:
                        name, step = progress.get_nowait()
                    except queue_module.Empty:
                        break
                    advance(name, step)
                for future in done:
                    finish(futures[future], future.result())  # a failed run raises here; finished ones are kept
        except BaseException as error:
            for future in remaining:
                future.cancel()
            if not isinstance(error, Exception):  # Ctrl-C: stop the runs in progress instead of waiting for them
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.terminate()
            raise


def parse_seeds(text) -> list[int]:
    """`3` -> seeds 0, 1, 2; `0,5,7` -> exactly those seeds."""
    text = str(text).strip()
    try:
        listed = [int(part) for part in text.split(",") if part.strip()] if "," in text else None
        count = None if listed is not None else int(text)
    except ValueError:
        raise CompareInputError(f"cannot read --seeds {text!r}; give a count (3) or a list (0,5,7)") from None
    if count is not None and not 1 <= count <= MAX_SEED_COUNT:
        raise CompareInputError(f"--seeds count must be from 1 to {MAX_SEED_COUNT}, got {count}; "
                                "give a count (3) or a list of seeds (0,5,7)")
    seeds = listed if listed is not None else list(range(count))
    return [check_option_number("--seeds", seed, OPTION_RULES["seed"], CompareInputError) for seed in seeds]


def parse_strategies(text) -> list[str]:
    strategies = [part.strip() for part in str(text).split(",") if part.strip()]
    if not strategies:
        raise CompareInputError(f"cannot read --strategies {text!r}; give a comma-separated list, e.g. baseline,difffilter")
    return strategies
