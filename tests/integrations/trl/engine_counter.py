"""`engine_counter`: what TRL's own generation returned, for tests that check a strategy's completion counts."""


def engine_counter(trainer) -> list[int]:
    """Count the completions TRL's own generation returns (``_generate_single_turn``), calling it through; returns
    the list each call appends its row count to."""
    generate, seen = trainer._generate_single_turn, []

    def counting(*args, **kwargs):
        result = generate(*args, **kwargs)
        seen.append(len(result[0]))  # (completion_ids, logprobs): one row per completion
        return result

    trainer._generate_single_turn = counting
    return seen
