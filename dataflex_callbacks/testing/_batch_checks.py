"""The conformance checks of components called on one batch: scorers, selectors and reweighters.

Each is called on three random batches (`trials`): 0/1 rewards with every entry weighted, real-valued rewards with
some rows dropped, and NaN/inf signals cleaned as ``nan_policy='drop'`` cleans them; the checks are those the
module docstring of `dataflex_callbacks.testing.conformance` lists.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from dataflex_callbacks.components.reweighters import Reweighter
from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.testing._checker import CUDA_TOLERANCE, FLOAT_TOLERANCE, Checker, item_text, keeps_state
from dataflex_callbacks.testing._random_batches import BATCH_FIELDS, batch_rows, batch_to, cleaned_signals, random_batch

SCOPES = ("row", "group", "batch")
GRANULARITIES = ("response", "token")


@dataclass
class _Trial:
    """One call's inputs: the batch, the scores (selectors, reweighters) and the weight mask (reweighters)."""

    label: str
    batch: RolloutBatch
    scores: torch.Tensor
    mask: torch.Tensor

    def rows(self, rows: torch.Tensor) -> _Trial:
        return _Trial(self.label, batch_rows(self.batch, rows), self.scores[rows], self.mask[rows])

    def to(self, device: str) -> _Trial:
        return _Trial(self.label, batch_to(self.batch, device), self.scores.to(device), self.mask.to(device))


def _valid_tokens(batch: RolloutBatch) -> torch.Tensor:
    """``(N, L)`` bool: the valid tokens of a random batch (each has a completion mask)."""
    mask = batch.valid_mask
    assert mask is not None, "the random batches carry a completion mask"
    return mask


def _group_ids(batch: RolloutBatch) -> torch.Tensor:
    """``(N,)`` the group ids of a random batch (each has them)."""
    assert batch.group_ids is not None, "the random batches carry group ids"
    return batch.group_ids


class BatchChecker(Checker):
    """The checks of scorers, selectors and reweighters: components called on one batch."""

    def run(self) -> None:
        self.check_declarations()
        trials = self.trials()
        if self.kind == "reweighter":
            self.check_raw_weights(trials)
        outputs = [self.check_outputs(trial) for trial in trials]
        self.passed("output contract")
        self.passed("non-finite inputs")
        for trial, output in zip(trials, outputs, strict=True):
            self.check_group_loop(trial, output)
        self.passed("group loop")
        if self.reference is None:
            self.skip("reference", "no reference= function given")
        else:
            for trial in trials:
                self.check_reference(trial, self.reference)
            self.passed("reference")
        self.check_cuda(trials, outputs)
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
            shape = (batch.n, _valid_tokens(batch).shape[1]) if self.granularity == "token" else (batch.n,)
            scores = torch.rand(shape, generator=gen)
            mask = keep.unsqueeze(1) & _valid_tokens(batch) if self.granularity == "token" else keep
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
            return output.masked_fill(~_valid_tokens(trial.batch).to(output.device), 0)
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
                    f"{where}: _raw returned {item_text(raw, at)} at {at} ({share} of the {total} "
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
                f"{where}: returned {item_text(covered, at)} at {at}; outputs must be finite once nan_policy "
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
            group_ids = _group_ids(trial.batch)
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

    def check_reference(self, trial: _Trial, reference: Callable[..., Any]) -> None:
        for rows in self.parts(trial.batch):
            part = trial.rows(rows)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = {
                    "scorer": (part.batch,),
                    "selector": (part.scores, part.batch),
                    "reweighter": (part.scores, part.batch, part.mask),
                }[self.kind]
                want = torch.as_tensor(reference(*args))
            got = self.comparable(self.call(self.fresh(), part), part)
            self.expect_close(
                "reference",
                got,
                self.comparable(want.to(got.device), part),
                f"{trial.label}: {_describe_rows(trial.batch, rows, self.unit)} against reference=",
                FLOAT_TOLERANCE,
            )

    def check_cuda(self, trials: list[_Trial], outputs: list[torch.Tensor]) -> None:
        """The same results on CUDA as on the CPU (skipped, and said so, without CUDA)."""
        if self.device is None:
            self.skip("cuda", "CUDA is not available on this machine")
            return
        for trial, output in zip(trials, outputs, strict=True):
            got = self.call(self.fresh(), trial.to(self.device))
            self.expect_close(
                "cuda",
                self.comparable(got.cpu(), trial),
                self.comparable(output, trial),
                f"{trial.label}: the CUDA result against the CPU one",
                CUDA_TOLERANCE,
            )
        self.passed("cuda")

    def check_state(self, trials: list[_Trial]) -> None:
        if not keeps_state(self.initial):
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
    return f"group_id {int(_group_ids(batch)[rows[0]])} (rows {rows.tolist()})"
