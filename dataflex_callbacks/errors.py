"""Exceptions raised by dataflex-callbacks, each naming the bad value and the fix, and the warning of a step that
keeps nothing."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from dataflex_callbacks._plain_values import plain_scalar


class DataFlexError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(DataFlexError, ValueError):
    """A strategy configuration is invalid: unknown name, bad parameter, missing signal."""


class ParamError(ConfigError):
    """A component parameter has a bad value (wrong type, out of range, given twice); names the parameter.

    Raised by a component's constructor (``TopKFraction(fraction=2)``) and, prefixed with the
    component, when a config builds it. Attributes: ``param``, the parameter's name.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.param)


class BatchError(DataFlexError, ValueError):
    """A `RolloutBatch` (or its use) is inconsistent: wrong shape, dtype, device, missing field."""


class StateError(DataFlexError, ValueError):
    """A saved state cannot be loaded: not a state dict, missing keys, wrong shapes or types."""


class HostError(DataFlexError, RuntimeError):
    """The host trainer cannot run the strategy as set up: an unsupported version,
    or an adapter attached twice or not at all."""


class WrongHostError(HostError, TypeError):
    """An adapter was given a trainer it does not serve (a GRPO callback on an RLOO trainer, ...);
    names the right one."""


class InputError(DataFlexError, ValueError):
    """Data or job input is unusable: a file, a column, a task domain, a budget; names the value and the fix."""


class ArgumentError(DataFlexError, TypeError):
    """A public function or method got an argument of the wrong type; names the argument, the value, the type it takes
    and the fix.

    A `TypeError`, as the error it replaces: ``strategy.apply(batch, "3")``, ``DomainMixingSampler(5)``,
    ``strategy.apply_policy(decision, batch)`` (arguments swapped) fail here, at the call, and not
    deep inside with an `AttributeError`.
    """


class ComponentError(DataFlexError, ValueError):
    """A component (built-in or yours) returned values its contract forbids, at run time.

    Raised when a scorer's scores are not finite, or a reweighter's weights or a mixer's proportions
    are negative or not finite; the message names the component, the first bad value and where it
    came from. Fix the component:
    `dataflex_callbacks.testing.check_component` finds such values before a run does.
    """


# How a core message names the reward a strategy selects on when the host named no setting of its own
# (`Strategy.bind_selection_reward`: TRL names ``selection_reward=``).
SELECTION_REWARD_TEXT = "a selection reward (the reward the strategy selects on, set in the host adapter)"


class DroppedAllWarning(UserWarning):
    """A step kept nothing, so it trains nothing (metric ``dropped_all`` = 1); shown once per strategy.

    Attributes:
        step: the host's step counter at that step.
        strategy: the strategy's name.
        cause: why, one of `DROPPED_ALL_CAUSES`.
        fix: the setting or code change that changes it, or None where none can (e.g. a step whose
            groups all had equal rewards under a preset that exists to drop such groups).
    """

    def __init__(
        self,
        message: str,
        step: int | None = None,
        strategy: str | None = None,
        cause: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.step, self.strategy, self.cause, self.fix = step, strategy, cause, fix

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.step, self.strategy, self.cause, self.fix)


class RepeatedRowWarning(UserWarning):
    """A `DomainMixingSampler` batch holds a row more than once: a domain's share of the batch outgrew its rows;
    shown once per sampler.

    Attributes:
        domains: ``{domain: (rows drawn in the batch, rows the domain has)}`` for each domain that repeated.
    """

    def __init__(self, message: str, domains: Mapping[str, tuple[int, int]] | None = None) -> None:
        super().__init__(message)
        self.domains = dict(domains or {})

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.domains)


class RewardScaleWarning(UserWarning):
    """A solve rate was read on rewards that are not all 0 or 1 with the default threshold; shown once per scorer."""


# Causes a `DroppedAllWarning` names: every row had a NaN/inf signal under nan_policy='drop'; every
# group's rewards were equal (no signal to keep);
# a solve rate read on rewards that are not 0/1; 0/1 rewards whose solve rates fell outside the band;
# the selector's rule on this step's scores (anything else).
DROPPED_ALL_CAUSES = ("nonfinite_signals", "equal_rewards", "reward_scale", "band", "selector")


# Modules whose frames a warning skips to reach the user's line: this library (its adapters install as
# dataflex_callbacks.integrations), torch, and ray (`dataflex compare`'s executor runs runs in its workers); each
# host's framework is added by its registration (`dataflex_callbacks.host.register_host`, `HostDeclaration.packages`).
_LIBRARY_PACKAGES = {"dataflex_callbacks", "torch", "ray"}


def add_library_packages(packages: Iterable[str]) -> None:
    """Skip the frames of ``packages`` (top-level module names) in `user_stacklevel`; `register_host` calls it."""
    _LIBRARY_PACKAGES.update(packages)


def library_packages() -> frozenset[str]:
    """The top-level modules whose frames `user_stacklevel` skips: this library, torch, ray and each registered
    host's."""
    return frozenset(_LIBRARY_PACKAGES)


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that points a warning at the user's line, not at this library.

    Call it from the function that calls ``warnings.warn``: it counts the frames of
    `library_packages` above that function, so a warning raised inside ``trainer.train()`` names the
    user's ``trainer.train()`` line. When every frame is the library's (``dataflex run``), the
    outermost one is named.
    """
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None:
        module = frame.f_globals.get("__name__") or ""
        if module.split(".")[0] not in _LIBRARY_PACKAGES:
            return level
        frame, level = frame.f_back, level + 1
    return level


def check_argument(
    value: Any, types: type | tuple[type, ...], name: str, where: str, expected: str, fix: str = ""
) -> Any:
    """``value`` if it is an instance of ``types``, else an `ArgumentError` naming ``where``'s argument ``name``.

    ``expected`` says in words what the argument takes (``"an int step counter"``); ``fix``, when
    given, what to change. A bool is not taken where ``types`` holds ``int`` but not ``bool``.
    """
    types = types if isinstance(types, tuple) else (types,)
    is_bool = isinstance(value, bool) and bool not in types
    if isinstance(value, types) and not is_bool:
        return value
    shown = repr(value) if isinstance(value, (bool, int, float, str, type(None))) else f"a {type(value).__name__}"
    raise ArgumentError(f"{where}: argument {name!r} must be {expected}; got {shown}" + (f". {fix}" if fix else ""))


def check_step(step: Any, where: str) -> int:
    """``step`` as a plain int (numpy and 0-d torch integers accepted), else an `ArgumentError` naming ``where``."""
    value = plain_scalar(step)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    shown = repr(step) if isinstance(step, (bool, float, str, type(None))) else f"a {type(step).__name__}"
    raise ArgumentError(
        f"{where}: argument 'step' must be an int, the host's step counter (warm-ups and mixing "
        f"updates count it); got {shown}. Pass the trainer's integer step, e.g. trainer.state.global_step"
    )


def check_state(state: Any, keys: Iterable[str], what: str) -> Mapping:
    """``state`` if it is a mapping holding every key in ``keys``, else a `StateError` naming what is expected.

    Used by every ``load_state_dict`` so ``None``, a list or a truncated checkpoint fails with one
    line instead of an AttributeError/KeyError deep inside.
    """
    keys = list(keys)
    if not isinstance(state, Mapping):
        raise StateError(
            f"{what}.load_state_dict expects the dict returned by {what}.state_dict() "
            f"(keys: {', '.join(keys)}); got {type(state).__name__}"
        )
    missing = [k for k in keys if k not in state]
    if missing:
        raise StateError(
            f"{what}.load_state_dict: the state lacks key(s) {missing}; it must come from "
            f"{what}.state_dict() of this library version"
        )
    return state


class NoSignalStepWarning(UserWarning):
    """An asynchronous step took its bound of groups and the strategy kept none, so it trains on zero-signal groups
    masked out (advantage 0); shown once per adapter.

    Attributes:
        step: the step as the host logs it.
        cause: ``"nonfinite_rewards"`` (no completion got a finite reward), ``"equal_rewards"`` (every group's
            completions got one reward) or ``"selector"`` (the strategy's select part dropped every group).
        fix: what to change.
    """

    def __init__(self, message: str, step: int | None = None, cause: str | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.step, self.cause, self.fix = step, cause, fix

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.step, self.cause, self.fix)


class PilotEvidenceWarning(UserWarning):
    """A decision drawn from pilots of k completions, which are weak evidence of what a whole group would show.

    Two cases. A ``pre_select`` rule that learns from whole groups (``skip_predicted``) sits beside an
    ``allocation`` part, so it learns from the allocation's pilots instead, whose rewards agree far more often than
    a group's: its estimates of "no signal" run high for every state (on the testbed every state came to be skipped
    alike); shown when the strategy is built (the screen allocator's ``min_prior_signal`` skips before the pilot from
    a model of the pilot's size). And the screen allocator's ``evict`` on pilots of fewer than 8 completions, where
    an all-correct pilot is weak evidence of "solved"; shown when the group size is bound."""


class ZeroRewardWarning(UserWarning):
    """Every reward of a run's first steps was 0 or unscored (None/NaN), so GRPO's advantages were all 0 and
    nothing trained; shown once per run, naming the likely causes (the prompt format the model reads, the
    answer the reward compares with).

    Attributes:
        steps: the steps watched (`dataflex_callbacks.host.zero_rewards.DEFAULT_WATCH_STEPS` by default).
        completions: the completions they scored.
        unscored: those no reward function gave a number (None or NaN from every one).
    """

    def __init__(self, message: str, steps: int = 0, completions: int = 0, unscored: int = 0) -> None:
        super().__init__(message)
        self.steps, self.completions, self.unscored = steps, completions, unscored

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.steps, self.completions, self.unscored)


class ContextLengthError(InputError):
    """The longest prompt plus the completion length exceeds the model's positions (``max_position_embeddings``).

    Past them generation runs on positions the model never learned, or is cut; the message names both
    numbers and the fix (shorter prompts or completions, or a model with more positions).
    """
