"""Too few prompts for one Lightning step: one line in the Lightning user's settings (batch_size, the Trainer's
world size), never the sampler's internal chunk."""

import pytest
from lightning_toy import ToyGRPO, toy_rows, toy_trainer

from dataflex_callbacks import ConfigError
from dataflex_callbacks.integrations.lightning import DataFlexCallback


@pytest.mark.parametrize("strategy", ["skip", "difffilter", "static"])
def test_too_few_prompts_for_one_step_names_batch_size_and_the_world_size(strategy):
    module = ToyGRPO(toy_rows(3), prompts_per_step=4)
    with pytest.raises(ConfigError) as caught:
        toy_trainer([DataFlexCallback(strategy)], max_steps=2).fit(module)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    for text in (
        "the dataset gives 3 prompt(s)",
        "batch_size=4",
        "Trainer's 1 process(es)",
        "world_size",
        "self.dataflex.sampler(...)",
    ):
        assert text in message, (text, message)
    assert "chunk" not in message


def test_a_num_samples_option_is_named_when_it_limits_the_prompts():
    module = ToyGRPO(toy_rows(12), prompts_per_step=4, sampler_options={"num_samples": 2})
    with pytest.raises(ConfigError, match=r"num_samples=2 gives 2 prompt\(s\) to draw from.*batch_size=4"):
        toy_trainer([DataFlexCallback("skip")], max_steps=2).fit(module)
