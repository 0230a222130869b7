"""Two CPU processes (torchrun, gloo): a group spans both ranks, every rank reaches the same decision (selection,
mixing, dynamic sampling, allocation)."""

import pytest
from two_ranks import run_two_ranks


@pytest.mark.slow
def test_two_ranks_make_identical_decisions_without_hanging(tmp_path):
    ranks = run_two_ranks(tmp_path, "select")
    assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    assert ranks[0]["history"] == ranks[1]["history"]
    history = ranks[0]["history"]
    assert len(history) == 3 and all(len(h["keep"]) == 6 for h in history)
    # Rows 2 (rank 0) and 3 (rank 1) form one group; group selection keeps or drops it as a whole.
    assert all(h["keep"][2] == h["keep"][3] for h in history)


@pytest.mark.slow
def test_two_ranks_draw_the_same_mixing_stream_and_skip_the_same_prompts(tmp_path):
    ranks = run_two_ranks(tmp_path, "mixing")
    assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    assert len(ranks[0]["stream"]) >= 12 * 6 and ranks[0]["stream"] == ranks[1]["stream"]
    assert ranks[0]["history"] == ranks[1]["history"]
    assert ranks[0]["sampler_state"] == ranks[1]["sampler_state"]
    assert ranks[0]["strategy_state"] == ranks[1]["strategy_state"]
    # Every rank's RolloutBatch holds all 6 rows (3 prompts x 2 generations), keys gathered from both ranks.
    assert all(len(h["prompt_keys"]) == 6 for h in ranks[0]["history"])
    assert ranks[0]["history"][-1]["metrics"]["pre_select/skipped_prompts"] > 0


@pytest.mark.slow
def test_two_ranks_take_the_same_dynamic_sampling_rounds_when_one_rank_has_no_signal(tmp_path):
    ranks = run_two_ranks(tmp_path, "dynamic")  # a hang would fail inside run_two_ranks
    assert ranks[0]["history"] == ranks[1]["history"]
    assert ranks[0]["totals"] == ranks[1]["totals"]
    assert ranks[0]["parameters"] == ranks[1]["parameters"]
    history = ranks[0]["history"]
    assert len(history) == 4 and all(len(h["keep"]) == 6 for h in history)
    assert sum(h["dynamic"]["dynamic/rounds"] for h in history) > 4, "no extra round: the test is void"
    for h in history:
        if not h["dynamic"]["dynamic/short"]:
            assert h["dynamic"]["dynamic/signal_groups"] == 3 and all(h["keep"])


@pytest.mark.slow
def test_two_ranks_screen_the_same_prompts_and_count_every_completion(tmp_path):
    ranks = run_two_ranks(tmp_path, "allocation")
    assert ranks[0]["history"] == ranks[1]["history"]
    assert ranks[0]["strategy_state"] == ranks[1]["strategy_state"]
    assert ranks[0]["parameters"] == ranks[1]["parameters"]
    history = ranks[0]["history"]
    assert len(history) == 3 and all(len(h["keep"]) == 8 for h in history)  # B = 2 groups of 4, equal shapes
    assert history[-1]["alloc"]["alloc/generated"] == ranks[0]["engine_rows"] + ranks[1]["engine_rows"]
    assert ranks[0]["engine_rows"] == ranks[1]["engine_rows"]
