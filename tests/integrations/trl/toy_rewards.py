"""The toy reward functions of the TRL adapter tests, and a comparison of state dicts.

Imported by bare name (``from toy_rewards import checksum_reward``): a test module cannot import
``conftest``, a name every test folder's conftest.py shares.
"""

import torch


def parity_reward(completions, **kwargs):
    """1 when the completion has an even number of characters: a cheap, deterministic 0/1 reward."""
    return [float(len(c) % 2 == 0) for c in completions]


def digit_reward(completions, **kwargs):
    """Fraction of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def checksum_reward(completions, **kwargs):
    """Parity of the characters' code sum: a 0/1 reward that stays mixed within groups as the model trains."""
    return [float(sum(map(ord, c)) % 2) for c in completions]


def same_state(first, second) -> bool:
    """Equality of two state dicts that may hold tensors."""
    if isinstance(first, torch.Tensor):
        return isinstance(second, torch.Tensor) and torch.equal(first, second)
    if isinstance(first, dict):
        return (
            isinstance(second, dict)
            and first.keys() == second.keys()
            and all(same_state(first[k], second[k]) for k in first)
        )
    if isinstance(first, (list, tuple)):
        return type(first) is type(second) and len(first) == len(second) and all(map(same_state, first, second))
    return first == second
