"""Independent, deliberately plain reference implementations of the core's math.

Per-group Python loops over lists / small tensors, written from METHODS.md and not from the
library code. The tests compare the vectorised core against these; `benchmarks/bench_core.py`
times them as the loop baseline.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict

import numpy as np
import torch

# ---------------------------------------------------------------- groups


def groups_of(group_ids) -> OrderedDict[int, list[int]]:
    """{group id: [row indices]} in first-appearance order, by a plain Python loop."""
    out: OrderedDict[int, list[int]] = OrderedDict()
    for row, gid in enumerate(torch.as_tensor(group_ids).tolist()):
        out.setdefault(gid, []).append(row)
    return out


def population_variance(values) -> float:
    values = [float(v) for v in values]
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


def round_count(fraction: float, size: int) -> int:
    """DataFlex-RL's count: max(1, int(round(fraction * size))), Python's round (half to even)."""
    return min(size, max(1, int(round(fraction * size))))


# ---------------------------------------------------------------- scorers


def group_solve_rate(rewards: torch.Tensor, group_ids: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    out = torch.zeros(rewards.shape[0], dtype=torch.float32, device=rewards.device)
    for rows in groups_of(group_ids).values():
        idx = torch.tensor(rows, device=rewards.device)
        out[idx] = (rewards[idx].float() > threshold).float().mean()
    return out


def group_reward_variance(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(rewards.shape[0], dtype=torch.float32, device=rewards.device)
    for rows in groups_of(group_ids).values():
        idx = torch.tensor(rows, device=rewards.device)
        out[idx] = rewards[idx].double().var(unbiased=False).float()
    return out


def advantage_magnitude(advantages: torch.Tensor, mask: torch.Tensor | None, reduce: str = "mean") -> torch.Tensor:
    adv = advantages.double().abs()
    n = adv.shape[0]
    out = torch.zeros(n, dtype=torch.float64, device=adv.device)
    for i in range(n):
        if adv.dim() == 1:
            count = 1 if mask is None else int(mask[i].sum())
            out[i] = adv[i] * count if reduce == "sum" else adv[i]
            continue
        row_mask = torch.ones(adv.shape[1], dtype=torch.bool, device=adv.device) if mask is None else mask[i].bool()
        values = adv[i][row_mask]
        if values.numel() == 0:
            out[i] = 0.0
        elif reduce == "mean":
            out[i] = values.mean()
        elif reduce == "sum":
            out[i] = values.sum()
        else:
            out[i] = values.max()
    return out.float()


# ---------------------------------------------------------------- selectors


def threshold_band(scores, low, high) -> torch.Tensor:
    """Open band, compared in the scores' float32 precision (so a solve rate of 1/5 equals 0.2)."""
    low, high = float(np.float32(low)), float(np.float32(high))
    return torch.tensor([low < float(np.float32(s)) < high for s in scores.tolist()], dtype=torch.bool)


def topk_fraction(scores: torch.Tensor, fraction: float, largest: bool = True) -> torch.Tensor:
    """DataFlex-RL's rule: ``torch.topk`` of the whole float32 score vector on the CPU."""
    n = scores.shape[0]
    keep = torch.zeros(n, dtype=torch.bool)
    if n == 0:
        return keep
    keep[torch.topk(scores.float().cpu(), round_count(fraction, n), largest=largest).indices] = True
    return keep


def top_within_groups(metric: torch.Tensor, group_ids: torch.Tensor, k: int) -> torch.Tensor:
    """Per group (rows in row order): whole group if it has <= k rows, else ``torch.topk`` of its metric."""
    keep = torch.zeros(metric.shape[0], dtype=torch.bool)
    metric = metric.float().cpu()
    for rows in groups_of(group_ids).values():
        if len(rows) <= k:
            keep[rows] = True
            continue
        top = torch.topk(metric[torch.tensor(rows)], k).indices.tolist()
        keep[[rows[j] for j in top]] = True
    return keep


def gfpo(scores: torch.Tensor, lengths: torch.Tensor, group_ids: torch.Tensor, k: int, metric: str) -> torch.Tensor:
    """GFPO as DataFlex-RL: ``-L`` (short) or scorer value / max(L, 1) (efficiency), top k per group."""
    value = -lengths.float() if metric == "short" else scores.float() / lengths.float().clamp_min(1)
    return top_within_groups(value, group_ids, k)


def max_variance_value(values, n_keep: int) -> float:
    """Brute force over every subset of size n_keep: the maximal population variance."""
    return max(population_variance(subset) for subset in itertools.combinations(values, n_keep))


def max_variance_keep_size(group_size: int, keep_fraction: float) -> int:
    return round_count(keep_fraction, group_size)


def max_variance_loop(scores: torch.Tensor, group_ids: torch.Tensor, keep_fraction: float) -> torch.Tensor:
    """DataFlex-RL's per-group scan: sort ascending (stable), prefix sums from the group's start, every
    ``a`` lowest + ``n - a`` highest, first strictly larger variance wins; ``n >= G`` keeps the group."""
    keep = torch.zeros(scores.shape[0], dtype=torch.bool)
    values = scores.float().tolist()
    for rows in groups_of(group_ids).values():
        size = len(rows)
        n = max_variance_keep_size(size, keep_fraction)
        if n >= size:
            keep[rows] = True
            continue
        ordered = sorted(rows, key=lambda i: values[i])
        prefix, prefix_sq = [0.0], [0.0]
        for i in ordered:
            prefix.append(prefix[-1] + values[i])
            prefix_sq.append(prefix_sq[-1] + values[i] * values[i])
        best_var, best_a = -1.0, 0
        for a in range(n + 1):
            b = n - a
            total = prefix[a] + (prefix[size] - prefix[size - b] if b > 0 else 0.0)
            total_sq = prefix_sq[a] + (prefix_sq[size] - prefix_sq[size - b] if b > 0 else 0.0)
            var = total_sq / n - (total / n) ** 2
            if var > best_var:
                best_var, best_a = var, a
        chosen = ordered[:best_a] + (ordered[size - (n - best_a) :] if n - best_a > 0 else [])
        keep[chosen] = True
    return keep


def top_tokens(scores: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    flat_scores = scores.reshape(-1).float().tolist()
    flat_mask = mask.reshape(-1).tolist()
    valid = [i for i, m in enumerate(flat_mask) if m]
    keep = torch.zeros(len(flat_mask), dtype=torch.bool)
    if valid:
        k = round_count(fraction, len(valid))
        chosen = sorted(valid, key=lambda i: (-flat_scores[i], i))[:k]
        keep[chosen] = True
    return keep.view_as(mask)


def top_tokens_by_sort(scores: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """The same rule as `top_tokens` by a full stable sort (fast enough for benchmark sizes)."""
    flat_mask = mask.reshape(-1)
    valid = torch.nonzero(flat_mask).flatten()
    keep = torch.zeros_like(flat_mask)
    if valid.numel():
        k = round_count(fraction, valid.numel())
        order = torch.sort(scores.reshape(-1)[valid].float(), descending=True, stable=True).indices
        keep[valid[order[:k]]] = True
    return keep.view_as(mask)


# ---------------------------------------------------------------- reweighters


def normalize(raw: torch.Tensor, mask: torch.Tensor, mode: str = "mean_one", group_ids=None) -> torch.Tensor:
    w = torch.where(mask, raw.double(), torch.zeros((), dtype=torch.float64))
    if mode == "none":
        return w.float()
    out = torch.zeros_like(w)
    if mode == "mean_one":
        sets = [list(range(w.shape[0]))]
    else:
        sets = list(groups_of(group_ids).values())
    for rows in sets:
        idx = torch.tensor(rows, dtype=torch.long, device=w.device)
        sub_w, sub_m = w[idx], mask[idx]
        count = float(sub_m.sum())
        total = float(sub_w.sum())
        if count == 0:
            out[idx] = sub_w
        elif total <= 0:
            out[idx] = sub_m.double()
        else:
            out[idx] = sub_w * (count / total)
    return out.float()


def softmax_raw(scores: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    s = scores.double()
    if not bool(mask.any()):
        return torch.zeros_like(s)
    top = max(
        float(v) / temperature for v, m in zip(s.reshape(-1).tolist(), mask.reshape(-1).tolist(), strict=True) if m
    )
    return torch.where(mask, torch.exp(s / temperature - top), torch.zeros_like(s))


def difficulty_band_raw(scores, mask, low_q, high_q, focus_weight):
    inside = scores[mask].float().cpu().numpy()
    if inside.size == 0:
        return torch.zeros(scores.shape, dtype=torch.float64)
    lo, hi = (float(np.float32(q)) for q in np.quantile(inside, [low_q, high_q]))
    return torch.tensor([focus_weight if lo <= v <= hi else 1.0 for v in scores.float().tolist()])


def reward_range_raw(scores, low, high, inside, outside):
    low, high = float(np.float32(low)), float(np.float32(high))  # compared in the scores' float32
    return torch.tensor([inside if low <= v <= high else outside for v in scores.float().tolist()])


def advantage_reweight_raw(probs, alpha):
    return alpha * probs.double() + (1 - alpha)


def per_advantage_raw(scores, alpha):
    """DataFlex-RL's priority: (|s| + 1e-8) ** alpha, in the scores' float32."""
    return (scores.float().abs() + 1e-8) ** alpha


# ---------------------------------------------------------------- mixers


def floor_mix(q, floor):
    q = np.asarray(q, dtype=np.float64)
    q = q / q.sum()
    return floor + (1 - len(q) * floor) * q


def softmax_np(values, temperature):
    v = np.asarray(values, dtype=np.float64) / temperature
    e = np.exp(v - v.max())
    return e / e.sum()


# ---------------------------------------------------------------- tracker


class ReferenceTracker:
    """Per-domain plain lists of observations, truncated to the last `window`."""

    def __init__(self, domains, window):
        self.domains = list(domains)
        self.window = window
        self.obs = {d: [] for d in self.domains}  # (step, reward, abs_adv, group_var, count)
        self.total = {d: 0.0 for d in self.domains}

    def update(self, rewards, domains, step, advantages=None, group_ids=None):
        rewards = [float(r) for r in rewards]
        groups = groups_of(group_ids) if group_ids is not None else None
        for d in self.domains:
            rows = [i for i, x in enumerate(domains) if x == d]
            finite = [i for i in rows if math.isfinite(rewards[i])]
            gvars = []
            if groups is not None:
                for members in groups.values():
                    if domains[members[0]] == d:
                        gvars.append(
                            population_variance([rewards[i] if math.isfinite(rewards[i]) else 0.0 for i in members])
                        )
            if not finite and not gvars:
                continue
            count = len(finite)
            reward = sum(rewards[i] for i in finite) / max(count, 1)
            adv = 0.0
            if advantages is not None:
                adv = sum(abs(float(advantages[i])) for i in finite) / max(count, 1)
            gvar = sum(gvars) / max(len(gvars), 1)
            self.obs[d].append((float(step), reward, adv, gvar, float(count)))
            self.obs[d] = self.obs[d][-self.window :]
            self.total[d] += count

    def mean(self, field):
        col = {"reward": 1, "abs_advantage": 2, "group_variance": 3}[field]
        return [float(np.mean([o[col] for o in self.obs[d]])) if self.obs[d] else float("nan") for d in self.domains]

    def slope(self):
        out = []
        for d in self.domains:
            pts = self.obs[d]
            xs = np.array([o[0] for o in pts])
            if len(pts) < 2 or np.ptp(xs) == 0:
                out.append(0.0)
                continue
            out.append(float(np.polyfit(xs, np.array([o[1] for o in pts]), 1)[0]))
        return out


# ---------------------------------------------------------------- DataFlex-RL's methods, as we read them
# Written from the behaviour of haolpku/DataFlex-RL (src/dataflex_verl), not from its code: its scorers are
# vectorised over (bs, L) token grids with float masks, its group steps loop over np.unique(uid), and its
# reweighters normalise every row to mean 1 (w / max(mean, 1e-8)).


def dfrl_advantage_magnitude(advantages: torch.Tensor, mask: torch.Tensor, agg: str = "mean") -> torch.Tensor:
    maskf = mask.to(advantages.dtype)
    weighted = advantages.abs() * maskf
    if agg == "sum":
        return weighted.sum(dim=-1)
    if agg == "max":
        return weighted.amax(dim=-1)
    return weighted.sum(dim=-1) / maskf.sum(dim=-1).clamp(min=1.0)


def dfrl_group_solve_rate(
    rewards: torch.Tensor, group_ids: torch.Tensor, success_threshold: float = 0.5
) -> torch.Tensor:
    success = (rewards.float() > success_threshold).float()
    uid = np.asarray(group_ids.cpu())
    out = torch.zeros_like(success)
    for g in np.unique(uid):
        rows = np.where(uid == g)[0]
        out[rows] = success[rows].mean()
    return out


def dfrl_threshold_band(scores: torch.Tensor, low: float, high: float) -> torch.Tensor:
    s = scores.float()
    return (s > low) & (s < high)


def dfrl_gfpo(scores: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor, k: int, metric: str) -> torch.Tensor:
    lengths = mask.float().sum(-1).clamp(min=1.0)
    return gfpo(scores, lengths, group_ids, k, metric)


def dfrl_mean_one(weights: torch.Tensor) -> torch.Tensor:
    return weights / weights.mean().clamp(min=1e-8)


def dfrl_softmax(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    s = scores.float().flatten()
    return dfrl_mean_one(torch.softmax(s / temperature, dim=0) * s.numel())


def dfrl_difficulty_band(scores: torch.Tensor, low_q: float, high_q: float, focus_weight: float) -> torch.Tensor:
    s = scores.float().flatten()
    if s.numel() <= 1:
        return torch.ones_like(s)
    lo, hi = torch.quantile(s, low_q), torch.quantile(s, high_q)
    w = torch.ones_like(s)
    w[(s >= lo) & (s <= hi)] = focus_weight
    return dfrl_mean_one(w)


def dfrl_advantage_reweight(probs: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    w = alpha * probs.float() + (1.0 - alpha)
    maskf = mask.float()
    return w * (maskf.sum().clamp(min=1.0) / (w * maskf).sum().clamp(min=1e-8))


def dfrl_per_advantage(scores: torch.Tensor, alpha: float) -> torch.Tensor:
    return dfrl_mean_one((scores.float().flatten().abs() + 1e-8) ** alpha)
