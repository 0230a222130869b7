"""Whether a run's prompts and completions fit the model's positions, checked the same way by every host."""

from __future__ import annotations

from dataflex_callbacks.errors import ContextLengthError


def check_context_length(
    longest_prompt: int,
    completion_tokens: int,
    positions: int | None,
    *,
    prompts: str,
    setting: str,
    error: type[Exception] = ContextLengthError,
) -> None:
    """Refuse, in one line naming both numbers, a longest prompt plus completion length past the model's positions.

    Args:
        longest_prompt: tokens of the longest prompt, as the host tokenizes it for generation.
        completion_tokens: the most tokens a completion may have.
        positions: the model's ``max_position_embeddings``; None or 0: unknown, nothing is checked.
        prompts: what holds the prompts, for the message (``"the train dataset"``, ``"'gsm8k.jsonl'"``).
        setting: the user's setting of the completion length, for the fix (``"--max-completion-length"``).
        error: the error class raised (a `ContextLengthError` unless the caller has its own input error).
    """
    if not positions or longest_prompt + completion_tokens <= positions:
        return
    if longest_prompt >= positions:  # no completion length fixes this: the prompt alone fills the model
        raise error(
            f"the longest prompt of {prompts} is {longest_prompt} tokens, but the model holds {positions} positions "
            f"(max_position_embeddings in its config.json): the prompt alone leaves no room for a completion; "
            "shorten the prompts (or drop the longest ones), or use a model with more than "
            f"{longest_prompt + completion_tokens - 1} positions"
        )
    raise error(
        f"the longest prompt of {prompts} is {longest_prompt} tokens and completions are up to {completion_tokens} "
        f"tokens: {longest_prompt + completion_tokens} positions, but the model holds {positions} "
        f"(max_position_embeddings); lower {setting} to at most {positions - longest_prompt}, shorten "
        "the prompts, or use a model with more positions"
    )
