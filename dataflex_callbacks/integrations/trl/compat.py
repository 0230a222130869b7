"""The TRL versions the adapter supports, and the check that refuses any other before a step runs.

The adapter wraps six methods of TRL's ``GRPOTrainer`` / ``RLOOTrainer`` (`callback.HOOKS`), four
of them private, and unpacks what they return. A TRL whose trainer lacks one of them, or calls it
with other parameters, would otherwise fail with an ``AttributeError`` or an unpacking error in the
middle of a training step. `check_trl_trainer` runs when a DataFlex trainer is built and when
`attach` is called, and refuses such a TRL in one line naming the version found and the supported range.

The floor is the oldest TRL on which the adapter's equivalence, resume and two-process tests pass
(``scripts/test_trl_versions.sh`` runs them there; CI's main environment runs them on the newest release):

- TRL < 1.7 returns two values from ``_get_per_token_logps_and_entropies`` (no ``compute_aux_loss``);
- TRL 1.7 and 1.8 divide the dapo/cispo/vespo loss by an unclamped ``num_items_in_batch``, so a
  step whose strategy drops every row gives a NaN loss and NaN gradients instead of zero.
"""

from __future__ import annotations

import inspect
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from dataflex_callbacks.errors import HostError

TRL_FLOOR = "1.9.0"
"""Oldest TRL the adapter supports (``pyproject.toml`` admits ``trl>=`` this)."""

TRL_NEWEST_TESTED = "1.16.0"
"""Newest TRL release the adapter's tests ran on."""

SUPPORTED_TRL = f"trl>={TRL_FLOOR} (tested on {TRL_FLOOR} and {TRL_NEWEST_TESTED})"
"""The supported range as the error messages and docs write it."""

WRAPPED_PARAMETERS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("inputs",),
    # compute_aux_loss marks the TRL that returns (logps, entropies, aux_loss), which the adapter unpacks.
    "_get_per_token_logps_and_entropies": (
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
    ),
    "_compute_loss": ("model", "inputs"),
    "_load_optimizer_and_scheduler": ("checkpoint",),
    "_get_train_sampler": ("dataset",),
}
"""Each method the adapter wraps (the keys of `callback.HOOKS`) -> the leading parameters it is called with."""


def installed_trl_version() -> str:
    """The installed TRL's version string (``"unknown"`` when its package metadata is missing)."""
    try:
        return version("trl")
    except PackageNotFoundError:
        import trl

        return getattr(trl, "__version__", "unknown")


def check_trl_trainer(trainer_class: type, host_class: type, after: type | None = None) -> None:
    """Raise a one-line ``RuntimeError`` unless the installed TRL is supported and every wrapped method fits.

    Args:
        trainer_class: the trainer's class; its methods are looked up along its MRO.
        host_class: the TRL trainer the adapter serves (``trl.GRPOTrainer``, ``trl.RLOOTrainer``). A
            class that is not one is left to `DataFlexCallback.bind`, which names the supported trainers.
        after: look methods up only in the MRO past this class (`DataFlexTrainerMixin`, whose
            overrides call ``super()``).
    """
    if not issubclass(trainer_class, host_class):
        return
    mro = trainer_class.__mro__
    if after is not None and after in mro:
        mro = mro[mro.index(after) + 1 :]
    found = installed_trl_version()
    if _older_than_floor(found):
        raise HostError(
            f"dataflex: TRL {found} is older than the TRL adapter supports: {SUPPORTED_TRL}; "
            f"upgrade with pip install 'trl>={TRL_FLOOR}'."
        )
    for name, wanted in WRAPPED_PARAMETERS.items():
        owner, method = _lookup(mro, name)
        problem = _mismatch(method, wanted)
        if problem is not None:
            raise HostError(
                f"dataflex: TRL {found} is not supported by the TRL adapter: "
                f"{owner or host_class.__name__}.{name} {problem}; "
                f"supported: "
                f"{SUPPORTED_TRL}. Install a supported TRL, e.g. pip install 'trl>={TRL_FLOOR}'."
            )


def _lookup(mro: tuple[type, ...], name: str) -> tuple[str | None, Any]:
    """The name of the first class in ``mro`` defining ``name``, and its raw class attribute (None, None if none)."""
    for cls in mro:
        if name in vars(cls):
            return cls.__name__, vars(cls)[name]
    return None, None


def _mismatch(method: Any, wanted: tuple[str, ...]) -> str | None:
    """Why ``method`` (a raw class attribute) cannot be called as the adapter calls it; None when it can."""
    if method is None or not callable(method):
        return "is missing"
    parameters = list(inspect.signature(method).parameters.values())
    if inspect.isfunction(method):
        parameters = parameters[1:]  # self
    names = []
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            return None  # (*args, **kwargs) accepts the adapter's calls as they are
        names.append(parameter.name)
    lead = tuple(names[: len(wanted)])
    if lead != wanted:
        return f"takes ({', '.join(names)}), the adapter calls it with ({', '.join(wanted)})"
    required = [p.name for p in parameters[len(wanted) :] if p.default is inspect.Parameter.empty]
    if required:
        return f"requires ({', '.join(required)}) beyond the ({', '.join(wanted)}) the adapter passes"
    return None


def _older_than_floor(found: str) -> bool:
    """True when version string ``found`` is a release before `TRL_FLOOR` (an unreadable version is not refused)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(found).release < Version(TRL_FLOOR).release
    except InvalidVersion:
        return False
