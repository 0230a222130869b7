"""One compute budget for every strategy of a comparison: optimizer steps or generated completions.

`Budget.parse("steps:300")` or `Budget.parse("completions:20000")`. A steps budget gives every run
the same number of optimizer steps; a completions budget stops a run once it has generated that
many completions, which is the fair unit when a strategy changes how much is generated per step
(pre-rollout selection skips prompts before generation).

How completions are counted: TRL generates ``generation_batch_size`` completions (all processes
together) once every ``steps_per_generation * num_iterations`` micro-steps. `GenerationLedger`
applies that rule at the end of every optimizer step; a strategy part that generates more within the step
logs the step's total (`completion_accounting.logged_generated`: every round of a ``dynamic_sampling`` part, every
pilot and commit of an ``allocation`` part), which then replaces the schedule's count for that step
(`GenerationLedger.record_generated`), as `dataflex run`'s own accounting does. Responses an allocation part
reused from earlier steps cost no generation: they are counted apart (`GenerationLedger.reused_responses`).
Completion tokens come from TRL's logged ``completions/mean_length`` of each step times its completions, or, for an
allocation part (whose pilot and commit calls differ in size), from the adapter's exact
``dataflex/alloc/step_generated_tokens``; trained tokens (the
completion tokens of the responses the strategy kept in the loss) from the TRL adapter's logged
``dataflex/kept_tokens``, exact, or, on a path that does not log it (plain GRPO without a strategy: every
response is trained), the step's generated tokens times its logged kept fraction (1 without one). TRL's
generation batch has a fixed size (a pre-rollout sampler replaces skipped prompts rather than
generating fewer), so with the TRL adapter every strategy generates at least one batch per step:
the steps a fixed batch needs to spend the budget (`Budget.step_cap`) are enough for every
strategy, and dynamic sampling and allocation (whose pilots alone cost a batch's completions) spend it
in fewer. A strategy with a pre-rollout part, or an allocation part without refill, is still
given 4x the steps as a cap, so that a host that generates fewer per step can spend the same
completions over more steps.

Stopping and evaluating under a completions budget: a run stops within one generation round of
the budget. A step without dynamic sampling generates one round (one generation batch), so the
first step that reaches the budget overshoots it by less than a round; with dynamic sampling the
callback also stops the step's further rounds once the budget is reached (`bind_trainer`), so the
overshoot stays below one round there too (the step then trains on the signal groups in hand, as
when ``max_rounds`` ends it). An allocation step's next screening round is then its last (it commits
what the step still needs, as ``max_screens`` does), so the overshoot stays below one screening round
(a pilot and its commits). Evaluations along the way are planned in the budget's unit
(`EvalPlan`): by completions for a completions budget, so every strategy is evaluated at the same
completions whatever a step costs it, by steps for a steps budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dataflex_callbacks.errors import InputError

from ..completion_accounting import (
    KEPT_TOKENS_KEY,
    REUSED_KEY,
    generated_tokens,
    logged_generated,
)

BUDGET_UNITS = ("steps", "completions")
FEWER_STEP_HEADROOM = 4


@dataclass(frozen=True)
class Budget:
    """How much compute each run gets: `amount` optimizer steps or generated completions."""

    unit: str
    amount: int

    def __post_init__(self):
        if self.unit not in BUDGET_UNITS:
            raise InputError(f"unknown budget unit {self.unit!r}; use steps:N or completions:N (e.g. steps:300)")
        if int(self.amount) < 1:
            raise InputError(f"budget amount must be at least 1, got {self.amount} (e.g. steps:300)")

    @classmethod
    def parse(cls, text: str) -> Budget:
        """Read `steps:300` or `completions:20000`; raises ValueError naming the valid forms."""
        unit, sep, amount = str(text).strip().partition(":")
        if not sep or not amount.strip().isdigit():
            raise InputError(
                f"cannot read budget {text!r}; use steps:N or completions:N (e.g. steps:300, completions:20000)"
            )
        return cls(unit.strip().lower(), int(amount))

    def __str__(self) -> str:
        return f"{self.unit}:{self.amount}"

    def step_cap(self, completions_per_step: int, fewer_per_step: bool = False) -> int:
        """Optimizer steps to give the trainer (`max_steps`); a completions budget stops the run earlier or at it."""
        if self.unit == "steps":
            return int(self.amount)
        steps = math.ceil(self.amount / max(1, completions_per_step))
        return steps * (FEWER_STEP_HEADROOM if fewer_per_step else 1)


@dataclass
class EvalPlan:
    """When a run is evaluated besides before and after: `points` thresholds evenly spaced over the budget.

    The thresholds are in the budget's unit (``k * amount // (points + 1)`` steps or completions,
    k = 1..points). After each step the run is evaluated once if it crossed one or more thresholds
    not yet served; a step that crosses several (it generated more than their spacing) serves them
    with one evaluation, so its curve has fewer points than planned (`missed` counts them).
    """

    budget: Budget
    points: int

    def thresholds(self) -> list[int]:
        """The planned thresholds, ascending and distinct, each below the budget."""
        amount = int(self.budget.amount)
        marks = {k * amount // (self.points + 1) for k in range(1, self.points + 1)}
        return sorted(m for m in marks if 0 < m < amount)

    def due(self, served: int, steps: int, completions: int) -> list[int]:
        """Thresholds after the first `served` that a run at `steps` steps and `completions` completions has crossed."""
        value = steps if self.budget.unit == "steps" else completions
        return [mark for mark in self.thresholds()[served:] if mark <= value]


@dataclass
class GenerationLedger:
    """Counts completions and completion tokens a run generated, and decides when its budget is spent.

    Attributes:
        budget: the run's `Budget`.
        completions: completions generated so far (all processes).
        completion_tokens: completion tokens generated so far.
        trained_tokens: completion tokens of the responses kept in the loss so far (`record_trained`).
        steps: optimizer steps finished.
        generated_at: `step -> completions generated by that step's generation` (steps without a generation are absent).
        round_size: completions of one generation round (TRL's ``generation_batch_size``), once a step was counted.
        reused_responses: earlier responses an allocation part reused (trained, not generated: not in `completions`).
    """

    budget: Budget
    completions: int = 0
    completion_tokens: float = 0.0
    trained_tokens: float = 0.0
    steps: int = 0
    generated_at: dict = field(default_factory=dict)
    round_size: int | None = None
    reused_responses: int = 0

    def record_step(
        self, global_step: int, generation_batch_size: int, micro_steps_per_step: int, generate_every: int
    ) -> bool:
        """Count the generations of optimizer step `global_step` (1-based); True when the budget is now spent."""
        micro_before = (global_step - 1) * micro_steps_per_step
        micro_after = global_step * micro_steps_per_step
        # Generations happen at micro-steps 0, generate_every, 2*generate_every, ...
        generations = math.ceil(micro_after / generate_every) - math.ceil(micro_before / generate_every)
        if generations > 0:
            self.completions += generations * generation_batch_size
            self.generated_at[global_step] = generations * generation_batch_size
        self.steps = global_step
        return self.spent

    def record_generated(self, global_step: int, count: int) -> bool:
        """Replace the schedule's count of step `global_step` by the `count` its strategy logged
        (`completion_accounting.logged_generated`: every dynamic-sampling round, every allocation pilot and commit);
        True when the budget is now spent."""
        count = int(count)
        self.completions += count - self.generated_at.get(global_step, 0)
        if count:
            self.generated_at[global_step] = count
        else:
            self.generated_at.pop(global_step, None)
        return self.spent

    def record_lengths(self, global_step: int, mean_length) -> None:
        """Add the tokens of the generation made at `global_step`, from TRL's logged mean completion length."""
        count = self.generated_at.get(global_step)
        if count and mean_length is not None and math.isfinite(float(mean_length)):
            self.completion_tokens += float(mean_length) * count

    def record_tokens(self, global_step: int, logs: dict) -> None:
        """Add the completion tokens of the generation made at `global_step`, from its logs
        (`completion_accounting.generated_tokens`: exact for an allocation part, else TRL's mean length times the
        step's completions), and the responses an allocation part reused in it."""
        count = self.generated_at.get(global_step)
        tokens = generated_tokens(logs, count) if count else None
        if tokens is not None:
            self.completion_tokens += tokens
        if logs.get(REUSED_KEY) is not None:
            self.reused_responses += int(round(float(logs[REUSED_KEY])))

    def record_trained(self, global_step: int, logs: dict) -> None:
        """Add the tokens trained on from the generation made at `global_step`, from its logs.

        Exact where the TRL adapter logged `KEPT_TOKENS_KEY` (the kept responses' tokens in the loss, all
        processes). Otherwise (a trainer without a strategy) the generated tokens of the step
        (``completions/mean_length`` times its completions) times ``dataflex/kept_frac`` (1 when not logged,
        as without a strategy, where every response is trained): exact as far as the generated tokens are.
        A generation trained over several steps (``num_iterations`` > 1) counts once, like its generated tokens.
        """
        count = self.generated_at.get(global_step)
        if not count:
            return
        kept_tokens = logs.get(KEPT_TOKENS_KEY)
        if kept_tokens is not None and math.isfinite(float(kept_tokens)):
            self.trained_tokens += float(kept_tokens)
            return
        mean_length, kept_frac = logs.get("completions/mean_length"), logs.get("dataflex/kept_frac", 1.0)
        if mean_length is not None and math.isfinite(float(mean_length)) and math.isfinite(float(kept_frac)):
            self.trained_tokens += float(mean_length) * count * float(kept_frac)

    def record_shown(self, step: int, completions: int, tokens: int, trained_tokens: int, *, steps: int) -> bool:
        """Add one batch a training function's strategy decided on (`training_run.CountingStrategy`): its
        `completions` rows, their completion `tokens`, the `trained_tokens` kept in the loss, at the host's `step`;
        `steps` is the distinct steps seen so far. `round_size` becomes the most completions one step held.
        True when the budget is now spent."""
        self.completions += int(completions)
        self.completion_tokens += int(tokens)
        self.trained_tokens += int(trained_tokens)
        self.generated_at[step] = self.generated_at.get(step, 0) + int(completions)
        self.round_size = max(self.round_size or 0, self.generated_at[step])
        self.steps = int(steps)
        return self.spent

    @property
    def spent(self) -> bool:
        if self.budget.unit == "steps":
            return self.steps >= self.budget.amount
        return self.completions >= self.budget.amount

    @property
    def progress(self) -> int:
        """What the run has spent of its budget, in the budget's unit (steps or completions), at most the budget:
        the progress bar's count, which holds whatever a step generates (a step of fewer completions advances it
        less, an overshooting step ends it at the budget)."""
        spent = self.steps if self.budget.unit == "steps" else self.completions
        return min(int(spent), int(self.budget.amount))

    @property
    def overshoot(self) -> int | None:
        """Completions generated beyond a completions budget (0 when under it); None for a steps budget."""
        if self.budget.unit != "completions":
            return None
        return max(0, self.completions - int(self.budget.amount))

    def may_generate(self, generated_this_step: int) -> bool:
        """Whether a step that generated `generated_this_step` completions so far may generate another round.

        False once the finished steps and this step's rounds reach a completions budget. Every process
        counts the same logged, all-process numbers, so every process stops at the same round.
        """
        if self.budget.unit != "completions":
            return True
        return self.completions + int(generated_this_step) < int(self.budget.amount)


class BudgetTracker:
    """Count generated completions and tokens, stop at the budget, evaluate along the way (the hooks of
    `budget_callback`'s ``TrainerCallback``, which adds no state of its own).

    A step whose logs follow (``control.should_log``; the runner logs every step) is decided in
    `on_log`, once its logged count of generated completions is known; any other step at its end.
    """

    def __init__(
        self,
        ledger: GenerationLedger,
        evaluate: Callable | None,
        plan: EvalPlan,
        on_step: Callable[[int], None] | None,
    ):
        self.ledger, self.evaluate, self.on_step = ledger, evaluate, on_step
        self.curve: list[dict] = []
        self.plan = plan
        self.served = 0  # thresholds of the plan already served
        self.started: float | None = None  # perf_counter() when training began
        self.eval_seconds = 0.0  # spent in the evaluations along the way, not counted as training
        self.ended: float | None = None  # perf_counter() when training ended
        self.generation_seconds: float | None = None  # in the trainer's generation, once bound to a trainer

    def seconds(self) -> dict:
        """The training time so far as curve point fields: ``wall_seconds``, and where generation was timed,
        ``generation_seconds`` and ``update_seconds`` (the rest)."""
        total = self.train_seconds()
        out = {"wall_seconds": round(total, 3)}
        if self.generation_seconds is not None:
            generation = min(self.generation_seconds, total)
            out.update(generation_seconds=round(generation, 3), update_seconds=round(total - generation, 3))
        return out

    def train_seconds(self) -> float:
        """Seconds of training so far (until training ended, once it has), evaluations along the way excluded."""
        if self.started is None:
            return 0.0
        now = self.ended if self.ended is not None else time.perf_counter()
        return max(0.0, now - self.started - self.eval_seconds)

    def on_train_begin(self, args, state, control, **kwargs):
        self.started, self.eval_seconds, self.ended = time.perf_counter(), 0.0, None
        if self.generation_seconds is not None:
            self.generation_seconds = 0.0
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.ended = time.perf_counter()
        return control

    def bind_trainer(self, trainer) -> None:
        """Stop a dynamic-sampling step's further rounds, and end an allocation step's screening, once the budget
        is reached (a TRL DataFlex trainer), and time the trainer's generation (``_generate_and_score_completions``,
        where it has one)."""
        adapter = getattr(trainer, "dataflex", None)
        for part in (getattr(adapter, "dynamic", None), getattr(adapter, "allocation", None)):
            if part is not None:
                part.may_generate = self.ledger.may_generate
        generate = getattr(trainer, "_generate_and_score_completions", None)
        if generate is None:
            return
        self.generation_seconds = 0.0

        def timed_generation(*args, **kwargs):
            began = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                self.generation_seconds += time.perf_counter() - began

        # The only way in between generation and update: TRL calls this method from `_prepare_inputs`.
        trainer._generate_and_score_completions = timed_generation

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        generate_every = int(args.steps_per_generation) * int(getattr(args, "num_iterations", 1) or 1)
        self.ledger.round_size = int(args.generation_batch_size)
        self.ledger.record_step(
            state.global_step,
            int(args.generation_batch_size),
            int(args.gradient_accumulation_steps),
            generate_every,
        )
        if not control.should_log:
            self._finish_step(state, control, model, processing_class)
        return control

    def on_log(self, args, state, control, logs=None, model=None, processing_class=None, **kwargs):
        if not logs or "loss" not in logs:
            return control
        generated = logged_generated(logs)
        if generated is not None:  # every dynamic-sampling round, every allocation pilot and commit
            self.ledger.record_generated(state.global_step, generated)
        self.ledger.record_tokens(state.global_step, logs)
        self.ledger.record_trained(state.global_step, logs)
        self._finish_step(state, control, model, processing_class)
        return control

    def _finish_step(self, state, control, model, processing_class) -> None:
        if self.ledger.spent:
            control.should_training_stop = True
        elif self.evaluate is not None:
            due = self.plan.due(self.served, state.global_step, self.ledger.completions)
            if due:
                point = {
                    "step": state.global_step,
                    "completions": self.ledger.completions,
                    "completion_tokens": int(round(self.ledger.completion_tokens)),
                    "trained_tokens": int(round(self.ledger.trained_tokens)),
                    **self.seconds(),
                }
                evaluating = time.perf_counter()
                point.update(self.evaluate(model, processing_class).curve_fields())
                self.eval_seconds += time.perf_counter() - evaluating
                self.curve.append({**point, "planned": due})
                self.served += len(due)
        if self.on_step is not None:
            self.on_step(self.ledger.progress)


def budget_callback(
    ledger: GenerationLedger,
    evaluate: Callable | None = None,
    eval_points: int = 0,
    on_step: Callable[[int], None] | None = None,
):
    """A `transformers.TrainerCallback` that feeds `ledger`, stops training when the budget is spent,
    evaluates held-out accuracy at the `eval_points` thresholds of an `EvalPlan` and, after each finished step,
    tells `on_step` what the run has spent of its budget in the budget's unit (`GenerationLedger.progress`).

    `evaluate(model, tokenizer) -> held_out.HeldOutScores`; its results go to `callback.curve` as
    `{"step", "completions", "completion_tokens", "trained_tokens", "wall_seconds", "generation_seconds",
    "update_seconds", "accuracy", "sampled_pass_at_1", "headline", "planned"}` rows (``accuracy``: greedy, per domain
    and overall; ``sampled_pass_at_1``: the same sampled, None with ``--eval-samples 0``; ``headline``: one number,
    `HeldOutScores.curve_fields`), ``planned`` being the thresholds the evaluation serves (the final evaluation is
    the runner's own); `callback.plan` is the plan. ``step`` counts optimizer steps.
    ``wall_seconds`` is training time: seconds since training began (``on_train_begin``, after the runner's
    "before" evaluation and model loading) less the time spent in the evaluations along the way;
    `callback.train_seconds()` gives it at any moment. It splits into ``generation_seconds``, the time in the
    trainer's ``_generate_and_score_completions`` (generation, reward scoring, the old and reference
    log-probabilities TRL computes there, the adapter's strategy decision; every dynamic-sampling round),
    measured once `bind_trainer` has the trainer, and ``update_seconds``, the rest (forward and backward
    passes of the loss, optimizer steps, callbacks). A trainer without that method records neither (the
    report reads "n/a (not recorded)").
    """
    from transformers import TrainerCallback

    class BudgetCallback(BudgetTracker, TrainerCallback):
        pass

    return BudgetCallback(ledger, evaluate, EvalPlan(ledger.budget, int(eval_points)), on_step)
