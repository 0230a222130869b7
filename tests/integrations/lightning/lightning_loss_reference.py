"""Reference losses on a physically reduced batch, written with plain loops (independent of the adapter)."""

from __future__ import annotations

import torch


def reduced_batch(per_token_loss, mask, keep, weights, token_keep=None):
    """Remove dropped responses (and dropped tokens) for real: ``(K, L)`` loss, mask and weights of kept rows."""
    rows = [i for i in range(len(keep)) if keep[i]]
    token_mask = mask if token_keep is None else mask & token_keep
    weights = weights if weights.dim() == 2 else weights.unsqueeze(1).expand_as(per_token_loss)
    return per_token_loss[rows], token_mask[rows], weights[rows]


def reference_loss(per_token_loss, mask, weights, loss_type, max_length=None):
    """The loss of the reduced batch; responses without a kept token are gone too."""
    rows = [i for i in range(per_token_loss.shape[0]) if bool(mask[i].any())]
    if not rows:
        return per_token_loss.sum() * 0.0
    per_row, tokens = [], 0
    for i in range(per_token_loss.shape[0]):
        if i not in rows:
            continue
        total = sum(weights[i, t] * per_token_loss[i, t] for t in range(per_token_loss.shape[1]) if mask[i, t])
        count = int(mask[i].sum())
        per_row.append((total, count))
        tokens += count
    k = len(rows)
    if loss_type == "token_mean":
        return sum(total for total, _ in per_row) / tokens
    if loss_type == "sequence_mean":
        return sum(total / count for total, count in per_row) / k
    if loss_type == "sequence_sum":
        return sum(total for total, _ in per_row) / k
    if loss_type == "fixed_length":
        length = per_token_loss.shape[1] if max_length is None else max_length
        return sum(total for total, _ in per_row) / (k * length)
    raise ValueError(loss_type)


def reference_from_record(record, loss_type):
    """Reference loss of one `ToyGRPO` training-step record."""
    per_token_loss = torch.tensor(record["per_token_loss"], dtype=torch.float64)
    mask = torch.tensor(record["mask"], dtype=torch.bool)
    keep = torch.tensor(record["keep"], dtype=torch.bool)
    weights = torch.tensor(record["weights"], dtype=torch.float64)
    loss, token_mask, w = reduced_batch(per_token_loss, mask, keep, weights)
    return float(reference_loss(loss, token_mask, w, loss_type))
