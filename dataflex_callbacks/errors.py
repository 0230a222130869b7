"""Exceptions raised by dataflex-callbacks, each naming the bad value and the fix, and the warning of a step that keeps nothing."""

from __future__ import annotations

from typing import Any, Iterable, Mapping


class DataFlexError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(DataFlexError, ValueError):
    """A strategy configuration is invalid: unknown name, bad parameter, missing signal."""


class ParamError(ConfigError):
    """A component parameter has a bad value (wrong type, out of range, given twice); names the parameter.

    Raised by a component's constructor (``TopKFraction(fraction=2)``) and, prefixed with the
    component, when a config builds it. Attributes: ``param``, the parameter's name.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param

    def __reduce__(self):
        return type(self), (str(self), self.param)


class BatchError(DataFlexError, ValueError):
    """A `RolloutBatch` (or its use) is inconsistent: wrong shape, dtype, device, missing field."""


class StateError(DataFlexError, ValueError):
    """A saved state cannot be loaded: not a state dict, missing keys, wrong shapes or types."""


class HostError(DataFlexError, RuntimeError):
    """The host trainer cannot run the strategy as set up: an unsupported version, or an adapter attached twice or not at all."""


class WrongHostError(HostError, TypeError):
    """An adapter was given a trainer it does not serve (a GRPO callback on an RLOO trainer, ...); names the right one."""


class InputError(DataFlexError, ValueError):
    """Data or job input is unusable: a file, a column, a task domain, a budget; names the value and the fix."""


class ComponentError(DataFlexError, ValueError):
    """A component (built-in or yours) returned values its contract forbids, at run time.

    Raised when a reweighter's weights or a mixer's proportions are negative or not finite; the
    message names the component, the first bad value and where it came from. Fix the component:
    `dataflex_callbacks.testing.check_component` finds such values before a run does.
    """


# A host-neutral concept a core message may name as part of a fix; each host adapter sets it its own
# way (TRL: ``selection_reward=``), so an adapter can read it from ``host_setting`` and name its own.
SELECTION_REWARD = "selection_reward"
SELECTION_REWARD_TEXT = "a selection reward (the reward the strategy selects on, set in the host adapter)"


class DroppedAllWarning(UserWarning):
    """A step kept nothing, so it trains nothing (metric ``dropped_all`` = 1); shown once per strategy.

    Attributes:
        step: the host's step counter at that step.
        strategy: the strategy's name.
        cause: why, one of `DROPPED_ALL_CAUSES`.
        fix: the setting or code change that changes it, or None where none can (e.g. a step whose
            groups all had equal rewards under a preset that exists to drop such groups).
        host_setting: the host-neutral concept the fix names (`SELECTION_REWARD`), or None; an
            adapter maps it to its own setting's name.
    """

    def __init__(self, message: str, step: int | None = None, strategy: str | None = None, cause: str | None = None,
                 fix: str | None = None, host_setting: str | None = None):
        super().__init__(message)
        self.step, self.strategy, self.cause, self.fix = step, strategy, cause, fix
        self.host_setting = host_setting

    def __reduce__(self):
        return type(self), (str(self), self.step, self.strategy, self.cause, self.fix, self.host_setting)


class RewardScaleWarning(UserWarning):
    """A solve rate was read on rewards that are not all 0 or 1 with the default threshold; shown once per scorer.

    Attributes:
        host_setting: `SELECTION_REWARD`, the concept the fix names (select on a 0/1 reward); an
            adapter maps it to its own setting's name.
    """

    host_setting = SELECTION_REWARD


# Causes a `DroppedAllWarning` names: every row had a NaN/inf signal under nan_policy='drop'; the
# selection scorer returned NaN/inf scores; every group's rewards were equal (no signal to keep);
# a solve rate read on rewards that are not 0/1; 0/1 rewards whose solve rates fell outside the band;
# the selector's rule on this step's scores (anything else).
DROPPED_ALL_CAUSES = ("nonfinite_signals", "nonfinite_scores", "equal_rewards", "reward_scale", "band", "selector")


def check_state(state: Any, keys: Iterable[str], what: str) -> Mapping:
    """``state`` if it is a mapping holding every key in ``keys``, else a `StateError` naming what is expected.

    Used by every ``load_state_dict`` so ``None``, a list or a truncated checkpoint fails with one
    line instead of an AttributeError/KeyError deep inside.
    """
    keys = list(keys)
    if not isinstance(state, Mapping):
        raise StateError(f"{what}.load_state_dict expects the dict returned by {what}.state_dict() "
                         f"(keys: {', '.join(keys)}); got {type(state).__name__}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise StateError(f"{what}.load_state_dict: the state lacks key(s) {missing}; it must come from "
                         f"{what}.state_dict() of this library version")
    return state
