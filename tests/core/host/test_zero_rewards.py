"""`ZeroRewardWatch`: one warning when every reward of the first steps is 0 or None, none when one pays."""

import math
import warnings

import pytest
import torch

from dataflex_callbacks.errors import ArgumentError, ZeroRewardWarning
from dataflex_callbacks.host.zero_rewards import DEFAULT_WATCH_STEPS, ZeroRewardWatch


def feed(watch, steps, rewards, **options):
    """Observe ``rewards`` once per step ``0 .. steps - 1``; the warnings shown and the verdicts returned."""
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        verdicts = [watch.observe(rewards, step, **options) for step in range(steps)]
    return [w.message for w in shown if isinstance(w.message, ZeroRewardWarning)], verdicts


def test_all_zero_rewards_warn_once_after_the_watched_steps_naming_both_causes():
    watch = ZeroRewardWatch(reward_names=["correct"])
    shown, verdicts = feed(watch, DEFAULT_WATCH_STEPS + 3, torch.zeros(8, 1))
    assert len(shown) == 1 and verdicts.index(shown[0]) == DEFAULT_WATCH_STEPS - 1  # at the 5th step, not before
    message = str(shown[0])
    assert "first 5 steps" in message and "['correct']" in message and "40 completions" in message
    assert "prompts' format" in message and "reversed-digit arithmetic" in message and "wrong slot" in message
    assert (shown[0].steps, shown[0].completions, shown[0].unscored) == (5, 40, 0)


def test_rewards_that_are_all_none_warn_that_nothing_was_scored():
    shown, _ = feed(ZeroRewardWatch(steps=2), 2, torch.full((4, 2), math.nan))
    assert len(shown) == 1 and "unscored" in str(shown[0]) and "None" in str(shown[0])
    assert shown[0].unscored == shown[0].completions == 8


def test_zeros_and_nones_together_warn():
    rewards = torch.tensor([[0.0], [math.nan], [0.0], [math.nan]])
    shown, _ = feed(ZeroRewardWatch(steps=2), 2, rewards)
    assert len(shown) == 1 and shown[0].unscored == 4 and "0 or None" in str(shown[0])


@pytest.mark.parametrize("paying", [1.0, -1.0, 0.25])
def test_one_paying_reward_in_the_first_steps_means_no_warning_ever(paying):
    watch = ZeroRewardWatch(steps=3)
    rewards = torch.zeros(6, 2)
    feed(watch, 1, rewards)
    rewards[4, 1] = paying  # the second function pays one completion of step 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert watch.observe(rewards, 1) is None
        assert all(watch.observe(torch.zeros(6, 2), step) is None for step in range(2, 10))


def test_batches_of_one_step_count_as_one_step():
    """Dynamic-sampling rounds and allocation pilots of one step are one step of the watch."""
    watch = ZeroRewardWatch(steps=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert all(watch.observe(torch.zeros(4), 7) is None for _ in range(5))
    shown, _ = feed(watch, 1, torch.zeros(4))  # step 0: a second distinct step
    assert len(shown) == 1 and shown[0].completions == 24


def test_every_rank_reaches_the_same_verdict_and_only_the_main_one_shows_it():
    """Fed the rewards gathered from every rank (the same tensor everywhere), the ranks agree; one warns."""
    gathered = torch.cat([torch.zeros(4), torch.zeros(4)])
    main, other = ZeroRewardWatch(steps=2), ZeroRewardWatch(steps=2)
    shown_main, verdicts_main = feed(main, 2, gathered, warn=True)
    shown_other, verdicts_other = feed(other, 2, gathered, warn=False)
    assert len(shown_main) == 1 and shown_other == []
    assert [v is None for v in verdicts_main] == [v is None for v in verdicts_other] == [True, False]
    assert str(verdicts_main[1]) == str(verdicts_other[1]) and main.done and other.done


@pytest.mark.parametrize("steps", [0, -1, 2.5, True, "5"])
def test_a_bad_step_count_is_refused_naming_the_default(steps):
    with pytest.raises(ArgumentError, match="'steps' must be an int >= 1.*default, 5"):
        ZeroRewardWatch(steps=steps)


def test_the_warning_survives_pickling():
    import pickle

    warning = ZeroRewardWarning("m", 5, 40, 3)
    copy = pickle.loads(pickle.dumps(warning))
    assert (str(copy), copy.steps, copy.completions, copy.unscored) == ("m", 5, 40, 3)
