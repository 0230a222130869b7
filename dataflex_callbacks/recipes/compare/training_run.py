"""One run of a comparison trained by the user's own function: `TrainingRun`, and the result record it leaves.

``compare(strategies, seeds=..., budget=..., train=my_train)`` calls ``my_train(run)`` once per (strategy, seed).
The function binds ``run.strategy`` to its host (Lightning's ``DataFlexCallback(run.strategy)``, verl's config,
its own loop calling ``run.strategy.apply``), trains until ``run.budget_spent()``, and records held-out evaluations
with ``run.log(accuracy=..., step=..., **per_domain)``: one before training, one after, any in between.

What the run spent is counted by the library, not taken from the user: ``run.strategy`` is a `CountingStrategy`,
which counts every batch it decides on (`Strategy.apply`, which every host calls once per step with the step's
rollouts, also for the no-part ``baseline``): completions (rows), completion tokens (its ``completion_mask``),
tokens kept in the loss (its decision), signal groups (groups whose rewards are not all equal) and steps (distinct
step numbers). A run that logged nothing before or after training fails with `TrainingRunError`, naming the fix; a
run that stopped short of its budget or went past it by more than one step's completions is flagged in the report.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from typing import TYPE_CHECKING, Any

import torch

from dataflex_callbacks.errors import DataFlexError
from dataflex_callbacks.strategy.strategy import Strategy, build_strategy

from ..held_out import LOGGED, headline_text
from .budget import Budget, GenerationLedger

if TYPE_CHECKING:  # pragma: no cover
    from .settings import CompareSettings, GridRun

TRAIN_DOCS = "docs/compare.md, 'Your own training loop'"


class TrainingRunError(DataFlexError, RuntimeError):
    """A user's training function left a run that cannot be paired (no evaluation before or after training, a
    strategy that saw no batch, a bad logged value); the message names the run and the fix."""


class CountingStrategy(Strategy):
    """A `Strategy` that counts every batch it decides on into a `GenerationLedger` (the run's budget use).

    Every host calls `Strategy.apply` once per step (per micro-batch under gradient accumulation) with the rollouts
    it generated, so the counts are those of the user's loop, whatever it reports.

    Args:
        config: the strategy's config (any form `build_strategy` reads).
        ledger: the run's ledger: completions, completion tokens, trained tokens and steps are added there.

    Attributes:
        signal_groups: groups whose finite rewards are not all equal (they carry a learning signal).
        zero_signal_completions: completions in the other groups.
        kept_fractions: per `apply` call, the fraction of rows kept.
    """

    def __init__(self, config: Any, ledger: GenerationLedger):
        super().__init__(build_strategy(config).config)
        self.ledger = ledger
        self.signal_groups = 0
        self.zero_signal_completions = 0
        self.kept_fractions: list[float] = []
        self.proportions: list[dict] = []
        self._steps: set[int] = set()

    def apply(self, batch, step, **options):
        decision = super().apply(batch, step, **options)
        self._count(batch, int(step), decision)
        return decision

    def _count(self, batch, step: int, decision) -> None:
        """Add one decided batch: rows, tokens (``completion_mask (N, L)``), kept tokens, signal groups."""
        mask = batch.valid_mask
        if mask is None:
            raise TrainingRunError(
                "the RolloutBatch given to the strategy has no completion_mask, so the comparison cannot count the "
                "completion tokens of the run; pass RolloutBatch(..., completion_mask=mask) with mask (N, L) the "
                "completion's real tokens"
            )
        mask = mask.bool()
        kept = decision.keep.unsqueeze(1) & mask
        if decision.token_keep is not None:
            kept = kept & decision.token_keep.bool()
        self._steps.add(step)
        self.ledger.record_shown(step, batch.n, int(mask.sum()), int(kept.sum()), steps=len(self._steps))
        self.kept_fractions.append(float(decision.keep.float().mean()) if batch.n else 1.0)
        if batch.domains is not None and batch.n:
            self._count_domains(step, list(batch.domains))
        if batch.group_ids is not None and batch.n:
            signal = group_signal(batch.rewards, batch.group_ids)
            self.signal_groups += int(signal.sum())
            _, index = torch.unique(batch.group_ids, return_inverse=True)
            self.zero_signal_completions += int((~signal[index]).sum())

    def _count_domains(self, step: int, domains: list) -> None:
        """Add the step's rows per domain to `proportions` (the record's sampled shares and the mixer's target)."""
        if not self.proportions or self.proportions[-1]["step"] != step:
            self.proportions.append({"step": step, "rows": {}, "target": self.target_proportions})
        rows = self.proportions[-1]["rows"]
        for name in set(domains):
            rows[str(name)] = rows.get(str(name), 0) + domains.count(name)

    def proportion_record(self) -> list[dict]:
        """The result record's ``proportions``: per step, each domain's share of the rows and the mixer's target."""
        out = []
        for entry in self.proportions:
            total = sum(entry["rows"].values())
            shares = {name: count / total for name, count in entry["rows"].items()}
            out.append({"step": entry["step"], "sampled": shares, "target": entry["target"]})
        return out


def group_signal(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Whether each group's finite rewards are not all equal: ``(G,)`` bool over the groups of
    ``torch.unique(group_ids)``, from ``rewards (N,)`` and ``group_ids (N,)``."""
    _, index = torch.unique(group_ids, return_inverse=True)
    count = int(index.max()) + 1
    values = rewards.detach().float()
    finite = torch.isfinite(values)
    high = torch.full((count,), -math.inf).scatter_reduce(
        0, index[finite].cpu(), values[finite].cpu(), reduce="amax", include_self=True
    )
    low = torch.full((count,), math.inf).scatter_reduce(
        0, index[finite].cpu(), values[finite].cpu(), reduce="amin", include_self=True
    )
    return torch.isfinite(high) & (high > low)


class TrainingRun:
    """One (strategy, seed) run of a comparison, handed to the user's ``train(run)``.

    Attributes:
        strategy: the built strategy (a `CountingStrategy`): bind it to your host, e.g.
            ``DataFlexCallback(run.strategy)``; it counts what your loop generates.
        strategy_name: the strategy as the comparison names it (``"baseline"``, ``"diffband"``, a file).
        seed: the run's seed: seed your initial weights, data order and sampling with it, so the runs of one
            seed differ only by their strategy.
        budget: the run's `Budget` (``steps:N`` or ``completions:N``); stop when `budget_spent` is True.
        output_dir: the run's folder, for your checkpoints and logs.
        name: the run's name (``<strategy>-seed<k>``).
    """

    def __init__(self, strategy_name: str, seed: int, budget: Budget, output_dir: str, name: str):
        self.ledger = GenerationLedger(budget)
        spec = "baseline" if str(strategy_name).lower() == "none" else strategy_name
        self.strategy = CountingStrategy(spec, self.ledger)
        self.strategy_name, self.seed, self.budget = strategy_name, int(seed), budget
        self.output_dir, self.name = output_dir, name
        self.points: list[dict] = []
        self.domains: list[str] | None = None
        self.started = time.perf_counter()

    def budget_spent(self) -> bool:
        """True once the batches the strategy decided on reach the budget (steps or completions): stop training
        after this step (Lightning: set ``trainer.should_stop = True`` in ``on_train_batch_end``)."""
        return self.ledger.spent

    @property
    def completions(self) -> int:
        """Completions the strategy has been shown so far (every row of every batch it decided on)."""
        return self.ledger.completions

    @property
    def steps(self) -> int:
        """Distinct steps the strategy has decided on so far."""
        return self.ledger.steps

    def log(self, accuracy: float, *, step: int | None = None, **per_domain: float) -> None:
        """Record a held-out evaluation now: before training (no batch decided yet), after it, or in between.

        The point is placed at the completions, tokens and steps the library counted, not at `step`.

        Args:
            accuracy: the held-out score in [0, 1] (e.g. sampled pass@1, `lightning.held_out.sampled_pass_at_1`);
                the comparison's headline.
            step: your loop's step counter, kept beside the point for your reading (``host_step``).
            per_domain: the score per domain (``arithmetic=0.4, logic=0.2``); give the same domains every time.

        Raises `TrainingRunError` for a value that is not a number in [0, 1], or domains that differ between calls.
        """
        values = {"overall": accuracy, **per_domain}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
                what = "accuracy" if key == "overall" else f"domain {key!r}"
                raise TrainingRunError(
                    f"run {self.name}: run.log got {what}={value!r}; log held-out scores as numbers in [0, 1], "
                    "e.g. run.log(accuracy=0.42, step=trainer.global_step, arithmetic=0.5)"
                )
        domains = sorted(per_domain)
        if self.domains is None:
            self.domains = domains
        elif domains != self.domains:
            raise TrainingRunError(
                f"run {self.name}: run.log got domains {domains}, but the first log gave {self.domains}; log the same "
                "domains every time (the report pairs them across runs)"
            )
        ledger = self.ledger
        point = {
            "step": ledger.steps,
            "completions": ledger.completions,
            "completion_tokens": int(ledger.completion_tokens),
            "trained_tokens": int(ledger.trained_tokens),
            "wall_seconds": round(time.perf_counter() - self.started, 3),
            "accuracy": {k: float(v) for k, v in values.items()},
            "headline": float(accuracy),
            "host_step": step,
        }
        if self.points and self.points[-1]["completions"] == point["completions"]:
            self.points[-1] = point  # two logs at the same compute: the later one counts
        else:
            self.points.append(point)


def _checked_points(run: TrainingRun, function: str) -> list[dict]:
    """The run's curve, first point before training and last after it; `TrainingRunError` naming the fix else."""
    fix = (
        f"call run.log(accuracy=..., step=0) before training and run.log(accuracy=..., step=...) after it, in "
        f"{function} ({TRAIN_DOCS})"
    )
    if run.ledger.completions == 0:
        raise TrainingRunError(
            f"run {run.name}: the strategy decided on no batch, so nothing was trained or counted; bind run.strategy "
            f"to your host in {function} (Lightning: Trainer(callbacks=[DataFlexCallback(run.strategy)]) and "
            "self.dataflex.loss(...) in training_step; your own loop: run.strategy.apply(batch, step))"
        )
    if not run.points:
        raise TrainingRunError(f"run {run.name}: {function} logged no held-out evaluation; {fix}")
    if run.points[0]["completions"] != 0:
        raise TrainingRunError(
            f"run {run.name}: {function} logged no evaluation before training (its first log came after "
            f"{run.points[0]['completions']} completions); {fix}"
        )
    if len(run.points) < 2 or run.points[-1]["completions"] != run.ledger.completions:
        raise TrainingRunError(
            f"run {run.name}: {function} logged no evaluation after training (the strategy was shown "
            f"{run.ledger.completions} completions, the last log came after {run.points[-1]['completions']}); {fix}"
        )
    return run.points


def budget_problem(ledger: GenerationLedger) -> str | None:
    """Why a run's budget use makes it unfair to pair (short of the budget, or past it by more than one step), or
    None."""
    budget = ledger.budget
    if not ledger.spent:
        used = ledger.steps if budget.unit == "steps" else ledger.completions
        return f"stopped at {used} of its {budget} budget"
    if budget.unit == "steps":
        over = ledger.steps - budget.amount
        return f"ran {over} step(s) past its {budget} budget" if over > 0 else None
    step_size = ledger.round_size or 0
    if ledger.overshoot > step_size:
        return f"generated {ledger.overshoot} completions past its {budget} budget, more than one step's ({step_size})"
    return None


def training_record(settings: CompareSettings, run: GridRun, training: TrainingRun, function: str) -> dict:
    """The result record of a finished training-function run (the fields of `results.RESULT_FIELDS`): the headline is
    the logged accuracy, every domain as logged, the budget use as the strategy counted it."""
    points = _checked_points(training, function)
    ledger, strategy = training.ledger, training.strategy
    before, after = points[0]["accuracy"], points[-1]["accuracy"]
    kept = strategy.kept_fractions
    problem = budget_problem(ledger)
    return {
        "strategy": run.strategy,
        "seed": run.seed,
        "name": run.name,
        "budget": str(settings.budget),
        "shared_key": settings.shared_key(),
        "run_dir": training.output_dir,
        "train": function,
        "domains": list(training.domains or []),
        "held_out_rows": {"total": None, "per_domain": {}},
        "steps": ledger.steps,
        "completions": ledger.completions,
        "reused_responses": 0,
        "overshoot": ledger.overshoot,
        "round_completions": ledger.round_size,
        "budget_problem": problem,
        "eval_points": {"planned": None, "evaluated": len(points) - 2},
        "completion_tokens": int(ledger.completion_tokens),
        "trained_tokens": int(ledger.trained_tokens),
        "signal_groups": strategy.signal_groups,
        "zero_signal_completions": strategy.zero_signal_completions,
        "completions_per_signal_group": (
            ledger.completions / strategy.signal_groups if strategy.signal_groups else None
        ),
        "unscored_completions": None,
        "wall_seconds": points[-1]["wall_seconds"],
        "generation_seconds": None,
        "update_seconds": None,
        "kept_frac": sum(kept) / len(kept) if kept else 1.0,
        "truncated_share": None,
        "before": before,
        "after": after,
        "headline": {
            "metric": LOGGED,
            "levels": None,
            "rows": None,
            "before": before["overall"],
            "after": after["overall"],
        },
        "curve": points,
        "proportions": strategy.proportion_record(),
    }


def train_run(settings: CompareSettings, run: GridRun) -> dict:
    """Call the comparison's training function on one grid run; its result record (`results.execute_run` writes
    it)."""
    from .settings import CompareInputError
    from .train_function import resolve_train, train_name

    function = resolve_train(settings.train, CompareInputError)
    name = train_name(settings.train)
    folder = settings.run_dir(run)
    os.makedirs(folder, exist_ok=True)
    training = TrainingRun(run.strategy, run.seed, settings.budget, folder, run.name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # kept for the report, as a TRL run's are
        function(training)
    record = training_record(settings, run, training, name)
    notes = {str(w.message).strip() for w in caught if str(w.message).startswith("dataflex")}
    if record["budget_problem"]:
        notes.add(f"dataflex compare: run {run.name} {record['budget_problem']}: not a fair pairing")
    record["notes"] = sorted(notes)
    return record


def report_lines(settings, outcome) -> list[str]:
    """The report's settings of a comparison of a training function: what it trained, and how it was counted."""
    total_run_seconds = sum(r["wall_seconds"] for r in outcome.records)
    function = settings.train_inputs()["function"]
    lines = [
        f"- command: `{settings.command}`" if settings.command else None,
        f"- training function: `{function}` (model, data, reward and batch shape are its own); it is called once "
        "per strategy and seed with the built strategy, which counts every batch it decides on",
        f"- budget per run: `{settings.budget}`, in what the strategy was shown: completions are the rows of the "
        "batches it decided on, completion tokens their completion_mask, steps the distinct steps",
        f"- seeds: {', '.join(str(s) for s in sorted({r['seed'] for r in outcome.records}))} (the function seeds its "
        "weights, data and sampling with run.seed); baseline: `" + settings.baseline + "`",
        f"- headline: {headline_text(outcome.records[0]['headline'])}, before training, after it and where it "
        "logged in between; accuracies are fractions (0-1)",
        None
        if settings.cost_model is None
        else f"- cost model: {settings.cost_model} (`--cost-model`; linear in tokens, no fixed cost per step)",
        f"- wall time: {outcome.wall_seconds:.0f} s for this invocation with {settings.jobs} job(s) "
        f"({len(outcome.computed)} runs computed, {len(outcome.reused)} reused from a previous invocation); "
        f"{total_run_seconds:.0f} s summed over runs (a run's seconds include its own evaluations)",
    ]
    if settings.budget.unit == "completions":
        lines.append(f"- overshoot beyond the budget of {settings.budget.amount} completions:")
        for strategy in settings.strategies:
            values = [r["overshoot"] for r in outcome.records if r["strategy"] == strategy]
            if values:
                lines.append(f"  - `{strategy}`: mean {sum(values) / len(values):.0f}, max {max(values)}")
    return [line for line in lines if line]
