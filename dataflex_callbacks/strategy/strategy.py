"""`Strategy`: selection, reweighting and domain mixing composed into one decision per step.

``Strategy.apply(batch, step)`` returns a `Decision`: which responses stay in the loss
(``keep``), how much each response or token counts (``weights``, selection folded in, mean 1
over kept entries) and a dict of metrics. Parts whose scorer needs the *current* policy's
log-probs or entropies can be deferred to the loss (``defer_policy=True`` then
``apply_policy``), which is how host adapters avoid an extra forward pass.

A strategy's state is written by its own methods only: a host binds what it tells the strategy
once (`bind_domains`, `bind_host_settings`, `bind_signal_buffer`) and passes the rest with each
call (``warn``, ``sync``, ``host_step``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping, Sequence

import torch

from dataflex_callbacks.rollout.batch import RolloutBatch, clean_signals, masked_centered_square_sum, true_count
from dataflex_callbacks.config import StrategyConfig, load_config, read_config
from dataflex_callbacks.rollout.decision import Decision
from dataflex_callbacks.strategy._dropped_all import dropped_all_reason
from dataflex_callbacks.errors import (
    SELECTION_REWARD,
    SELECTION_REWARD_TEXT,
    ArgumentError,
    BatchError,
    ComponentError,
    ConfigError,
    DroppedAllWarning,
    check_argument,
    check_state,
    check_step,
    user_stacklevel,
)
from dataflex_callbacks.mixing.domain_mixing import DomainMixing
from dataflex_callbacks.strategy.parts import POLICY_SIGNALS, Part, build_allocation, build_mixing
from dataflex_callbacks.registry import build_component
from dataflex_callbacks.components.reweighters import normalize_weights_

# Float signals `nan_policy` covers; each gets a ``nonfinite_<name>`` counter (responses) in the metrics.
CHECKED_SIGNALS = ("rewards", "advantages", "logprobs", "entropies")

SETTING_WORDS = {SELECTION_REWARD: ("a selection reward", SELECTION_REWARD_TEXT)}
"""Each host-neutral setting a warning names -> (what it is, the core's words for it); a host's own spelling
follows what it is (`Strategy.bind_host_settings`)."""


class Strategy:
    """A composed data strategy; build it with `build_strategy`.

    Args:
        config: the strategy's `StrategyConfig` (or a config dict), read through `read_config`; the
            strategy keeps its own checked copy as ``config``.
    """

    def __init__(self, config: StrategyConfig | Mapping[str, Any]):
        check_argument(
            config,
            (StrategyConfig, Mapping),
            "config",
            "Strategy",
            "a StrategyConfig or a config dict",
            "Build a strategy from a preset name, a dict or a YAML path with build_strategy(...)",
        )
        self.config: StrategyConfig = read_config(config)
        self.name = self.config.name
        self.nan_policy = self.config.nan_policy
        self.domain_key = self.config.domain_key
        self._warned_dropped_all = False  # a step that keeps nothing warns once (`_warn_dropped_all`)
        self._host_settings: dict[str, str] = {}  # the host's spelling of the settings warnings name
        self._signal_buffer = None  # the SignalGroupBuffer driving the dynamic_sampling part, once one is bound
        self._pilots_observed = False  # a host shows the pre_select filter every pilot round (`bind_pilot_observer`)
        self.select = Part("select", self.config.select) if self.config.select else None
        self.reweight = Part("reweight", self.config.reweight) if self.config.reweight else None
        pre = self.config.pre_select
        self.pre_select = build_component("pre_select", pre["name"], **pre["params"]) if pre else None
        self.mixing: DomainMixing | None = build_mixing(self.config.mix) if self.config.mix else None
        self.allocation = build_allocation(self.config)  # an Allocator, or None

    # ------------------------------------------------------------ declarations

    @property
    def parts(self) -> list[Part]:
        return [p for p in (self.select, self.reweight) if p is not None]

    @property
    def needs_groups(self) -> bool:
        """Whether the strategy needs ``group_ids`` (responses grouped by prompt)."""
        return any(p.needs_groups for p in self.parts)

    @property
    def needs_policy_signals(self) -> bool:
        """Whether some part scores the policy's log-probs or entropies (computed inside the loss)."""
        return any(p.needs_policy for p in self.parts)

    @property
    def requires(self) -> set[str]:
        """Every `RolloutBatch` field the strategy reads."""
        fields = set().union(*(p.requires for p in self.parts)) if self.parts else set()
        if self.mixing is not None:
            fields |= {"rewards", "domains"}
        if self.pre_select is not None:
            fields |= set(self.pre_select.requires)
        return fields

    @property
    def is_noop(self) -> bool:
        return not self.parts and self.mixing is None and self.pre_select is None and self.allocation is None

    @property
    def mix_enabled(self) -> bool:
        return self.mixing is not None

    @property
    def domains(self) -> list[str] | None:
        return None if self.mixing is None else self.mixing.domains

    @property
    def target_proportions(self) -> dict[str, float] | None:
        """Current target sampling proportions per domain (None without a mix part)."""
        return None if self.mixing is None or not self.mixing.bound else dict(self.mixing.target)

    def bind_domains(self, domains: Sequence[str]) -> None:
        """Tell the mix part which domains the data has (adapters call this from the dataset)."""
        if self.mixing is not None:
            self.mixing.bind(domains)

    def bind_host_settings(self, settings: Mapping[str, str]) -> None:
        """Name the host's own settings in this strategy's warnings; a host adapter calls it once, when it binds.

        Args:
            settings: each host-neutral setting a warning may name (`errors.SELECTION_REWARD`) -> how
                this host sets it, e.g. ``{SELECTION_REWARD: "DataFlexGRPOTrainer(..., selection_reward=...)"}``.
                A setting left out is named in the core's words (``errors.SELECTION_REWARD_TEXT``).
        """
        check_argument(
            settings,
            Mapping,
            "settings",
            "Strategy.bind_host_settings",
            "a mapping {errors.SELECTION_REWARD: 'how the host sets it'}",
        )
        unknown = sorted(set(settings) - set(SETTING_WORDS))
        if unknown:
            raise ConfigError(
                f"Strategy.bind_host_settings: unknown setting(s) {unknown}; the settings warnings "
                f"name are {sorted(SETTING_WORDS)}"
            )
        self._host_settings = {concept: str(spelled) for concept, spelled in settings.items()}

    def _setting_text(self, concept: str) -> str:
        """How a warning names ``concept``: the host's spelling when it bound one, else the core's words."""
        noun, words = SETTING_WORDS[concept]
        spelled = self._host_settings.get(concept)
        return words if spelled is None else f"{noun} ({spelled})"

    @property
    def signal_buffer(self) -> Any:
        """The `SignalGroupBuffer` that drives this strategy's ``dynamic_sampling`` part; None until one is built."""
        return self._signal_buffer

    def bind_signal_buffer(self, buffer: Any) -> None:
        """Record the `SignalGroupBuffer` driving this strategy (its constructor calls this, once).

        The buffer shows the pre-rollout filter every generated round, so `apply` does not show it
        the groups taken from those rounds again; hosts warn about a ``dynamic_sampling`` part
        that no buffer drives.
        """
        self._signal_buffer = buffer

    def bind_pilot_observer(self) -> None:
        """Record that the host's allocation rounds show the ``pre_select`` filter every pilot round (a host calls it
        once), so `apply` does not show it the trained groups again: the filter then predicts pilot outcomes, the
        completions a skipped prompt would cost."""
        self._pilots_observed = True

    def check_host(self, available: set[str] | Sequence[str], host: str = "this host") -> None:
        """Fail at build time if the host cannot provide a field some part needs (e.g. groups in PPO)."""
        check_argument(
            available,
            (set, frozenset, list, tuple),
            "available",
            "Strategy.check_host",
            "the set of RolloutBatch field names the host provides, e.g. {'rewards', 'group_ids'}",
        )
        available = set(available)
        for part in self.parts:
            for component in (part.scorer, part.actuator):
                needed = set(getattr(component, "requires", ())) - available
                if needed:
                    kind = "scorer" if component is part.scorer else part.actuator_kind
                    raise ConfigError(
                        f"{kind} {component.name!r} needs {', '.join(sorted(needed))}, which {host} does not provide"
                        + (
                            "; group scorers need responses grouped by prompt (GRPO-style)"
                            if "group_ids" in needed
                            else ""
                        )
                    )
        if self.mixing is not None and "domains" not in available:
            raise ConfigError(f"the mix part needs domain labels, which {host} does not provide")
        if self.pre_select is not None:
            needed = set(self.pre_select.requires) - available
            if needed:
                raise ConfigError(
                    f"pre_select {self.pre_select.name!r} needs {', '.join(sorted(needed))}, "
                    f"which {host} does not provide"
                )

    def observe_sampled(self, domain_counts: Mapping[str, int]) -> None:
        """Record what the sampler actually drew (for the actual-proportion metrics)."""
        check_argument(
            domain_counts, Mapping, "domain_counts", "Strategy.observe_sampled", "a mapping {domain: prompts drawn}"
        )
        if self.mixing is not None:
            self.mixing.observe_sampled(domain_counts)

    # ------------------------------------------------------------ decisions

    def _checked_signals(self, batch: RolloutBatch, policy_only: bool = False) -> list[str]:
        """The float signals of ``batch`` some component reads (rewards always: metrics and mixing read them)."""
        read = self.requires | {"rewards"}
        if self.mixing is not None:
            read.add("advantages")  # the tracker's per-domain |advantage|
        names = POLICY_SIGNALS if policy_only else CHECKED_SIGNALS
        return [name for name in names if name in read and getattr(batch, name) is not None]

    def _warn_dropped_all(
        self,
        step: int | None,
        batch: RolloutBatch,
        bad_rows: torch.Tensor | None,
        counts: dict,
        token_level: bool,
        warn: bool,
    ) -> None:
        """Warn once per strategy, with a `DroppedAllWarning` naming its cause and fix, that a step kept nothing.

        ``bad_rows``: ``(N,)`` rows holding a non-finite signal (None: none), left out under
        ``nan_policy='drop'``; ``warn``: whether this process warns (`apply`).
        """
        if self._warned_dropped_all or not warn:
            return
        self._warned_dropped_all = True
        n_bad = 0 if bad_rows is None or self.nan_policy != "drop" else int(bad_rows.sum())
        cause, what, fix = dropped_all_reason(
            self.select,
            self.config.dynamic_sampling,
            n_bad,
            batch,
            counts,
            token_level,
            self._setting_text(SELECTION_REWARD),
        )
        text = f"dataflex: step {step}: strategy {self.name!r} {what}."
        if fix:
            text += f" This step trains nothing (metric dropped_all=1); if it repeats, nothing trains. Fix: {fix}."
        host_setting = SELECTION_REWARD if fix and cause in ("selector", "reward_scale") else None
        warnings.warn(
            DroppedAllWarning(
                text + " This warning is shown once.",
                step=step,
                strategy=self.name,
                cause=cause,
                fix=fix,
                host_setting=host_setting,
            ),
            stacklevel=user_stacklevel(),
        )

    def apply(
        self,
        batch: RolloutBatch,
        step: int,
        *,
        defer_policy: bool = False,
        sync: bool = True,
        host_step: int | None = None,
        warn: bool = True,
    ) -> Decision:
        """Decide keep mask and weights for one batch, and feed the mixing statistics.

        Args:
            batch: the step's rollouts.
            step: the host's step counter (warm-ups and mixing updates key on it).
            defer_policy: leave parts that need current-policy signals for `apply_policy`.
            sync: all-reduce mixing statistics across ranks; pass False when ``batch`` is already
                the global batch, identical on every rank.
            host_step: this step as the host numbers it in its own logs, which warnings and errors
                name (TRL logs its first step as 1 while its counter still reads 0); None: ``step``.
            warn: whether this process warns when the step keeps nothing (a `DroppedAllWarning`, once
                per strategy). Every rank decides alike, so a host passes ``rank == 0``.
        """
        if not isinstance(batch, RolloutBatch):
            raise BatchError(f"Strategy.apply expects a RolloutBatch; got {type(batch).__name__}")
        step = check_step(step, "Strategy.apply")
        shown_step = step if host_step is None else check_step(host_step, "Strategy.apply")
        batch, bad_rows, counts = clean_signals(batch, self._checked_signals(batch), self.nan_policy)
        keep = torch.ones(batch.n, dtype=torch.bool, device=batch.device)
        stats_batch = batch
        if bad_rows is not None and self.nan_policy == "drop":
            keep = ~bad_rows
            # A dropped row is no observation at all: a NaN reward makes the tracker skip the whole row.
            stats_batch = batch.replace(rewards=batch.rewards.masked_fill(bad_rows, float("nan")))
        token_keep, response_w, token_w, deferred = None, None, None, []
        reweight_scores = None

        if self.select is not None and self.select.active(step):
            if self.select.needs_policy and defer_policy:
                deferred.append("select")
            else:
                scores = self.select.score(batch)
                selected = self.select.actuator.select(scores, batch)
                if self.select.token_level:
                    token_keep = selected & batch.valid_mask & keep.unsqueeze(1)
                else:
                    keep = keep & selected
        if self.reweight is not None and self.reweight.active(step):
            if self.reweight.needs_policy and defer_policy:
                deferred.append("reweight")
            else:
                scores = reweight_scores = self.reweight.score(batch)
                if self.reweight.token_level:
                    token_w = self.reweight.actuator.weights(
                        scores, batch, mask=self._token_mask(batch, keep, token_keep)
                    )
                else:
                    response_w = self.reweight.actuator.weights(scores, batch, mask=keep)
        weights = self._combine(batch, keep, token_keep, response_w, token_w)

        metrics = self._metrics(batch, keep, token_keep, weights, counts, stats_batch.rewards, reweight_scores)
        if metrics["dropped_all"]:
            self._warn_dropped_all(shown_step, batch, bad_rows, counts, token_keep is not None, warn)
        if self.mixing is not None:
            if self.mixing.observe(stats_batch, step, sync=sync):
                self._check_proportions(shown_step)
            metrics.update(self.mixing.metrics())
        if self.pre_select is not None:
            # A SignalGroupBuffer showed the filter every generated round already; this batch is a pick of them.
            observed = self._signal_buffer is not None or self._pilots_observed
            metrics.update(self.pre_select.metrics() if observed else self.pre_select.observe(batch, step, sync=sync))
        return Decision(
            keep=keep,
            weights=weights,
            token_keep=token_keep,
            metrics=metrics,
            deferred=tuple(deferred),
            response_weights=response_w,
            step=shown_step,
        )

    def apply_policy(self, batch: RolloutBatch, decision: Decision, *, warn: bool = True) -> Decision:
        """Complete a decision's deferred parts from current-policy signals (``logprobs``/``entropies``).

        ``batch`` must hold the same rows as the batch given to `apply`, with the current policy's
        detached ``logprobs`` and/or ``entropies``. Returns token-level weights ``(N, L)``. ``warn``
        as in `apply`.
        """
        if isinstance(batch, Decision) and isinstance(decision, RolloutBatch):
            raise ArgumentError(
                "Strategy.apply_policy takes (batch, decision); got (decision, batch): swap the "
                "arguments, strategy.apply_policy(batch, decision)"
            )
        if not isinstance(batch, RolloutBatch):
            raise BatchError(f"Strategy.apply_policy expects a RolloutBatch as 'batch'; got {type(batch).__name__}")
        check_argument(
            decision,
            Decision,
            "decision",
            "Strategy.apply_policy",
            "the Decision that Strategy.apply(batch, step, defer_policy=True) returned",
        )
        if not decision.deferred:
            return decision
        keep, token_keep, token_w = decision.keep, decision.token_keep, None
        if batch.n != keep.shape[0]:
            raise BatchError(f"apply_policy got {batch.n} rows but the decision covers {keep.shape[0]}")
        batch, bad_rows, counts = clean_signals(batch, self._checked_signals(batch, policy_only=True), self.nan_policy)
        if bad_rows is not None and self.nan_policy == "drop":
            keep = keep & ~bad_rows
            token_keep = None if token_keep is None else token_keep & keep.unsqueeze(1)
        select_scores = reweight_scores = None
        if "select" in decision.deferred:
            select_scores = self.select.score(batch)
            token_keep = self.select.actuator.select(select_scores, batch) & batch.valid_mask & keep.unsqueeze(1)
        if "reweight" in decision.deferred:
            reweight_scores = self.reweight.score(batch)
            token_w = self.reweight.actuator.weights(
                reweight_scores, batch, mask=self._token_mask(batch, keep, token_keep)
            )
        weights = self._combine(batch, keep, token_keep, decision.response_weights, token_w)
        metrics = dict(decision.metrics)
        metrics.update(counts)
        metrics.update(self._weight_metrics(keep, token_keep, weights, batch, reweight_scores))
        was_dropped = bool(metrics.get("dropped_all", 0.0))
        if keep is not decision.keep or select_scores is not None:
            # The deferred selection decides which tokens stay; dropped rows change what is kept.
            kept = self._kept_metrics(batch, keep, token_keep if select_scores is not None else None)
            if keep is decision.keep:  # the same rows: the decision's kept_frac, of the batch it was made on, stands
                del kept["kept_frac"]
            kept["dropped_all"] = float(was_dropped or kept["dropped_all"])
            metrics.update(kept)
        if metrics.get("dropped_all") and not was_dropped:
            self._warn_dropped_all(decision.step, batch, bad_rows, counts, token_keep is not None, warn)
        return Decision(
            keep=keep,
            weights=weights,
            token_keep=token_keep,
            metrics=metrics,
            deferred=(),
            response_weights=decision.response_weights,
            step=decision.step,
        )

    @staticmethod
    def _token_mask(batch: RolloutBatch, keep: torch.Tensor, token_keep: torch.Tensor | None) -> torch.Tensor:
        """``(N, L)`` tokens the weights are normalised over while deciding: ``token_keep`` (already valid
        and kept), else the valid tokens of kept responses. Hosts read a finished decision's kept tokens
        with `dataflex_callbacks.host.kept_token_mask` (which cannot be imported here: it builds strategies)."""
        if token_keep is not None:
            return token_keep
        if batch.valid_mask is None:
            raise BatchError("token-level parts need RolloutBatch.completion_mask (or another (N, L) field)")
        if bool(keep.all()):
            return batch.valid_mask  # read-only here: no (N, L) copy when every response stays
        return batch.valid_mask & keep.unsqueeze(1)

    def _combine(self, batch, keep, token_keep, response_w, token_w) -> torch.Tensor:
        if token_keep is None and token_w is None:
            return response_w if response_w is not None else keep.to(torch.float32)
        if token_w is not None and response_w is None:
            return token_w  # already zero outside its mask (the kept tokens) and normalised
        mask = self._token_mask(batch, keep, token_keep)
        if mask.dtype == torch.bool and mask.device.type == "cpu" and mask.is_contiguous():
            # A bool -> float copy through the uint8 view is about 2x faster on CPU (same 0/1 values).
            weights = torch.empty(mask.shape, dtype=torch.float32).copy_(mask.view(torch.uint8))
        else:
            weights = mask.to(torch.float32)
        if response_w is None and token_w is None:
            return weights  # 0/1 over the mask: already mean 1 over it (globally and per group), exactly
        if response_w is not None:
            weights.mul_(response_w.unsqueeze(1))
        if token_w is not None:
            weights.mul_(token_w)
        mode = self.reweight.actuator.normalize if self.reweight is not None else "mean_one"
        return normalize_weights_(weights, mask, mode, batch.group_ids)

    # ------------------------------------------------------------ component output checks

    def _refuse_weights(self, weights: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor | None) -> None:
        """Raise the `ComponentError` for weights ``(N,)`` or ``(N, L)`` holding a negative or non-finite value
        (failure path only)."""
        flat = weights.detach().reshape(-1)
        bad = ~torch.isfinite(flat) | (flat < 0)
        first = int(torch.nonzero(bad)[0])
        at = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), tuple(weights.shape)))
        found = (
            f"weight {float(flat[first]):.6g} at {at[0] if len(at) == 1 else at} "
            f"({int(bad.sum())} of {flat.numel()} negative or not finite)"
        )
        if self.reweight is None:
            raise ComponentError(f"strategy {self.name!r} produced {found}; weights must be finite and >= 0")
        reweighter, scorer = self.reweight.actuator.name, self.reweight.scorer.name
        if scores is not None and not bool(torch.isfinite(scores).all()):
            raise ComponentError(
                f"scorer {scorer!r} returned NaN or infinite scores, which reweighter {reweighter!r} "
                f"turned into {found}; a scorer must return finite scores (nan_policy cleans the "
                "batch's signals before scoring, so these come from the scorer itself)"
            )
        raise ComponentError(
            f"reweighter {reweighter!r} (on scorer {scorer!r}) returned {found}; loss weights must be "
            "finite and >= 0: make its raw weights >= 0 (e.g. exp(score), or score - score.min()); "
            "dataflex_callbacks.testing.check_component shows the failing input"
        )

    def _check_proportions(self, step: int) -> None:
        """Refuse (`ComponentError`) target proportions that are negative or not finite, naming the mixer.

        Runs after each mixing update (K values, once per update): a mixer's raw values are checked
        by `Mixer.proportions`; this catches a mixer that replaces ``proportions`` itself.
        """
        target = self.mixing.target
        values = torch.tensor(list(target.values()), dtype=torch.float64)
        if bool((torch.isfinite(values) & (values >= 0)).all()):
            return
        raise ComponentError(
            f"step {step}: mixer {self.mixing.mixer.name!r} gave the proportions {target}; proportions "
            "must be finite and >= 0: implement raw_proportions (the base class normalises and floors "
            "it) rather than proportions"
        )

    # ------------------------------------------------------------ metrics

    def _weight_metrics(self, keep, token_keep, weights, batch, reweight_scores=None) -> dict[str, float]:
        """Weight statistics for the metrics; refuses (`ComponentError`) negative or non-finite weights.

        This is the one place every decision's weights pass, so the check of any reweighter's output
        (built-in or a user's) lives here: the minimum comes from the same pass as the maximum the
        metrics need, and the three sums are read with one device sync. ``reweight_scores`` (the
        reweighter's input, or None) only serves the error message.
        """
        # Weights are 0 outside their mask, so plain sums over all entries are sums over the kept
        # ones: no gather of the kept entries, no (N, L) temporary.
        mask = self._token_mask(batch, keep, token_keep) if weights.dim() == 2 else keep
        n = true_count(mask)
        if n == 0:
            return {"weight_mean": 0.0, "weight_std": 0.0, "weight_max": 0.0, "ess": 0.0}
        values = weights if weights.dim() == 2 else weights.to(torch.float64)
        total, minimum, maximum = torch.stack((values.sum(), *torch.aminmax(values))).tolist()
        if not (minimum >= 0 and maximum < math.inf):  # NaN fails both comparisons
            self._refuse_weights(weights, mask, reweight_scores)
        mean = total / n
        if weights.dim() == 2:
            spread = masked_centered_square_sum(weights, mask, mean)
        else:
            spread = float(((values - mean) * keep).square().sum())
        square = spread + n * mean * mean  # sum of squared weights over the mask
        std = (spread / n) ** 0.5
        ess = total * total / (n * square) if square > 0 else 0.0
        return {"weight_mean": mean, "weight_std": std, "weight_max": maximum, "ess": ess}

    @staticmethod
    def _kept_metrics(batch: RolloutBatch, keep: torch.Tensor, token_keep: torch.Tensor | None) -> dict[str, float]:
        """``kept_frac`` and ``dropped_all`` of ``keep`` ``(N,)``,
        with ``kept_token_frac`` of ``token_keep`` ``(N, L)``.

        A step keeps nothing (``dropped_all`` 1) when no response stays, or no token of the kept ones.
        """
        n = batch.n
        kept = int(keep.sum()) if n else 0
        metrics = {"kept_frac": kept / n if n else 0.0, "dropped_all": float(n > 0 and kept == 0)}
        if token_keep is not None:
            n_valid = float(batch.lengths[keep].sum())
            n_tok = true_count(token_keep)
            metrics["kept_token_frac"] = n_tok / n_valid if n_valid else 0.0
            metrics["dropped_all"] = float(metrics["dropped_all"] or (n > 0 and n_tok == 0))
        return metrics

    def _metrics(
        self, batch, keep, token_keep, weights, counts, observed_rewards, reweight_scores=None
    ) -> dict[str, float]:
        n = batch.n
        metrics = {**self._kept_metrics(batch, keep, token_keep), "nonfinite_rewards": 0.0}
        metrics.update(counts)
        metrics.update(self._weight_metrics(keep, token_keep, weights, batch, reweight_scores))
        if batch.domains is not None and n:
            labels, codes = batch.domain_codes()
            index = torch.from_numpy(codes)
            rewards = observed_rewards.detach().to("cpu", torch.float64)
            seen = torch.isfinite(rewards)  # rows left out under nan_policy='drop' are not observations
            sums = torch.zeros(len(labels), dtype=torch.float64).index_add_(0, index, rewards.where(seen, 0.0))
            rows = torch.zeros(len(labels), dtype=torch.float64).index_add_(0, index, seen.to(torch.float64))
            for label, total, count in zip(labels, sums.tolist(), rows.tolist()):
                if count:
                    metrics[f"selection_reward/{label}"] = total / count
        return metrics

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict:
        """Everything needed to continue exactly: the resolved config, the mixing and pre-rollout state."""
        return {
            "config": self.config.to_dict(),
            "mixing": None if self.mixing is None else self.mixing.state_dict(),
            "pre_select": None if self.pre_select is None else self.pre_select.state_dict(),
            "allocation": None if self.allocation is None else self.allocation.state_dict(),
            # A component without state (the base class's {}) is left out: loading nothing leaves it as it is.
            "components": {place: state for place, part in self._components() if (state := part.state_dict())},
        }

    def _components(self) -> list[tuple[str, Any]]:
        """``("select.scorer", component)`` for each part's scorer and actuator (every `Component` has a
        ``state_dict``, ``{}`` when it keeps no state)."""
        return [
            (f"{part.kind}.{role}", component)
            for part in self.parts
            for role, component in (("scorer", part.scorer), (part.actuator_kind, part.actuator))
        ]

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Restore saved state; with ``strict`` a changed config is an error naming what differs."""
        check_state(state, ("config",), "Strategy")
        saved, config = _comparable_config(state["config"]), self.config.to_dict()
        if strict and saved != config:
            changed = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
            raise ConfigError(
                f"the saved strategy state was made with a different config (changed: {', '.join(changed)}); "
                "resume with the same strategy config, or pass strict=False to restore only the mixing state"
            )
        if self.mixing is not None and state.get("mixing") is not None:
            self.mixing.load_state_dict(state["mixing"])
        if self.pre_select is not None and state.get("pre_select") is not None:
            self.pre_select.load_state_dict(state["pre_select"])
        if self.allocation is not None and state.get("allocation") is not None:
            self.allocation.load_state_dict(state["allocation"])
        saved_components = state.get("components") or {}
        for place, component in self._components():
            if place in saved_components:
                component.load_state_dict(saved_components[place])

    def summary_line(self, domains: Sequence[str] | None = None, domain_key: str | None = None) -> str:
        """The one console line a host prints when training starts: the strategy, its parts and the domains seen.

        A pre-rollout filter that has not skipped a prompt yet is said to be warming up: its
        ``pre_select/*`` metrics read 0 until it first skips, which is expected, not a fault.

        Args:
            domains: the domain labels of the host's data; empty: the data has none; None: not known
                before the first batch (a stream, or batches the user's own code builds).
            domain_key: the column the host reads domains from, named in the line so a user sees which
                column was read, or that the data has none (then every prompt is in one pool).
        """
        parts = []
        for part in self.parts:
            config = getattr(self.config, part.kind)
            text = (
                f"{part.kind} {_component_text(config.scorer)} -> "
                f"{_component_text(getattr(config, part.actuator_kind))}"
            )
            if part.warmup_steps:
                text += f" from step {part.warmup_steps}"
            parts.append(text)
        if self.mixing is not None:
            mix = self.config.mix
            parts.append(
                f"mix {_component_text(mix.mixer)} (target proportions fixed for the first "
                f"{mix.warmup_steps} steps, then updated every {mix.update_every})"
            )
        if self.config.dynamic_sampling is not None:
            parts.append(f"dynamic_sampling(max_rounds={self.config.dynamic_sampling.max_rounds})")
        if self.config.allocation is not None:
            parts.append(f"allocation {_component_text(self.config.allocation)}")
        if self.pre_select is not None:
            text = f"pre_select {_component_text(self.config.pre_select)}"
            if self.pre_select.skipped:
                text += f" (acting: {self.pre_select.skipped} prompts skipped so far)"
            else:
                text += (
                    " (warming up: it skips a prompt only once the run's groups predict it gives no signal, "
                    "so its pre_select/* metrics read 0 until it first skips)"
                )
            parts.append(text)
        column = "" if domain_key is None else f" (column {domain_key!r})"
        if domains is None:
            seen = f"domains{column}: not known before the first batch"
        elif not domains:
            none = "one pool of prompts" if domain_key is None else f"no {domain_key!r} column: one pool of prompts"
            seen = f"domains: none ({none})"
        else:
            seen = f"domains{column}: " + ", ".join(sorted({str(domain) for domain in domains}))
        return f"dataflex: strategy {self.name!r}: {'; '.join(parts) or 'no parts (plain training)'}; {seen}"

    def __repr__(self) -> str:
        parts = [p.kind + "=" + p.scorer.name + "->" + p.actuator.name for p in self.parts]
        if self.mixing is not None:
            parts.append("mix=" + self.mixing.mixer.name)
        if self.pre_select is not None:
            parts.append("pre_select=" + self.pre_select.name)
        if self.allocation is not None:
            parts.append("allocation=" + self.allocation.name)
        return f"Strategy({self.name!r}: {', '.join(parts) or 'no-op'})"


def _component_text(spec: Mapping[str, Any]) -> str:
    """``name(param=value, ...)`` of a resolved component spec, ``name`` alone without parameters."""
    params = ", ".join(
        f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}" for key, value in spec["params"].items()
    )
    return f"{spec['name']}({params})" if params else spec["name"]


def _comparable_config(saved: Any) -> dict:
    """A saved config brought to the current canonical form (defaults filled), so only real changes count."""
    if not isinstance(saved, Mapping):
        return {"config": saved}
    try:
        return load_config(dict(saved))
    except ConfigError:
        return dict(saved)


def build_strategy(config: Any = "baseline") -> Strategy:
    """Build a `Strategy` from a preset name, a dict (either config form), a `StrategyConfig` or a YAML file path."""
    return Strategy(read_config(config))
