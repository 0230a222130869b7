"""Pre-rollout selection: skip prompts predicted to give no learning signal, before generating.

A group whose rewards all agree (all correct or all wrong) has zero advantage in GRPO and
contributes no gradient, yet its generation was paid for. Prompts that gave such groups tend to
keep giving them (GRESO, "Act Only When It Pays", arXiv 2506.02177). `SkipZeroVarianceFilter` keeps a
`PromptHistory` and lets the sampler skip a prompt with no-signal streak ``z`` with
probability ``1 - max(min_keep, explore ** z)``:

- the longer the streak, the likelier the skip;
- ``explore`` adapts after every batch, in proportion to the miss, so the share of no-signal
  groups among generated groups tracks ``target_share`` (too many: explore less);
- ``min_keep`` is the floor chance of re-checking any prompt, so one that became learnable
  comes back.

Two additions to GRESO's rule, both on by default:

- ``domain_prior``: a prompt not seen yet is predicted from its domain. If a share ``q`` of the
  domain's recent groups gave no signal, the prompt is kept with ``1 - q * (1 - explore)`` (the
  keep probability of a prompt that has a streak of one with probability ``q``). Within one pass
  over a large dataset few prompts come back, so without it the rule has nothing to act on.
- ``noise_check``: a group in which identical completions got different rewards counts as giving
  no signal: a verifiable reward is a function of the answer, so its reward is noise there
  (needs ``RolloutBatch.completion_ids``, which the TRL adapter provides).

`SkipPredictedFilter` (``skip_predicted``) learns the skip rule from the run instead: per
domain and per prompt state (streak, solved or failed, never seen) it estimates how likely the
next group is to be solved or to give no signal, and skips confidently predicted states only. It
is the filter of the ``skip`` preset; ``skip_zero_variance`` is GRESO's rule as published.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from dataflex_callbacks.components.history import PromptHistory, no_signal_flags
from dataflex_callbacks.config.params import check_bool, check_number
from dataflex_callbacks.errors import user_stacklevel
from dataflex_callbacks.registry import Component, register, register_base
from dataflex_callbacks.rollout.batch import NO_DOMAIN, RolloutBatch
from dataflex_callbacks.rollout.prompt_keys import hashable_key

SILENT_OBSERVATIONS = 8
"""Batches observed in a row with prompts or states to skip and no prompt skipped
before the filter looks for a cause."""

DRAWN_KEYS_KEPT = 4096  # prompt keys the sampler drew that the filter remembers while it looks for a cause

SAMPLER_FIX = (
    "the filter acts only through the prompt sampler built with this strategy: TRL installs it, Lightning "
    "needs self.dataflex.sampler(...) in train_dataloader(), a loop of your own "
    "DomainMixingSampler(dataset, strategy=strategy)"
)


@register_base("pre_select")
class PreSelectFilter(Component):
    """Base class of pre-rollout filters: subclass it and implement ``keep_probability`` and ``observe``.

    A filter chooses, before generation, which drawn prompts to skip. The prompt sampler (a
    `DomainMixingSampler` built with the strategy) asks it ``keep_probability(keys, labels)`` about
    its candidate prompts and reports what it generated with ``record_draws(accepted, skipped)``;
    the strategy shows it each step's rollouts with ``observe(batch, step, sync)`` and logs the
    metrics that returns (``metrics()`` alone when a `SignalGroupBuffer` showed it the rollouts
    already). A host sets ``num_generations``, the completions a skipped prompt would have cost (its
    ``pre_select/completions_redirected`` metric: they are generated for the prompts that replace it).

    It declares ``requires``, the `RolloutBatch` fields ``observe`` reads, checked once, when the
    strategy is built. ``state_dict`` and ``load_state_dict`` are public no-ops, right for a filter
    without state; a filter that learns across steps overrides both, so a resumed run skips
    exactly as the saved one would.
    """

    name = "pre_select"
    requires: tuple[str, ...] = ("rewards", "group_ids", "prompt_keys")

    def __init__(self) -> None:
        self.skipped = 0  # prompts skipped so far
        self.drawn = 0  # prompts the sampler generated
        self.num_generations = 1  # set by the sampler: completions a skipped prompt would have cost

    def keep_probability(self, keys: Sequence[Hashable], labels: Sequence[str] | None = None) -> np.ndarray:
        """``(K,)`` float: the probability that each candidate prompt (``keys``, domains ``labels`` or None) is
        generated now."""
        raise NotImplementedError(f"{type(self).__name__} must implement keep_probability(keys, labels)")

    def observe(self, batch: RolloutBatch, step: int, sync: bool = False) -> dict[str, float]:
        """Learn from a step's rollouts (``sync``: all-reduce what it counts across ranks); returns `metrics`."""
        raise NotImplementedError(f"{type(self).__name__} must implement observe(batch, step, sync)")

    def record_draws(self, accepted: Sequence[Hashable], skipped: int) -> None:
        """Sampler bookkeeping: the prompts it generated and how many candidates it skipped."""
        self.drawn += len(accepted)
        self.skipped += int(skipped)

    def metrics(self) -> dict[str, float]:
        """The filter's ``pre_select/*`` metrics as they stand."""
        return {
            "pre_select/skipped_prompts": float(self.skipped),
            # The host refills its batch with other prompts, so these completions go to the replacements.
            "pre_select/completions_redirected": float(self.skipped * self.num_generations),
        }


class _PreSelectRule(PreSelectFilter):
    """What both built-in filters share: the `PromptHistory`, the sampler's draw counters and their metrics and state.

    A filter that has prompts (or states) it would skip, yet skipped none over `SILENT_OBSERVATIONS`
    observed batches, warns once when it finds why its metrics say it acts while it does not: no
    sampler asks it, the sampler asks about domains the rollouts were never recorded under, or the
    rollouts' prompt keys are never the ones the sampler drew.
    """

    def __init__(self, history: PromptHistory) -> None:
        super().__init__()
        self.history = history
        self.rechecked = 0
        self.last_zero_share = float("nan")
        self.last_noisy_share = float("nan")
        self._warned = False
        self._reset_watch()

    # ------------------------------------------------------------ a filter that does not act

    def _reset_watch(self) -> None:
        """Forget what the sampler asked and drew: the watch starts again."""
        self._silent = 0  # observed batches in a row with something to skip and nothing skipped
        self._asked = 0  # candidates the sampler asked about since
        self._asked_labels: set = set()  # their domains
        self._drawn_keys: set = set()  # keys it drew (at most DRAWN_KEYS_KEPT)
        self._drawn_observed = 0  # observed groups whose key it drew

    def _watching(self) -> bool:
        return not (self._warned or self.skipped)

    def _note_asked(self, count: int, labels: Sequence[str] | None) -> None:
        """Bookkeeping of one `keep_probability` call (only until the filter first skips)."""
        if self._watching():
            self._asked += count
            if labels is not None:
                self._asked_labels.update(labels)

    def _skippable(self) -> int:
        """How many prompts (or states) the filter would now skip with a keep probability below 1."""
        raise NotImplementedError

    def _observed_domains(self) -> set:
        """The domains the filter has recorded groups under."""
        raise NotImplementedError

    def _check_acting(self, observed_keys: Sequence[Hashable]) -> None:
        """Warn once when the filter had something to skip over `SILENT_OBSERVATIONS` batches, skipped
        nothing, and a cause is clear (see the class docstring)."""
        if not self._watching():
            return
        skippable = self._skippable()
        if not skippable:
            self._reset_watch()
            return
        self._silent += 1
        if self._drawn_keys:
            self._drawn_observed += sum(hashable_key(key) in self._drawn_keys for key in observed_keys)
        cause = self._silence_cause() if self._silent >= SILENT_OBSERVATIONS else None
        if cause is not None:
            self._warned = True
            warnings.warn(
                f"dataflex: pre_select {self.name!r} has {skippable} "
                f"prompt states it would skip, yet skipped no prompt over {self._silent} observed batches "
                f"(pre_select/skipped_prompts stays 0): {cause}",
                stacklevel=user_stacklevel(),
            )

    def _silence_cause(self) -> str | None:
        """Why the filter skips nothing, when that is clear; None otherwise (e.g. the first pass over new data)."""
        if not self._asked and not self.drawn:
            return f"no prompt sampler asks it about any prompt; {SAMPLER_FIX}"
        observed = self._observed_domains()
        if self._asked_labels and observed and not (self._asked_labels & observed):
            return (
                f"the sampler asks about prompts of domain(s) {sorted(self._asked_labels)[:5]}, but the rollouts "
                f"it learnt from are recorded under {sorted(observed)[:5]}. The sampler's labels (its domain "
                f"column, or {NO_DOMAIN!r} without one) and RolloutBatch.domains (None means {NO_DOMAIN!r}) "
                "must name the same domains: give the batch each prompt's value of the sampler's domain column, "
                "or leave both out"
            )
        if self._drawn_keys and not self._drawn_observed:
            return (
                f"no observed group has the prompt key of a prompt the sampler drew (e.g. "
                f"{sorted(map(repr, self._drawn_keys))[:3]}): RolloutBatch.prompt_keys must name prompts as the "
                "sampler does (its prompt_key_column, else the 'prompt_key' field, else 'prompt', else the row index)"
            )
        return None

    def record_draws(self, accepted: Sequence[Hashable], skipped: int) -> None:
        """Sampler bookkeeping: prompts it generated and how many candidates it skipped."""
        if self._watching() and len(self._drawn_keys) < DRAWN_KEYS_KEPT:
            self._drawn_keys.update(hashable_key(key) for key in accepted[: DRAWN_KEYS_KEPT - len(self._drawn_keys)])
        super().record_draws(accepted, skipped)
        self.rechecked += int((self.history.streaks(accepted) > 0).sum())

    def metrics(self) -> dict[str, float]:
        return {
            **super().metrics(),
            "pre_select/zero_variance_share": self.last_zero_share,
            "pre_select/noisy_share": self.last_noisy_share,
            "pre_select/recheck_rate": self.rechecked / self.drawn if self.drawn else 0.0,
        }

    def state_dict(self) -> dict:
        """History (tensors) and counters (Python scalars): loads with ``torch.load(weights_only=True)``."""
        return {
            "history": self.history.state_dict(),
            "skipped": int(self.skipped),
            "drawn": int(self.drawn),
            "rechecked": int(self.rechecked),
            "last_zero_share": float(self.last_zero_share),
            "last_noisy_share": float(self.last_noisy_share),
        }

    def load_state_dict(self, state: dict) -> None:
        self.history.load_state_dict(state["history"])
        self.skipped, self.drawn, self.rechecked = int(state["skipped"]), int(state["drawn"]), int(state["rechecked"])
        self.last_zero_share = float(state["last_zero_share"])
        self.last_noisy_share = float(state.get("last_noisy_share", float("nan")))


@register("pre_select", "skip_zero_variance")
class SkipZeroVarianceFilter(_PreSelectRule):
    """Skip prompts whose recent groups all had zero reward variance (GRESO-style), adaptively.

    The rule and its two additions are described in this module's docstring (GRESO, arXiv
    2506.02177).

    Args:
        target_share: wanted share, in [0, 1], of no-signal groups (all rewards equal, or noisy)
            among the generated groups; ``explore`` adapts towards it.
        explore: starting base, in [0, 1], of the keep probability: a prompt with a no-signal
            streak z is kept with ``max(min_keep, explore ** z)``; it adapts after every batch.
        min_keep: floor keep probability, in (0, 1], of every prompt, so one that became
            learnable is re-checked (also the lowest value ``explore`` adapts to).
        adapt_rate: step, in [0, 1], by which ``explore`` moves per batch at the largest
            possible miss of ``target_share`` (proportionally less for smaller misses).
        domain_prior: predict a prompt never seen from its domain's recent no-signal share.
        prior_rate: moving-average rate, in (0, 1], of each domain's no-signal share (the weight
            of the newest batch).
        noise_check: count a group whose identical completions got different rewards as giving no
            signal (needs ``RolloutBatch.completion_ids``).
    """

    def __init__(
        self,
        target_share: float = 0.25,
        explore: float = 0.5,
        min_keep: float = 0.05,
        adapt_rate: float = 0.02,
        domain_prior: bool = True,
        prior_rate: float = 0.2,
        noise_check: bool = True,
    ) -> None:
        self.target_share = check_number("target_share", target_share, low=0.0, high=1.0)
        self.explore = check_number("explore", explore, low=0.0, high=1.0)
        self.min_keep = check_number("min_keep", min_keep, low=0.0, high=1.0, low_open=True)
        self.adapt_rate = check_number("adapt_rate", adapt_rate, low=0.0, high=1.0)
        self.domain_prior = check_bool("domain_prior", domain_prior)
        self.noise_check = check_bool("noise_check", noise_check)
        super().__init__(PromptHistory(prior_rate=prior_rate))

    def keep_probability(self, keys: Sequence[Hashable], labels: Sequence[str] | None = None) -> np.ndarray:
        """Probability that each candidate prompt is generated now.

        A prompt seen before: ``max(min_keep, explore ** streak)`` (1 with no streak). One never seen,
        with its domain in ``labels`` and ``domain_prior`` on: ``max(min_keep, 1 - q * (1 - explore))``,
        ``q`` its domain's recent no-signal share; otherwise 1.
        """
        slots = self.history.lookup(keys)
        self._note_asked(len(slots), labels)
        seen = slots >= 0
        streak = self.history.streaks_at(slots).astype(np.float64)
        keep = np.where(streak > 0, np.maximum(self.min_keep, self.explore**streak), 1.0)
        if self.domain_prior and labels is not None and not seen.all():
            unseen = ~seen
            share = self.history.prior([labels[i] for i in np.flatnonzero(unseen).tolist()])
            predicted = np.maximum(self.min_keep, 1.0 - np.nan_to_num(share, nan=0.0) * (1.0 - self.explore))
            keep[unseen] = predicted
        return keep

    def observe(self, batch: RolloutBatch, step: int, sync: bool = False) -> dict[str, float]:
        """Record the batch's group outcomes and adapt ``explore`` towards the target share."""
        outcomes = self.history.gathered_outcomes(batch, sync=sync, noise_check=self.noise_check)
        stats = self.history.record_outcomes(outcomes, step)
        if stats["groups"]:
            self.last_zero_share = stats["zero_variance_share"]
            self.last_noisy_share = stats["noisy_share"]
            # Proportional: the step is adapt_rate at the largest possible miss, so the mean share settles on
            # the target.
            miss = (self.target_share - stats["no_signal_share"]) / max(self.target_share, 1.0 - self.target_share)
            self.explore = float(min(1.0, max(self.min_keep, self.explore + self.adapt_rate * miss)))
        self._check_acting(outcomes.keys)
        return self.metrics()

    def _skippable(self) -> int:
        """Prompts on a no-signal streak, plus domains whose unseen prompts the prior skips (keep below 1)."""
        if self.min_keep >= 1.0 or self.explore >= 1.0:
            return 0
        prior = sum(share > 0 for share in self.history.domain_prior.values()) if self.domain_prior else 0
        return int((self.history.streak[: self.history.size] > 0).sum()) + int(prior)

    def _observed_domains(self) -> set:
        return set(self.history.domain_prior)

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "pre_select/explore": self.explore}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "explore": float(self.explore)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.explore = float(state["explore"])


MAX_STREAK = 3  # streaks of 3 or more share one calibration state
# States: 0 last group had signal; 1..3 streak 1, 2, 3+ of failed groups; 4..6 the same, solved; 7 never seen.
STATES = 2 * MAX_STREAK + 2
UNSEEN = STATES - 1
SOLVED_ABOVE = 0.5  # a zero-variance group is solved when its solve rate is above this (all its rewards above 0.5)


def _ratio(numerator: np.ndarray, denominator: np.ndarray, empty: float | np.ndarray) -> np.ndarray:
    """``numerator / denominator``, and ``empty`` where there is nothing to divide (no groups, no prior)."""
    empty = np.broadcast_to(empty, np.broadcast_shapes(np.shape(numerator), np.shape(empty)))
    return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), empty)


@register("pre_select", "skip_predicted")
class SkipPredictedFilter(_PreSelectRule):
    """Skip prompts whose state reliably gives no signal, judged by estimates learnt from the run.

    A prompt's state is its no-signal streak before the group (0, 1, 2, 3 or more), the streak split
    by whether its last group was solved (all rewards above 0.5) or failed, or "never seen"; states
    are kept per domain. For each (domain, state) the filter counts groups, no-signal groups and
    solved groups. Each new group of a state fades that state's earlier counts by ``decay``, so an
    estimate follows the state's last ``~1/decay`` groups however rarely the state is generated.
    An estimate is the state's rate shrunk towards its domain's pooled rate by ``prior_groups``
    groups (the pooled rate towards 0.5), so a state seen a few times borrows its domain's evidence.

    A candidate is kept with ``min_keep`` when its next group is estimated to be solved with
    probability above ``skip_solved_above``, or to give no signal at all with probability above
    ``skip_above``; otherwise it is always kept (so is any prompt before there is evidence: every
    estimate starts at 0.5). The two thresholds differ on purpose: a
    solved prompt has nothing left to teach, so "more likely than not" suffices, while a failed
    prompt may turn learnable as the policy improves on its neighbours, so skipping it takes strong
    evidence (a domain that never gives signal), not a few early failures of a domain still being
    learnt. ``min_keep`` keeps some training on skipped states, which also keeps their estimates
    current. GRESO (arXiv 2506.02177) skips with a fixed ``p ** streak``; this filter learns
    per-state probabilities instead. Measured against it under dynamic sampling in
    ``docs/dynamic_sampling.md``.

    Args:
        skip_above: estimated no-signal probability, in [0, 1), above which a state is skipped.
        skip_solved_above: estimated probability, in [0, 1), that the next group is solved, above
            which a state is skipped.
        min_keep: keep probability, in (0, 1], of a skipped state's prompts.
        decay: share, in [0, 1), of a state's counts that fades with each new group in that state.
        prior_groups: weight, >= 0, in groups, of the domain's pooled rate in each state's estimate.
        noise_check: also count a group whose identical completions got different rewards as giving
            no signal (needs ``RolloutBatch.completion_ids``). Off by default: signal then means
            "rewards not all equal", as for the ``diffband`` selection.
    """

    def __init__(
        self,
        skip_above: float = 0.9,
        skip_solved_above: float = 0.5,
        min_keep: float = 0.2,
        decay: float = 0.01,
        prior_groups: float = 10.0,
        noise_check: bool = False,
    ) -> None:
        self.skip_above = check_number("skip_above", skip_above, low=0.0, high=1.0, high_open=True)
        self.skip_solved_above = check_number("skip_solved_above", skip_solved_above, low=0.0, high=1.0, high_open=True)
        self.min_keep = check_number("min_keep", min_keep, low=0.0, high=1.0, low_open=True)
        self.decay = check_number("decay", decay, low=0.0, high=1.0, high_open=True)
        self.prior_groups = check_number("prior_groups", prior_groups, low=0.0, finite=True)
        self.noise_check = check_bool("noise_check", noise_check)
        super().__init__(PromptHistory())
        self.domains: dict[str, int] = {}
        self.groups = np.zeros((0, STATES))  # (domains, states): faded group counts
        self.no_signal = np.zeros((0, STATES))  # of those, faded no-signal counts
        self.solved = np.zeros((0, STATES))  # of those, faded counts of groups solved by every completion
        self.slot_domain = np.zeros(0, dtype=np.int64)  # per history slot: the row of the prompt's domain

    def _domain_rows(self, labels: Sequence[str] | None, n: int) -> np.ndarray:
        """Row of each label in the count tables, adding rows for new domains (`NO_DOMAIN` without labels)."""
        names = [NO_DOMAIN] * n if labels is None else [str(label) for label in labels]
        for name in names:
            if name not in self.domains:
                self.domains[name] = len(self.domains)
        grow = len(self.domains) - self.groups.shape[0]
        if grow > 0:
            self.groups = np.vstack([self.groups, np.zeros((grow, STATES))])
            self.no_signal = np.vstack([self.no_signal, np.zeros((grow, STATES))])
            self.solved = np.vstack([self.solved, np.zeros((grow, STATES))])
        return np.fromiter((self.domains[name] for name in names), dtype=np.int64, count=n)

    def _states(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Each key's state: its no-signal streak capped at 3, split by whether its last group was
        solved (solve rate above 0.5) or failed; 0 after a group with signal; ``UNSEEN`` never seen."""
        return self._states_at(self.history.lookup(keys))

    def _states_at(self, slots: np.ndarray) -> np.ndarray:
        """`_states` of history slots already looked up (``-1``: never seen)."""
        streak = np.minimum(self.history.streaks_at(slots), MAX_STREAK)
        solved = np.zeros(len(slots), dtype=bool)
        solved[slots >= 0] = self.history.solve_rate[slots[slots >= 0]] > SOLVED_ABOVE
        state = np.where((streak > 0) & solved, streak + MAX_STREAK, streak)
        return np.where(slots >= 0, state, UNSEEN)

    def estimate(self, keys: Sequence[Hashable], labels: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Estimated probabilities that each prompt's next group gives no signal, and that it is solved."""
        rows, states = self._domain_rows(labels, len(keys)), self._states(keys)
        return self._shrunk(self.no_signal)[rows, states], self._shrunk(self.solved)[rows, states]

    def _shrunk(self, counts: np.ndarray) -> np.ndarray:
        """``(domains, STATES)`` rates, each state's pulled towards its domain's pooled rate by ``prior_groups``
        groups (the pooled rate itself towards 0.5), so a rarely seen state borrows its domain's evidence."""
        k = self.prior_groups
        pooled = _ratio(counts.sum(axis=1, keepdims=True) + 0.5 * k, self.groups.sum(axis=1, keepdims=True) + k, 0.5)
        return _ratio(counts + k * pooled, self.groups + k, pooled)

    def _skipped_states(self) -> np.ndarray:
        """``(domains, STATES)`` bool: states whose prompts are kept with ``min_keep`` only."""
        return (self._shrunk(self.no_signal) > self.skip_above) | (self._shrunk(self.solved) > self.skip_solved_above)

    def keep_probability(self, keys: Sequence[Hashable], labels: Sequence[str] | None = None) -> np.ndarray:
        """``min_keep`` for a prompt whose state is skipped (see the class docstring), else 1.

        Without ``labels`` (a sampler whose mixer has already chosen the domain), a prompt seen
        before is judged in the domain it was observed in, and one never seen is kept.
        """
        slots = self.history.lookup(keys)
        self._note_asked(len(slots), labels)
        if labels is not None or not self.domains:
            rows, states = self._domain_rows(labels, len(keys)), self._states_at(slots)
            return np.where(self._skipped_states()[rows, states], self.min_keep, 1.0)
        seen = slots >= 0
        keep = np.ones(len(keys))
        if seen.any():
            states = self._states_at(slots[seen])
            skipped = self._skipped_states()[self.slot_domain[slots[seen]], states]
            keep[seen] = np.where(skipped, self.min_keep, 1.0)
        return keep

    def observe(self, batch: RolloutBatch, step: int, sync: bool = False) -> dict[str, float]:
        """Count each group's outcome under the state its prompt was in, then record it in the history."""
        outcomes = self.history.gathered_outcomes(batch, sync=sync, noise_check=self.noise_check)
        if outcomes.keys:
            zero, noisy = no_signal_flags(outcomes.variance, outcomes.disagreeing)
            rows, states = self._domain_rows(outcomes.labels, len(outcomes.keys)), self._states(outcomes.keys)
            arrivals = np.zeros_like(self.groups)
            np.add.at(arrivals, (rows, states), 1.0)
            fade = (1.0 - self.decay) ** arrivals  # each new group of a state fades that state's counts once
            self.groups *= fade
            self.no_signal *= fade
            self.solved *= fade
            self.groups += arrivals
            solved = zero & (np.asarray(outcomes.solve_rate) > SOLVED_ABOVE)
            np.add.at(self.no_signal, (rows, states), (zero | noisy).astype(np.float64))
            np.add.at(self.solved, (rows, states), solved.astype(np.float64))
            self.last_zero_share, self.last_noisy_share = float(zero.mean()), float(noisy.mean())
            self.history.record_outcomes(outcomes, step)
            if self.slot_domain.shape[0] < self.history.size:
                self.slot_domain = np.concatenate(
                    [self.slot_domain, np.zeros(self.history.size - self.slot_domain.shape[0], np.int64)]
                )
            self.slot_domain[self.history.lookup(outcomes.keys)] = rows
        self._check_acting(outcomes.keys)
        return self.metrics()

    def _skippable(self) -> int:
        """Skipped (domain, state) pairs, when skipping one keeps its prompts with a probability below 1."""
        return int(self._skipped_states().sum()) if self.min_keep < 1.0 else 0

    def _observed_domains(self) -> set:
        return {name for name, row in self.domains.items() if self.groups[row].sum() > 0}

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "pre_select/skipped_states": float(self._skipped_states().sum())}

    def state_dict(self) -> dict:
        """History, counters, domains and the per-state count tables (tensors)."""
        return {
            **super().state_dict(),
            "domains": list(self.domains),
            **{
                name: torch.from_numpy(getattr(self, name).copy())
                for name in ("groups", "no_signal", "solved", "slot_domain")
            },
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.domains = {str(name): i for i, name in enumerate(state["domains"])}
        for name in ("groups", "no_signal", "solved"):
            setattr(self, name, np.array(torch.as_tensor(state[name]).cpu().numpy(), dtype=np.float64))
        self.slot_domain = np.array(torch.as_tensor(state["slot_domain"]).cpu().numpy(), dtype=np.int64)
