"""verl allocation reads each session's reward from TransferQueue's ``rm_scores`` in one vectorised sum
(`fields.completion_rewards`): with sessions of different response lengths TransferQueue hands the rows back nested,
and every reward still comes back, prompt by prompt, session by session (real in-process TransferQueue, local Ray)."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import torch  # noqa: E402
from test_allocation import PromptFeed  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from dataflex_callbacks.integrations.verl.allocation import PARTITION, TransferQueueRollouts  # noqa: E402


def _reward(index: int, session: int) -> float:
    return float((index + 2 * session) % 3) - 0.5


def _length(index: int, session: int) -> int:
    return 1 + (index + session) % 4  # 1 to 4 response tokens: the rows are jagged


def test_sessions_of_different_lengths_each_give_their_reward(transfer_queue):
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    tq = transfer_queue

    def agent_loop(batch):
        """verl's agent loop's leavings: each prompt's sessions, its score on the last response token, then its
        status."""
        count = tu.get(batch, "__rollout_n__")
        for uid, index in zip(tu.get(batch, "uid"), tu.get(batch, "index"), strict=True):
            rows = []
            for session in range(count):
                scores = torch.zeros(_length(int(index), session))
                scores[-1] = _reward(int(index), session)
                rows.append({"rm_scores": scores, "uid": uid, "index": int(index)})
            keys = [f"{uid}_{s}_0" for s in range(count)]
            tags = [{"status": "success", "global_steps": 1}] * count
            tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=list_of_dict_to_tensordict(rows), tags=tags)
            tq.kv_put(key=uid, partition_id=PARTITION, tag={"is_prompt": True, "status": "finished"})

    prompts = PromptFeed(chunk=3)()
    uids = [str(uuid.uuid4()) for _ in range(3)]
    rewards = TransferQueueRollouts(agent_loop, global_steps=1).generate(prompts, uids, 3)
    keys = [f"{uid}_{s}_0" for uid in uids for s in range(3)]
    stored = tq.kv_batch_get(keys=keys, partition_id=PARTITION, select_fields=["rm_scores"])["rm_scores"]
    assert stored.is_nested  # the jagged layout reached the sum
    expected = [_reward(int(index), s) for index in tu.get(prompts, "index") for s in range(3)]
    assert rewards.dtype == torch.float64 and rewards.tolist() == expected
    tq.kv_clear(keys=list(tq.kv_list()[PARTITION]), partition_id=PARTITION)
