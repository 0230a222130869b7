"""Completion accounting of a run: one metrics record per optimizer step, completions generated, signal groups trained.

`RecordMetrics` (built by `metrics_callback`) is the trainer callback that keeps the records
(the rows of metrics.jsonl) and drives the progress bar; `scheduled_completions` and
`signal_accounting` are the counts it uses, and `dataflex compare`'s budget reads `GENERATED_KEY`.
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


GENERATED_KEY = "dataflex/dynamic/generated"
"""The step's generated completions (all rounds), logged by a strategy with a ``dynamic_sampling`` part."""
KEPT_TOKENS_KEY = "dataflex/kept_tokens"
"""The completion tokens of the responses a strategy kept in the loss of a generation batch (all processes), logged by
the TRL adapter; absent without a strategy (every response is trained)."""
SIGNAL_GROUPS_KEY = "dataflex/dynamic/signal_groups"
"""The signal groups a dynamic-sampling step trained on, logged by a strategy with a ``dynamic_sampling`` part."""
ZERO_STD_KEY = "frac_reward_zero_std"
"""TRL's logged fraction of the generation batch's groups whose rewards are all equal (all processes)."""


def scheduled_completions(args, global_step: int) -> int:
    """Completions TRL's generation schedule makes in optimizer step `global_step` (1-based), all processes.

    TRL generates ``generation_batch_size`` completions at micro-steps 0, G, 2G, ... with
    G = ``steps_per_generation * num_iterations``. Pre-rollout selection changes which prompts are
    generated, never how many; dynamic sampling generates more (its logged `GENERATED_KEY` counts them).
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
    Otherwise every generated group is trained, and a group carries signal when its rewards are not
    all equal: TRL's `ZERO_STD_KEY` (reward std close to 0) gives the share that are. None when the
    step's logs (or a missing buffer) cannot tell.

    `unscored_groups`: the step's groups no reward function scored (None or NaN for each completion,
    `user_reward.ScoredRewards`). TRL gives them a NaN spread, which `ZERO_STD_KEY` does not count, so
    they are moved to the zero-signal side here; never a signal group, with or without dynamic sampling.
    """
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


def metrics_callback(records: list[dict], domains: list[str], steps: int, progress: bool, scoring=None):
    """A `RecordMetrics` trainer callback appending one record per optimizer step to `records`.

    `scoring`: the run's `user_reward.ScoredRewards` (the user's reward functions), whose count of unscored
    completions and groups each step's record takes; None with the built-in verifier.
    """
    from transformers import TrainerCallback

    class RecordMetrics(TrainerCallback):
        """Keep one record per optimizer step, count generated completions and signal groups, drive the progress bar.

        Each record holds the step's ``generated`` completions, the cumulative ``completions``, the
        step's trained ``signal_groups`` and ``zero_signal_completions`` (`signal_accounting`).
        ``buffer`` is the adapter's dynamic-sampling buffer, set once the trainer exists (None without one).
        """

        def __init__(self):
            self.bar = None
            self.completions = 0
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
            if progress:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=steps, desc="dataflex run", unit="step", dynamic_ncols=True)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return  # the end-of-training summary has no per-step metrics
            generated = self._scheduled
            if logs.get(GENERATED_KEY) is not None:  # dynamic sampling generated every round it needed
                generated = int(round(logs[GENERATED_KEY]))
                self.completions += generated - self._scheduled
            self._scheduled = 0
            zero_total = None if self.buffer is None else int(self.buffer.totals["zero_signal_completions"])
            unscored, unscored_groups = (None, 0) if scoring is None else scoring.take()
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
            record = step_record(state.global_step, logs, domains)
            record.update(
                completions=self.completions,
                generated=generated,
                signal_groups=signal_groups,
                zero_signal_completions=zero_signal,
            )
            if unscored is not None:  # the user's reward: completions no function scored this step
                record["unscored_completions"] = unscored
            records.append(record)
            if self.bar is not None:
                self.bar.update(record["step"] - self.bar.n)
                shown = {"reward": record["reward"], "kept": record["kept_frac"]}
                self.bar.set_postfix({k: f"{v:.2f}" for k, v in shown.items() if v is not None})

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()

    return RecordMetrics()
