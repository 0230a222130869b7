"""Synthetic GRPO rollouts in verl's field layout, shared by the verl tests."""

import numpy as np
import torch

GROUP_SIZE = 5
# Correct answers per group of 5: difffilter keeps solve rates in (0.2, 0.8), i.e. 2 or 3 correct.
CORRECT_PER_GROUP = (0, 1, 2, 3, 5, 2)


def synthetic_rollouts(seed: int = 0, max_len: int = 7):
    """Padded verl fields for len(CORRECT_PER_GROUP) prompts x GROUP_SIZE responses, unequal lengths."""
    gen = torch.Generator().manual_seed(seed)
    n = GROUP_SIZE * len(CORRECT_PER_GROUP)
    lengths = torch.randint(2, max_len + 1, (n,), generator=gen)
    positions = torch.arange(max_len).unsqueeze(0)
    response_mask = (positions < lengths.unsqueeze(1)).to(torch.int64)
    outcome = torch.zeros(n)
    for g, correct in enumerate(CORRECT_PER_GROUP):
        outcome[g * GROUP_SIZE : g * GROUP_SIZE + correct] = 1.0
    scores = torch.zeros(n, max_len)
    scores[torch.arange(n), lengths - 1] = outcome  # verl puts the outcome score on the last token
    old_log_probs = -torch.rand(n, max_len, generator=gen) * response_mask
    uids = np.array([f"prompt-{i // GROUP_SIZE}" for i in range(n)], dtype=object)
    domains = np.array(["math" if (i // GROUP_SIZE) % 2 == 0 else "code" for i in range(n)], dtype=object)
    index = np.array([i // GROUP_SIZE for i in range(n)], dtype=object)
    return {
        "response_mask": response_mask,
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
        "old_log_probs": old_log_probs,
        "lengths": lengths,
    }, {"uid": uids, "data_source": domains, "index": index}
