"""The report's Method section: the statistics (`stats`' docstring, one source for code and report) and how each
figure is measured."""

from __future__ import annotations

from . import stats


def method_text() -> str:
    """The statistical method, as documented in `compare.stats` (one source for code and report)."""
    doc = stats.__doc__ or ""
    marker = "Method (also written into every report):"
    return doc.split(marker, 1)[1].strip() if marker in doc else doc.strip()


METHOD_NOTES = [
    '- The "before" figures of a seed are the same for every strategy (same initial weights), so the '
    "paired difference of figures after training is also the paired difference of gains.",
    "- The headline is held-out sampled pass@1: per prompt the share of `--eval-samples` completions sampled at "
    "the training temperature that the verifier (or `--reward` at `--reward-threshold`) passes, averaged over the "
    "headline's prompts (the testbed's headline levels; every held-out prompt of your data). The samples are "
    "seeded, so the same weights give the same figure, and every evaluation point uses the same seed. Greedy "
    "accuracy is the share of prompts whose greedy completion passes.",
    "- Completions are counted from TRL's generation schedule (`generation_batch_size` completions every "
    "`steps_per_generation * num_iterations` micro-steps); completion tokens from TRL's logged mean "
    "completion length. A strategy with dynamic sampling counts every round it generated "
    "(`dataflex/dynamic/generated`), one with rollout allocation every pilot and commit "
    "(`dataflex/alloc/step_generated`, their tokens exactly: `dataflex/alloc/step_generated_tokens`); responses "
    "an allocation part reused from earlier steps cost no generation and are counted apart (`reused_responses`). "
    "A `completions:N` budget stops a run at the first step that reaches N, "
    "a dynamic-sampling step at the first round that reaches it and an allocation step at its next screening "
    "round, so a run overshoots N by less than one generation (or screening) round. "
    "Intermediate evaluations are planned in the budget's unit: at N/(k+1), 2N/(k+1), ... "
    "completions for a completions budget, whatever a step costs each strategy.",
    "- Optimizer steps are the trainer's. Trained tokens are the completion tokens of the responses the "
    "strategy kept in the loss (`dataflex/kept_tokens`, logged by the TRL adapter; without a strategy every "
    "generated response is trained). Generation seconds are the time in TRL's "
    "`_generate_and_score_completions` (generation, reward scoring, the log-probabilities computed there, the "
    "strategy's decision, every dynamic-sampling round); update seconds the rest of the training time "
    "(forward and backward passes, optimizer steps). A cost model's modelled cost is gen_token x generated "
    "tokens + train_token x trained tokens.",
    "- Completions per trained signal group: completions generated over the signal groups trained on "
    "(`dataflex/dynamic/signal_groups` with dynamic sampling; otherwise the generated groups whose rewards "
    "are not all equal, from TRL's `frac_reward_zero_std`). Completions in zero-signal groups: generated "
    "completions whose group's rewards were all equal (with dynamic sampling, as the strategy's select "
    "part judged them, every round included).",
    "- Runs of one invocation share the machine when `--jobs` > 1, so wall times are comparable only roughly.",
]

FUNCTION_METHOD_NOTES = [
    '- The "before" figures of a seed are the same for every strategy when your training function seeds its '
    "initial weights with run.seed, so the paired difference of figures after training is also the paired "
    "difference of gains.",
    "- The headline is the held-out accuracy your training function logged (run.log(accuracy=..., **per_domain)): "
    "dataflex ran no evaluation of its own, so its prompts, samples and reward are the function's.",
    "- Counted by the library from every batch the strategy decided on (`Strategy.apply`, which the host calls "
    "once per step, or per micro-batch under gradient accumulation), not taken from the function: completions are "
    "the batches' rows, completion tokens their `completion_mask`, trained tokens those the strategy kept in the "
    "loss (its keep and token masks), steps the distinct step numbers passed to the strategy (Lightning: the "
    "optimizer step). A run stops when run.budget_spent() turns True; one that stopped short of its budget or went "
    "past it by more than one step's completions is flagged. Each curve point is placed at the counts when "
    "run.log was called.",
    "- Completions per trained signal group: completions over the groups (`group_ids`) whose finite rewards are "
    "not all equal; completions in zero-signal groups: those of the other groups.",
    "- Training seconds are the function's wall time from its call to each run.log (its set-up and its own "
    "evaluations included); generation and update seconds are not measured. Runs of one invocation share the "
    "machine when `--jobs` > 1, so wall times are comparable only roughly.",
]
"""The Method notes of a comparison of a user's training function (`training_run`): what its runs measured."""
