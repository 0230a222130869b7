"""DomainMixing: warm-up on the prior, update schedule, smoothing and floor, state, metrics."""

import copy

import pytest
import torch

from dataflex_callbacks import ConfigError, RolloutBatch, build_component, build_strategy
from dataflex_callbacks.mixing import DomainMixing

DOMAINS = ["easy", "hard", "mid"]
SOLVE = {"easy": 0.5, "hard": 0.0, "mid": 0.3}


def batch_for(step, per_domain=4, num_generations=4):
    """Groups of num_generations 0/1 rewards per domain; 'hard' is never solved."""
    generator = torch.Generator().manual_seed(step)
    domains = [d for d in DOMAINS for _ in range(per_domain * num_generations)]
    rewards = torch.bernoulli(torch.tensor([SOLVE[d] for d in domains]), generator=generator)
    group_ids = torch.arange(len(domains)) // num_generations
    means = rewards.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations)
    return RolloutBatch(rewards, group_ids=group_ids, advantages=rewards - means, domains=domains)


def mixing(mixer="dump_ucb", **kwargs):
    params = kwargs.pop("mixer_params", {})
    return DomainMixing(build_component("mixer", mixer, **params), domains=DOMAINS, **kwargs)


def test_warmup_keeps_the_prior_with_its_floor():
    mix = mixing(warmup_steps=5, prior={"easy": 0.8, "hard": 0.2, "mid": 0.0})
    floor = mix.mixer.floor
    expected = {d: floor + (1 - 3 * floor) * p for d, p in {"easy": 0.8, "hard": 0.2, "mid": 0.0}.items()}
    for step in range(5):
        assert mix.observe(batch_for(step), step) is False
        assert mix.target == pytest.approx(expected)
    assert mix.observe(batch_for(5), 5) is True
    assert mix.target != pytest.approx(expected)


@pytest.mark.parametrize("warmup_steps, update_every", [(0, 1), (3, 4), (10, 5)])
def test_updates_at_warmup_then_every_update_every_steps(warmup_steps, update_every):
    mix = mixing(warmup_steps=warmup_steps, update_every=update_every)
    updated = [step for step in range(30) if mix.observe(batch_for(step), step)]
    assert updated == list(range(warmup_steps, 30, update_every))
    assert mix.last_update_step == updated[-1]


def test_updates_happen_when_the_host_calls_at_strided_steps():
    # A host calling once per generation round (every 4 steps) still gets an update every >= 5 steps.
    mix = mixing(warmup_steps=3, update_every=5)
    updated = [step for step in range(0, 60, 4) if mix.observe(batch_for(step), step)]
    assert updated == [4, 12, 20, 28, 36, 44, 52]


def test_a_repeated_step_updates_once():
    mix = mixing(warmup_steps=0, update_every=1)
    assert mix.observe(batch_for(0), 0) is True
    assert mix.observe(batch_for(1), 0) is False


def test_smoothing_blends_old_and_new_and_keeps_the_floor():
    params = {"temperature": 0.01, "floor": 0.1}
    sharp = mixing("reward_gap", warmup_steps=0, update_every=1, mixer_params=params)
    smooth = mixing("reward_gap", warmup_steps=0, update_every=1, smoothing=0.7, mixer_params=params)
    for step in range(12):
        before = dict(smooth.target)
        sharp.observe(batch_for(step), step)
        smooth.observe(batch_for(step), step)
        fresh = smooth.mixer.proportions(smooth.tracker)
        assert fresh == pytest.approx(sharp.target)
        assert smooth.target == pytest.approx({d: 0.7 * before[d] + 0.3 * fresh[d] for d in DOMAINS})
        assert sum(smooth.target.values()) == pytest.approx(1.0)
        assert min(smooth.target.values()) >= 0.1 - 1e-12
    # reward_gap with a tiny temperature puts everything not floored on the lagging domain.
    assert sharp.target["easy"] == pytest.approx(0.1)
    assert smooth.target["easy"] > sharp.target["easy"]


def test_smoothing_must_be_below_one():
    with pytest.raises(ValueError, match="smoothing"):
        mixing(smoothing=1.0)


@pytest.mark.parametrize("mixer", ["static", "reward_gap", "dump_ucb", "tscl", "learnability"])
def test_state_round_trip_continues_identically(mixer):
    original = mixing(mixer, warmup_steps=2, update_every=3, smoothing=0.5, window=6)
    for step in range(10):
        original.observe(batch_for(step), step)
        original.observe_drawn({"easy": step, "hard": 1, "mid": 2})
    state = copy.deepcopy(original.state_dict())
    restored = mixing(mixer, warmup_steps=2, update_every=3, smoothing=0.5, window=6)
    restored.load_state_dict(state)
    assert restored.metrics() == original.metrics()
    for step in range(10, 25):
        assert original.observe(batch_for(step), step) == restored.observe(batch_for(step), step)
        original.observe_drawn({"easy": 3, "hard": 1, "mid": 2})
        restored.observe_drawn({"easy": 3, "hard": 1, "mid": 2})
        assert restored.target == original.target
        assert restored.metrics() == original.metrics()


def test_strategy_state_round_trip_through_torch_save(tmp_path):
    config = {"mix": {"mixer": "tscl", "domains": DOMAINS, "warmup_steps": 1, "update_every": 2}}
    strategy = build_strategy(config)
    for step in range(7):
        strategy.apply(batch_for(step), step)
    torch.save(strategy.state_dict(), tmp_path / "state.pt")
    restored = build_strategy(config)
    restored.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=False))
    for step in range(7, 12):
        a, b = strategy.apply(batch_for(step), step), restored.apply(batch_for(step), step)
        assert a.metrics == b.metrics
    assert restored.target_proportions == strategy.target_proportions


def test_metrics_keys():
    mix = mixing(warmup_steps=0)
    assert set(mix.metrics()) == {f"mix/target/{d}" for d in DOMAINS}  # nothing drawn or observed yet
    mix.observe(batch_for(0), 0)
    mix.observe_drawn({"easy": 2, "hard": 1, "mid": 1})
    metrics = mix.metrics()
    expected = {f"mix/{kind}/{d}" for kind in ("target", "actual", "signal") for d in DOMAINS}
    assert set(metrics) == expected
    assert metrics["mix/actual/easy"] == pytest.approx(0.5)
    assert sum(metrics[f"mix/target/{d}"] for d in DOMAINS) == pytest.approx(1.0)
    assert metrics["mix/signal/hard"] < metrics["mix/signal/easy"]  # |advantage| UCB: 'hard' has none
    assert all(isinstance(v, float) for v in metrics.values())


def test_strategy_apply_reports_mix_metrics():
    strategy = build_strategy({"mix": {"mixer": "learnability", "domains": DOMAINS, "warmup_steps": 0}})
    strategy.observe_sampled({"easy": 1, "hard": 1, "mid": 2})
    metrics = strategy.apply(batch_for(0), 0).metrics
    for d in DOMAINS:
        assert {f"mix/target/{d}", f"mix/actual/{d}", f"mix/signal/{d}", f"reward/{d}"} <= set(metrics)


def test_actual_recent_window():
    mix = mixing()
    mix.observe_drawn({"easy": 100, "hard": 0, "mid": 0})
    for _ in range(20):  # pushes the first draw out of the recent window
        mix.observe_drawn({"easy": 1, "hard": 1, "mid": 2})
    assert mix.actual(recent=True) == pytest.approx({"easy": 0.25, "hard": 0.25, "mid": 0.5})
    assert mix.actual()["easy"] == pytest.approx(120 / 180)


def test_errors():
    unbound = DomainMixing(build_component("mixer", "static"))
    with pytest.raises(ConfigError, match="bind_domains"):
        unbound.observe(batch_for(0), 0)
    mix = mixing()
    with pytest.raises(ConfigError, match="unknown domain"):
        mix.observe_drawn({"other": 1})
    with pytest.raises(ConfigError, match="cannot rebind"):
        mix.bind(["easy", "mid"])
    with pytest.raises(ConfigError, match="unknown domain"):
        mixing(prior={"easy": 0.5, "zzz": 0.5})
