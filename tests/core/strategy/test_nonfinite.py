"""`nan_policy` on every signal a component reads: never a NaN weight, always a counter, a loud empty step."""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import BatchError, RolloutBatch, build_strategy, list_presets
from dataflex_callbacks.errors import DroppedAllWarning
from dataflex_callbacks.rollout.batch import nonfinite_rows

DOMAINS = ["math", "code", "logic"]
N, G, L = 20, 5, 6


def batch_with(token_advantages=False, seed=0, **changes):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(N, L, generator=gen) > 0.3
    mask[:, 0] = True
    advantages = torch.randn(N, generator=gen)
    if token_advantages:
        advantages = advantages.unsqueeze(1) * mask  # verl's form: (N, L), zero on padding
    batch = RolloutBatch(
        (torch.rand(N, generator=gen) > 0.5).float(),
        group_ids=torch.arange(N) // G,
        completion_mask=mask,
        advantages=advantages,
        logprobs=-torch.rand(N, L, generator=gen) * 3,
        entropies=torch.rand(N, L, generator=gen),
        domains=[DOMAINS[i % 3] for i in range(N)],
        prompt_keys=[f"p{i // G}" for i in range(N)],
    )
    return batch.replace(**changes) if changes else batch


def poisoned(batch, name, rows=(2,), value=float("nan")):
    tensor = getattr(batch, name).clone()
    for row in rows:
        if tensor.dim() == 1:
            tensor[row] = value
        else:
            tensor[row, 0] = value  # token 0 is always valid
    return batch.replace(**{name: tensor})


def finite_decision(decision):
    assert torch.isfinite(decision.weights).all() and (decision.weights >= 0).all()
    assert all(v == v and abs(v) != float("inf") for v in decision.metrics.values()), decision.metrics


# preset -> the signal its scorer reads
READERS = [
    ("softmax", "advantages"),
    ("per", "advantages"),
    ("topk", "advantages"),
    ("ar", "logprobs"),
    ("entropy_top", "entropies"),
    ("difffilter", "rewards"),
    ("maxvar", "rewards"),
    ("gfpo", "rewards"),
]


@pytest.mark.parametrize("preset, signal", READERS)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("token_advantages", [False, True])
def test_zero_policy_gives_finite_weights_and_counts(preset, signal, value, token_advantages):
    batch = poisoned(batch_with(token_advantages), signal, rows=(2, 7), value=value)
    decision = build_strategy(preset).apply(batch, 0)
    finite_decision(decision)
    # -inf is a valid log-probability (probability 0): used as it is, not counted as bad.
    valid_minus_inf = signal == "logprobs" and value == float("-inf")
    assert decision.metrics[f"nonfinite_{signal}"] == (0.0 if valid_minus_inf else 2.0)
    assert decision.keep.shape == (N,)


@pytest.mark.parametrize("preset, signal", READERS)
@pytest.mark.parametrize("token_advantages", [False, True])
def test_drop_policy_leaves_the_rows_out(preset, signal, token_advantages):
    batch = poisoned(batch_with(token_advantages), signal, rows=(2, 7))
    decision = build_strategy({**_canonical(preset), "nan_policy": "drop"}).apply(batch, 0)
    finite_decision(decision)
    assert decision.metrics[f"nonfinite_{signal}"] == 2.0
    assert not decision.keep[[2, 7]].any()
    assert (decision.weights[[2, 7]] == 0).all()


@pytest.mark.parametrize("preset, signal", READERS)
def test_raise_policy_names_the_signal_and_the_fix(preset, signal):
    batch = poisoned(batch_with(), signal, rows=(2,))
    with pytest.raises(BatchError, match=rf"1 of {N} .*{signal}.*NaN or infinite.*nan_policy"):
        build_strategy({**_canonical(preset), "nan_policy": "raise"}).apply(batch, 0)


def _canonical(preset):
    from dataflex_callbacks.config import load_config

    config = load_config(preset)
    config.pop("name", None)
    return config


def test_topk_does_not_keep_nan_rows_first():
    batch = poisoned(batch_with(), "advantages", rows=tuple(range(10)))
    decision = build_strategy("topk").apply(batch, 0)
    assert not decision.keep[:10].any()  # they count as |A| = 0, the smallest magnitude


def test_softmax_one_nan_advantage_keeps_the_others_weights():
    clean = build_strategy("softmax").apply(batch_with(), 0).weights
    batch = poisoned(batch_with(), "advantages", rows=(2,))
    weights = build_strategy({**_canonical("softmax"), "nan_policy": "drop"}).apply(batch, 0).weights
    assert weights[2] == 0
    others = torch.ones(N, dtype=torch.bool)
    others[2] = False
    ratio = weights[others] / clean[others]  # same relative weights, rescaled to mean 1 over 19 rows
    torch.testing.assert_close(ratio, ratio[0].expand_as(ratio))


def test_all_nan_entropies_are_not_dropped_silently():
    batch = batch_with(entropies=torch.full((N, L), float("nan")))
    zero = build_strategy("entropy_top").apply(batch, 0)
    finite_decision(zero)
    assert zero.metrics["nonfinite_entropies"] == N and zero.metrics["dropped_all"] == 0.0
    assert int(zero.token_keep.sum()) == round(0.2 * int(batch.valid_mask.sum()))
    strategy = build_strategy({**_canonical("entropy_top"), "nan_policy": "drop"})
    with pytest.warns(UserWarning, match=r"NaN or infinite value \(entropies\).*nan_policy: zero"):
        dropped = strategy.apply(batch, 0)
    finite_decision(dropped)
    assert dropped.metrics["dropped_all"] == 1.0 and not dropped.keep.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per strategy
        strategy.apply(batch, 1)


def dropped_all_warning(record):
    """The one `DroppedAllWarning` among the recorded warnings (a scorer may add its own advice)."""
    found = [w.message for w in record if w.category is DroppedAllWarning]
    assert len(found) == 1, [str(w.message) for w in record]
    return found[0]


def test_selection_that_keeps_nothing_warns_once_naming_the_fix():
    # A partial-credit reward (0.1 or 0.3 within each group): no response looks solved at the threshold 0.5.
    batch = batch_with(rewards=0.1 + 0.2 * (torch.arange(N) % 2).float())
    strategy = build_strategy("difffilter")
    with pytest.warns(UserWarning) as record:
        decision = strategy.apply(batch, 0)
    assert decision.metrics["dropped_all"] == 1.0
    warning = dropped_all_warning(record)
    assert (warning.cause, warning.step, warning.strategy) == ("reward_scale", 0, "difffilter")
    assert "success_threshold=" in warning.fix and "a selection reward" in warning.fix
    assert "kept no response" in str(warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strategy.apply(batch, 1)


def test_binary_rewards_that_fill_no_band_get_the_band_advice_not_the_threshold_advice():
    rewards = (torch.arange(N) % G == 0).float()  # one of 5 right in every group: solve rate 0.2, outside (0.2, 0.8)
    with pytest.warns(UserWarning) as record:
        build_strategy("difffilter").apply(batch_with(rewards=rewards), 0)
    warning = dropped_all_warning(record)
    assert warning.cause == "band" and "widen" in warning.fix and "success_threshold=" not in warning.fix


def test_nonfinite_outside_the_mask_is_cleaned_not_counted():
    batch = batch_with(token_advantages=True)
    advantages, entropies = batch.advantages.clone(), batch.entropies.clone()
    padding = ~batch.valid_mask
    advantages[padding] = float("nan")
    entropies[padding] = float("inf")
    batch = batch.replace(advantages=advantages, entropies=entropies)
    for preset in ("softmax", "per", "topk", "entropy_top"):
        decision = build_strategy({**_canonical(preset), "nan_policy": "raise"}).apply(batch, 0)
        finite_decision(decision)
        assert decision.metrics.get("nonfinite_advantages", 0.0) == 0.0
        assert decision.metrics.get("nonfinite_entropies", 0.0) == 0.0


def test_negative_infinite_logprobs_are_probability_zero():
    logprobs = batch_with().logprobs.clone()
    logprobs[3, 0] = float("-inf")
    decision = build_strategy({**_canonical("ar"), "nan_policy": "raise"}).apply(batch_with(logprobs=logprobs), 0)
    finite_decision(decision)
    assert decision.metrics["nonfinite_logprobs"] == 0.0


def test_counters_for_every_signal_read():
    metrics = build_strategy("softmax").apply(batch_with(), 0).metrics
    assert metrics["nonfinite_rewards"] == 0.0 and metrics["nonfinite_advantages"] == 0.0
    assert "nonfinite_entropies" not in metrics  # softmax on |advantage| never reads entropies
    metrics = build_strategy("entropy_top").apply(batch_with(), 0).metrics
    assert metrics["nonfinite_entropies"] == 0.0


@pytest.mark.parametrize("policy", ["zero", "drop"])
def test_deferred_policy_signals_are_cleaned_in_apply_policy(policy):
    strategy = build_strategy({**_canonical("ar"), "nan_policy": policy})
    batch = batch_with()
    first = strategy.apply(batch, 0, defer_policy=True)
    done = strategy.apply_policy(poisoned(batch, "logprobs", rows=(4,)), first)
    finite_decision(done)
    assert done.metrics["nonfinite_logprobs"] == 1.0
    assert bool(done.keep[4]) is (policy == "zero")


def test_mixing_sees_dropped_rows_as_no_observation():
    batch = poisoned(batch_with(), "advantages", rows=tuple(range(N)))
    strategy = build_strategy(
        {"mix": {"mixer": "dump_ucb", "domains": DOMAINS, "warmup_steps": 0, "update_every": 1}, "nan_policy": "drop"}
    )
    decision = strategy.apply(batch, 0)
    finite_decision(decision)
    assert decision.metrics["nonfinite_advantages"] == N
    assert float(strategy.mixing.tracker.total_count.sum()) == 0
    assert not any(k.startswith("selection_reward/") for k in decision.metrics)


signal_names = st.sampled_from(["rewards", "advantages", "logprobs", "entropies"])
bad_values = st.sampled_from([float("nan"), float("inf"), float("-inf")])


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(sorted(list_presets())),
    st.sampled_from(["zero", "drop"]),
    st.lists(st.tuples(signal_names, st.integers(0, N - 1), st.integers(0, L - 1), bad_values), max_size=6),
    st.booleans(),
)
def test_any_nonfinite_signal_never_gives_nan(preset, policy, poison, token_advantages):
    batch = batch_with(token_advantages)
    fields = {name: getattr(batch, name).clone() for name in ("rewards", "advantages", "logprobs", "entropies")}
    for name, row, col, value in poison:
        if fields[name].dim() == 1:
            fields[name][row] = value
        else:
            fields[name][row, col] = value
    strategy = build_strategy({**_canonical(preset), "nan_policy": policy})
    strategy.bind_domains(DOMAINS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        decision = strategy.apply(batch.replace(**fields), 0)
    finite_decision(decision)


def test_nonfinite_rows_helper():
    values = torch.tensor([[1.0, float("nan")], [float("-inf"), 2.0], [0.0, 1.0]])
    mask = torch.tensor([[True, False], [True, True], [True, True]])
    bad, cleaned = nonfinite_rows(values, mask)
    assert bad.tolist() == [False, True, False] and torch.isfinite(cleaned).all()
    bad, _ = nonfinite_rows(values, mask, allow_negative_inf=True)
    assert bad is None or not bad.any()
    same = torch.ones(3, 2)
    assert nonfinite_rows(same) == (None, same) and nonfinite_rows(same)[1] is same


def test_an_adapter_can_take_over_the_dropped_all_warning():
    batch = batch_with(rewards=torch.zeros(N))  # every group all-wrong: difffilter keeps nothing
    with pytest.warns(UserWarning, match="kept no response"):
        build_strategy("difffilter").apply(batch, 0)
    strategy = build_strategy("difffilter")
    with warnings.catch_warnings():  # e.g. the TRL adapter, which warns with the reward spread
        warnings.simplefilter("error")
        decision = strategy.apply(batch, 0, warn=False)
    assert decision.metrics["dropped_all"] == 1.0
