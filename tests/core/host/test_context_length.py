"""`check_context_length`: a fix that fixes, for both ways a run can overflow the model's positions."""

import pytest

from dataflex_callbacks.errors import ContextLengthError
from dataflex_callbacks.host.context_length import check_context_length


def test_a_run_that_fits_passes():
    check_context_length(50, 14, 64, prompts="the train dataset", setting="max_completion_length")
    check_context_length(500, 14, None, prompts="the train dataset", setting="max_completion_length")


def test_a_completion_too_long_names_the_setting_and_the_length_that_fits():
    with pytest.raises(ContextLengthError, match=r"lower max_completion_length to at most 14\b"):
        check_context_length(50, 32, 64, prompts="the train dataset", setting="max_completion_length")


@pytest.mark.parametrize("longest_prompt", [64, 122])
def test_a_prompt_that_alone_fills_the_model_says_so_instead_of_a_length_of_zero(longest_prompt):
    with pytest.raises(ContextLengthError) as raised:
        check_context_length(longest_prompt, 8, 64, prompts="the train dataset", setting="max_completion_length")
    message = str(raised.value)
    assert "the prompt alone leaves no room" in message and "max_position_embeddings" in message
    assert "at most 0" not in message and "max_completion_length" not in message
    assert f"more than {longest_prompt + 7} positions" in message
