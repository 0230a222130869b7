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
"""

from __future__ import annotations

import zlib

PASS_RATE = {"easy": 0.6, "hard": 0.3}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """1.0 if the checksum of ``solution_str`` falls under the pass rate of ``data_source``, else 0.0."""
    if data_source not in PASS_RATE:
        raise ValueError(f"test reward: unknown data_source {data_source!r}; known: {sorted(PASS_RATE)}")
    draw = (zlib.crc32(solution_str.encode("utf-8")) % 10_000) / 10_000
    return float(draw < PASS_RATE[data_source])


def compute_score_hard_unsolved(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """``compute_score``, except that every ``hard`` response fails (all-fail groups in every batch)."""
    if data_source == "hard":
        return 0.0
    return compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
