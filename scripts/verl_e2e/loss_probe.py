"""A policy loss that records, per actor micro-batch, which responses receive a gradient; for the end-to-end tests.

Loaded like ``cpu_platform`` (``VERL_USE_EXTERNAL_MODULES=cpu_platform,loss_probe``, so it is
imported in the actor worker too) and chosen with ``actor_rollout_ref.actor.policy_loss.loss_mode=
probe_vanilla``. It registers through verl's own policy-loss registry
(``verl.trainer.ppo.core_algos.register_policy_loss``), calls verl's ``vanilla`` loss unchanged, and
appends one JSON line per call to ``$DATAFLEX_E2E_PROBE``:

- ``rows``: responses in the micro-batch; ``masked_in``: responses with any token left in
  ``response_mask`` (what ``dataflex`` zeroes for a dropped response);
- ``grad_rows``: responses whose log-probabilities get a non-zero gradient from the policy loss,
  i.e. the responses that reach the update; ``weight_sum``: the sum of ``rollout_is_weights`` over
  kept tokens (absent field: null).

The gradient is taken with ``torch.autograd.grad(..., retain_graph=True)`` before verl's own
backward, so the training step itself is unchanged.
"""

from __future__ import annotations

import json
import os

import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss

PROBE_ENV = "DATAFLEX_E2E_PROBE"


@register_policy_loss("probe_vanilla")
def probe_vanilla(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """verl's ``vanilla`` policy loss, plus one JSON line on which responses (rows of ``log_prob [B, T]``) get
    a gradient.
    """
    pg_loss, metrics = get_policy_loss_fn("vanilla")(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )
    path = os.environ.get(PROBE_ENV)
    if path and log_prob.requires_grad:
        (grad,) = torch.autograd.grad(pg_loss, log_prob, retain_graph=True, allow_unused=True)
        grad_rows = 0 if grad is None else int((grad.abs().sum(dim=-1) > 0).sum())
        record = {
            "rows": int(log_prob.shape[0]),
            "masked_in": int((response_mask.sum(dim=-1) > 0).sum()),
            "grad_rows": grad_rows,
            "weight_sum": None if rollout_is_weights is None else float((rollout_is_weights * response_mask).sum()),
        }
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
    return pg_loss, metrics
