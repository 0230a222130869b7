"""Completion accounting of a run: one metrics record per optimizer step, completions generated, signal groups trained.

`RecordMetrics` (built by `metrics_callback`) is the trainer callback that keeps the records
(the rows of metrics.jsonl) and drives the progress bar; `scheduled_completions` and
`signal_accounting` are the counts it uses. A strategy part that generates more than TRL's schedule (dynamic
sampling's rounds, rollout allocation's pilots and commits) logs the step's generated completions (`GENERATED_KEYS`);
`logged_generated` reads them here and in `dataflex compare`'s budget, so both count every completion alike.
"""

from __future__ import annotations

import math
from typing import Any


def step_record(step: int, logs: dict, domains: list[str]) -> dict:
    """Flatten one step's trainer logs into the metrics.jsonl schema (plus every raw numeric log)."""
    record: dict[str, Any] = {"step": step}
    raw = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    record["loss"] = raw.get("loss")
    record["reward"] = raw.get("reward")
    for domain in domains:
        record[f"reward/{domain}"] = raw.get(f"tasks/reward/{domain}")
        record[f"mix/actual/{domain}"] = raw.get(f"tasks/share/{domain}", 0.0)
    kept = [v for k, v in raw.items() if k.endswith("kept_frac")]
    record["kept_frac"] = kept[0] if kept else 1.0
    for key, value in raw.items():
        # Strategy metrics (mix targets, weights, ...) keep the adapter's names; wall-clock
        # timings are left out so a fixed seed gives byte-identical metrics.
        if key in record or key.startswith("tasks/") or "time" in key or key.endswith("_per_second"):
            continue
        record[key] = value
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


GENERATED_KEYS = ("dataflex/dynamic/generated", "dataflex/alloc/step_generated", "dataflex/pre_select/step_generated")
"""The step's generated completions, every round, logged by a strategy part that generates more than TRL's schedule:
dynamic sampling (its rounds), rollout allocation (its pilots and commits) and a ``pre_select`` part with
``refill: false`` (only the kept prompts); the three are refused together.
`logged_generated` reads them."""
GENERATED_TOKENS_KEY = "dataflex/alloc/step_generated_tokens"
"""The completion tokens of every completion the step generated (pilots and commits), logged by the TRL adapter for a
strategy with an ``allocation`` part, whose generation calls differ in size (TRL's logged mean length averages them)."""
REUSED_KEY = "dataflex/alloc/step_reused_responses"
"""Earlier responses an ``allocation`` part reused in the step's groups: trained, but not generated (no cost)."""
KEPT_TOKENS_KEY = "dataflex/kept_tokens"
"""The completion tokens of the responses a strategy kept in the loss of a generation batch (all processes), logged by
the TRL adapter; absent without a strategy (every response is trained)."""
SIGNAL_GROUPS_KEY = "dataflex/dynamic/signal_groups"
"""The signal groups a dynamic-sampling step trained on, logged by a strategy with a ``dynamic_sampling`` part."""
ALLOCATION_SIGNAL_GROUPS_KEY = "dataflex/alloc/step_signal_groups"
"""The trained groups of an allocation step whose rewards differ, logged by a strategy with an ``allocation`` part."""
ZERO_STD_KEY = "frac_reward_zero_std"
"""TRL's logged fraction of the generation batch's groups whose rewards are all equal (all processes)."""


def logged_generated(logs: dict) -> int | None:
    """The step's generated completions as its strategy logged them (`GENERATED_KEYS`), or None when it logged none
    (TRL's schedule counts the step: `scheduled_completions`)."""
    for key in GENERATED_KEYS:
        if logs.get(key) is not None:
            return int(round(float(logs[key])))
    return None


def generated_tokens(logs: dict, generated: int) -> float | None:
    """The completion tokens of the step's `generated` completions: `GENERATED_TOKENS_KEY` where logged, else TRL's
    logged ``completions/mean_length`` times `generated` (exact when every generation call of the step had the same
    size); None when neither is logged or finite."""
    for value, count in ((logs.get(GENERATED_TOKENS_KEY), 1), (logs.get("completions/mean_length"), generated)):
        if value is not None and math.isfinite(float(value)):
            return float(value) * count
    return None


def scheduled_completions(args, global_step: int) -> int:
    """Completions TRL's generation schedule makes in optimizer step `global_step` (1-based), all processes.

    TRL generates ``generation_batch_size`` completions at micro-steps 0, G, 2G, ... with
    G = ``steps_per_generation * num_iterations``. Pre-rollout selection changes which prompts are
    generated, never how many; dynamic sampling and rollout allocation generate more (`logged_generated` counts them).
    """
    micro = int(args.gradient_accumulation_steps)
    every = int(args.steps_per_generation) * int(getattr(args, "num_iterations", 1) or 1)
    before, after = (global_step - 1) * micro, global_step * micro
    return (-(-after // every) - -(-before // every)) * int(args.generation_batch_size)


def dynamic_buffer(trainer):
    """The `SignalGroupBuffer` the TRL adapter drives for a ``dynamic_sampling`` strategy, or None."""
    dynamic = getattr(getattr(trainer, "dataflex", None), "dynamic", None)
    return None if dynamic is None else dynamic.buffer


def signal_accounting(
    logs: dict,
    generated: int,
    num_generations: int,
    zero_signal_total: int | None,
    zero_signal_before: int,
    unscored_groups: int = 0,
) -> tuple[int | None, int | None]:
    """``(trained signal groups, completions in zero-signal groups)`` of one step, from its logs.

    Dynamic sampling (`SIGNAL_GROUPS_KEY` logged): the signal groups it trained, and the step's
    growth of its buffer's ``totals["zero_signal_completions"]`` (`zero_signal_total`, read after the
    step; the buffer judges every generated group, trained or not, with the strategy's select part).
    Rollout allocation (`ALLOCATION_SIGNAL_GROUPS_KEY` logged): the trained groups whose rewards differ, each of
    ``num_generations`` generated completions (its pilot and its commit); every other generated completion (pilots
    not committed or not needed, groups trained without signal) is on the zero-signal side.
    Otherwise every generated group is trained, and a group carries signal when its rewards are not
    all equal: TRL's `ZERO_STD_KEY` (reward std close to 0) gives the share that are. None when the
    step's logs (or a missing buffer) cannot tell.

    `unscored_groups`: the step's groups no reward function scored (None or NaN for each completion,
    `user_reward.ScoredRewards`). TRL gives them a NaN spread, which `ZERO_STD_KEY` does not count, so
    they are moved to the zero-signal side here; never a signal group, with or without dynamic sampling.
    """
    if logs.get(ALLOCATION_SIGNAL_GROUPS_KEY) is not None:
        signal_groups = int(round(float(logs[ALLOCATION_SIGNAL_GROUPS_KEY])))
        return signal_groups, max(int(generated) - signal_groups * int(num_generations), 0)
    if logs.get(SIGNAL_GROUPS_KEY) is not None:
        zero_signal = None if zero_signal_total is None else int(zero_signal_total - zero_signal_before)
        scored_groups = max(generated // num_generations - unscored_groups, 0)
        return min(int(round(logs[SIGNAL_GROUPS_KEY])), scored_groups), zero_signal
    if generated == 0:
        return 0, 0
    if logs.get(ZERO_STD_KEY) is None:
        return None, None
    groups = generated // num_generations
    zero_groups = min(int(round(float(logs[ZERO_STD_KEY]) * groups)) + unscored_groups, groups)
    return groups - zero_groups, zero_groups * num_generations


class StepRecorder:
    """Keep one record per optimizer step, count generated completions and signal groups, drive the progress bar.

    Each record holds the step's ``generated`` completions (`logged_generated` where the strategy logged them:
    every dynamic-sampling round, every allocation pilot and commit; else TRL's schedule) and their
    ``generated_tokens`` (`generated_tokens`), the cumulative ``completions``, the step's trained
    ``signal_groups`` and ``zero_signal_completions`` (`signal_accounting`), and with an allocation part the
    step's ``reused_responses`` (trained, not generated: they count in neither ``generated`` nor ``completions``).
    ``buffer`` is the adapter's dynamic-sampling buffer, set once the trainer exists (None without one).
    The totals: ``completions``, ``generated_tokens`` (None once a step's logs could not tell them) and
    ``reused_responses``.
    """

    def __init__(self, records: list[dict], domains: list[str], steps: int, progress: bool, scoring: Any = None):
        self.records, self.domains, self.steps, self.progress, self.scoring = records, domains, steps, progress, scoring
        self.bar: Any = None
        self.completions = 0
        self.generated_tokens: float | None = 0.0
        self.reused_responses = 0
        self.signal_groups = 0
        self.zero_signal_completions = 0
        self.signal_counted = True  # False once a step's logs could not tell its signal groups
        self.buffer = None
        self._scheduled = 0  # this step's completions by TRL's schedule, until its logs say otherwise
        self._zero_signal_seen = 0

    def on_step_end(self, args, state, control, **kwargs):
        self._scheduled = scheduled_completions(args, state.global_step)
        self.completions += self._scheduled

    def on_train_begin(self, args, state, control, **kwargs):
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.steps, desc="dataflex run", unit="step", dynamic_ncols=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return  # the end-of-training summary has no per-step metrics
        generated = self._scheduled
        logged = logged_generated(logs)
        if logged is not None:  # dynamic sampling's rounds, allocation's pilots and commits: every one counts
            generated = logged
            self.completions += generated - self._scheduled
        self._scheduled = 0
        tokens = generated_tokens(logs, generated) if generated else 0.0
        if tokens is None or self.generated_tokens is None:
            self.generated_tokens = None
        else:
            self.generated_tokens += tokens
        reused = None if logs.get(REUSED_KEY) is None else int(round(float(logs[REUSED_KEY])))
        self.reused_responses += reused or 0
        zero_total = None if self.buffer is None else int(self.buffer.totals["zero_signal_completions"])
        unscored, unscored_groups = (None, 0) if self.scoring is None else self.scoring.take()
        signal_groups, zero_signal = signal_accounting(
            logs, generated, int(args.num_generations), zero_total, self._zero_signal_seen, unscored_groups
        )
        if zero_total is not None:
            self._zero_signal_seen = zero_total
        if signal_groups is None or zero_signal is None:
            self.signal_counted = False
        else:
            self.signal_groups += signal_groups
            self.zero_signal_completions += zero_signal
        record = step_record(state.global_step, logs, self.domains)
        record.update(
            completions=self.completions,
            generated=generated,
            generated_tokens=None if tokens is None else round(tokens, 3),
            signal_groups=signal_groups,
            zero_signal_completions=zero_signal,
        )
        if reused is not None:  # an allocation part: responses reused, not generated
            record["reused_responses"] = reused
        if unscored is not None:  # the user's reward: completions no function scored this step
            record["unscored_completions"] = unscored
        self.records.append(record)
        if self.bar is not None:
            self.bar.update(record["step"] - self.bar.n)
            shown = {"reward": record["reward"], "kept": record["kept_frac"]}
            self.bar.set_postfix({k: f"{v:.2f}" for k, v in shown.items() if v is not None})

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


def metrics_callback(records: list[dict], domains: list[str], steps: int, progress: bool, scoring: Any = None) -> Any:
    """A `RecordMetrics` trainer callback appending one record per optimizer step to `records`.

    `scoring`: the run's `user_reward.ScoredRewards` (the user's reward functions), whose count of unscored
    completions and groups each step's record takes; None with the built-in verifier.
    """
    from transformers import TrainerCallback

    class RecordMetrics(StepRecorder, TrainerCallback):
        pass

    return RecordMetrics(records, domains, steps, progress, scoring)
