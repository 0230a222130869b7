"""The user's training function of `compare(..., train=my_train)` / `dataflex compare --train module:function`.

A training function takes one `TrainingRun` and trains it on any host (Lightning, verl, a plain loop). It is
named by an import path (``"module:function"``) wherever it must reach another process (``--jobs`` > 1, Ray
workers), and fingerprinted (`train_fingerprint`) so that a comparison resumed after the function changed is
refused instead of pairing runs of two different trainings.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from collections.abc import Callable

TRAIN_FORM = "'module:function' (e.g. my_training:train, importable from the current directory or PYTHONPATH)"


def train_name(train) -> str:
    """How a training function is named in errors, compare.json and the report: its spec, or `module:qualname`
    (a `functools.partial` or a callable instance by the module-level name that holds it)."""
    from ..options import reward_name  # one naming rule for every user callable

    return reward_name(train)


def import_train(spec: str, error: type[Exception]) -> Callable:
    """The training function at `spec` (``module:function``); raises `error` (the comparison's `CompareInputError`)
    naming the spec and the fix."""
    from dataflex_callbacks.registry import import_object

    found = import_object(
        str(spec).strip(),
        what=f"--train {spec!r}",
        error=error,
        form=TRAIN_FORM,
        missing="run from the folder that holds it or put that folder on PYTHONPATH",
        allow_dot=False,
    )
    if not callable(found) or inspect.isclass(found):
        raise error(
            f"--train {spec!r} is a {type(found).__name__}, not a function; name a function train(run) that "
            f"trains run.strategy, as {TRAIN_FORM}"
        )
    return found


def train_for_workers(train, jobs: int, executor: str, error: type[Exception]):
    """`train` as the import path that names it (so spawned workers and Ray tasks import it), or the callable itself
    when no path names it and the runs train in this process (``jobs=1``, processes).

    Raises `error` for anything but a callable or text, and for a callable no import path names (a
    lambda, a nested function, one defined in a notebook or ``__main__``) with ``jobs > 1`` or Ray.
    """
    if isinstance(train, str):
        import_train(train, error)  # a typo fails here, before anything is written
        return train.strip()
    if not callable(train) or inspect.isclass(train):
        raise error(f"train must be a function train(run) or its import path {TRAIN_FORM}, got {train!r}")
    path = train_name(train)
    named = None
    if "<" not in path and "__main__" not in path:
        try:
            named = import_train(path, error)
        except error:
            named = None
    if named is train:
        return path
    if jobs > 1 or executor == "ray":
        workers = "the Ray workers" if executor == "ray" else f"the {jobs} worker processes of jobs={jobs}"
        raise error(
            f"training function {path!r} cannot reach {workers}: workers are fresh interpreters that import the "
            "training function by path, and no import path names this one (a lambda, a nested function, one "
            "defined in a notebook or __main__); move it into a .py file and pass 'module:function' (or the "
            "function imported from there), or pass jobs=1"
            + (" with executor='processes'" if executor == "ray" else "")
        )
    return train


def resolve_train(train, error: type[Exception]) -> Callable:
    """The callable of `train` (an import path is imported; `error` names a bad one)."""
    return import_train(train, error) if isinstance(train, str) else train


def _source_digest(function) -> str | None:
    target = function.func if isinstance(function, functools.partial) else function
    target = target if inspect.isfunction(target) or inspect.ismethod(target) else type(target)
    try:
        return hashlib.sha256(inspect.getsource(target).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def _module_digest(function) -> str | None:
    target = function.func if isinstance(function, functools.partial) else function
    try:
        path = inspect.getsourcefile(target if inspect.isfunction(target) else type(target))
    except TypeError:
        return None
    if path is None or not os.path.isfile(path):  # defined in `python -c`, a notebook cell, an interactive session
        return None
    with open(path, "rb") as handle:
        return f"{path} sha256:{hashlib.sha256(handle.read()).hexdigest()}"


def train_fingerprint(train, error: type[Exception]) -> dict:
    """What identifies a training function for resuming: its name, the sha256 of its source, the arguments a
    `functools.partial` binds, and the sha256 of the file that defines it (a changed helper or module class there
    changes the training too); a part that cannot be read is None."""
    function = resolve_train(train, error)
    name = train_name(train)
    source = _source_digest(function)
    arguments = None
    if isinstance(function, functools.partial):
        arguments = repr((function.args, sorted(function.keywords.items())))
    return {
        "function": name,
        "source": None if source is None else f"{name} sha256:{source}",
        "arguments": arguments,
        "module_file": _module_digest(function),
    }
