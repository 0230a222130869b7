"""The built-in task domains: procedurally generated prompts with verifiable answers.

They are sized for the tiny character-level model of `dataflex_callbacks.recipes.tiny_model`
trained with GRPO on a CPU for 100-200 steps, and span the difficulty range that data
strategies are meant to exploit:

| domain  | prompt -> answer                     | for the tiny model                                  |
|---------|--------------------------------------|-----------------------------------------------------|
| `echo`  | `echo q k d` -> `d` (last letter)    | solved from step 0                                  |
| `digit` | `echo 3 8 5` -> `5` (last digit)     | learned during the run (held-out accuracy rises)    |
| `code`  | `code 3 8 5:` -> 8 random letters    | unlearnable: the answer is independent of the prompt |
| `coin`  | `coin 3 8 5:` -> reward ~ Bernoulli(0.5) | noisy: the reward ignores the completion        |

`echo` and `digit` ask for the same skill; the difference is the tiny model's prior. Its tied
embeddings make it repeat the last input character, strongly for letters (embedding init std
0.1) but weakly for digits (std 0.03): it samples the right digit ~10% of the time and its
greedy answer is often wrong, so GRPO has signal to learn from and visible progress to make.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from .verifiers import coin_flip, prefix_match


def _digits(rng: random.Random, count: int) -> list[str]:
    return [str(rng.randrange(10)) for _ in range(count)]


def _echo(rng: random.Random) -> tuple[str, str]:
    letters = [rng.choice(string.ascii_lowercase) for _ in range(3)]
    return "echo " + " ".join(letters), letters[-1]


def _digit(rng: random.Random) -> tuple[str, str]:
    digits = _digits(rng, 3)
    return "echo " + " ".join(digits), digits[-1]


def _code(rng: random.Random) -> tuple[str, str]:
    digits = _digits(rng, 3)
    secret = "".join(rng.choice(string.ascii_lowercase) for _ in range(8))
    return "code " + " ".join(digits) + ":", secret


def _coin(rng: random.Random) -> tuple[str, str]:
    digits = _digits(rng, 3)
    # The reference answer is nominal: the coin domain's reward never looks at it.
    return "coin " + " ".join(digits) + ":", "h"


@dataclass(frozen=True)
class TaskDomain:
    """One verifiable task family: how to draw an example and how to score a completion.

    Attributes:
        name: domain label written in the dataset's `domain` column.
        description: one line for listings.
        difficulty: `easy`, `learnable`, `unlearnable` or `noisy` (for the tiny model).
        make_example: `rng -> (prompt, answer)`; prompts must vary enough to fill both splits.
        verify: `(completion, answer) -> bool`; ignored when `noisy` is True.
        noisy: the reward is a Bernoulli(`noise_probability`) draw independent of the completion.
        max_unique: number of distinct prompts the generator can produce.
    """

    name: str
    description: str
    difficulty: str
    make_example: Callable[[random.Random], tuple[str, str]]
    verify: Callable[[object, str], bool] = prefix_match
    noisy: bool = False
    noise_probability: float = 0.5
    max_unique: int = 1000

    def score(self, prompt: str, completion, answer: str, salt: object = 0) -> float:
        """Reward of one completion: 1.0 or 0.0. `salt` (e.g. seed and call index) seeds the noisy draw."""
        if self.noisy:
            return float(coin_flip(self.name, salt, prompt, completion, probability=self.noise_probability))
        return float(self.verify(completion, answer))


TASK_DOMAINS: dict[str, TaskDomain] = {
    domain.name: domain
    for domain in (
        TaskDomain(
            "echo", "repeat the last letter of the prompt (solved from the start)", "easy", _echo, max_unique=26**3
        ),
        TaskDomain("digit", "repeat the last digit of the prompt (learned during training)", "learnable", _digit),
        TaskDomain("code", "guess an 8-letter code unrelated to the prompt (unlearnable)", "unlearnable", _code),
        TaskDomain("coin", "reward is a fair coin flip, whatever the answer (noisy)", "noisy", _coin, noisy=True),
    )
}
