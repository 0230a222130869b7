"""A safety net for components at run time: bad scores, weights and proportions refused, a step that keeps
nothing explained.

Any scorer (built-in or a user's) whose scores are not finite, any reweighter whose weights are
negative or not finite, and any mixer whose proportions are, stops the step with a
`ComponentError` naming it; a step that keeps
nothing warns with a `DroppedAllWarning` whose ``cause`` says why and whose ``fix`` is None
where no setting can change it.
"""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import (
    ComponentError,
    DataFlexError,
    DroppedAllWarning,
    Mixer,
    Reweighter,
    RolloutBatch,
    Scorer,
    build_strategy,
)
from dataflex_callbacks.errors import DROPPED_ALL_CAUSES

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DOMAINS = ["math", "code", "logic"]


def grouped_batch(rewards, group=4, length=5, device="cpu"):
    """Groups of ``group`` consecutive rows, every token valid, random advantages and policy signals."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    n = rewards.shape[0]
    gen = torch.Generator().manual_seed(n)
    return RolloutBatch(
        rewards.to(device),
        group_ids=(torch.arange(n) // group).to(device),
        completion_mask=torch.ones(n, length, dtype=torch.bool, device=device),
        advantages=torch.randn(n, generator=gen).to(device),
        logprobs=(-torch.rand(n, length, generator=gen) * 3).to(device),
        entropies=torch.rand(n, length, generator=gen).to(device),
        domains=[DOMAINS[(i // group) % 3] for i in range(n)],
    )


# ---------------------------------------------------------------- user components, as a user writes them


class SignedAdvantage(Scorer):
    """The advantage itself, both signs: fine as a score, not as a weight."""

    requires = ("advantages",)
    scope = "row"

    def _score(self, batch):
        return batch.advantages.float()


class IdentityWeights(Reweighter):
    """Raw weight = score: negative wherever the score is."""

    scope = "row"

    def _raw(self, scores, mask):
        return scores.clone()


class TokenIdentityWeights(IdentityWeights):
    granularity = "token"


class LogProbScore(Scorer):
    """The token log-probability (< 0): reads the current policy, so a host defers it to the loss."""

    requires = ("logprobs",)
    granularity = "token"
    scope = "row"

    def _score(self, batch):
        return batch.logprobs.float()


class OwnWeights(Reweighter):
    """Replaces weights() itself (no _raw) and returns the scores as they are."""

    scope = "row"

    def weights(self, scores, batch, mask=None):
        return scores.float() * (1.0 if mask is None else mask.float())


class LogOfZero(Scorer):
    """log(reward): -inf for a reward of 0, a scorer bug."""

    requires = ("rewards",)
    scope = "row"

    def _score(self, batch):
        return torch.log(batch.rewards.float())


class NanTokenScore(Scorer):
    """NaN for every token (e.g. 0/0 in a user's entropy); reads the policy, so it is deferred to the loss."""

    requires = ("entropies",)
    granularity = "token"
    scope = "row"

    def _score(self, batch):
        return batch.entropies.float() * float("nan")


class MinusOne(Mixer):
    """Raw proportions all -1; normalised, they would read as 1/K each."""

    def raw_proportions(self, tracker):
        return -torch.ones(len(self.domains), dtype=torch.float64)


class NanRaw(Mixer):
    """A NaN raw proportion (a statistic of a domain never observed, used unfilled)."""

    def raw_proportions(self, tracker):
        return tracker.mean_reward()


class OwnProportions(Mixer):
    """Replaces proportions() itself and returns a negative one."""

    def proportions(self, tracker):
        return {d: (-0.5 if i == 0 else 1.5 / (len(self.domains) - 1)) for i, d in enumerate(self.domains)}


def path(cls):
    return f"{__name__}:{cls.__name__}"


def reweighting(scorer, reweighter, **params):
    return build_strategy(
        {
            "reweight": {
                "scorer": path(scorer) if isinstance(scorer, type) else scorer,
                "reweighter": {"name": path(reweighter), **params},
            }
        }
    )


# ---------------------------------------------------------------- weights


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("normalize", ["mean_one", "per_group_mean_one", "none"])
@pytest.mark.parametrize("reweighter", [IdentityWeights, TokenIdentityWeights])
def test_negative_weights_are_refused_naming_the_reweighter(device, normalize, reweighter):
    # The example: raw values [2, -2, 2, 2] (both signs) in one group.
    batch = grouped_batch([1.0, 0.0, 1.0, 1.0], device=device).replace(
        advantages=torch.tensor([2.0, -2.0, 2.0, 2.0], device=device)
    )
    scorer = SignedAdvantage
    if reweighter is TokenIdentityWeights:  # the same values per token, through a token-level scorer
        scorer = LogProbScore
        batch = batch.replace(logprobs=batch.advantages.unsqueeze(1).expand(4, 5).clone())
    strategy = reweighting(scorer, reweighter, normalize=normalize)
    with pytest.raises(ComponentError) as info:
        strategy.apply(batch, 0)
    message = str(info.value)
    assert f"reweighter {path(reweighter)!r}" in message and "negative or not finite" in message
    assert "\n" not in message
    assert isinstance(info.value, DataFlexError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("normalize", ["mean_one", "per_group_mean_one"])
def test_all_negative_raw_weights_are_refused_not_made_uniform(normalize):
    batch = grouped_batch([1.0, 0.0, 1.0, 1.0]).replace(advantages=torch.tensor([-1.0, -2.0, -3.0, -4.0]))
    with pytest.raises(ComponentError, match=r"reweighter .*IdentityWeights.*weight -"):
        reweighting(SignedAdvantage, IdentityWeights, normalize=normalize).apply(batch, 0)


def test_weights_from_a_reweighter_that_replaces_weights_are_checked_too():
    batch = grouped_batch([1.0, 0.0, 1.0, 1.0]).replace(advantages=torch.tensor([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ComponentError, match=r"reweighter .*OwnWeights.*weight -1 at 1 "):
        reweighting(SignedAdvantage, OwnWeights).apply(batch, 0)


def test_deferred_token_weights_are_checked_in_apply_policy():
    strategy = reweighting(LogProbScore, TokenIdentityWeights)
    batch = grouped_batch([1.0, 0.0, 1.0, 1.0])
    decision = strategy.apply(batch, 0, defer_policy=True)
    assert decision.deferred == ("reweight",)
    with pytest.raises(ComponentError, match="TokenIdentityWeights"):
        strategy.apply_policy(batch, decision)  # log-probabilities are < 0: negative raw weights


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=4, max_size=16),
    st.sampled_from(["mean_one", "none"]),
)
def test_weights_are_refused_exactly_when_a_kept_raw_weight_is_negative(raw, normalize):
    n = len(raw) - len(raw) % 4
    batch = grouped_batch([1.0] * n).replace(advantages=torch.tensor(raw[:n]))
    strategy = reweighting(SignedAdvantage, IdentityWeights, normalize=normalize)
    if any(value < 0 for value in raw[:n]):  # reference: a plain loop over the raw values
        with pytest.raises(ComponentError):
            strategy.apply(batch, 0)
    else:
        weights = strategy.apply(batch, 0).weights
        assert bool(torch.isfinite(weights).all()) and bool((weights >= 0).all())


# ---------------------------------------------------------------- scores


class AllNan(Scorer):
    """NaN for every response (a user's 0/0): under topk_fraction it once kept an arbitrary half, silently."""

    scope = "row"

    def _score(self, batch):
        return batch.rewards.float() * float("nan")


class NanAtPadding(Scorer):
    """Finite at valid tokens, NaN at padding: padding is never read, so this is allowed."""

    requires = ("entropies",)
    granularity = "token"
    scope = "row"

    def _score(self, batch):
        return batch.entropies.float().masked_fill(~batch.valid_mask, float("nan"))


class GivenScores(Scorer):
    """The batch's advantages as scores, whatever they hold (NaN and inf included): the property test's scorer."""

    requires = ("advantages",)
    scope = "row"

    def _score(self, batch):
        return batch.advantages.float()


SCORE_PARTS = {
    "select topk_fraction": lambda scorer: {
        "select": {"scorer": path(scorer), "selector": {"name": "topk_fraction", "params": {"fraction": 0.5}}}
    },
    "select threshold_band": lambda scorer: {"select": {"scorer": path(scorer), "selector": "threshold_band"}},
    "reweight per_advantage": lambda scorer: {"reweight": {"scorer": path(scorer), "reweighter": "per_advantage"}},
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "scorer, found",
    [
        (AllNan, "returned 8 NaN and 0 infinite of 8 response scores"),
        (LogOfZero, "returned 0 NaN and 4 infinite of 8 response scores"),
    ],
)
@pytest.mark.parametrize("part", list(SCORE_PARTS))
def test_nonfinite_scores_are_refused_naming_the_scorer(device, scorer, found, part):
    strategy = build_strategy(SCORE_PARTS[part](scorer))
    batch = grouped_batch([1.0, 0.0, 1.0, 0.0] * 2, device=device)  # groups with signal: only the scores are wrong
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused, not a warning
        with pytest.raises(ComponentError) as info:
            strategy.apply(batch, 0)
    message = str(info.value)
    assert message.startswith(f"{part.split()[0]}: scorer {path(scorer)!r} {found}"), message
    assert "make it return finite scores" in message and "\n" not in message
    assert isinstance(info.value, DataFlexError) and isinstance(info.value, ValueError)


def test_nonfinite_token_scores_of_a_deferred_selection_are_refused_in_apply_policy():
    strategy = build_strategy({"select": {"scorer": path(NanTokenScore), "selector": "entropy_top_tokens"}})
    batch = grouped_batch([1.0, 0.0, 1.0, 0.0] * 2)
    decision = strategy.apply(batch, 5, defer_policy=True)
    assert decision.deferred == ("select",)
    with pytest.raises(
        ComponentError,
        match=r"select: scorer .*NanTokenScore.* returned 40 NaN and 0 infinite of 40 "
        r"token scores \(first: nan at \(0, 0\)\)",
    ):
        strategy.apply_policy(batch, decision)


def test_dynamic_sampling_refuses_nonfinite_scores_too():
    from dataflex_callbacks import signal_rows

    strategy = build_strategy(SCORE_PARTS["select threshold_band"](AllNan))
    with pytest.raises(ComponentError, match="AllNan"):
        signal_rows(grouped_batch([1.0, 0.0, 1.0, 0.0] * 2), strategy)


def test_nonfinite_token_scores_at_padding_are_not_read():
    batch = grouped_batch([1.0, 0.0, 1.0, 0.0] * 2)
    mask = batch.completion_mask.clone()
    mask[:, 3:] = False  # two padding tokens per response
    batch = batch.replace(completion_mask=mask)
    strategy = build_strategy(
        {
            "select": {
                "scorer": path(NanAtPadding),
                "selector": {"name": "entropy_top_tokens", "params": {"fraction": 0.5}},
            }
        }
    )
    decision = strategy.apply(batch, 0)
    assert not bool((decision.token_keep & ~mask).any()) and bool(decision.token_keep.any())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.5, -2.0, 3e38]), min_size=8, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.sampled_from([float("nan"), float("inf"), -float("inf")])), max_size=2),
    st.sampled_from(list(SCORE_PARTS)),
)
def test_scores_are_refused_exactly_when_one_is_not_finite(finite, bad, part):
    # Part.score is where every score passes; called on the raw batch (Strategy.apply would clean the
    # advantages first). 3e38 values make the one-sum fast path overflow: that alone is no refusal.
    values = list(finite)
    for at, value in bad:
        values[at] = value
    strategy = build_strategy(SCORE_PARTS[part](GivenScores))
    batch = grouped_batch([1.0, 0.0, 1.0, 0.0] * 2).replace(advantages=torch.tensor(values))
    scoring = strategy.select or strategy.reweight
    if any(v != v or abs(v) == float("inf") for v in values):  # reference: a plain loop over the scores
        with pytest.raises(ComponentError, match="infinite of 8 response scores"):
            scoring.score(batch)
    else:
        assert scoring.score(batch).tolist() == torch.tensor(values).tolist()


# ---------------------------------------------------------------- proportions


@pytest.mark.parametrize(
    "mixer, words",
    [
        (MinusOne, ["'math': -1.0", "negative or not finite"]),
        (NanRaw, ["nan", "negative or not finite", "fill_unobserved"]),
        (OwnProportions, ["-0.5", "implement raw_proportions"]),
    ],
)
def test_bad_proportions_are_refused_naming_the_mixer(mixer, words):
    strategy = build_strategy({"mix": {"mixer": path(mixer), "domains": DOMAINS, "warmup_steps": 0, "update_every": 1}})
    batch = grouped_batch([1.0, 0.0, 1.0, 1.0] * 2)  # math and code observed; logic never: a NaN statistic
    with pytest.raises(ComponentError) as info:
        strategy.apply(batch, 0)
    message = str(info.value)
    assert f"mixer {path(mixer)!r}" in message and "\n" not in message
    for word in words:
        assert word in message, message


# ---------------------------------------------------------------- a step that keeps nothing: what, when, which fix


def dropped_all_warning(apply):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = apply()
    found = [w.message for w in caught if w.category is DroppedAllWarning]
    assert len(found) == 1, [str(w.message) for w in caught]
    return decision, found[0]


EQUAL_GROUPS = [1.0] * 4 + [0.0] * 4 + [1.0] * 4 + [0.0] * 4  # every group all right or all wrong


@pytest.mark.parametrize("preset", ["diffband", "dapo", "difffilter"])
def test_equal_reward_groups_say_what_happened_without_a_settings_fix(preset):
    decision, warning = dropped_all_warning(lambda: build_strategy(preset).apply(grouped_batch(EQUAL_GROUPS), 3))
    assert decision.metrics["dropped_all"] == 1.0
    assert (warning.cause, warning.fix, warning.step, warning.strategy) == ("equal_rewards", None, 3, preset)
    text = str(warning)
    assert "Fix:" not in text and "band or fraction" not in text
    assert "repeats" in text and "every step" in text  # when it matters
    assert ("generation rounds" in text) == (preset == "dapo")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=2, max_size=4), min_size=1, max_size=5))
def test_diffband_drops_everything_exactly_when_every_group_is_equal(groups):
    rewards = torch.tensor([r for group in groups for r in group])
    group_ids = torch.cat([torch.full((len(group),), i) for i, group in enumerate(groups)])
    batch = RolloutBatch(rewards, group_ids=group_ids)
    every_equal = all(len(set(group)) == 1 for group in groups)  # reference: a plain loop over the groups
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = build_strategy("diffband").apply(batch, 0)
    causes = [w.message.cause for w in caught if w.category is DroppedAllWarning]
    assert decision.metrics["dropped_all"] == float(every_equal)
    assert causes == (["equal_rewards"] if every_equal else [])
    assert set(causes) <= set(DROPPED_ALL_CAUSES)
