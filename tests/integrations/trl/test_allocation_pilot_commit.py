"""The `pilot_commit` preset (band, pilot of G/4, eviction) through TRL's GRPOTrainer allocation path, at G = 8.

A real tiny GRPO training on the toy dataset: 16 rows per generation batch (B = 2 groups of 8), pilots of 2.
"""

from engine_counter import engine_counter
from toy_rewards import checksum_reward

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer

GENERATIONS = 8


def solved_or_checksum_reward(prompts, completions, **kwargs):
    """1 for every completion of a prompt whose first number is a multiple of 3 (always solved), else the checksum."""
    checksum = checksum_reward(completions)
    return [1.0 if int(p.split("+")[0]) % 3 == 0 else c for p, c in zip(prompts, checksum, strict=True)]


def pilot_spy(allocator):
    """Records each step's pilot keys and which pilots were all correct, calling `observe` through."""
    observe, seen = allocator.observe, []

    def recording(tally, keys, domains=None):
        seen.append((list(keys), ((tally.trials > 0) & (tally.passes == tally.trials)).tolist(), tally.trials.tolist()))
        return observe(tally, keys, domains)

    allocator.observe = recording
    return seen


def test_pilot_commit_trains_full_groups_and_never_pilots_an_evicted_prompt(make_trainer):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        reward_funcs=[solved_or_checksum_reward],
        max_steps=4,
        trainer_kwargs={"strategy": "pilot_commit", "record_decisions": True},
        per_device_train_batch_size=2 * GENERATIONS,
        num_generations=GENERATIONS,
    )
    allocator = trainer.dataflex.strategy.allocation
    pilots, trainer.engine_rows = pilot_spy(allocator), engine_counter(trainer)
    trainer.train()
    assert allocator.pilot == GENERATIONS // 4
    evicted: set = set()
    for keys, solved, trials in pilots:
        assert not evicted & set(keys), "an evicted prompt was piloted again"
        assert all(t == allocator.pilot for t in trials)  # dropped before the pilot, not given 0 completions
        evicted |= {k for k, s in zip(keys, solved, strict=True) if s}
    assert evicted and set(allocator.evictions.keys) == evicted
    decisions = trainer.dataflex.decisions
    for decision in decisions:
        assert decision["keep"].shape == (2 * GENERATIONS,)
        keys = decision["prompt_keys"]
        assert all(len(set(keys[g * GENERATIONS : (g + 1) * GENERATIONS])) == 1 for g in range(2))
    last = decisions[-1]["dynamic"]
    assert last["alloc/generated"] == sum(trainer.engine_rows)
    assert last["alloc/evicted_prompts"] == len(evicted)
    assert sum(d["dynamic"]["alloc/step_pilot_skips"] for d in decisions) > 0
