"""Rollout allocation in verl's ``dataflex_sync`` trainer (`integrations/verl/allocation.py`).

- the keys: a commit's trajectory keys belong, as verl's ReplayBuffer reads them, to the pilot's group;
- `VerlAllocation.step` on verl-shaped prompt batches, with rollouts scripted by prompt (no Ray): the step fills
  exactly ``train_batch_size`` groups, merges the commits it generated, drops the other pilots, forces the last round;
- the merge against a real in-process TransferQueue and verl's own sync ReplayBuffer (local Ray, CPU): after
  `TransferQueueRollouts.merge` the buffer samples the pilot's uid with its G rows, every row's ``uid`` field the
  pilot's (what verl's GRPO advantage groups by); a dropped pilot leaves nothing behind.

The whole path, verl's agent loop included, runs end to end in tests/integrations/verl/e2e/test_main_ppo.py.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from dataflex_callbacks import build_strategy  # noqa: E402
from dataflex_callbacks.integrations.verl.allocation import (  # noqa: E402
    VerlAllocation,
    commit_uid,
    domains_from,
    final_outputs,
    group_of,
    submission_of,
)

G, PILOT = 4, 2


def test_a_commits_keys_join_the_pilots_group_as_verl_reads_keys():
    uid = str(uuid.uuid4())
    key = f"{commit_uid(uid)}_1_0"
    assert group_of(key) == uid  # verl's ReplayBuffer: key.split("_")[0]
    assert submission_of(key) == commit_uid(uid) != submission_of(f"{uid}_1_0")  # distinct verl sessions
    assert key.rsplit("_", 2)[0] + "_1" != f"{uid}_1"  # compute_advantage_for_multi_trajectories' session key


def test_final_outputs_take_each_sessions_last_output_in_session_order():
    keys = ["a_1_0", "a_0_1", "a_0_0", "a_commit_0_0", "b_0_0"]
    assert final_outputs(keys) == {"a": ["a_0_1", "a_1_0"], "a_commit": ["a_commit_0_0"], "b": ["b_0_0"]}


class PromptFeed:
    """Chunks of prompts as verl's ``_fetch_one_gen_batch`` gives them: a fresh uuid ``uid``, ``index``, a domain."""

    def __init__(self, chunk: int = 4, size: int | None = None):
        self.chunk, self.next, self.size = chunk, 0, size  # size: a dataset of that many prompts, drawn in cycles

    def __call__(self):
        index = np.arange(self.next, self.next + self.chunk)
        index = index if self.size is None else index % self.size
        self.next += self.chunk
        return tu.get_tensordict(
            {
                "index": index,
                "uid": np.array([str(uuid.uuid4()) for _ in index], dtype=object),
                "data_source": np.array(["easy" if i % 2 else "hard" for i in index], dtype=object),
            }
        )


class ScriptedRollouts:
    """Rollouts whose rewards are fixed by the prompt's ``index``: ``passes(index)`` completions out of each call pass.

    Records what the driver submitted, merged and dropped, as verl's TransferQueue would hold it."""

    def __init__(self, passes):
        self.passes = passes
        self.groups: dict[str, int] = {}  # submitted uid -> rows
        self.merged: list[str] = []
        self.dropped: list[str] = []
        self.piloted: list[int] = []  # the prompt index of every pilot

    def generate(self, prompts, uids, count):
        rewards = []
        for index, uid in zip(tu.get(prompts, "index"), uids, strict=True):
            self.groups[uid] = count
            if not uid.endswith("_commit"):
                self.piloted.append(int(index))
            passed = min(count, self.passes(int(index)))
            rewards += [1.0] * passed + [0.0] * (count - passed)
        return torch.tensor(rewards, dtype=torch.float64)

    def merge(self, uids):
        for uid in uids:
            self.groups[uid] += self.groups.pop(commit_uid(uid))
        self.merged += list(uids)

    def drop(self, uids):
        for uid in uids:
            del self.groups[uid]
        self.dropped += list(uids)


def allocation(batch_groups=4, strategy="screen", size=None, **params):
    built = build_strategy({"allocation": {"name": "screen", "params": {"pilot": PILOT, **params}}})
    if strategy != "screen":
        built = build_strategy(strategy)
    feed = PromptFeed(size=size)
    return VerlAllocation(built, G, batch_groups, feed, lambda batch: domains_from(batch, "data_source")), feed


def test_a_step_fills_the_batch_with_merged_groups_of_g_and_drops_the_other_pilots():
    driver, feed = allocation(batch_groups=4)
    rollouts = ScriptedRollouts(lambda index: 1 if index % 3 == 0 else 0)  # pilots of 1 pass in 2 commit
    metrics = driver.step(rollouts, step=1)
    assert len(rollouts.merged) == 4 and set(rollouts.groups) == set(rollouts.merged)
    assert all(rows == G for rows in rollouts.groups.values())  # every group verl trains: pilot + commit = G
    piloted = len(rollouts.merged) + len(rollouts.dropped)
    assert metrics["alloc/step_generated"] == piloted * PILOT + 4 * (G - PILOT)
    assert metrics["alloc/step_trained_groups"] == 4 and metrics["alloc/forced_groups"] == 0
    assert feed.next >= piloted  # every piloted prompt came from the feed (the rest wait in the carry)


def test_the_last_screening_round_forces_the_groups_the_step_still_needs():
    driver, _ = allocation(batch_groups=3, max_screens=2)
    rollouts = ScriptedRollouts(lambda index: 0)  # no pilot ever varies: the rule commits none
    metrics = driver.step(rollouts, step=1)
    assert metrics["alloc/screens"] == 2 and metrics["alloc/forced_groups"] == 3
    assert len(rollouts.merged) == 3 and all(rows == G for rows in rollouts.groups.values())


def test_a_prompt_the_allocator_evicted_is_dropped_before_its_pilot():
    driver, _ = allocation(batch_groups=2, size=8, evict=True)
    rollouts = ScriptedRollouts(lambda index: G if index < 4 else 1)  # prompts 0-3: every pilot correct, evicted
    driver.step(rollouts, step=1)
    evicted = {index for index in rollouts.piloted if index < 4}
    assert evicted, rollouts.piloted
    rollouts.piloted.clear()
    metrics = driver.step(rollouts, step=2)
    assert metrics["alloc/step_pilot_skips"] >= 1, metrics
    assert not evicted & set(rollouts.piloted), rollouts.piloted


def test_a_domain_whose_prior_predicts_no_signal_is_dropped_before_its_pilot():
    driver, _ = allocation(batch_groups=2, rule="posterior", min_prior_signal=0.2, explore=0.0)
    rollouts = ScriptedRollouts(lambda index: 1 if index % 2 else 0)  # "hard" (even) never passes, "easy" 1 in 2
    driver.step(rollouts, step=1)
    assert any(index % 2 == 0 for index in rollouts.piloted), rollouts.piloted
    rollouts.piloted.clear()
    metrics = driver.step(rollouts, step=2)
    assert metrics["alloc/step_pilot_skips"] >= 1 and metrics["alloc/prior_skips"] >= 1, metrics
    assert rollouts.piloted and all(index % 2 for index in rollouts.piloted), rollouts.piloted


def test_pre_select_sees_every_pilot_and_learns_what_a_skip_saves():
    driver, _ = allocation(batch_groups=2, strategy="screen_greso")
    rollouts = ScriptedRollouts(lambda index: 0)  # every pilot without variance: the filter's streaks grow
    driver.step(rollouts, step=1)
    assert driver.pilot == PILOT and len(rollouts.piloted) >= 2
    assert (driver.strategy.pre_select.history.streaks(rollouts.piloted) >= 1).all()
    assert driver.strategy.pre_select.num_generations == PILOT  # a skipped prompt saves its pilot, not G


def put_submission(tq, uid, count, rewards, owner):
    """One submission as verl's agent loop leaves it: a finished status key and ``count`` sessions' rows."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    tq.kv_put(key=uid, partition_id="train", tag={"is_prompt": True, "status": "finished", "global_steps": 1})
    rows = [
        {
            "responses": torch.ones(3, dtype=torch.int64),
            "response_mask": torch.ones(3, dtype=torch.int64),
            "rm_scores": torch.tensor([0.0, 0.0, float(rewards[s])]),
            "uid": uid,
            "index": owner,
        }
        for s in range(count)
    ]
    keys = [f"{uid}_{s}_0" for s in range(count)]
    tags = [{"status": "success", "seq_len": 5, "global_steps": 1}] * count
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(rows), tags=tags)


def test_verls_replay_buffer_samples_a_merged_group_of_g_rows_under_the_pilots_uid(transfer_queue):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from dataflex_callbacks.integrations.verl.allocation import TransferQueueRollouts

    tq = transfer_queue
    kept, dropped = str(uuid.uuid4()), str(uuid.uuid4())
    put_submission(tq, kept, PILOT, [1, 0], owner=7)
    put_submission(tq, commit_uid(kept), G - PILOT, [1, 1], owner=7)
    put_submission(tq, dropped, PILOT, [0, 0], owner=8)
    rollouts = TransferQueueRollouts(submit=None, global_steps=1)
    rollouts.merge([kept])
    rollouts.drop([dropped])
    assert set(tq.kv_list()["train"]) == {kept} | {f"{kept}_{s}_0" for s in range(PILOT)} | {
        f"{commit_uid(kept)}_{s}_0" for s in range(G - PILOT)
    }
    buffer = ReplayBuffer("sync", OmegaConf.create({}), None, "drop", OmegaConf.create({}), poll_interval=0.01)
    batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=1)
    assert len(batch.keys) == G
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["uid", "rm_scores"])
    assert list(data["uid"]) == [kept] * G
    assert sorted(float(row.sum()) for row in data["rm_scores"]) == [0.0, 1.0, 1.0, 1.0]
    tq.kv_clear(keys=batch.keys, partition_id="train")


def test_generate_hands_verl_the_uids_and_counts_and_reads_each_sessions_reward(transfer_queue):
    from dataflex_callbacks.errors import HostError
    from dataflex_callbacks.integrations.verl.allocation import TransferQueueRollouts

    tq = transfer_queue
    submitted = []

    def agent_loop(batch, status="finished"):
        """What verl's agent loop leaves in TransferQueue for each submitted prompt: its sessions, then its status."""
        submitted.append(batch)
        count = tu.get(batch, "__rollout_n__")
        for uid, index in zip(tu.get(batch, "uid"), tu.get(batch, "index"), strict=True):
            put_submission(tq, uid, count, [float((int(index) + s) % 2) for s in range(count)], owner=int(index))
            tq.kv_put(key=uid, partition_id="train", tag={"status": status})

    prompts = PromptFeed(chunk=3)()
    uids = [commit_uid(str(uuid.uuid4())) for _ in range(3)]
    rewards = TransferQueueRollouts(agent_loop, global_steps=5).generate(prompts, uids, 2)
    assert rewards.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 1.0]  # prompt by prompt, session by session
    assert list(tu.get(submitted[0], "uid")) == uids and tu.get(submitted[0], "global_steps") == 5
    rollouts = TransferQueueRollouts(lambda batch: agent_loop(batch, status="failure"), global_steps=5)
    with pytest.raises(HostError, match="status 'failure'"):
        rollouts.generate(PromptFeed(chunk=1)(), [str(uuid.uuid4())], 2)
    tq.kv_clear(keys=list(tq.kv_list()["train"]), partition_id="train")
