"""DomainMixing: warm-up on the prior, update schedule, smoothing and floor, state, metrics."""

import copy

import pytest
import torch

from dataflex_callbacks import ConfigError, RolloutBatch, build_component, build_strategy
from dataflex_callbacks.config.fields import MixConfig
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
    config = MixConfig(mixer={"name": mixer, "params": params}, domains=DOMAINS, **kwargs)
    return DomainMixing(build_component("mixer", mixer, **params), config)


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
        original.observe_sampled({"easy": step, "hard": 1, "mid": 2})
    state = copy.deepcopy(original.state_dict())
    restored = mixing(mixer, warmup_steps=2, update_every=3, smoothing=0.5, window=6)
    restored.load_state_dict(state)
    assert restored.metrics() == original.metrics()
    for step in range(10, 25):
        assert original.observe(batch_for(step), step) == restored.observe(batch_for(step), step)
        original.observe_sampled({"easy": 3, "hard": 1, "mid": 2})
        restored.observe_sampled({"easy": 3, "hard": 1, "mid": 2})
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
    mix.observe_sampled({"easy": 2, "hard": 1, "mid": 1})
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
        assert {f"mix/target/{d}", f"mix/actual/{d}", f"mix/signal/{d}", f"selection_reward/{d}"} <= set(metrics)


def test_actual_recent_window():
    mix = mixing()
    mix.observe_sampled({"easy": 100, "hard": 0, "mid": 0})
    for _ in range(20):  # pushes the first draw out of the recent window
        mix.observe_sampled({"easy": 1, "hard": 1, "mid": 2})
    assert mix.actual(recent=True) == pytest.approx({"easy": 0.25, "hard": 0.25, "mid": 0.5})
    assert mix.actual()["easy"] == pytest.approx(120 / 180)


def test_errors():
    unbound = DomainMixing(build_component("mixer", "static"), MixConfig(mixer="static"))
    with pytest.raises(ConfigError, match="bind_domains"):
        unbound.observe(batch_for(0), 0)
    mix = mixing()
    with pytest.raises(ConfigError, match="unknown domain"):
        mix.observe_sampled({"other": 1})
    with pytest.raises(ConfigError, match="cannot rebind"):
        mix.bind(["easy", "mid"])
    with pytest.raises(ConfigError, match="unknown domain"):
        mixing(prior={"easy": 0.5, "zzz": 0.5})


MIXERS = ["static", "reward_gap", "dump_ucb", "tscl", "learnability"]


@pytest.mark.parametrize("unit", ["steps", "rows"])
@pytest.mark.parametrize("mixer", MIXERS)
def test_state_loads_with_weights_only_for_every_mixer(mixer, unit, tmp_path):
    import numpy as np

    params = {"proportions": [np.float64(0.2), np.float64(0.3), np.float64(0.5)]} if mixer == "static" else {}
    config = MixConfig(mixer=mixer, domains=DOMAINS, warmup_steps=1, update_every=2, window=7, window_unit=unit)
    mix = DomainMixing(build_component("mixer", mixer, **params), config)
    for step in range(6):
        mix.observe(batch_for(step), np.int64(step))  # hosts pass numpy / tensor step counters
        mix.observe_sampled({"easy": np.int64(2), "hard": 1, "mid": 1})
    torch.save(mix.state_dict(), tmp_path / "mix.pt")
    loaded = torch.load(tmp_path / "mix.pt", weights_only=True)
    restored = DomainMixing(build_component("mixer", mixer, **params), config)
    restored.load_state_dict(loaded)
    for step in range(6, 10):
        assert mix.observe(batch_for(step), step) == restored.observe(batch_for(step), step)
        assert restored.target == mix.target
    assert restored.metrics() == mix.metrics()


@pytest.mark.parametrize("mixer", MIXERS)
def test_strategy_state_loads_with_weights_only(mixer, tmp_path):
    import numpy as np

    params = (
        {"proportions": {"easy": np.float32(0.5), "hard": torch.tensor(0.25), "mid": 0.25}} if mixer == "static" else {}
    )
    config = {
        "mix": {
            "mixer": {"name": mixer, "params": params},
            "domains": DOMAINS,
            "warmup_steps": 1,
            "prior": [np.float64(0.5), 0.25, 0.25],
        }
    }
    strategy = build_strategy(config)
    for step in range(4):
        strategy.apply(batch_for(step), step)
    torch.save(strategy.state_dict(), tmp_path / "strategy.pt")
    restored = build_strategy(config)
    restored.load_state_dict(torch.load(tmp_path / "strategy.pt", weights_only=True))
    assert restored.target_proportions == strategy.target_proportions


def test_state_dict_does_not_alias_the_mixing():
    mix = mixing(warmup_steps=0)
    mix.observe(batch_for(0), 0)
    mix.observe_sampled({"easy": 1, "hard": 1, "mid": 1})
    before = copy.deepcopy(mix.state_dict())
    state = mix.state_dict()
    state["target"]["easy"] = 9.0
    state["drawn_total"]["easy"] = 99
    state["drawn_recent"][0]["easy"] = 99
    state["domains"].append("other")
    state["tracker"]["windows"]["reward"].fill_(7.0)
    after = mix.state_dict()
    assert after["target"] == before["target"] and after["drawn_total"] == before["drawn_total"]
    assert after["drawn_recent"] == before["drawn_recent"] and mix.domains == DOMAINS
    assert torch.equal(after["tracker"]["windows"]["reward"], before["tracker"]["windows"]["reward"])


@pytest.mark.parametrize(
    "garbage, fragment",
    [
        (None, "expects the dict"),
        ([1, 2], "expects the dict"),
        ({"domains": DOMAINS}, "lacks key"),
        (
            {
                "domains": DOMAINS,
                "target": None,
                "last_update_step": None,
                "tracker": None,
                "drawn_total": {},
                "drawn_recent": [],
            },
            "'target'",
        ),
    ],
)
def test_load_garbage_state_is_a_clear_error(garbage, fragment):
    from dataflex_callbacks.errors import StateError

    with pytest.raises(StateError, match=fragment):
        mixing().load_state_dict(garbage)


def test_tracker_state_missing_inside_mixing_state_is_a_clear_error():
    from dataflex_callbacks.errors import StateError

    state = mixing().state_dict()
    state["tracker"] = None
    with pytest.raises(StateError, match="DomainTracker"):
        mixing().load_state_dict(state)


def test_prior_as_a_list_and_a_string_domain():
    mix = DomainMixing(build_component("mixer", "static"), MixConfig(mixer="static", domains="easy", prior=[1.0]))
    assert mix.domains == ["easy"] and mix.target == {"easy": 1.0}
    listed = mixing(prior=[0.5, 0.25, 0.25], mixer="static")
    assert listed.target == pytest.approx({"easy": 0.5, "hard": 0.25, "mid": 0.25})
    with pytest.raises(ConfigError, match="mapping"):
        mixing(prior=0.5)
    with pytest.raises(ConfigError, match="DomainMixing needs a Mixer"):
        DomainMixing("reward_gap", MixConfig(mixer="reward_gap"))


def test_row_window_mixing_uses_rows():
    mix = mixing(mixer="reward_gap", window=4, window_unit="rows", warmup_steps=0)
    mix.observe(batch_for(0), 0)
    assert mix.tracker.window_unit == "rows" and mix.tracker.window_counts().tolist() == [4.0, 4.0, 4.0]


def test_all_nan_domain_does_not_win_reward_gap():
    """nan_policy=drop: a domain whose rewards are all NaN keeps its prior statistics, never 'reward 0'."""
    strategy = build_strategy(
        {"nan_policy": "drop", "mix": {"mixer": "reward_gap", "domains": DOMAINS, "warmup_steps": 0, "update_every": 1}}
    )
    nan = float("nan")
    for step in range(3):
        rewards = torch.tensor([1.0, 0.0] * 2 + [nan] * 4 + [1.0, 1.0] * 2)  # easy: 0.5, hard: all NaN, mid: 1.0
        batch = RolloutBatch(
            rewards, group_ids=torch.arange(12) // 4, domains=["easy"] * 4 + ["hard"] * 4 + ["mid"] * 4
        )
        strategy.apply(batch, step)
    target = strategy.target_proportions
    assert target["hard"] < 0.9  # before: 'hard' recorded as reward 0 and got 95% of the data
    assert target["easy"] == max(target.values())  # the observed lagging domain gets the most


def test_static_proportions_hold_before_the_first_update():
    mix = mixing("static", warmup_steps=5, mixer_params={"proportions": [0.6, 0.3, 0.1], "floor": 0.0})
    assert mix.target == pytest.approx({"easy": 0.6, "hard": 0.3, "mid": 0.1})
    # An explicit prior still wins over the mixer's starting proportions.
    mix = mixing(
        "static",
        prior={"easy": 0.2, "hard": 0.2, "mid": 0.6},
        mixer_params={"proportions": [0.6, 0.3, 0.1], "floor": 0.0},
    )
    assert mix.target == pytest.approx({"easy": 0.2, "hard": 0.2, "mid": 0.6})
