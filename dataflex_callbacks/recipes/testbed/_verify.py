"""The testbed's verifier and reward: the completion must state the reference answer exactly.

Both reuse the library's `exact_match` (recipes/tasks/verifiers.py, `--verifier exact` of
`dataflex run`): the completion's final answer (after the last "answer:" or "####" marker, else its
first line), stripped, must equal the reference string. So ``58 or 59``, ``not 58``, ``5`` (a part)
and ``04`` for ``4`` all earn 0: the answers are digit strings compared as text.
"""

from __future__ import annotations

from dataflex_callbacks.recipes.tasks.verifiers import exact_match


def verify(completion, answer) -> bool:
    """True when `completion` (text or chat messages) states exactly `answer`; an empty answer matches nothing."""
    return bool(str(answer).strip()) and exact_match(completion, answer)


def testbed_reward(prompts, completions, answer, **columns) -> list[float]:
    """A TRL reward function (``dataflex run --reward dataflex_callbacks.recipes.testbed:testbed_reward``):
    1.0 or 0.0 per completion."""
    return [float(verify(completion, reference)) for completion, reference in zip(completions, answer, strict=True)]
