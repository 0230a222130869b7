"""DomainTracker: windowed statistics (step and row windows) vs plain-list references; NaN rows; state."""

import io
import math

import core_reference as ref
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import BatchError, ConfigError, DomainTracker, RolloutBatch
from dataflex_callbacks.errors import DataFlexError, StateError

DOMAINS = ["math", "code", "logic"]


class PlainTracker(ref.ReferenceTracker):
    """Per-domain plain lists of observations, truncated to the last ``window``; NaN rows are no observation.

    ``unit="steps"``: one observation per step a domain had a finite row (the step's means);
    ``unit="rows"``: one observation per finite response row (DataFlex-RL's window).
    """

    def __init__(self, domains, window, unit="steps"):
        super().__init__(domains, window)
        self.unit = unit

    def update(self, rewards, domains, step, advantages=None, group_ids=None):
        rewards = [float(r) for r in rewards]
        # a row is an observation only when every signal the tracker reads is finite
        finite = [
            math.isfinite(r) and (advantages is None or math.isfinite(float(advantages[i])))
            for i, r in enumerate(rewards)
        ]
        group_var = {}
        if group_ids is not None:
            for members in ref.groups_of(group_ids).values():
                values = [rewards[i] for i in members if finite[i]]
                for i in members:
                    group_var[i] = ref.population_variance(values)
        for d in self.domains:
            rows = [i for i, x in enumerate(domains) if x == d and finite[i]]
            if not rows:
                continue
            self.total[d] += len(rows)
            adv = [abs(float(advantages[i])) if advantages is not None else 0.0 for i in rows]
            if self.unit == "rows":
                for i, a in zip(rows, adv, strict=True):
                    self.obs[d].append((float(step), rewards[i], a, group_var.get(i, 0.0), 1.0))
            else:
                groups = []
                if group_ids is not None:
                    for members in ref.groups_of(group_ids).values():
                        if domains[members[0]] == d and any(finite[i] for i in members):
                            groups.append(group_var[members[0]])
                self.obs[d].append(
                    (
                        float(step),
                        sum(rewards[i] for i in rows) / len(rows),
                        sum(adv) / len(rows),
                        sum(groups) / max(len(groups), 1),
                        float(len(rows)),
                    )
                )
            self.obs[d] = self.obs[d][-self.window :]


def random_batch(gen, n=24, group=4, with_nan=False):
    rewards = (torch.rand(n, generator=gen) > torch.rand(1, generator=gen)).float()
    if with_nan:
        rewards[torch.rand(n, generator=gen) < 0.1] = float("nan")
    gids = torch.arange(n) // group
    # one domain per group (a group is one prompt); some domains may be absent in a step
    group_domain = [
        DOMAINS[int(i)]
        for i in torch.randint(0, 2 + int(torch.rand(1, generator=gen) > 0.5), (n // group,), generator=gen)
    ]
    domains = [group_domain[i // group] for i in range(n)]
    advantages = torch.randn(n, generator=gen)
    return RolloutBatch(rewards, group_ids=gids, advantages=advantages, domains=domains)


def assert_matches(tracker, reference):
    np.testing.assert_allclose(tracker.mean_reward().numpy(), reference.mean("reward"), atol=1e-12)
    np.testing.assert_allclose(tracker.mean_abs_advantage().numpy(), reference.mean("abs_advantage"), atol=1e-12)
    np.testing.assert_allclose(tracker.mean_group_variance().numpy(), reference.mean("group_variance"), atol=1e-12)
    np.testing.assert_allclose(tracker.reward_slope().numpy(), reference.slope(), atol=1e-9)
    assert tracker.total_count.tolist() == [reference.total[d] for d in DOMAINS]


@pytest.mark.parametrize("unit", ["steps", "rows"])
@pytest.mark.parametrize("window", [1, 3, 7, 50])
@pytest.mark.parametrize("with_nan", [False, True])
def test_window_means_and_slope_match_reference(window, with_nan, unit):
    gen = torch.Generator().manual_seed(window)
    tracker, reference = DomainTracker(DOMAINS, window=window, window_unit=unit), PlainTracker(DOMAINS, window, unit)
    for step in range(12):
        batch = random_batch(gen, with_nan=with_nan)
        tracker.update(batch, step=step * 2)
        reference.update(
            batch.rewards.tolist(), list(batch.domains), step * 2, batch.advantages.tolist(), batch.group_ids
        )
        assert_matches(tracker, reference)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_row_window_matches_reference_on_unequal_shuffled_groups(data):
    window = data.draw(st.integers(1, 9))
    tracker, reference = (
        DomainTracker(DOMAINS, window=window, window_unit="rows"),
        PlainTracker(DOMAINS, window, "rows"),
    )
    for step in range(data.draw(st.integers(1, 5))):
        sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
        gids = torch.tensor([g for g, s in enumerate(sizes) for _ in range(s)])
        perm = torch.tensor(data.draw(st.permutations(range(len(gids)))))
        gids = gids[perm]
        group_domain = data.draw(st.lists(st.sampled_from(DOMAINS), min_size=len(sizes), max_size=len(sizes)))
        domains = [group_domain[int(g)] for g in gids]
        values = data.draw(
            st.lists(
                st.sampled_from([0.0, 1.0, 0.25, float("nan"), float("inf")]), min_size=len(gids), max_size=len(gids)
            )
        )
        batch = RolloutBatch(
            torch.tensor(values), group_ids=gids, advantages=torch.tensor(values[::-1]) - 0.5, domains=domains
        )
        tracker.update(batch, step=step)
        reference.update(values, domains, step, (torch.tensor(values[::-1]) - 0.5).tolist(), gids)
        np.testing.assert_allclose(tracker.mean_reward().numpy(), reference.mean("reward"), atol=1e-12)
        np.testing.assert_allclose(tracker.mean_abs_advantage().numpy(), reference.mean("abs_advantage"), atol=1e-12)
        np.testing.assert_allclose(tracker.mean_group_variance().numpy(), reference.mean("group_variance"), atol=1e-12)
        np.testing.assert_allclose(tracker.reward_slope().numpy(), reference.slope(), atol=1e-9)


def test_row_window_keeps_the_last_rows_of_a_large_step():
    tracker = DomainTracker(["a"], window=3, window_unit="rows")
    tracker.update(RolloutBatch(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), domains=["a"] * 6), step=0)
    assert float(tracker.mean_reward()[0]) == 0.0 and float(tracker.window_counts()[0]) == 3
    tracker.update(RolloutBatch(torch.tensor([1.0, 1.0]), domains=["a"] * 2), step=1)
    assert float(tracker.mean_reward()[0]) == pytest.approx(2 / 3) and float(tracker.total_count[0]) == 8


@pytest.mark.parametrize("unit", ["steps", "rows"])
def test_all_nan_domain_keeps_previous_statistics(unit):
    tracker = DomainTracker(["a", "b"], window=4, window_unit=unit)
    tracker.update(
        RolloutBatch(
            torch.tensor([1.0, 0.0, 1.0, 1.0]),
            group_ids=torch.tensor([0, 0, 1, 1]),
            advantages=torch.tensor([0.5, -0.5, 0.0, 0.0]),
            domains=["a", "a", "b", "b"],
        ),
        step=0,
    )
    before = tracker.as_dict()
    nan = float("nan")
    tracker.update(
        RolloutBatch(
            torch.tensor([nan, nan, 1.0, 1.0]),
            group_ids=torch.tensor([0, 0, 1, 1]),
            advantages=torch.tensor([nan, nan, 0.0, 0.0]),
            domains=["a", "a", "b", "b"],
        ),
        step=1,
    )
    after = tracker.as_dict()
    assert after["reward"]["a"] == before["reward"]["a"] == 0.5  # not pulled towards 0
    assert after["group_variance"]["a"] == before["group_variance"]["a"] == 0.25
    assert after["samples"]["a"] == 2.0 and after["samples"]["b"] == 4.0


@pytest.mark.parametrize("unit", ["steps", "rows"])
def test_never_finite_domain_stays_unobserved(unit):
    tracker = DomainTracker(["a", "b"], window_unit=unit)
    tracker.update(
        RolloutBatch(
            torch.tensor([float("nan"), float("inf"), 1.0]), group_ids=torch.tensor([0, 0, 1]), domains=["a", "a", "b"]
        ),
        step=0,
    )
    assert math.isnan(float(tracker.mean_reward()[0])) and math.isnan(float(tracker.mean_group_variance()[0]))
    assert tracker.filled.tolist()[0] == 0


def test_nan_advantage_is_no_observation_and_nan_padding_is_ignored():
    tracker = DomainTracker(["a"])
    mask = torch.tensor([[True, False], [True, True]])
    advantages = torch.tensor([[0.5, float("nan")], [float("nan"), 1.0]])  # row 0: NaN only in padding
    tracker.update(
        RolloutBatch(torch.tensor([1.0, 0.0]), completion_mask=mask, advantages=advantages, domains=["a", "a"])
    )
    assert float(tracker.mean_reward()[0]) == 1.0 and float(tracker.mean_abs_advantage()[0]) == 0.5


def test_unobserved_domain_is_nan_and_slope_zero():
    tracker = DomainTracker(DOMAINS)
    tracker.update(RolloutBatch(torch.tensor([1.0, 0.0]), domains=["math", "math"]), step=0)
    assert tracker.mean_reward()[0] == 0.5 and math.isnan(tracker.mean_reward()[1])
    assert tracker.reward_slope().tolist() == [0.0, 0.0, 0.0]


def test_slope_of_linear_series_is_exact():
    tracker = DomainTracker(["a"], window=5)
    for step in range(10):
        tracker.update(RolloutBatch(torch.tensor([0.1 * step]), domains=["a"]), step=step)
    assert float(tracker.reward_slope()[0]) == pytest.approx(0.1)


@pytest.mark.parametrize("unit", ["steps", "rows"])
def test_state_dict_round_trip_is_exact_and_loads_weights_only(unit):
    gen = torch.Generator().manual_seed(0)
    tracker = DomainTracker(DOMAINS, window=4, window_unit=unit)
    for step in range(7):
        tracker.update(random_batch(gen, with_nan=True), step=step)
    state = tracker.state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    restored = DomainTracker(DOMAINS, window=4, window_unit=unit)
    restored.load_state_dict(loaded)
    for k in tracker.as_dict():
        np.testing.assert_array_equal(list(restored.as_dict()[k].values()), list(tracker.as_dict()[k].values()))
    batch = random_batch(gen)
    tracker.update(batch, step=7)
    restored.update(batch, step=7)
    for name in ("reward", "abs_advantage", "group_variance", "count", "step"):
        assert torch.equal(tracker.windows[name], restored.windows[name])
    assert torch.equal(tracker.reward_slope(), restored.reward_slope())


def test_state_dict_does_not_alias_the_tracker():
    tracker = DomainTracker(["a"])
    tracker.update(RolloutBatch(torch.tensor([1.0]), domains=["a"]), step=0)
    state = tracker.state_dict()
    state["windows"]["reward"].fill_(5.0)
    state["filled"].fill_(0)
    state["domains"].append("b")
    assert float(tracker.mean_reward()[0]) == 1.0 and tracker.domains == ["a"]


def test_load_state_with_other_config_raises():
    state = DomainTracker(DOMAINS, window=4).state_dict()
    with pytest.raises(ConfigError, match="resume with the same config"):
        DomainTracker(DOMAINS, window=5).load_state_dict(state)
    with pytest.raises(ConfigError):
        DomainTracker(["math", "code"], window=4).load_state_dict(state)
    with pytest.raises(ConfigError, match="window_unit"):
        DomainTracker(DOMAINS, window=4, window_unit="rows").load_state_dict(state)


@pytest.mark.parametrize("garbage", [None, [1, 2], "state", {}, {"domains": ["a"]}])
def test_load_garbage_state_is_a_clear_error(garbage):
    with pytest.raises(StateError, match="DomainTracker"):
        DomainTracker(["a"]).load_state_dict(garbage)


def test_load_state_with_wrong_shapes_is_a_clear_error():
    state = DomainTracker(["a", "b"], window=3).state_dict()
    state["windows"]["reward"] = torch.zeros(2, 2)
    with pytest.raises(StateError, match="windows"):
        DomainTracker(["a", "b"], window=3).load_state_dict(state)
    state = DomainTracker(["a", "b"], window=3).state_dict()
    state["filled"] = [0, 0]
    with pytest.raises(DataFlexError, match="'filled'"):
        DomainTracker(["a", "b"], window=3).load_state_dict(state)


def test_errors():
    tracker = DomainTracker(DOMAINS)
    with pytest.raises(BatchError, match="domains"):
        tracker.update(RolloutBatch(torch.zeros(2)))
    with pytest.raises(BatchError, match="'poetry'"):
        tracker.update(RolloutBatch(torch.zeros(1), domains=["poetry"]))
    with pytest.raises(ConfigError):
        DomainTracker([])
    with pytest.raises(ConfigError):
        DomainTracker(["a", "a"])
    with pytest.raises(ConfigError, match="non-empty string"):
        DomainTracker(["a", None])
    with pytest.raises(ValueError, match="window"):
        DomainTracker(["a"], window=0)
    with pytest.raises(ValueError, match="window_unit"):
        DomainTracker(["a"], window_unit="tokens")
    with pytest.raises(ConfigError, match="window_unit='steps'"):
        DomainTracker(["a"], window_unit="rows").update_from_sums(torch.zeros(1, 6))


def test_a_single_string_is_one_domain():
    assert DomainTracker("math").domains == ["math"]


@pytest.mark.parametrize("unit", ["steps", "rows"])
def test_empty_batch_changes_nothing_but_the_update_count(unit):
    tracker = DomainTracker(DOMAINS, window_unit=unit)
    tracker.update(RolloutBatch(torch.zeros(0), domains=[]), step=0)
    assert tracker.filled.tolist() == [0, 0, 0] and tracker.updates == 1


def test_bf16_rewards():
    tracker = DomainTracker(["a"])
    tracker.update(
        RolloutBatch(
            torch.tensor([1.0, 0.0], dtype=torch.bfloat16),
            advantages=torch.tensor([0.5, -0.5], dtype=torch.bfloat16),
            domains=["a", "a"],
        )
    )
    assert float(tracker.mean_reward()[0]) == 0.5 and float(tracker.mean_abs_advantage()[0]) == 0.5


TWO_RANK_WORKER = r"""
import json, sys
import torch
import torch.distributed as dist
from dataflex_callbacks import DomainTracker, RolloutBatch

rank, init, out, unit = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
generator = torch.Generator().manual_seed(0)
tracker = DomainTracker(["a", "b"], window=5, window_unit=unit)
for step in range(4):
    rewards = torch.rand(24, generator=generator)
    rewards[torch.rand(24, generator=generator) < 0.1] = float("nan")
    advantages = torch.randn(24, generator=generator)
    domains = [("a", "b")[g % 2] for g in range(6) for _ in range(4)]
    half = slice(12 * rank, 12 * rank + 12)  # rank r holds groups 3r .. 3r + 2
    tracker.update(RolloutBatch(rewards[half], group_ids=(torch.arange(24) // 4)[half], advantages=advantages[half],
                                domains=domains[half]), step=step, sync=True)
json.dump(tracker.as_dict(), open(f"{out}/rank{rank}.json", "w"))
# Exiting with a live gloo group can abort in its destructor ("terminate called without an active exception").
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.parametrize("unit", ["steps", "rows"])
def test_two_ranks_hold_the_statistics_of_the_whole_batch(unit, tmp_path):
    import json

    from processes import run_ranks

    init = tmp_path / "init"
    run_ranks([["-c", TWO_RANK_WORKER, str(r), str(init), str(tmp_path), unit] for r in range(2)])
    generator = torch.Generator().manual_seed(0)
    whole = DomainTracker(["a", "b"], window=5, window_unit=unit)
    for step in range(4):
        rewards = torch.rand(24, generator=generator)
        rewards[torch.rand(24, generator=generator) < 0.1] = float("nan")
        advantages = torch.randn(24, generator=generator)
        domains = [("a", "b")[g % 2] for g in range(6) for _ in range(4)]
        whole.update(
            RolloutBatch(rewards, group_ids=torch.arange(24) // 4, advantages=advantages, domains=domains), step=step
        )
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for name, per_domain in whole.as_dict().items():
            np.testing.assert_allclose(list(got[name].values()), list(per_domain.values()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key", ["windows", "window_unit"])
def test_a_state_without_a_key_of_state_dict_is_a_state_error(key):
    from dataflex_callbacks.errors import StateError

    tracker = DomainTracker(["a", "b"], window=3)
    tracker.update(RolloutBatch(torch.tensor([1.0, 0.0]), domains=["a", "b"]), step=0)
    state = tracker.state_dict()
    state.pop(key)
    with pytest.raises(StateError, match=key):
        DomainTracker(["a", "b"], window=3).load_state_dict(state)
