"""Plan, run and resume the strategy x seed grid of a comparison.

Every run of the grid is one `dataflex run` (`runner.run_training`) with the same options except
the strategy and the seed; the seed fixes the task suite, the initial weights, the sampling order and
the noisy reward, so the runs of one seed differ only by their strategy. With `--tune-learning-rates` the
baseline strategy also trains at each listed rate (`runs/<strategy>@lr<rate>-seed<k>`, `tuning.py` reads them).
Each finished run leaves `runs/<strategy>-seed<k>/result.json`, written atomically (temporary file +
`os.replace`): a run either has a complete result or none, and an interrupted comparison resumes by running only the
runs without one. A result that is unreadable or lacks a field is recomputed, with a warning.

Processes and files: every input is checked (numbers, strategies, data, output folder) before
anything is written; a comparison holds an exclusive lock on its folder (`.compare.lock`), so a
second `dataflex compare` on the same folder is refused; worker processes die with the process
that started them, even when it is killed with SIGKILL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from ..options import OPTION_RULES, check_option_number
from .results import RESULT_FILE, execute_run, load_result, result_problem, write_json_atomic
from .settings import RUNS_FOLDER, CompareInputError, CompareSettings, GridRun
from .workers import run_parallel

__all__ = [
    "CompareInputError",
    "CompareSettings",
    "GridOutcome",
    "GridRun",
    "FolderLock",
    "execute_run",
    "run_grid",
    "load_result",
    "result_problem",
    "write_json_atomic",
    "RESULT_FILE",
    "parse_seeds",
    "parse_strategies",
]

COMPARE_FILE = "compare.json"
LOCK_FILE = ".compare.lock"
MAX_SEED_COUNT = 1000  # `--num-seeds N` (or a `--seeds` range) beyond this is a typo, not a comparison


def _generates_fewer(strategy) -> bool:
    """A strategy that may generate fewer completions per step than a batch: a pre-rollout part, or one whose steps
    may train fewer groups (`Strategy.trains_fewer_groups`: no refill, ``groups_per_step``, groups of different sizes
    such as ``adaptive`` and ``knapsack``); `Budget.step_cap` gives it more steps."""
    return strategy is not None and (strategy.skips_prompts or strategy.trains_fewer_groups)


def check_strategies(settings: CompareSettings) -> dict[str, bool]:
    """Build every strategy once before any run starts; returns `spec -> may generate fewer per step`."""
    return {spec: _generates_fewer(strategy) for spec, strategy in build_strategies(settings).items()}


def build_strategies(settings: CompareSettings) -> dict:
    """`spec -> built strategy (None for plain GRPO)` for every strategy, each checked as the TRL adapter will check
    it for these runs (`run_inputs.adapter_refusal`).

    Raises one `CompareInputError` naming every strategy that cannot train, one line each with its reason,
    before anything is written: none of the others trains first.
    """
    from dataflex_callbacks.recipes.options import RunInputError
    from dataflex_callbacks.recipes.run_inputs import adapter_refusal, resolve_strategy

    if settings.train is not None:
        return _training_function_strategies(settings)
    found, refused = {}, {}
    for spec in settings.strategies:
        try:
            found[spec] = resolve_strategy(spec)
        except RunInputError as error:
            refused[spec] = str(error)
            continue
        reason = adapter_refusal(found[spec], settings.recipe_options(settings.recipe_of(spec)))
        if reason is not None:
            refused[spec] = f"the TRL adapter refuses it: {reason}"
    if refused:
        head = (
            f"{len(refused)} of {len(settings.strategies)} strategies cannot train with these settings (nothing was "
            "written; fix or drop each from --strategies):"
        )
        raise CompareInputError("\n".join([head, *(f"  - {spec}: {reason}" for spec, reason in refused.items())]))
    return found


COUNTED_ELSEWHERE = {
    "dynamic_sampling": "its further rounds reach a SignalGroupBuffer, not the strategy's decision",
    "allocation": "its pilots and commits reach the allocator, not the strategy's decision",
}
"""Parts that generate completions `Strategy.apply` never sees: a training function's run could not count them."""


def _training_function_strategies(settings: CompareSettings) -> dict:
    """`spec -> built strategy` for a comparison of a training function ('none' is the no-part baseline), refusing
    in one `CompareInputError` every strategy that does not build or whose generation the library cannot count."""
    from dataflex_callbacks import build_strategy

    found, refused = {}, {}
    for spec in settings.strategies:
        try:
            strategy = build_strategy("baseline" if str(spec).lower() == "none" else spec)
        except Exception as error:  # the library names the valid presets and keys
            refused[spec] = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            continue
        parts = [part for part in COUNTED_ELSEWHERE if getattr(strategy.config, part, None)]
        if parts:
            refused[spec] = (
                f"its {' and '.join(parts)} part generates completions the library cannot count in a training "
                f"function's run ({'; '.join(COUNTED_ELSEWHERE[p] for p in parts)}); compare it as a TRL run "
                "(without --train)"
            )
            continue
        found[spec] = strategy
    if refused:
        head = f"{len(refused)} of {len(settings.strategies)} strategies cannot be compared with --train:"
        raise CompareInputError("\n".join([head, *(f"  - {spec}: {reason}" for spec, reason in refused.items())]))
    return found


def check_data(settings: CompareSettings, strategies: dict) -> str:
    """Load the data once and check every strategy can train on it, before any folder is written; returns the
    console line naming the data and its domains (`runner.data_line`).

    Raises `CompareInputError` for unusable data (missing file or column, malformed rows, too few
    rows for one step, mix domains the data lacks, prompts plus completions past the model's positions).
    """
    from dataflex_callbacks.recipes.options import RunInputError
    from dataflex_callbacks.recipes.run_inputs import check_context, check_trainable, load_data
    from dataflex_callbacks.recipes.runner import data_line

    options = settings.options_for(settings.grid()[0])
    try:
        data = load_data(options)
        train, test = data.train, data.test
    except RunInputError as error:
        raise CompareInputError(str(error)) from error
    for spec, strategy in strategies.items():
        check_trainable(dataclasses.replace(options, strategy=spec), strategy, train, CompareInputError)
    check_context(options, train, test, CompareInputError)  # last: it reads the model's tokenizer and config
    return data_line(options, data, command="dataflex compare")


@dataclass
class GridOutcome:
    """Records of every grid run (grid order), of the learning-rate sweep's runs (`CompareSettings.tuning_runs`,
    kept apart: each is a run of the baseline strategy at another rate), and what this invocation did."""

    records: list[dict]
    tuned: list[dict] = field(default_factory=list)
    computed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    def as_read(self, settings: CompareSettings) -> GridOutcome:
        """This outcome as the user reads it: each record's strategy by its label (`CompareSettings.labels`, a
        strategy file's `name:`), as `settings.as_read()` names the strategies."""
        labels = settings.labels()

        def named(records: list[dict]) -> list[dict]:
            return [{**record, "strategy": labels.get(record["strategy"], record["strategy"])} for record in records]

        return dataclasses.replace(self, records=named(self.records), tuned=named(self.tuned))


class FolderLock:
    """An exclusive lock on a comparison folder (`fcntl.flock` on `.compare.lock`), held while a comparison runs.

    The kernel releases it when the holder exits, however it exits. Where `fcntl` is missing
    (Windows), comparisons are not locked.
    """

    def __init__(self, folder: str):
        self.path = os.path.join(folder, LOCK_FILE)
        self.handle = None

    def acquire(self) -> FolderLock:
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
    fix = (
        f"delete {path!r} (the finished runs in {RUNS_FOLDER}/ are kept and reused when the settings match) "
        "or pass --overwrite"
    )
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CompareInputError(
            f"{path!r} cannot be read ({type(error).__name__}: {reason}; truncated by an interrupted write?); {fix}"
        ) from None
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


_ABSENT = object()  # a setting one of two compare.json files lacks


def _shown(value) -> str:
    text = "(not recorded)" if value is _ABSENT else json.dumps(value, default=str)
    text = re.sub(r"sha256:([0-9a-f]{12})[0-9a-f]+", r"sha256:\1...", text.strip('"'))
    return text if len(text) <= 120 else text[:117] + "..."


def setting_changes(previous, current, prefix: str = "") -> list[str]:
    """What differs between two `CompareSettings.shared()` dicts, one ``name: old -> new`` per setting:
    ``run_options.learning_rate: 0.003 -> 0.001``, ``inputs.dataset: d.jsonl sha256:1a2b... -> d.jsonl sha256:...``."""
    if not (isinstance(previous, dict) and isinstance(current, dict)):
        return [] if previous == current else [f"{prefix.rstrip('.')}: {_shown(previous)} -> {_shown(current)}"]
    changes = []
    for key in sorted(set(previous) | set(current), key=str):
        old, new = previous.get(key, _ABSENT), current.get(key, _ABSENT)
        if isinstance(old, dict) and isinstance(new, dict):
            changes += setting_changes(old, new, f"{prefix}{key}.")
        elif old != new:
            changes.append(f"{prefix}{key}: {_shown(old)} -> {_shown(new)}")
    return changes


def _prepare_folder(
    settings: CompareSettings, overwrite: bool, on_warning: Callable[[str], None] | None = None
) -> None:
    """Check the folder's compare.json against these settings
    (refusing other settings with finished runs), then write it."""
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
                changes = setting_changes(previous, current)
                raise CompareInputError(
                    f"{path!r} holds {len(finished)} finished run(s) made with other settings or inputs, which "
                    f"would be paired with runs on these; changed: {'; '.join(changes)}; resume with the same options "
                    "and unchanged files, or pass --overwrite (retrains every run) or another --output-dir"
                )
            if on_warning is not None:  # nothing finished to keep: a failed start must not block the fixed command
                on_warning(f"{manifest} was written with other settings but no run finished; replacing it")
    write_json_atomic(
        manifest,
        {
            "shared": settings.shared(),
            "strategies": settings.strategies,
            "seeds": settings.seeds,
            "baseline": settings.baseline,
            # Not among the shared settings: a changed list keeps the finished runs, as for strategies.
            "tune_learning_rates": settings.tune_learning_rates,
            # Checked per run (`results.load_result`): a changed recipe retrains only that strategy's runs.
            "strategy_recipes": {label: dict(recipe) for label, recipe in (settings.strategy_recipes or {}).items()},
        },
    )


def _start(settings: CompareSettings, overwrite: bool, on_warning) -> tuple:
    """Check every input, then create and lock the folder and write compare.json; returns
    `(fewer_per_step, folder, lock)`.

    Nothing is written before the checks pass; if a later step of the start fails, the folder is
    removed again when this start created it.
    """
    from dataflex_callbacks.recipes.run_folder import OutputFolder

    strategies = build_strategies(settings)
    line = None if settings.train is not None else check_data(settings, strategies)  # its data is the function's
    if settings.progress and line is not None:
        from dataflex_callbacks.recipes.runner import learning_rate_line

        print(line, flush=True)
        print(learning_rate_line(settings.base, command="dataflex compare"), flush=True)
    folder = OutputFolder(settings.output_dir, error=CompareInputError).create()
    lock = FolderLock(settings.output_dir)
    try:
        lock.acquire()
        _prepare_folder(settings, overwrite, on_warning)
    except BaseException:
        lock.release()
        folder.discard()
        raise
    return {spec: _generates_fewer(s) for spec, s in strategies.items()}, folder, lock


def run_grid(
    settings: CompareSettings, overwrite: bool = False, on_warning: Callable[[str], None] | None = None
) -> GridOutcome:
    """Run every grid run that has no finished result yet (in `settings.jobs` processes) and return all records.

    `on_warning(message)` hears about results that are recomputed and runs whose first steps' rewards were all 0
    or None (default: `warnings.warn`).
    Raises `CompareInputError` (or the runner's `RunInputError`) before writing anything when an
    input is unusable, and when another comparison holds the folder.
    """
    if on_warning is None:

        def on_warning(message: str) -> None:
            warnings.warn(f"dataflex compare: {message}", stacklevel=3)

    started = time.perf_counter()
    fewer_per_step, _, lock = _start(settings, overwrite, on_warning)
    try:
        outcome = _run_started_grid(settings, fewer_per_step, on_warning, started)
    finally:
        lock.release()
    warn_zero_rewards(outcome.records, on_warning)
    return outcome


def warn_zero_rewards(records: list[dict], on_warning: Callable[[str], None]) -> None:
    """Pass on, once per message, the runs whose first steps scored every completion 0 or None
    (`ZeroRewardWarning`, kept in each record's notes: a worker's warnings never reach this console)."""
    from dataflex_callbacks.host.zero_rewards import ZERO_REWARD_PREFIX

    runs: dict[str, list[str]] = {}
    for record in records:
        for note in record.get("notes") or []:
            if note.startswith(ZERO_REWARD_PREFIX):
                runs.setdefault(note, []).append(str(record.get("name")))
    for note, names in runs.items():
        on_warning(f"{', '.join(names)}: {note.removeprefix('dataflex: ')}")


def _run_started_grid(settings: CompareSettings, fewer_per_step: dict, on_warning, started: float) -> GridOutcome:
    grid = settings.grid() + settings.tuning_runs()
    records: dict[str, dict] = {}
    for run in grid:
        record = load_result(settings, run, on_warning)
        if record is not None:
            records[run.name] = record
    pending = [run for run in grid if run.name not in records]
    outcome = GridOutcome(records=[], reused=[run.name for run in grid if run.name in records])

    # In the budget's unit, which every run spends whatever a step generates (`GenerationLedger.progress`); a
    # training function's runs report nothing along the way: the bar counts them.
    per_run = settings.budget.amount if settings.train is None else 1
    bar = None
    if settings.progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=per_run * len(grid),
            initial=per_run * len(outcome.reused),
            desc="dataflex compare",
            unit=settings.budget.unit.removesuffix("s") if settings.train is None else "run",
            dynamic_ncols=True,
        )
    shown: dict[str, int] = {}

    def advance(name: str, spent: int) -> None:
        spent = min(spent, per_run)
        if bar is not None and spent > shown.get(name, 0):
            bar.update(spent - shown.get(name, 0))
            shown[name] = spent

    def finish(run: GridRun, record: dict) -> None:
        records[run.name] = record
        outcome.computed.append(run.name)
        advance(run.name, per_run)  # a run that ended short of its budget (its step cap) is done all the same
        if bar is not None:
            bar.set_postfix_str(f"runs {len(records)}/{len(grid)}")

    def note(line: str) -> None:  # where the runs train, above the progress bar
        if bar is not None:
            bar.write(line)

    try:
        if settings.executor == "ray" and pending:
            from .ray_executor import run_on_ray

            run_on_ray(settings, pending, fewer_per_step, advance, finish, note=note)
        elif settings.jobs == 1 or len(pending) <= 1:
            for run in pending:
                finish(
                    run,
                    execute_run(
                        settings,
                        run,
                        fewer_per_step[run.strategy],
                        on_step=lambda spent, name=run.name: advance(name, spent),
                    ),
                )
        else:
            run_parallel(settings, pending, fewer_per_step, advance, finish, on_warning=on_warning, note=note)
    finally:
        if bar is not None:
            bar.close()
    outcome.records = [records[run.name] for run in grid if run.learning_rate is None]
    outcome.tuned = [records[run.name] for run in grid if run.learning_rate is not None]
    outcome.wall_seconds = time.perf_counter() - started
    return outcome


SEED_FORMS = "one seed (11), a list (0,5,7) or an inclusive range (11-13)"


def parse_seeds(seeds, flag: str = "--seeds") -> list[int]:
    """The seeds a comparison runs: text as `--seeds` takes it (`"11"` -> [11], `"0,5,7"`, `"11-13"` -> [11, 12, 13]),
    an int as a count (`3` -> [0, 1, 2], what `--num-seeds` and `compare(seeds=3)` mean), or a list of seeds.

    `flag` names the input in errors (`--seeds`, `--num-seeds`, `seeds=`). Anything else, a bool or a float
    included, is a `CompareInputError` naming the value and the accepted forms.
    """
    if isinstance(seeds, str):
        listed = []
        for part in (p.strip() for p in seeds.split(",")):
            bounds = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
            if bounds is not None:
                low, high = int(bounds[1]), int(bounds[2])
                if low > high or high - low >= MAX_SEED_COUNT:
                    raise CompareInputError(
                        f"{flag} range {part!r} must go up, by at most {MAX_SEED_COUNT} seeds; write e.g. 11-13"
                    )
                listed += range(low, high + 1)
            elif re.fullmatch(r"[+-]?\d+", part):
                listed.append(int(part))
            elif part:
                raise CompareInputError(f"cannot read {flag} {seeds!r}; give {SEED_FORMS}")
        seeds = listed
    elif isinstance(seeds, int) and not isinstance(seeds, bool):
        if not 1 <= seeds <= MAX_SEED_COUNT:
            raise CompareInputError(
                f"{flag} {seeds} asks for {seeds} seeds; a count of seeds must be from 1 to {MAX_SEED_COUNT}"
            )
        seeds = list(range(seeds))
    elif not isinstance(seeds, (list, tuple, range)):
        raise CompareInputError(
            f"{flag} {seeds!r} is not a count of seeds, a list of seeds or text; give a count (3: seeds 0, 1, 2), "
            f"a list ([0, 5, 7]) or text as --seeds takes it: {SEED_FORMS}"
        )
    if not seeds:
        raise CompareInputError(f"{flag} {seeds!r} names no seed; give {SEED_FORMS}")
    return [check_option_number(flag, seed, OPTION_RULES["seed"], CompareInputError) for seed in seeds]


def parse_strategies(text) -> list[str]:
    strategies = [part.strip() for part in str(text).split(",") if part.strip()]
    if not strategies:
        raise CompareInputError(
            f"cannot read --strategies {text!r}; give a comma-separated list, e.g. baseline,difffilter"
        )
    return strategies
