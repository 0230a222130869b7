"""``screen`` with ``min_prior_signal`` through TRL's GRPOTrainer: a domain whose reward is always 0 stops costing
pilots once its first pilots are seen (`Strategy.allocation_skips_pilot`, ``alloc/step_pilot_skips``).

A real tiny GRPO training on the toy dataset (domains ``add``, ``mul``, ``echo``), G = 4, B = 2 groups, pilots of 2.
"""

import pytest
from toy_rewards import checksum_reward

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer

GENERATIONS, STEPS = 4, 6


def echo_never_solved(prompts, completions, domain, **kwargs):
    """0 for every completion of an ``echo`` prompt (a domain the model never solves), else the checksum reward."""
    return [0.0 if d == "echo" else c for d, c in zip(domain, checksum_reward(completions), strict=True)]


def screen(min_prior_signal):
    params = {"pilot": 2, "rule": "posterior", "min_prior_signal": min_prior_signal, "explore": 0.0}
    return {"allocation": {"name": "screen", "params": params}}


@pytest.mark.parametrize("min_prior_signal", [0.2, 0.0])
def test_a_domain_that_never_passes_stops_costing_pilots_with_min_prior_signal(make_trainer, min_prior_signal):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[echo_never_solved],
        max_steps=STEPS,
        trainer_kwargs={"strategy": screen(min_prior_signal), "record_decisions": True},
        per_device_train_batch_size=2 * GENERATIONS,
        num_generations=GENERATIONS,
    )
    trainer.train()
    steps = [d["dynamic"] for d in trainer.dataflex.decisions]
    assert len(steps) == STEPS
    echo = [m.get("alloc/pilot_completions/echo", 0.0) for m in steps]  # cumulative
    others = [m["alloc/pilot_completions/add"] + m["alloc/pilot_completions/mul"] for m in steps]
    assert echo[0] > 0 and others[-1] > others[1]
    if min_prior_signal:
        assert echo[-1] == echo[1]  # no echo pilot after the first steps
        assert sum(m["alloc/step_pilot_skips"] for m in steps) > 0
        assert steps[-1]["alloc/prior_skips"] == sum(m["alloc/step_pilot_skips"] for m in steps)
    else:
        assert echo[-1] > echo[1]  # the echo prompts keep costing their pilots
        assert "alloc/step_pilot_skips" not in steps[-1]
