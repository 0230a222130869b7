"""`SignalGroupBuffer` and `signal_rows`: which groups carry signal, exactly B per step, carry-over, state."""

import copy
import io
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks import BatchError, ConfigError, RolloutBatch, StateError, build_strategy
from dataflex_callbacks.sampling.dynamic_sampling import DYNAMIC_METRICS, SignalGroupBuffer, signal_rows

# ---------------------------------------------------------------- an independent per-group reference


def reference_signal_groups(rewards: list[float], group_ids: list[int], strategy=None, nan_policy="drop") -> set[int]:
    """The group ids that carry signal, one group at a time in plain Python.

    With a select part the strategy's own `apply` decides which rows stay; a group carries signal
    when one of its rows stays. Without one, a group carries signal when its rewards differ.
    """
    members: dict[int, list[int]] = {}
    for row, group in enumerate(group_ids):
        members.setdefault(group, []).append(row)
    if strategy is not None:
        nan_policy = strategy.nan_policy
    keep = None
    if strategy is not None and strategy.select is not None:
        batch = RolloutBatch(torch.tensor(rewards, dtype=torch.float32), group_ids=torch.tensor(group_ids))
        keep = build_strategy(strategy.config).apply(batch, step=0).keep.tolist()
    signal = set()
    for group, rows in members.items():
        values = [rewards[row] for row in rows]
        if any(not math.isfinite(v) for v in values):
            if nan_policy == "drop":
                continue
            values = [v if math.isfinite(v) else 0.0 for v in values]
        if keep is not None:
            if any(keep[row] for row in rows):
                signal.add(group)
        elif max(values) != min(values):
            signal.add(group)
    return signal


@st.composite
def grouped_rewards(draw, allow_nan=False):
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=8))
    ids = draw(st.permutations(list(range(len(sizes)))))
    group_ids = [gid for gid, size in zip(ids, sizes, strict=True) for _ in range(size)]
    if draw(st.booleans()):  # groups need not be contiguous
        group_ids = draw(st.permutations(group_ids))
    values = [0.0, 1.0, 0.5, 0.1] + ([float("nan"), float("inf")] if allow_nan else [])
    rewards = draw(st.lists(st.sampled_from(values), min_size=len(group_ids), max_size=len(group_ids)))
    return rewards, list(group_ids)


def rows_to_groups(mask: torch.Tensor, group_ids: list[int]) -> set[int]:
    groups = {g for g, m in zip(group_ids, mask.tolist(), strict=True) if m}
    not_uniform = {g for g in groups if any(not m for gg, m in zip(group_ids, mask.tolist(), strict=True) if gg == g)}
    assert not not_uniform, "a group is all signal or all not"
    return groups


STRATEGIES = [
    None,
    "diffband",
    "difffilter",
    {
        "select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8}},
        "nan_policy": "drop",
    },
    {"nan_policy": "zero"},
]


@pytest.mark.parametrize("config", STRATEGIES, ids=lambda c: str(c)[:40])
@settings(max_examples=60, deadline=None)
@given(data=grouped_rewards(allow_nan=True))
def test_signal_groups_equal_a_per_group_reference(config, data):
    rewards, group_ids = data
    strategy = None if config is None else build_strategy(config)
    batch = RolloutBatch(torch.tensor(rewards, dtype=torch.float32), group_ids=torch.tensor(group_ids))
    mask = signal_rows(batch, strategy)
    assert mask.dtype == torch.bool and mask.shape == (len(rewards),)
    assert rows_to_groups(mask, group_ids) == reference_signal_groups(rewards, group_ids, strategy)


@settings(max_examples=40, deadline=None)
@given(data=grouped_rewards())
def test_the_buffer_keeps_exactly_the_signal_groups_in_arrival_order(data):
    rewards, group_ids = data
    buffer = SignalGroupBuffer(carry_over=False)
    buffer.start_step(num_groups=100)
    buffer.add(
        RolloutBatch(torch.tensor(rewards), group_ids=torch.tensor(group_ids)), payload=list(range(len(rewards)))
    )
    taken = buffer.take()
    expected = reference_signal_groups(rewards, group_ids)
    arrival = list(dict.fromkeys(group_ids))  # each group at its first row
    order = [g for g in arrival if g in expected]
    assert taken.num_groups == len(order) and taken.short == (len(order) < 100)
    rows = [[r for r, g in enumerate(group_ids) if g == group] for group in order]
    assert taken.payload == [r for group_rows in rows for r in group_rows]
    assert taken.group_sizes.tolist() == [len(r) for r in rows]
    assert torch.equal(taken.rewards, torch.tensor(rewards)[[r for group_rows in rows for r in group_rows]])


# ---------------------------------------------------------------- rounds, B, carry-over, ages


def round_batch(signal: list[bool], offset: int, size: int = 2):
    """One round: a group per flag, rewards (1, 0) for a signal group, (1, 1) otherwise; payload = global row ids."""
    rewards = torch.tensor([[1.0, 0.0] if s else [1.0, 1.0] for s in signal]).repeat_interleave(size // 2, 1).flatten()
    group_ids = torch.arange(len(signal)).repeat_interleave(size)
    payload = {
        "row": torch.arange(offset, offset + rewards.numel()),
        "group": [offset // size + g for g in group_ids.tolist()],
    }
    return RolloutBatch(rewards, group_ids=group_ids), payload


def run_step(buffer, rounds: list[list[bool]], want: int, start: int = 0):
    buffer.start_step(num_groups=want)
    offset = start
    for signal in rounds:
        if not buffer.should_generate_more():
            break
        batch, payload = round_batch(signal, offset)
        buffer.add(batch, payload)
        offset += batch.n
    return buffer.take(), offset


def test_exactly_b_groups_with_the_rest_carried_oldest_first():
    buffer = SignalGroupBuffer(max_rounds=4)
    taken, offset = run_step(buffer, [[True, False, True], [True, True, True]], want=3)
    assert taken.num_groups == 3 and not taken.short
    assert taken.payload["group"][::2] == [0, 2, 3]  # round 0's signal groups, then round 1's first
    assert taken.source_round.tolist() == [0, 0, 0, 0, 1, 1]
    assert taken.metrics == {
        "dynamic/rounds": 2.0,
        "dynamic/generated": 12.0,
        "dynamic/signal_groups": 3.0,
        "dynamic/carried": 0.0,
        "dynamic/short": 0.0,
        "dynamic/carried_age_mean": 0.0,
        "dynamic/dropped_stale": 0.0,
    }
    assert set(taken.metrics) == set(DYNAMIC_METRICS)
    # Groups 4 and 5 wait; the next step takes them first (age 1), then one new group.
    taken, _ = run_step(buffer, [[False, True, True]], want=3, start=offset)
    assert taken.payload["group"][::2] == [4, 5, 7]
    assert taken.ages.tolist() == [1, 1, 0] and taken.source_round.tolist() == [-1, -1, -1, -1, 0, 0]
    assert taken.metrics["dynamic/carried"] == 2.0 and taken.metrics["dynamic/carried_age_mean"] == 1.0
    assert taken.group_index.tolist() == [0, 0, 1, 1, 2, 2]
    assert buffer.available == 1  # group 8 is carried on


def test_carried_groups_alone_can_fill_a_step_and_age_each_step():
    buffer = SignalGroupBuffer()
    _, offset = run_step(buffer, [[True] * 5], want=1)
    taken, _ = run_step(buffer, [[True]], want=2, start=offset)
    assert taken.metrics["dynamic/rounds"] == 0.0, "B carried groups in hand: no generation"
    assert taken.ages.tolist() == [1, 1]
    taken, _ = run_step(buffer, [[True]], want=2, start=offset)
    assert taken.ages.tolist() == [2, 2] and taken.payload["group"][::2] == [3, 4]


def test_without_carry_over_extra_groups_are_dropped():
    buffer = SignalGroupBuffer(carry_over=False)
    _, offset = run_step(buffer, [[True] * 5], want=2)
    assert buffer.available == 0 and buffer.totals["dropped_extra"] == 3
    taken, _ = run_step(buffer, [[True, True]], want=2, start=offset)
    assert taken.metrics["dynamic/carried"] == 0.0 and taken.ages.tolist() == [0, 0]


@pytest.mark.parametrize("max_age, dropped", [(0, 3), (1, 0)])
def test_groups_older_than_max_age_are_dropped_and_counted(max_age, dropped):
    buffer = SignalGroupBuffer(max_age=max_age)
    _, offset = run_step(buffer, [[True] * 4], want=1)
    taken, _ = run_step(buffer, [[True] * 3], want=3, start=offset)
    assert taken.metrics["dynamic/dropped_stale"] == float(dropped)
    assert taken.metrics["dynamic/carried"] == float(3 - dropped)
    assert buffer.totals["dropped_stale"] == dropped


def test_max_rounds_ends_the_step_short_with_what_there_is():
    buffer = SignalGroupBuffer(max_rounds=3)
    taken, _ = run_step(buffer, [[False, True]] * 10, want=4)
    assert taken.short and taken.num_groups == 3
    assert taken.metrics["dynamic/rounds"] == 3.0 and taken.metrics["dynamic/short"] == 1.0
    assert taken.metrics["dynamic/generated"] == 12.0


def test_a_step_where_no_group_carries_signal_takes_nothing():
    buffer = SignalGroupBuffer(max_rounds=2)
    taken, _ = run_step(buffer, [[False, False]] * 3, want=2)
    assert taken.short and taken.num_groups == 0 and taken.n == 0
    assert taken.payload["row"].shape == (0,) and taken.payload["group"] == []
    assert taken.metrics["dynamic/signal_groups"] == 0.0 and buffer.totals["zero_signal_completions"] == 8


def test_an_empty_round_counts_as_a_round():
    buffer = SignalGroupBuffer(max_rounds=1)
    buffer.start_step(num_groups=1)
    assert buffer.add(RolloutBatch(torch.zeros(0), group_ids=torch.zeros(0, dtype=torch.long))).shape == (0,)
    assert not buffer.should_generate_more()
    taken = buffer.take()
    assert taken.short and taken.metrics["dynamic/rounds"] == 1.0 and taken.metrics["dynamic/generated"] == 0.0


# ---------------------------------------------------------------- non-finite rewards, select parts


def test_non_finite_rewards_follow_the_nan_policy():
    rewards = torch.tensor([float("nan"), 1.0, float("nan"), float("nan"), 1.0, 0.0])
    batch = RolloutBatch(rewards, group_ids=torch.tensor([0, 0, 1, 1, 2, 2]))
    assert signal_rows(batch).tolist() == [False, False, False, False, True, True], (
        "no strategy: such a group carries none"
    )
    assert signal_rows(batch, build_strategy({"nan_policy": "drop"})).tolist() == [False] * 4 + [True] * 2
    assert signal_rows(batch, build_strategy({"nan_policy": "zero"})).tolist() == [True, True, False, False, True, True]
    with pytest.raises(BatchError, match="nan_policy='raise'"):
        signal_rows(batch, build_strategy({"nan_policy": "raise"}))


def test_the_select_part_judges_with_its_warm_up():
    strategy = build_strategy(
        {
            "select": {
                "scorer": "group_solve_rate",
                "selector": {"name": "threshold_band", "low": 0.2, "high": 0.8},
                "warmup_steps": 2,
            }
        }
    )
    batch = RolloutBatch(torch.tensor([1.0, 1.0, 1.0, 0.0]), group_ids=torch.tensor([0, 0, 1, 1]))
    assert signal_rows(batch, strategy, step=0).all(), "during warm-up the select part keeps every row"
    assert signal_rows(batch, strategy, step=2).tolist() == [False, False, True, True]


def test_select_parts_that_cannot_judge_rollouts_are_refused():
    with pytest.raises(ConfigError, match="scores tokens"):
        SignalGroupBuffer("entropy_top")
    with pytest.raises(BatchError, match="group_ids"):
        signal_rows(RolloutBatch(torch.ones(2)))


def test_options_come_from_the_strategy_and_can_be_overridden():
    strategy = build_strategy(
        {
            "select": {
                "scorer": "group_reward_variance",
                "selector": {"name": "threshold_band", "low": 0.0, "high": float("inf")},
            },
            "dynamic_sampling": {"max_rounds": 2, "max_age": 3},
        }
    )
    buffer = SignalGroupBuffer(strategy)
    assert (buffer.max_rounds, buffer.carry_over, buffer.max_age) == (2, True, 3)
    assert SignalGroupBuffer(strategy, max_age=None, carry_over=False).max_age is None
    assert SignalGroupBuffer().max_rounds == 4
    with pytest.raises(ConfigError, match="max_rounds must be an integer >= 1"):
        SignalGroupBuffer(max_rounds=0)


def test_payload_errors_name_the_fix():
    buffer = SignalGroupBuffer()
    buffer.start_step(num_groups=4)
    batch, _ = round_batch([True, True], 0)
    with pytest.raises(BatchError, match="payload holds 3 rows"):
        buffer.add(batch, payload=[1, 2, 3])
    buffer.add(batch, payload=torch.zeros(4, 5))
    buffer.add(batch, payload=torch.zeros(4, 6))
    with pytest.raises(BatchError, match="pad them to one width"):
        buffer.take()
    with pytest.raises(BatchError, match="start_step"):
        SignalGroupBuffer().add(batch)


# ---------------------------------------------------------------- state


def test_state_dict_round_trip_reproduces_the_next_take():
    buffer = SignalGroupBuffer(max_age=5)
    _, offset = run_step(buffer, [[True, False, True, True, True]], want=2)
    state = buffer.state_dict()
    saved = copy.deepcopy(state)
    stream = io.BytesIO()
    torch.save(state, stream)
    stream.seek(0)
    loaded = torch.load(stream, weights_only=True)
    restored = SignalGroupBuffer(max_age=5)
    restored.load_state_dict(loaded)
    expected, _ = run_step(buffer, [[True, True]], want=3, start=offset)
    got, _ = run_step(restored, [[True, True]], want=3, start=offset)
    for name in ("rewards", "group_index", "group_sizes", "ages", "source_round", "source_rows"):
        assert torch.equal(getattr(got, name), getattr(expected, name)), name
    assert (
        torch.equal(got.payload["row"], expected.payload["row"]) and got.payload["group"] == expected.payload["group"]
    )
    assert got.metrics == expected.metrics and restored.totals == buffer.totals
    # Reading the state and loading it changed neither.
    assert torch.equal(state["carried"][0]["rewards"], saved["carried"][0]["rewards"])
    assert loaded["takes"] == saved["takes"] and len(loaded["carried"]) == len(saved["carried"])


def test_a_carried_row_that_views_its_round_saves_only_its_own_entries():
    """Hosts pass rows as views of one round tensor (cheap); the state must not save the whole round."""
    round_tensor = torch.arange(64 * 4096, dtype=torch.float32).reshape(64, 4096)
    rows = list(round_tensor.unbind(0))  # 64 row views of one storage
    buffer = SignalGroupBuffer(build_strategy("dapo"))
    buffer.start_step(30, step=0)
    buffer.add(RolloutBatch(rewards=torch.tensor([0.0, 1.0] * 32), group_ids=torch.arange(64) // 2), payload=rows)
    buffer.take()  # 30 groups trained, 2 groups (4 rows) carried
    stream = io.BytesIO()
    torch.save(buffer.state_dict(), stream)
    carried_bytes = 4 * 4096 * 4
    assert stream.tell() < 2 * carried_bytes  # the whole round would be 16x that
    stream.seek(0)
    saved_rows = [row for part in torch.load(stream, weights_only=True)["carried"] for row in part["payload"]]
    assert len(saved_rows) == 4 and all(
        torch.equal(row, round_tensor[i]) for row, i in zip(saved_rows, (60, 61, 62, 63), strict=True)
    )


def test_load_state_dict_refuses_something_else():
    with pytest.raises(StateError, match="SignalGroupBuffer.load_state_dict"):
        SignalGroupBuffer().load_state_dict({"carried": []})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_same_code_runs_on_cuda():
    batch, payload = round_batch([True, False, True], 0)
    cuda = RolloutBatch(batch.rewards.cuda(), group_ids=batch.group_ids.cuda())
    assert signal_rows(cuda, build_strategy("diffband")).cpu().tolist() == signal_rows(batch).tolist()
    buffer = SignalGroupBuffer("diffband")
    buffer.start_step(num_groups=2)
    buffer.add(cuda, payload={"row": payload["row"].cuda()})
    taken = buffer.take()
    assert taken.payload["row"].tolist() == [0, 1, 4, 5] and taken.rewards.is_cuda
