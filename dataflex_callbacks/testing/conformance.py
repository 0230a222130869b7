"""Conformance checks for strategy components: run your scorer, selector, reweighter, mixer or allocator through
`check_component`.

``check_component`` feeds a component random batches (unequal, interleaved groups, variable
lengths, NaN and infinite signals cleaned as a strategy's ``nan_policy`` cleans them) and
checks the contract its base class documents:

* ``declarations``: it subclasses its kind's base class and declares valid ``granularity``,
  ``scope`` and ``requires``;
* ``raw values``: a reweighter's ``_raw`` weights (inside the mask) and a mixer's
  ``raw_proportions`` are finite and >= 0 (proportions not all 0): the normalisation that follows
  only rescales them and cannot repair a sign (proportions of -1 would read as 1/K each);
* ``output contract``: shape, dtype and device of the result, inputs left unchanged, weights
  >= 0, 0 outside the mask and normalised as ``normalize`` says, proportions over exactly the
  domains, above the floor, summing to 1;
* ``non-finite inputs``: NaN/inf signals, once cleaned, never give NaN/inf scores, weights or
  proportions;
* ``group loop``: with ``scope`` ``"row"`` or ``"group"``, the vectorised call on the whole batch
  equals the component run on one group (``"row"``: one row) at a time (a reweighter's weights
  are compared as shares of their group: normalisation rescales them); with ``"batch"``,
  shuffling the rows shuffles the result; a mixer gives each domain the same proportion
  whatever the order of the domain list;
* ``reference``: equality with ``reference``, a plain function the user writes per group;
* ``cuda``: the same result on CUDA as on the CPU (skipped, and said so, without CUDA);
* ``state_dict``: a second instance loading the first's state gives the same results (skipped
  for stateless components).

A rollout allocator (kind ``allocation``) is driven through a host's rounds instead (`_allocator_checks`: its
answers' contract, its counts of generated completions, per prompt as in the batch, CUDA, state).

A failure raises `ConformanceError` (an ``AssertionError``) naming the check and the component.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.testing._allocator_checks import AllocatorChecks
from dataflex_callbacks.testing._random_batches import (
    BATCH_FIELDS,
    batch_rows,
    batch_to,
    cleaned_signals,
    drop_policy_batch,
    random_batch,
)
from dataflex_callbacks.registry import KINDS, Component, component_class
from dataflex_callbacks.components.allocation import Allocator
from dataflex_callbacks.components.reweighters import Reweighter
from dataflex_callbacks.components.scorers import Scorer
from dataflex_callbacks.components.selectors import Selector
from dataflex_callbacks.mixing.tracker import DomainTracker

__all__ = [
    "ConformanceError",
    "ConformanceReport",
    "check_component",
    "cuda_device",
    "random_batch",
    "batch_rows",
    "batch_to",
    "cleaned_signals",
    "drop_policy_batch",
]

BASES = {"scorer": Scorer, "selector": Selector, "reweighter": Reweighter, "mixer": Mixer, "allocation": Allocator}
SCOPES = ("row", "group", "batch")
GRANULARITIES = ("response", "token")
FLOAT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
CUDA_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def cuda_device() -> str | None:
    """The device the ``cuda`` check compares against the CPU: ``"cuda"``, or None without CUDA."""
    return "cuda" if torch.cuda.is_available() else None


class ConformanceError(AssertionError):
    """A component broke its kind's contract; the message names the check, the component and what differed."""


@dataclass
class ConformanceReport:
    """What `check_component` ran: the checks passed and the ones skipped, with the reason."""

    component: str
    kind: str
    passed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{self.kind} {self.component!r}: passed {', '.join(self.passed)}"]
        lines += [f"  skipped {check}: {reason}" for check, reason in self.skipped.items()]
        return "\n".join(lines)


def check_component(
    component: Any,
    kind: str | None = None,
    params: Mapping[str, Any] | None = None,
    reference: Callable | None = None,
    *,
    seed: int = 0,
    domains: Sequence[str] = ("math", "code", "chat"),
) -> ConformanceReport:
    """Run a component through every conformance check of its kind; raise `ConformanceError` on the first failure.

    Args:
        component: a component class, an instance, or a registered name (then ``kind`` is needed).
        kind: ``scorer``, ``selector``, ``reweighter``, ``mixer`` or ``allocation``; inferred from the base class.
        params: constructor parameters when ``component`` is a class or a name.
        reference: a plain per-group function, called like the component on each part the group
            loop runs alone (a group; a row for a row-scope scorer or selector; the whole batch for
            ``scope="batch"``) and compared with the component's result there:
            ``reference(batch) -> scores`` for a scorer, ``reference(scores, batch) -> keep`` for a
            selector, ``reference(scores, batch, mask) -> weights`` for a reweighter and
            ``reference(tracker) -> {domain: p}`` for a mixer; none for an allocator.
        seed: seeds the random batches.
        domains: the domains a mixer is bound to when it has none.

    Returns:
        A `ConformanceReport` of the checks passed and skipped (CUDA without a GPU, state for a
        stateless component).
    """
    kind, initial = _build(component, kind, dict(params or {}))
    report = ConformanceReport(component=str(getattr(initial, "name", type(initial).__name__)), kind=kind)
    if kind == "allocation":
        if reference is not None:
            raise ConfigError("check_component has no reference= check for an allocator; drop reference=")
        shared = _Checker(kind, initial, report, None, seed, list(domains))
        AllocatorChecks(initial, shared.fail, shared.passed, shared.skip, seed, cuda_device()).run()
        return report
    checker = _MixerChecker if kind == "mixer" else _BatchChecker
    checker(kind, initial, report, reference, seed, list(domains)).run()
    return report


def _build(component: Any, kind: str | None, params: dict) -> tuple[str, Any]:
    """The component's kind and an instance of it in its initial state."""
    if isinstance(component, str):
        if kind is None:
            raise ConfigError(f"check_component({component!r}) names a component: pass kind= too")
        component = component_class(kind, component)
    cls = component if isinstance(component, type) else type(component)
    if kind is None:
        kind = next((k for k, base in BASES.items() if issubclass(cls, base)), None)
        if kind is None:
            raise ConformanceError(
                f"{cls.__name__} failed the 'declarations' check: it subclasses none of "
                f"{', '.join(b.__name__ for b in BASES.values())}; subclass the base of its kind"
            )
    if kind not in BASES:
        raise ConfigError(
            f"check_component checks kinds {', '.join(BASES)}; got {kind!r} (known kinds: {', '.join(KINDS)})"
        )
    if not issubclass(cls, BASES[kind]):
        raise ConformanceError(
            f"{kind} {cls.__name__} failed the 'declarations' check: it does not subclass "
            f"{BASES[kind].__name__}; write 'class {cls.__name__}(dataflex_callbacks.{BASES[kind].__name__})'"
        )
    if isinstance(component, type):
        return kind, component(**params)
    if params:
        raise ConfigError(
            "check_component got an instance and params=; pass the class with params, or the instance alone"
        )
    return kind, copy.deepcopy(component)


class _Checker:
    """Shared parts of the checks: failure messages, fresh copies of the component, the report."""

    def __init__(
        self,
        kind: str,
        initial: Any,
        report: ConformanceReport,
        reference: Callable | None,
        seed: int,
        domains: list[str],
    ):
        self.kind, self.initial, self.report, self.reference = kind, initial, report, reference
        self.seed, self.domains = seed, domains

    def fail(self, check: str, detail: str) -> None:
        raise ConformanceError(f"{self.kind} {self.report.component!r} failed the {check!r} check: {detail}")

    def fresh(self) -> Any:
        """The component in its initial state: every call gets its own copy, so calls never share state."""
        return copy.deepcopy(self.initial)

    def passed(self, check: str) -> None:
        self.report.passed.append(check)

    def skip(self, check: str, reason: str) -> None:
        self.report.skipped[check] = reason

    def expect_close(self, check: str, got: torch.Tensor, want: torch.Tensor, what: str, tolerance: dict) -> None:
        if got.shape != want.shape:
            self.fail(check, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        if got.dtype == torch.bool or want.dtype == torch.bool:
            differ = got != want
        else:
            got, want = got.to(torch.float64), want.to(torch.float64)
            limit = tolerance["atol"] + tolerance["rtol"] * want.abs()
            differ = ~((got - want).abs() <= limit) & ~(got == want)  # equal infinities agree
        if bool(differ.any()):
            at = tuple(int(i) for i in torch.nonzero(differ)[0])
            self.fail(
                check,
                f"{what}: differs at {at} ({_item(got, at)} vs {_item(want, at)}; "
                f"{int(differ.sum())} of {differ.numel()} entries differ)",
            )


def _item(values: torch.Tensor, at: tuple[int, ...]) -> str:
    value = values[at]
    return str(bool(value)) if value.dtype == torch.bool else f"{float(value):.6g}"


@dataclass
class _Trial:
    """One call's inputs: the batch, the scores (selectors, reweighters) and the weight mask (reweighters)."""

    label: str
    batch: RolloutBatch
    scores: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def rows(self, rows: torch.Tensor) -> "_Trial":
        return _Trial(
            self.label,
            batch_rows(self.batch, rows),
            None if self.scores is None else self.scores[rows],
            None if self.mask is None else self.mask[rows],
        )

    def to(self, device: str) -> "_Trial":
        return _Trial(
            self.label,
            batch_to(self.batch, device),
            None if self.scores is None else self.scores.to(device),
            None if self.mask is None else self.mask.to(device),
        )


class _BatchChecker(_Checker):
    """The checks of scorers, selectors and reweighters: components called on one batch."""

    def run(self) -> None:
        self.check_declarations()
        trials = self.trials()
        if self.kind == "reweighter":
            self.check_raw_weights(trials)
        outputs = [self.check_outputs(trial) for trial in trials]
        self.passed("output contract")
        self.passed("non-finite inputs")
        for trial, output in zip(trials, outputs):
            self.check_group_loop(trial, output)
        self.passed("group loop")
        if self.reference is None:
            self.skip("reference", "no reference= function given")
        else:
            for trial in trials:
                self.check_reference(trial)
            self.passed("reference")
        device = cuda_device()
        if device is not None:
            for trial, output in zip(trials, outputs):
                got = self.call(self.fresh(), trial.to(device))
                self.expect_close(
                    "cuda",
                    self.comparable(got.cpu(), trial),
                    self.comparable(output, trial),
                    f"{trial.label}: the CUDA result against the CPU one",
                    CUDA_TOLERANCE,
                )
            self.passed("cuda")
        else:
            self.skip("cuda", "CUDA is not available on this machine")
        self.check_state(trials)

    # ------------------------------------------------------------ inputs

    @property
    def granularity(self) -> str:
        return getattr(self.initial, "granularity", "response")

    def trials(self) -> list[_Trial]:
        """Three calls: 0/1 rewards with every entry weighted; other rewards with some rows dropped; NaN/inf signals."""
        trials = []
        for index, (binary, token_advantages, nonfinite) in enumerate(
            ((True, False, False), (False, True, False), (True, True, True))
        ):
            seed = self.seed * 3 + index
            batch = random_batch(seed, binary=binary, token_advantages=token_advantages, nonfinite=nonfinite)
            label = "0/1 rewards" if binary and not nonfinite else "real-valued rewards"
            keep = torch.ones(batch.n, dtype=torch.bool)
            if nonfinite:
                batch, bad = cleaned_signals(batch)
                keep, label = ~bad, "NaN/inf signals cleaned by nan_policy='drop'"
            elif not binary:
                keep = torch.rand(batch.n, generator=torch.Generator().manual_seed(seed)) > 0.2
            gen = torch.Generator().manual_seed(seed + 1000)
            shape = (batch.n, batch.num_tokens) if self.granularity == "token" else (batch.n,)
            scores = torch.rand(shape, generator=gen)
            mask = keep.unsqueeze(1) & batch.valid_mask if self.granularity == "token" else keep
            trials.append(_Trial(f"batch {index + 1} ({label})", batch, scores, mask))
        return trials

    def call(self, component: Any, trial: _Trial) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. a scorer's one-time advice about the reward scale
            if self.kind == "scorer":
                return component.score(trial.batch)
            if self.kind == "selector":
                return component.select(trial.scores, trial.batch)
            return component.weights(trial.scores, trial.batch, mask=trial.mask)

    def comparable(self, output: torch.Tensor, trial: _Trial) -> torch.Tensor:
        """``output`` with the entries no contract covers set to 0 (token entries outside the valid mask)."""
        if output.dim() == 2 and self.kind != "reweighter":
            return output.masked_fill(~trial.batch.valid_mask.to(output.device), 0)
        return output

    # ------------------------------------------------------------ checks

    def check_declarations(self) -> None:
        component = self.initial
        scope = getattr(component, "scope", None)
        if scope not in SCOPES:
            self.fail("declarations", f"scope={scope!r}; declare one of {', '.join(SCOPES)} as a class attribute")
        if self.granularity not in GRANULARITIES:
            self.fail("declarations", f"granularity={self.granularity!r}; declare 'response' or 'token'")
        requires = getattr(component, "requires", ())
        unknown = sorted(set(requires) - set(BATCH_FIELDS))
        if unknown:
            self.fail(
                "declarations",
                f"requires names {unknown}, which are not RolloutBatch fields ({', '.join(BATCH_FIELDS)})",
            )
        if not isinstance(getattr(component, "needs_groups", False), bool):
            self.fail("declarations", "needs_groups must be True or False")
        self.passed("declarations")

    def check_raw_weights(self, trials: list[_Trial]) -> None:
        """A reweighter's ``_raw`` values inside the mask are finite and >= 0 (before normalisation can hide them)."""
        if getattr(type(self.initial), "_raw", None) is Reweighter._raw:
            self.skip(
                "raw values",
                "the reweighter replaces weights() and has no _raw (the output contract checks its weights)",
            )
            return
        for trial in trials:
            component = self.fresh()
            scores = trial.scores.to(torch.float32, copy=True)
            mask = component._entries(scores, trial.batch, trial.mask)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = torch.as_tensor(component._raw(scores, mask))
            where = f"{trial.label}, N={trial.batch.n}, L={trial.batch.num_tokens}"
            if raw.shape != scores.shape:
                self.fail(
                    "raw values",
                    f"{where}: _raw returned shape {tuple(raw.shape)}; raw weights are shaped like "
                    f"the scores, {tuple(scores.shape)}",
                )
            inside = torch.ones_like(raw, dtype=torch.bool) if mask is None else mask.to(raw.device)
            bad = inside & (~torch.isfinite(raw) | (raw < 0))
            if bool(bad.any()):
                at = tuple(int(i) for i in torch.nonzero(bad)[0])
                count, total = int(bad.sum()), int(inside.sum())
                share = "all" if count == total else f"{count}"
                self.fail(
                    "raw values",
                    f"{where}: _raw returned {_item(raw, at)} at {at} ({share} of the {total} "
                    "entries inside the mask are negative or not finite); raw weights must be "
                    "finite and >= 0: normalize= only rescales them and cannot repair a sign, and "
                    "a strategy refuses negative loss weights at run time. Make the rule "
                    "non-negative, e.g. exp(score) or score - score.min()",
                )
        self.passed("raw values")

    def check_outputs(self, trial: _Trial) -> torch.Tensor:
        inputs = {name: getattr(trial.batch, name) for name in BATCH_FIELDS}
        inputs.update(scores=trial.scores, mask=trial.mask)
        before = {name: value.clone() for name, value in inputs.items() if isinstance(value, torch.Tensor)}
        output = self.call(self.fresh(), trial)
        changed = [name for name, value in before.items() if not torch.equal(value, inputs[name])]
        if changed:
            self.fail(
                "output contract",
                f"{trial.label}: the call changed its input(s) {', '.join(changed)} in "
                "place; other parts of the strategy read them afterwards, so work on a copy",
            )
        check = "non-finite inputs" if "NaN" in trial.label else "output contract"
        batch = trial.batch
        n, length = batch.n, batch.num_tokens
        want = (n, length) if self.granularity == "token" else (n,)
        shape_name = "(N, L)" if self.granularity == "token" else "(N,)"
        where = f"{trial.label}, N={n}, L={length}"
        if not isinstance(output, torch.Tensor):
            self.fail("output contract", f"{where}: returned {type(output).__name__}, not a torch.Tensor")
        if tuple(output.shape) != want:
            self.fail(
                "output contract",
                f"{where}: returned shape {tuple(output.shape)}; a {self.granularity}-level "
                f"{self.kind} returns {shape_name} = {want}",
            )
        if output.device != batch.device:
            self.fail("output contract", f"{where}: returned a tensor on {output.device} for a batch on {batch.device}")
        if self.kind == "selector":
            if output.dtype != torch.bool:
                self.fail("output contract", f"{where}: returned dtype {output.dtype}; a keep mask is torch.bool")
            return output
        if not output.is_floating_point():
            self.fail("output contract", f"{where}: returned dtype {output.dtype}; expected a float tensor")
        covered = self.comparable(output, trial)
        if not bool(torch.isfinite(covered).all()):
            at = tuple(int(i) for i in torch.nonzero(~torch.isfinite(covered))[0])
            self.fail(
                check,
                f"{where}: returned {_item(covered, at)} at {at}; outputs must be finite once nan_policy "
                "has cleaned the signals (non-finite entries set to 0, -inf log-probs kept)",
            )
        if self.kind == "reweighter":
            self.check_weights(check, where, output, trial)
        return output

    def check_weights(self, check: str, where: str, weights: torch.Tensor, trial: _Trial) -> None:
        mask = trial.mask
        if bool((weights < 0).any()):
            self.fail(check, f"{where}: returned a negative weight ({float(weights.min()):.6g}); weights are >= 0")
        if bool((weights[~mask] != 0).any()):
            self.fail(check, f"{where}: returned a non-zero weight outside the mask; entries outside it get weight 0")
        normalize = getattr(self.initial, "normalize", "none")
        cells = [mask]
        if normalize == "per_group_mean_one":
            group_ids = trial.batch.group_ids
            rows = mask if mask.dim() == 1 else mask.any(dim=1)
            cells = [mask & (group_ids == g).view(-1, *([1] * (mask.dim() - 1))) for g in torch.unique(group_ids[rows])]
        elif normalize != "mean_one":
            return
        for cell in cells:
            count = int(cell.sum())
            if count and not math.isclose(float(weights[cell].sum()) / count, 1.0, rel_tol=1e-4):
                self.fail(
                    check,
                    f"{where}: normalize={normalize!r} but the weights average "
                    f"{float(weights[cell].sum()) / count:.6g} over {count} masked entries instead of 1",
                )

    @property
    def unit(self) -> str:
        """What the rule is run on alone: each ``row``, each ``group`` or the whole ``batch``."""
        if self.initial.scope == "row" and self.kind != "reweighter":
            return "row"
        # Reweighters compare weights within a group up to its normalisation, so single rows would prove nothing.
        return "batch" if self.initial.scope == "batch" else "group"

    def parts(self, batch: RolloutBatch) -> list[torch.Tensor]:
        """The row sets of `unit`."""
        if self.unit == "row":
            return [torch.tensor([i]) for i in range(batch.n)]
        if self.unit == "batch":
            return [torch.arange(batch.n)]
        return [torch.nonzero(batch.group_ids == g).flatten() for g in torch.unique(batch.group_ids)]

    def check_group_loop(self, trial: _Trial, output: torch.Tensor) -> None:
        scope = self.initial.scope
        if scope == "batch":
            perm = torch.randperm(trial.batch.n, generator=torch.Generator().manual_seed(self.seed + 7))
            shuffled = self.call(self.fresh(), trial.rows(perm))
            self.expect_close(
                "group loop",
                self.comparable(shuffled, trial.rows(perm)),
                self.comparable(output, trial)[perm],
                f"{trial.label}: scope='batch', so shuffling the rows must shuffle the result",
                FLOAT_TOLERANCE,
            )
            return
        unit = self.unit
        full = self.comparable(output, trial)
        for rows in self.parts(trial.batch):
            part = trial.rows(rows)
            alone = self.comparable(self.call(self.fresh(), part), part)
            what = (
                f"{trial.label}: scope={scope!r}, so {_describe_rows(trial.batch, rows, unit)} run alone must "
                f"give what it gets in the whole batch (alone vs in the batch); declare scope='batch' if the rule "
                f"reads other {unit}s"
            )
            if self.kind == "reweighter":
                self.expect_proportional(alone, full[rows], part, what)
            else:
                self.expect_close("group loop", alone, full[rows], what, FLOAT_TOLERANCE)

    def expect_proportional(self, alone: torch.Tensor, full: torch.Tensor, part: _Trial, what: str) -> None:
        """Weights of one group run alone equal its weights in the batch up to one positive scale
        (the normalisation)."""
        total_alone, total_full = float(alone.sum()), float(full.sum())
        if total_full == 0 or total_alone == 0:
            # All zero raw weights fall back to uniform weights over the mask, in either call.
            uniform = part.mask.to(alone.dtype)
            if not all(bool((w == 0).all()) or torch.equal(w, uniform) for w in (alone, full)):
                self.fail("group loop", f"{what}: one call gave zero weights, the other non-uniform ones")
            return
        self.expect_close(
            "group loop",
            alone / total_alone,
            full / total_full,
            what + " (weights as shares of the group)",
            FLOAT_TOLERANCE,
        )

    def check_reference(self, trial: _Trial) -> None:
        for rows in self.parts(trial.batch):
            part = trial.rows(rows)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = {
                    "scorer": (part.batch,),
                    "selector": (part.scores, part.batch),
                    "reweighter": (part.scores, part.batch, part.mask),
                }[self.kind]
                want = torch.as_tensor(self.reference(*args))
            got = self.comparable(self.call(self.fresh(), part), part)
            self.expect_close(
                "reference",
                got,
                self.comparable(want.to(got.device), part),
                f"{trial.label}: {_describe_rows(trial.batch, rows, self.unit)} against reference=",
                FLOAT_TOLERANCE,
            )

    def check_state(self, trials: list[_Trial]) -> None:
        if not _keeps_state(self.initial):
            self.skip("state_dict", "the component keeps no state (the base class's state_dict)")
            return
        first = self.fresh()
        for trial in trials[:2]:
            self.call(first, trial)
        untouched = copy.deepcopy(first)
        state = first.state_dict()
        second = self.fresh()
        second.load_state_dict(copy.deepcopy(state))
        for trial in trials[2:]:
            want = self.comparable(self.call(untouched, trial), trial)
            self.expect_close(
                "state_dict",
                self.comparable(self.call(first, trial), trial),
                want,
                f"{trial.label}: the component after state_dict() against before (state_dict must not change it)",
                FLOAT_TOLERANCE,
            )
            self.expect_close(
                "state_dict",
                self.comparable(self.call(second, trial), trial),
                want,
                f"{trial.label}: a fresh instance after load_state_dict against the saved one",
                FLOAT_TOLERANCE,
            )
        self.passed("state_dict")


def _describe_rows(batch: RolloutBatch, rows: torch.Tensor, unit: str) -> str:
    if unit == "row":
        return f"row {int(rows[0])}"
    if unit == "batch":
        return "the whole batch"
    return f"group_id {int(batch.group_ids[rows[0]])} (rows {rows.tolist()})"


class _MixerChecker(_Checker):
    """The checks of mixers: proportions from a `DomainTracker` fed random batches."""

    def run(self) -> None:
        self.check_declarations()
        domains = self.initial.domains or self.domains
        observed = domains[:-1] if len(domains) > 1 else domains  # the last domain stays unobserved: NaN statistics
        batches = [
            random_batch(self.seed * 3 + i, domains=observed, binary=i != 1, token_advantages=i == 1, nonfinite=i == 2)
            for i in range(3)
        ]
        batches = [drop_policy_batch(batch) for batch in batches]

        mixer = self.bound(domains)
        tracker = self.tracker(domains, batches, "cpu")
        self.check_raw_proportions(
            domains,
            [
                (DomainTracker(domains), "a tracker with no observation"),
                (tracker, f"a tracker fed NaN/inf rewards, with {domains[-1]!r} never observed"),
            ],
        )
        empty = self.proportions(mixer, DomainTracker(domains))
        self.check_proportions("output contract", empty, domains, mixer, "a tracker with no observation")
        result = self.proportions(mixer, tracker)
        self.check_proportions(
            "non-finite inputs",
            result,
            domains,
            mixer,
            f"a tracker fed NaN/inf rewards, with {domains[-1]!r} never observed",
        )
        self.passed("output contract")
        self.passed("non-finite inputs")

        relabelled = list(reversed(domains))
        other = self.proportions(self.bound(relabelled), self.tracker(relabelled, batches, "cpu"))
        self.expect_dict(
            "group loop",
            other,
            result,
            "the domains bound in reverse order (a domain's proportion must follow its statistics, not its position)",
        )
        self.passed("group loop")
        if self.reference is None:
            self.skip("reference", "no reference= function given")
        else:
            self.expect_dict(
                "reference", {d: float(p) for d, p in dict(self.reference(tracker)).items()}, result, "reference="
            )
            self.passed("reference")
        device = cuda_device()
        if device is not None:
            on_cuda = self.proportions(self.bound(domains), self.tracker(domains, batches, device))
            self.expect_dict("cuda", on_cuda, result, "a tracker fed CUDA batches against the CPU one")
            self.passed("cuda")
        else:
            self.skip("cuda", "CUDA is not available on this machine")
        if not _keeps_state(self.initial):
            self.skip("state_dict", "the mixer keeps no state of its own (its mix part checkpoints the tracker)")
            return
        first = self.bound(domains)
        for _ in range(2):
            self.proportions(first, tracker)
        second = self.bound(domains)
        second.load_state_dict(copy.deepcopy(first.state_dict()))
        self.expect_dict(
            "state_dict",
            self.proportions(second, tracker),
            self.proportions(first, tracker),
            "a fresh mixer after load_state_dict against the saved one",
        )
        self.passed("state_dict")

    def check_declarations(self) -> None:
        floor = getattr(self.initial, "floor", None)
        if not isinstance(floor, (int, float)) or not 0 <= floor < 1:
            self.fail("declarations", f"floor={floor!r}; call Mixer.__init__(domains, floor) from __init__")
        self.passed("declarations")

    def check_raw_proportions(self, domains: list[str], trackers: list[tuple[DomainTracker, str]]) -> None:
        """``raw_proportions`` is ``(K,)``, finite, >= 0 and not all 0 (normalising would hide a sign)."""
        if getattr(type(self.initial), "raw_proportions", None) is Mixer.raw_proportions:
            self.skip(
                "raw values",
                "the mixer replaces proportions() and has no raw_proportions (the output contract "
                "checks its proportions)",
            )
            return
        for tracker, where in trackers:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = torch.as_tensor(self.bound(domains).raw_proportions(tracker), dtype=torch.float64)
            if raw.shape != (len(domains),):
                self.fail(
                    "raw values",
                    f"{where}: raw_proportions returned shape {tuple(raw.shape)}; expected one value "
                    f"per domain, ({len(domains)},)",
                )
            values = dict(zip(domains, raw.tolist()))
            bad = {d: v for d, v in values.items() if not (math.isfinite(v) and v >= 0)}
            if bad or not sum(values.values()) > 0:
                what = f"{bad} are negative or not finite" if bad else "are all 0"
                self.fail(
                    "raw values",
                    f"{where}: raw_proportions returned {values}: {what}; raw proportions must be "
                    "finite, >= 0 and not all 0, since they are only normalised and floored "
                    "(all -1 would silently become 1/K each, mixed signs negative proportions)",
                )
        self.passed("raw values")

    def bound(self, domains: list[str]) -> Mixer:
        mixer = self.fresh()
        mixer.bind(domains)
        return mixer

    @staticmethod
    def tracker(domains: list[str], batches: list[RolloutBatch], device: str) -> DomainTracker:
        tracker = DomainTracker(domains, window=4)
        for step, batch in enumerate(batches):
            tracker.update(batch_to(batch, device), step=step, sync=False)
        return tracker

    def proportions(self, mixer: Mixer, tracker: DomainTracker) -> dict[str, float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = mixer.proportions(tracker)
        if not isinstance(result, Mapping):
            self.fail("output contract", f"proportions() returned {type(result).__name__}; expected {{domain: p}}")
        return dict(result)

    def check_proportions(self, check: str, result: dict, domains: list[str], mixer: Mixer, where: str) -> None:
        if sorted(result) != sorted(domains):
            self.fail(
                "output contract", f"{where}: proportions name {sorted(result)}, expected exactly {sorted(domains)}"
            )
        values = {d: float(p) for d, p in result.items()}
        bad = {d: p for d, p in values.items() if not math.isfinite(p)}
        if bad:
            self.fail(
                check,
                f"{where}: proportions {bad} are not finite; raw_proportions must be finite, >= 0, not all "
                "0 (fill_unobserved handles domains never observed)",
            )
        low = {d: p for d, p in values.items() if p < mixer.floor - 1e-9}
        if low:
            self.fail("output contract", f"{where}: proportions {low} are below the floor {mixer.floor}")
        if not math.isclose(sum(values.values()), 1.0, rel_tol=1e-6):
            self.fail("output contract", f"{where}: proportions sum to {sum(values.values()):.9g}, not 1")

    def expect_dict(self, check: str, got: dict, want: dict, what: str) -> None:
        for domain in want:
            if domain not in got or not math.isclose(float(got[domain]), want[domain], rel_tol=1e-6, abs_tol=1e-9):
                self.fail(
                    check,
                    f"{what}: domain {domain!r} gets {got.get(domain)!r}, expected {want[domain]:.9g} "
                    f"(all: {got} vs {want})",
                )


def _keeps_state(component: Any) -> bool:
    """Whether ``component`` overrides `Component.state_dict` (the base class's returns ``{}``: no state)."""
    return type(component).state_dict is not Component.state_dict
