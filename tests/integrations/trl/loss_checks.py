"""Helpers the TRL loss-equivalence tests share (GRPO and RLOO): a loss with its gradient, and a decision written
into TRL's batch.
"""

import torch

from dataflex_callbacks import Decision, RolloutBatch
from dataflex_callbacks.integrations.trl.callback import KEEP_KEY


def loss_and_grad(trainer, compute, inputs):
    """``compute(model, inputs)`` and the flattened gradient of every parameter that got one."""
    trainer.model.zero_grad(set_to_none=True)
    loss = compute(trainer.model, inputs)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return loss.detach(), grad


def grad_of_rows_alone(trainer, output, rows):
    """The gradient of TRL's own loss (no adapter key in the batch) on ``rows`` of ``output`` alone: what a step whose
    batch held only those rows would train on."""
    alone = {
        key: value[rows] if isinstance(value, torch.Tensor) and value.dim() >= 1 else value
        for key, value in output.items()
        if not key.startswith("dataflex_") and key != "tool_mask"
    }
    alone["num_items_in_batch"] = alone["completion_mask"].sum()
    return loss_and_grad(trainer, trainer._compute_loss, alone)[1]


def batch_normaliser_grads(trainer, output):
    """The gradient of the adapter's loss on TRL's batch ``output``, and what ``fewer_groups_loss: batch`` makes it: the
    kept rows' own gradient (`grad_of_rows_alone`, not zero) times kept rows / TRL's rows, as if the fillers were groups
    without signal under plain GRPO's normaliser."""
    kept = output[KEEP_KEY]
    _, grad = loss_and_grad(trainer, trainer._compute_loss, output)
    real = kept.nonzero().flatten()
    alone = grad_of_rows_alone(trainer, output, real)
    assert alone.abs().sum() > 0
    return grad, alone * (real.numel() / kept.numel())


def masked_inputs(trainer, inputs, keep, weights=None):
    """A copy of TRL's batch dict with the decision (``keep``, ``weights``) written in by the trainer's callback."""
    output = {k: v.clone() for k, v in inputs.items()}
    rows = inputs["completion_mask"].shape[0]
    batch = RolloutBatch(
        rewards=torch.zeros(rows), group_ids=torch.arange(rows) // 2, completion_mask=inputs["completion_mask"].bool()
    )
    decision = Decision(keep=keep, weights=keep.float() if weights is None else weights)
    trainer.dataflex.write_decision(trainer, output, decision, batch, batch.rewards)
    trainer.dataflex.last_decision = decision  # as _apply_strategy does; no deferred decision left from another test
    return output


def policy_weighted_step(trainer, strategy, inputs, completion_len):
    """Run the adapter's loss with ``strategy``'s policy-dependent (deferred) parts; return its decision,
    the gradient, and the ``(B, T)`` token weights the current policy gives, computed outside the loss."""
    from dataflex_callbacks.integrations.trl.signals import local_policy_batch

    mask = inputs["completion_mask"]
    rows = mask.shape[0]
    batch = RolloutBatch(
        rewards=torch.zeros(rows),
        group_ids=torch.arange(rows) // 2,
        completion_mask=mask.bool(),
        advantages=inputs["advantages"],
    )
    decision = strategy.apply(batch, 0, sync=False, defer_policy=True)
    output = {k: v.clone() for k, v in inputs.items()}
    trainer.dataflex.write_decision(trainer, output, decision, batch, batch.rewards)
    trainer.dataflex.last_decision = decision
    _, grad = loss_and_grad(trainer, trainer._compute_loss, output)
    with torch.no_grad():
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], mask], 1),
            completion_len,
            compute_entropy=True,
        )
    policy_batch = local_policy_batch(batch.rewards, batch.group_ids, mask, inputs["advantages"], logps, entropies)
    return decision, grad, strategy.apply_policy(policy_batch, decision).weights
