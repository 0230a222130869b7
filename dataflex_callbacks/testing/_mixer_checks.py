"""The conformance checks of mixers: proportions from a `DomainTracker` fed random batches.

The checks are those the module docstring of `dataflex_callbacks.testing.conformance` lists; the last domain is
never observed, so a mixer meets NaN statistics.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping

import torch

from dataflex_callbacks.mixing.mixers import Mixer
from dataflex_callbacks.mixing.tracker import DomainTracker
from dataflex_callbacks.rollout.batch import RolloutBatch
from dataflex_callbacks.testing._checker import Checker, keeps_state
from dataflex_callbacks.testing._random_batches import batch_to, drop_policy_batch, random_batch


class MixerChecker(Checker):
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
        self.check_cuda(domains, batches, result)
        self.check_state(domains, tracker)

    def check_cuda(self, domains: list[str], batches: list[RolloutBatch], result: dict[str, float]) -> None:
        """The same proportions from a tracker fed CUDA batches (skipped, and said so, without CUDA)."""
        if self.device is None:
            self.skip("cuda", "CUDA is not available on this machine")
            return
        on_cuda = self.proportions(self.bound(domains), self.tracker(domains, batches, self.device))
        self.expect_dict("cuda", on_cuda, result, "a tracker fed CUDA batches against the CPU one")
        self.passed("cuda")

    def check_state(self, domains: list[str], tracker: DomainTracker) -> None:
        """A fresh mixer loading a used one's state gives its proportions (skipped for a stateless mixer)."""
        if not keeps_state(self.initial):
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
            values = dict(zip(domains, raw.tolist(), strict=True))
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

    def check_proportions(
        self, check: str, result: dict[str, float], domains: list[str], mixer: Mixer, where: str
    ) -> None:
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

    def expect_dict(self, check: str, got: dict[str, float], want: dict[str, float], what: str) -> None:
        for domain in want:
            if domain not in got or not math.isclose(float(got[domain]), want[domain], rel_tol=1e-6, abs_tol=1e-9):
                self.fail(
                    check,
                    f"{what}: domain {domain!r} gets {got.get(domain)!r}, expected {want[domain]:.9g} "
                    f"(all: {got} vs {want})",
                )
