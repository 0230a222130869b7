"""A test reward that gives an untrained model mixed outcomes: some responses of a group pass, some fail.

verl calls ``compute_score`` per response (``reward.custom_reward_function``). A real task reward
(the right sum) gives a randomly initialised model 0 on every response: every group then has zero
reward variance, a selection strategy such as ``difffilter`` drops every group, and nothing
trains (seen: ``dataflex/dropped_all: 1.0``, grad norm 0). This reward instead passes a response
when a checksum of its text falls below the domain's pass rate. An untrained model writes
near-random text, so each response passes with about that probability, independently:
groups of mixed outcomes (kept by ``difffilter``) sit next to all-pass / all-fail ones
(dropped), and ``easy`` passes more often than ``hard``, so the domains' rewards differ for the
mixing strategies. It is deterministic in the text: the same responses get the same rewards.

``compute_score_hard_unsolved`` fails every ``hard`` response: every ``hard`` group then has zero
reward variance for certain, so a run that needs such groups (verl's DAPO filter evicting and
refilling) does not depend on how the responses happen to hash (two steps of the checksum reward
leave every group mixed about once in 40 runs).

``compute_score_near_even`` passes ``easy`` at 0.55 and ``hard`` at 0.45: a group of 4 then has
exactly 2 passes with probability 0.37 instead of 0.35 / 0.26, so a 2-step run of 8 prompts
with no such group at all (the select run then keeps nothing, seen once at 0.6 / 0.3: about 1 in
250 runs by these odds) becomes about 1 in 1,500; `easy` still passes more often on average.
"""

from __future__ import annotations

import zlib

PASS_RATE = {"easy": 0.6, "hard": 0.3}
NEAR_EVEN_PASS_RATE = {"easy": 0.55, "hard": 0.45}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """1.0 if the checksum of ``solution_str`` falls under the pass rate of ``data_source``, else 0.0."""
    return _checksum_pass(data_source, solution_str, PASS_RATE)


def compute_score_near_even(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """``compute_score`` at pass rates near 1/2 (`NEAR_EVEN_PASS_RATE`): groups of 2 passes in 4 at most steps."""
    return _checksum_pass(data_source, solution_str, NEAR_EVEN_PASS_RATE)


def _checksum_pass(data_source: str, solution_str: str, pass_rate: dict[str, float]) -> float:
    if data_source not in pass_rate:
        raise ValueError(f"test reward: unknown data_source {data_source!r}; known: {sorted(pass_rate)}")
    draw = (zlib.crc32(solution_str.encode("utf-8")) % 10_000) / 10_000
    return float(draw < pass_rate[data_source])


def compute_score_hard_unsolved(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """``compute_score``, except that every ``hard`` response fails (all-fail groups in every batch)."""
    if data_source == "hard":
        return 0.0
    return compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
