"""Rollout allocation in verl's ``dataflex_sync`` trainer: a pilot per prompt, the rest of the group where the allocator
commits, the two merged into one group of G before verl computes the advantage.

verl 0.9.1's agent loop generates a prompt's ``n`` sessions under keys ``{uid}_{session}_{index}``, sessions numbered
from 0 on every submission, and marks the uid ``finished`` after one submission
(``verl/trainer/ppo/v1/agent_loop_tq.py:123, 142, 193``): a second submission under the same uid would overwrite the
first. So the pilot and the commit are two submissions under two uids, and the commit is folded into the pilot's group
once both are done (`TransferQueueRollouts.merge`):

- the pilot runs under verl's own uid ``U`` with ``__rollout_n__ = k`` (the agent loop's per-prompt count);
- the commit runs under ``U_commit`` (`commit_uid`) with ``__rollout_n__ = G - k``; its keys
  ``U_commit_{session}_{index}`` begin with ``U_``, and verl's ReplayBuffer groups a trajectory by the key's text
  before its first ``_`` (``replay_buffer.py:246, 402``), so they belong to ``U``'s group; the commit's own status key
  ``U_commit`` is cleared, and the ``uid`` field of its rows, which verl's GRPO advantage groups by
  (``PPOTrainer._compute_advantage``), is rewritten to ``U``. verl's session keys (``U_commit_{session}``) stay
  distinct from the pilot's (``U_{session}``), so ``compute_advantage_for_multi_trajectories`` takes every session's
  final output;
- a prompt the step does not commit has its pilot cleared from TransferQueue (`TransferQueueRollouts.drop`).

Each step (`VerlAllocation.step`, run by the trainer's ``prepare_step`` in place of verl's submission of one batch)
fills verl's batch of ``data.train_batch_size`` groups of ``G = actor_rollout_ref.rollout.n``, as the TRL adapter does:
screening rounds of pilots (`Strategy.allocation_candidates` prompts from verl's dataloader, through ``pre_select``'s
skip when the strategy has one), commits of the first prompts the allocator keeps, until the batch is full; the last
round allowed (``max_screens``) commits whatever prompts the step still needs (``alloc/forced_groups``). verl's
ReplayBuffer then finds exactly the batch's groups finished, each of G rows, and the step goes on as verl's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu

from dataflex_callbacks.errors import ConfigError, HostError
from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .fields import completion_rewards

COMMIT_SUFFIX = "_commit"
PARTITION = "train"
POLL_SECONDS = 0.2
TERMINAL = ("finished", "failure")
MAX_BARREN_FETCHES = 1000  # dataloader fetches in a row whose prompts were all evicted, before the step gives up


def commit_uid(uid: str) -> str:
    """The uid a prompt's commit is submitted under, ``{uid}_commit``: verl groups its trajectory keys with ``uid``."""
    return f"{uid}{COMMIT_SUFFIX}"


def group_of(key: str) -> str:
    """The prompt group of a TransferQueue key as verl's ReplayBuffer reads it: the text before the first ``_``."""
    return key.split("_", 1)[0]


def submission_of(key: str) -> str:
    """The uid a trajectory key ``{uid}_{session}_{index}`` was submitted under (``U`` or ``U_commit``)."""
    return key.rsplit("_", 2)[0]


def final_outputs(keys: Sequence[str]) -> dict[str, list[str]]:
    """Each submission's final output per session, ``{submitted uid: [key, ...]}`` in session order: the rows whose
    rewards judge a session (verl's ``compute_advantage_for_multi_trajectories`` reads the same ones)."""
    last: dict[tuple[str, int], tuple[int, str]] = {}
    for key in keys:
        uid, session, index = key.rsplit("_", 2)
        slot = (uid, int(session))
        if slot not in last or last[slot][0] < int(index):
            last[slot] = (int(index), key)
    out: dict[str, list[str]] = {}
    for (uid, _), (_, key) in sorted(last.items()):
        out.setdefault(uid, []).append(key)
    return out


def only(chosen: torch.Tensor, size: int, count: int) -> torch.Tensor:
    """``(size,)`` long: ``count`` at the ``chosen`` prompts, 0 elsewhere."""
    counts = torch.zeros(size, dtype=torch.long)
    counts[chosen] = count
    return counts


class Rollouts(Protocol):
    """What `VerlAllocation` asks of verl: generate, drop and merge prompt groups (`TransferQueueRollouts`)."""

    def generate(self, prompts: TensorDict, uids: list[str], count: int) -> torch.Tensor:
        """Generate ``count`` completions of each of ``prompts`` under ``uids``; their ``(P * count,)`` rewards,
        prompt by prompt."""
        ...

    def drop(self, uids: Sequence[str]) -> None:
        """Remove the groups of ``uids`` (their pilots and any commit)."""
        ...

    def merge(self, uids: Sequence[str]) -> None:
        """Fold each of ``uids``' commit (`commit_uid`) into its group."""
        ...


class VerlAllocation:
    """One step's screening rounds in verl's sync trainer: pilots, commits, merged groups; the ``alloc/*`` metrics.

    Args:
        strategy: the run's strategy, with an ``allocation`` part of equal groups, a pilot and a commit (checked by
            `config.check_verl_config`); the group size is bound here.
        group_size: G, ``actor_rollout_ref.rollout.n``.
        batch_groups: groups per step, ``data.train_batch_size``.
        fetch: one chunk of prompts from verl's dataloader (the trainer's ``_fetch_one_gen_batch``, ``pre_select``
            skipping there), each row with a ``uid`` and the ``index`` column.
        domains_of: the domains of a chunk's rows (the strategy's prior and per-domain counts).
    """

    def __init__(
        self,
        strategy: Any,
        group_size: int,
        batch_groups: int,
        fetch: Callable[[], TensorDict],
        domains_of: Callable[[TensorDict], list[str]],
    ) -> None:
        self.strategy = strategy
        self.group_size, self.batch_groups = int(group_size), int(batch_groups)
        self.fetch, self.domains_of = fetch, domains_of
        strategy.bind_allocation_group_size(self.group_size)
        if strategy.skips_prompts:
            strategy.bind_pilot_observer()  # the pilots are shown to the filter here, not the trained groups again
        self.pilot = int(strategy.allocation_first_round() or 0)
        self.carry: TensorDict | None = None  # fetched prompts the step did not pilot, first in line next time
        self._pilot_skips = 0

    def step(self, rollouts: Rollouts, step: int) -> dict[str, float]:
        """Fill one step's batch with ``batch_groups`` merged groups of G in TransferQueue; return ``alloc/*``."""
        wanted, max_screens = self.batch_groups, self.strategy.allocation_max_screens
        kept = screens = forced = declined = 0
        self._pilot_skips = 0
        while kept < wanted:
            need, last = wanted - kept, screens + 1 >= max_screens
            prompts = self.candidates(self.strategy.allocation_candidates(need, last))
            keys, domains = prompt_keys(prompts), self.domains_of(prompts)
            uids = [str(uid) for uid in tu.get(prompts, "uid")]
            rounds = self.strategy.allocation_rounds(keys, domains, new_step=screens == 0)
            counts = rounds.start()
            rewards = rollouts.generate(prompts, uids, self.pilot)
            index = torch.repeat_interleave(torch.arange(len(keys)), counts)
            committing = rounds.add(rewards, index) > 0
            self.strategy.observe_allocation_pilots(rewards, index, keys, domains, step)
            self.strategy.note_allocation_screen(len(keys), int(committing.sum()))
            order = torch.cat([committing.nonzero().flatten(), (~committing).nonzero().flatten()])
            chosen = (order[:need] if last else committing.nonzero().flatten()[:need]).sort().values
            forced += int((~committing[chosen]).sum())
            declined += int(committing.sum()) - int(committing[chosen].sum())
            rounds.set_next(only(chosen, len(keys), self.group_size - self.pilot))
            commits = rounds.asked
            chosen_uids = [uids[i] for i in chosen.tolist()]
            commit_rewards = torch.zeros(0, dtype=torch.float64)
            if chosen_uids:
                commit_rewards = rollouts.generate(
                    tu.index_select_tensor_dict(prompts, chosen), list(map(commit_uid, chosen_uids)), int(commits.max())
                )
            rounds.add(commit_rewards, torch.repeat_interleave(torch.arange(len(keys)), commits))
            rounds.finish()
            rollouts.merge(chosen_uids)
            rollouts.drop(sorted(set(uids) - set(chosen_uids)))
            kept += len(chosen)
            screens += 1
        metrics = self.strategy.allocation_metrics()
        metrics.update({"alloc/screens": float(screens), "alloc/forced_groups": float(forced)})
        metrics["alloc/declined_prompts"] = float(declined)
        if "alloc/evicted_prompts" in metrics or "alloc/prior_skips" in metrics:  # an allocator that skips pilots
            metrics["alloc/step_pilot_skips"] = float(self._pilot_skips)
        return metrics

    def candidates(self, count: int) -> TensorDict:
        """``count`` prompts to pilot: the carry first, then verl's dataloader; a prompt the allocator skips
        (`Strategy.allocation_skips_pilot`: evicted, or predicted to give no signal) is dropped before its pilot
        (``alloc/step_pilot_skips``)."""
        waiting = [] if self.carry is None else [self.carry]  # checked again: the allocator may skip it since
        self.carry = None
        rows: list[TensorDict] = []
        held = barren = 0
        while held < count:
            chunk = waiting.pop() if waiting else self.fetch()
            skipped = self.strategy.allocation_skips_pilot(prompt_keys(chunk), self.domains_of(chunk)).bool()
            self._pilot_skips += int(skipped.sum())
            remaining = int((~skipped).sum())
            barren = 0 if remaining else barren + 1
            if barren > MAX_BARREN_FETCHES:
                raise ConfigError(
                    f"allocation {self.strategy.allocation_needs.name!r}: {barren} prompt batches drawn in a row were "
                    "all skipped before their pilot: evicted (an earlier pilot all correct) or predicted by their "
                    "domain's pass rate to give no signal: the train dataset has no prompt left to screen. Train on "
                    "other prompts, or set evict: false, or a lower min_prior_signal"
                )
            if remaining:
                rows.append(
                    tu.index_select_tensor_dict(chunk, (~skipped).nonzero().flatten()) if skipped.any() else chunk
                )
                held += remaining
        prompts = rows[0] if len(rows) == 1 else tu.concat_tensordict(rows)
        if len(prompts) > count:
            self.carry = tu.index_select_tensor_dict(prompts, torch.arange(count, len(prompts)))
            prompts = tu.index_select_tensor_dict(prompts, torch.arange(count))
        return prompts


class TransferQueueRollouts:
    """verl's agent loop and TransferQueue as `Rollouts`: submit through the trainer, wait on the uids' status tags.

    Args:
        submit: the trainer's ``_submit_batch_to_rollout`` (registers the prompts' status keys, dispatches them).
        global_steps: the step the submissions belong to (verl's ``global_steps`` field and tag).
        poll_seconds: how often the uids' status tags are read while waiting.
    """

    def __init__(self, submit: Callable[[TensorDict], Any], global_steps: int, poll_seconds: float = POLL_SECONDS):
        self.submit, self.global_steps, self.poll_seconds = submit, int(global_steps), poll_seconds

    def generate(self, prompts: TensorDict, uids: list[str], count: int) -> torch.Tensor:
        """Submit ``prompts`` under ``uids`` with ``count`` sessions each; wait until every uid is terminal; return the
        rewards of each session's final output (the sum of its ``rm_scores``), prompt by prompt."""
        if not uids or count == 0:
            return torch.zeros(0, dtype=torch.float64)
        batch = prompts.clone()
        tu.assign_non_tensor_stack(batch, "uid", list(uids))
        tu.assign_non_tensor_data(batch, "__rollout_n__", int(count))
        tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)
        self.submit(batch)
        listing = self._wait(uids)
        outputs = final_outputs([key for key in listing if not listing[key].get("is_prompt", False)])
        failed = [uid for uid in uids if listing[uid].get("status") != "finished" or len(outputs.get(uid, ())) != count]
        if failed:
            raise HostError(
                f"verl allocation: the agent loop returned {len(outputs.get(failed[0], ()))} of {count} sessions for "
                f"uid {failed[0]} (status {listing[failed[0]].get('status')!r}; {len(failed)} such prompts); a pilot "
                "or commit needs every session: see the agent loop's error in verl's log"
            )
        keys = [key for uid in uids for key in outputs[uid]]
        data = tq.kv_batch_get(keys=keys, partition_id=PARTITION, select_fields=["rm_scores"])
        if "rm_scores" not in data.keys():
            raise ConfigError(
                "verl allocation reads each completion's reward from the agent loop's 'rm_scores'; this run's agent "
                "loop stores none: enable verl's reward loop (reward.num_workers >= 1)"
            )
        return completion_rewards(data["rm_scores"])

    def _wait(self, uids: Sequence[str]) -> dict[str, dict]:
        """TransferQueue's tags of the train partition once every one of ``uids`` has a terminal status."""
        while True:
            listing = (tq.kv_list() or {}).get(PARTITION, {})
            if all(listing.get(uid, {}).get("status") in TERMINAL for uid in uids):
                return listing
            time.sleep(self.poll_seconds)

    def drop(self, uids: Sequence[str]) -> None:
        """Clear the groups of ``uids`` from TransferQueue: their status keys, pilots and any commit."""
        if not uids:
            return
        groups = set(uids)
        listing = (tq.kv_list() or {}).get(PARTITION, {})
        keys = [key for key in listing if group_of(key) in groups]
        tq.kv_clear(partition_id=PARTITION, keys=keys)

    def merge(self, uids: Sequence[str]) -> None:
        """Fold each of ``uids``' commit into its group: clear the commit's status key and write the pilot's uid into
        the ``uid`` field of the commit's rows (verl's GRPO advantage groups rows by it)."""
        if not uids:
            return
        owner = {commit_uid(uid): uid for uid in uids}
        listing = (tq.kv_list() or {}).get(PARTITION, {})
        rows = [key for key in listing if submission_of(key) in owner and not listing[key].get("is_prompt", False)]
        if rows:
            field = TensorDict({}, batch_size=[len(rows)])
            tu.assign_non_tensor_stack(field, "uid", [owner[submission_of(key)] for key in rows])
            tq.kv_batch_put(keys=rows, partition_id=PARTITION, fields=field)
        tq.kv_clear(partition_id=PARTITION, keys=list(owner))


def prompt_keys(batch: TensorDict) -> list:
    """The rows' stable prompt keys, verl's ``index`` column (extra_info.index) as Python values: the allocator's
    history of a prompt (the posterior rule, eviction) is kept by it."""
    values = tu.get(batch, "index")
    if values is None:
        raise ConfigError(
            "dataflex allocation needs a stable per-prompt key: give every training row extra_info.index (verl's "
            "example preprocessing scripts do)"
        )
    return [value.item() if hasattr(value, "item") else value for value in values]


def domains_from(batch: TensorDict, column: str) -> list[str]:
    """The rows' values of the domain ``column`` as strings; `NO_DOMAIN` for every row without that column."""
    values = tu.get(batch, column)
    return [NO_DOMAIN] * len(batch) if values is None else [str(value) for value in values]
