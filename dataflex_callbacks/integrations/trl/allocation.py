"""Rollout allocation in TRL's GRPOTrainer: screen prompts with a pilot, commit the rest of the group where it pays.

`Allocation` runs inside the adapter's wrapper of ``_generate_and_score_completions``, in place of
TRL's own generation of its batch. A step wants B groups of G completions (B = the prompts of TRL's
generation batch, G = ``num_generations``). Each screening round:

1. takes candidate prompts (round 0: the B prompts TRL's sampler drew, then further prompts from a
   seeded `rounds.PromptStream` over the train dataset, ``pre_select`` skipping there too), as many as
   the rule is expected to commit ``need`` of (`Strategy.allocation_candidates`; `screen`: ``need`` over the run's
   commit share, at most ``need * G / k``, as many completions as ``need`` plain groups);
2. generates a pilot of k completions per candidate by TRL's own method, with ``num_generations``
   set to k for that call (TRL groups rows, and a vLLM server dedupes prompts, by it);
3. asks the allocator (`Strategy.allocation_rounds`, `AllocationRounds` on the rewards of every rank)
   which pilots commit, keeps the first ``need`` of them, and generates their ``G - k`` further
   completions, again by TRL's method (``num_generations = G - k``).

With ``refill: false`` (`AllocatorNeeds.refills`) a step runs one screening round over TRL's B drawn prompts and trains
only the groups they commit (at least one): the callback fills TRL's batch with masked rows around them
(`fewer_groups.fill_rows`, the loss normalised as a step of those groups), so a step generates ``B * k + commits *
(G - k)`` completions instead of ``B * G`` (``alloc/step_groups``). With ``groups_per_step`` (K < B) the rounds
screen until the step holds K groups, laid out the same way.

A candidate the allocator skips (`Strategy.allocation_skips_pilot`: with ``evict`` an earlier pilot of it was all
correct; with ``min_prior_signal`` its prior predicts no signal) is dropped before its pilot and replaced from the
stream (``alloc/step_pilot_skips``).

A committed prompt's k pilot rows and G - k commit rows form one group of G. The screening rounds
repeat until B groups are in hand; the last one allowed (``max_screens``) commits whatever prompts
the step still needs, the rule's first (``alloc/forced_groups`` counts the others). The batch TRL
trains on is rebuilt from the B groups (`rounds.assemble`) and their advantages are recomputed over
the merged groups exactly as TRL computes them (`grpo_advantages`). Pilot and commit rows are
generated in the same step, by the same policy; each row keeps the old log-probs TRL computed in
its own round.

What a step generated is counted by the allocator (``alloc/step_generated``: every pilot and commit) and here its
completion tokens (``alloc/step_generated_tokens``, from TRL's logged mean length of each call times the call's rows:
the calls differ in size, so TRL's own step mean would weigh a small commit call like a large pilot call);
`dataflex run` and `dataflex compare` count a run's compute by them. ``may_generate``, when set (a compare budget),
makes the next screening round the step's last once it answers False.

Several processes: rounds are decided on the rewards of every rank (all-gathered), the rows of every
rank are gathered into the payload, every rank assembles the same B groups and keeps its block.
Groups of different sizes (``adaptive``) run in stages (`Allocation.generate_stages`), laid out in TRL's batch with
masked filler rows; with ``reuse``, an all-wrong group at the cap takes its prompt's stored earlier correct row
(`reuse.StagedReuse`). Refused in one line: an allocator of groups of G that reuses earlier responses or whose rounds
per step are not a pilot and a commit (read from what it declares, `AllocatorNeeds`), a ``mix`` part,
a ``dynamic_sampling`` part, a ``pre_select`` part with a pilot of 1, ``G - k`` not divisible by the number of
processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from dataflex_callbacks.components.allocation import AllocatorNeeds
from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.rollout.batch import NO_DOMAIN

from .reuse import StagedReuse
from .rounds import PromptStream, assemble, open_stream, pad_id, restore_stream, round_rows
from .sampling import row_key
from .signals import selection_rewards

NOT_SUPPORTED = "allocation in the TRL adapter does not support {what}; {fix}"


def check_allocation(settings, strategy) -> None:
    """Refuse, in one line naming the setting, what the TRL allocation rounds cannot run.

    ``settings``: the trainer's `trainer_settings.TrainerSettings`, or None for the rules on the strategy alone.
    Nothing is bound: the group size is checked on a copy of the allocator (`Allocation.bind` binds it).
    """
    needs = strategy.allocation_needs
    if needs.equal_groups:
        what = pilot_commit_refusal(needs, "")
        fix = "use 'screen', or run it in Lightning or your own loop (strategy.allocation_rounds)"
        refused = None if what is None else (what, fix)
    else:
        refused = staged_refusal(needs, strategy)
    if refused:
        raise ConfigError(NOT_SUPPORTED.format(what=refused[0], fix=refused[1]))
    if strategy.mix_enabled:
        raise ConfigError(NOT_SUPPORTED.format(what="a strategy with a mix part", fix="drop the mix part"))
    # Checked on a copy, nothing bound; a fraction of the group is known only with the trainer's num_generations.
    pilot = strategy.allocation_first_round(None if settings is None else settings.num_generations)
    if strategy.skips_prompts and pilot is not None and pilot < 2:
        raise ConfigError(
            NOT_SUPPORTED.format(
                what="a pre_select part with a pilot of 1 completion (pre_select learns which prompts to skip from "
                "the pilots' reward variance, and one completion never varies: it would learn to skip everything)",
                fix="use pilot >= 2 or drop pre_select",
            )
        )
    if settings is None:
        return
    if settings.environment_factories:
        raise ConfigError(NOT_SUPPORTED.format(what="environment_factories", fix="drop the allocation part"))
    assert pilot is not None  # known at the trainer's num_generations
    generations, processes = settings.num_generations, settings.num_processes
    if not needs.equal_groups:
        _check_stages(needs.name, pilot, generations, processes)
    elif needs.groups_per_step is not None and (needs.groups_per_step * generations) % processes:
        raise ConfigError(
            NOT_SUPPORTED.format(
                what=f"groups_per_step = {needs.groups_per_step} groups of {generations} on {processes} processes",
                fix=f"choose groups_per_step so that groups_per_step x num_generations is a multiple of {processes}",
            )
        )
    elif (generations - pilot) % processes:
        raise ConfigError(
            NOT_SUPPORTED.format(
                what=f"num_generations - pilot = {generations - pilot} completions per commit on {processes} processes",
                fix=f"choose pilot so that num_generations - pilot is a multiple of {processes}",
            )
        )


def staged_refusal(needs: AllocatorNeeds, strategy: Any) -> tuple[str, str] | None:
    """Why the TRL adapter's stages of groups of different sizes (`Allocation.generate_stages`) cannot run an
    allocator declaring ``needs`` with ``strategy``'s other parts: ``(what, fix)``, or None when they can."""
    if strategy.skips_prompts:
        return (
            f"allocation {needs.name!r} with a pre_select part (the filter counts a skipped prompt's savings in "
            "groups of one size)",
            "drop pre_select, or use 'screen' (screen_greso)",
        )
    return None


def _check_stages(name: str, stage: int, generations: int, processes: int) -> None:
    """Refuse a first stage that TRL's batch of B x num_generations rows cannot hold for its B prompts, or whose rows
    do not split evenly over the processes."""
    if stage > generations:
        raise ConfigError(
            NOT_SUPPORTED.format(
                what=f"allocation {name!r} with a first stage of {stage} completions per prompt above num_generations "
                f"= {generations} (TRL's batch holds B x num_generations rows, and each of its B prompts gets the "
                "first stage)",
                fix=f"set stage <= {generations}, or raise num_generations",
            )
        )
    if stage % processes:
        raise ConfigError(
            NOT_SUPPORTED.format(
                what=f"allocation {name!r} with stages of {stage} completions on {processes} processes",
                fix=f"choose stage and cap multiples of {processes}",
            )
        )


def pilot_commit_refusal(needs: AllocatorNeeds, why: str) -> str | None:
    """Why a host that runs a pilot and one commit per prompt, into groups of G, cannot run an allocator declaring
    ``needs`` (`AllocatorNeeds`): what it declares, in words; None when it can."""
    if not needs.equal_groups:
        return f"allocation {needs.name!r} (its groups differ in size; {why})"
    if needs.reuses_responses:
        return f"allocation {needs.name!r} (it puts earlier responses back into groups, which this host does not store)"
    if needs.rounds_per_step != 2:
        rounds = needs.rounds_per_step or "a varying number of"
        return f"allocation {needs.name!r} ({rounds} rounds per step; this host runs a pilot and one commit)"
    return None


def grpo_advantages(
    trainer: Any, rewards_per_func: torch.Tensor, group_index: torch.Tensor, num_groups: int
) -> torch.Tensor:
    """``(N,)`` TRL's advantages of ``rewards_per_func (N, F)``, a group being the rows of one ``group_index (N,)``.

    What ``GRPOTrainer._generate_and_score_completions`` computes (TRL 1.x) over ``view(-1, G)``, for every
    ``scale_rewards`` and ``multi_objective_aggregation``, here over groups of any sizes (``adaptive``): each group's
    mean and (Bessel-corrected, NaN-ignoring, as TRL's ``nanstd``) standard deviation over its own rows. A row whose
    reward functions all returned None is NaN in the baseline and gets advantage 0. ``group_index`` holds each row's
    group in ``[0, num_groups)``; equal groups of G are ``arange(N) // G``.
    """
    from trl.trainer.utils import nanstd

    device = rewards_per_func.device
    index = group_index.to(device=device, dtype=torch.long)
    weights = trainer.reward_weights.to(device).unsqueeze(0)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if trainer.multi_objective_aggregation == "normalize_then_sum":
        mean_k, std_k = _group_mean_std(rewards_per_func, index, num_groups)
        normalised = (rewards_per_func - mean_k[index]) / (std_k[index] + 1e-4)
        rewards = (normalised * weights).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        return torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std + 1e-4), nan=0.0)
    rewards = (rewards_per_func * weights).nansum(dim=1)
    rewards[unscorable] = torch.nan
    mean, std = _group_mean_std(rewards, index, num_groups)
    if trainer.scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    else:
        std = std[index]
    advantages = rewards - mean[index]
    if trainer.scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def _group_mean_std(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group of ``index (N,)``: the NaN-ignoring mean and Bessel-corrected std of ``values (N,)`` or ``(N, F)``,
    each ``(num_groups,)`` or ``(num_groups, F)``, as TRL's ``nanmean`` / ``nanstd`` over a group (NaN where a group
    has no value, and a std of NaN where it has one)."""
    present = ~torch.isnan(values)
    zeros = values.new_zeros((num_groups, *values.shape[1:]))
    count = zeros.index_add(0, index, present.to(values.dtype))
    mean = zeros.index_add(0, index, torch.where(present, values, 0.0)) / count
    squared = torch.where(present, (values - mean[index]) ** 2, 0.0)
    variance = zeros.index_add(0, index, squared) / count * (count / (count - 1))
    return mean, torch.where(count > 1, variance, torch.nan).sqrt()


@contextmanager
def generations_per_prompt(trainer, count: int) -> Iterator[None]:
    """TRL's ``num_generations`` set to ``count`` for one call of its scoring, then restored.

    TRL groups rows (``view(-1, num_generations)``) and a vLLM server dedupes prompts by it; a pilot
    round repeats each prompt k times, a commit round G - k times.
    """
    saved = trainer.num_generations
    trainer.num_generations = count
    try:
        yield
    finally:
        trainer.num_generations = saved


class Allocation:
    """The TRL side of rollout allocation: screening rounds, commits, and TRL's batch rebuilt from B merged groups.

    Args:
        strategy: the bound strategy; its ``allocation`` part declares equal groups of a pilot and a commit.
    """

    def __init__(self, strategy):
        self.strategy = strategy
        self.stream: PromptStream | None = None
        self._pending_stream: dict | None = None
        self.domain_key: str | None = None
        self.prompt_key_column: str | None = None
        self.reward_index: int | None = None
        self.may_generate: Callable[[int], bool] | None = None
        """``may_generate(generated)``: asked before each further screening round with the completions (all
        processes) the step generated so far; False makes that round the step's last (it commits what the step
        still needs, as ``max_screens`` does). Must answer alike on every rank."""
        self._step_tokens: float | None = None  # completion tokens the step generated, while TRL reports them
        self._pilot_skips = 0  # drawn prompts dropped this step before their pilot (`Strategy.allocation_skips_pilot`)
        self.reuse = StagedReuse(strategy)

    def bind(
        self,
        trainer,
        domain_key: str | None = None,
        prompt_key_column: str | None = None,
        reward_index: int | None = None,
    ) -> None:
        """Check the trainer's settings, bind G, and open the prompt stream of further candidates.

        ``reward_index``: the reward function the pilots are judged on (the adapter's ``selection_reward``);
        None: TRL's weighted sum.
        """
        self.strategy.bind_allocation_group_size(trainer.num_generations)  # checked by check_trl_strategy
        if self.strategy.skips_prompts:
            self.strategy.bind_pilot_observer()
        self.domain_key, self.prompt_key_column, self.reward_index = domain_key, prompt_key_column, reward_index
        self.stream = open_stream(trainer, self.strategy, prompt_key_column, domain_key, self._pending_stream)
        self._pending_stream = None

    def _candidates(self, trainer, prompts: list, need: int, last: bool) -> list:
        """``prompts`` topped up from the stream to `Strategy.allocation_candidates` ``need`` candidates (``need``
        over the run's commit share, at most ``need * G / k``), a count whose k rows split evenly over processes.

        Measured on the testbed (issue 40, `screen_posterior`, 120 steps): piloting ``need * G / k`` every round left
        951 committable pilots unneeded (1,902 of 26,960 completions); sizing by the share, 234.
        """
        processes = trainer.accelerator.num_processes
        count, pilot = self.strategy.allocation_candidates(need, last), self.strategy.allocation_first_round()
        assert pilot is not None  # the group size is bound
        while (count * pilot) % processes:
            count += 1
        prompts, barren = self._unskipped(prompts), 0
        while len(prompts) < count:
            drawn = self.stream.draw(count - len(prompts))
            kept = self._unskipped(drawn)
            barren = 0 if kept else barren + len(drawn)
            if barren > (self.stream.size or self.stream.STREAM_SHUFFLE_BUFFER):
                metrics = self.strategy.allocation_metrics()
                raise ConfigError(
                    f"allocation {self.strategy.allocation_needs.name!r}: {barren} prompts drawn in a row were all "
                    f"skipped before their pilot: evicted (an earlier pilot all correct; "
                    f"{metrics.get('alloc/evicted_prompts', 0):g} so far) or predicted by their domain's pass rate to "
                    f"give no signal ({metrics.get('alloc/prior_skips', 0):g} so far): the train dataset has no prompt "
                    "left to screen. Train on other prompts, or set evict: false, or a lower min_prior_signal"
                )
            prompts = prompts + kept
        return prompts[:count]

    def _drawn(self, trainer, drawn: list) -> list:
        """Without refill: TRL's drawn prompts less those skipped before their pilot, topped up from the stream only
        where none is left or their pilot rows would not split evenly over the processes."""
        prompts, pilot = self._unskipped(drawn), int(self.strategy.allocation_first_round() or 1)
        prompts = prompts or self._candidates(trainer, [], 1, last=False)  # refuses a stream with none left
        while (len(prompts) * pilot) % trainer.accelerator.num_processes:
            prompts += self._unskipped(self.stream.draw(1))
        return prompts

    def _unskipped(self, prompts: list) -> list:
        """``prompts`` without those the allocator skips before their pilot (`Strategy.allocation_skips_pilot`);
        counts the dropped ones."""
        keys = [row_key(row, self.prompt_key_column) for row in prompts]
        skips = self.strategy.allocation_skips_pilot(keys, [self._domain(row) for row in prompts]).tolist()
        self._pilot_skips += sum(skips)
        return [row for row, out in zip(prompts, skips, strict=True) if not out]

    def generate(
        self, trainer: Any, score_round: Callable, inputs: list
    ) -> tuple[list, dict, torch.Tensor, torch.Tensor | None, dict]:
        """Run one step's rounds from TRL's drawn ``inputs``; return what the step trains on.

        Args:
            trainer: the TRL GRPOTrainer.
            score_round: ``score_round(inputs) -> (output, rewards_per_func (N, F))``, TRL's own scoring.
            inputs: this rank's rows of TRL's generation batch (B prompts, each ``num_generations`` times).

        Returns:
            ``(inputs, output, rewards_per_func, group_ids, metrics)``: this rank's rows of the step's groups, their
            batch dict (advantages recomputed over those groups), the ``(N, F)`` rewards of every rank, each row's
            group (every rank; None for groups of ``num_generations``: `screen`, the B merged groups of TRL's batch),
            and ``alloc/*``. An allocator whose groups differ in size runs `generate_stages`.
        """
        needs = self.strategy.allocation_needs
        if needs is not None and not needs.equal_groups:
            return self.generate_stages(trainer, score_round, inputs)
        accelerator, generations = trainer.accelerator, trainer.num_generations
        pilot = int(self.strategy.allocation_first_round() or 0)  # bound with the group size, at `bind`
        drawn = _gathered_inputs(accelerator, inputs)[::generations]  # TRL's B prompts, in its order
        refills = needs is None or needs.refills
        target = None if needs is None else needs.groups_per_step
        wanted = len(drawn) if target is None else min(target, len(drawn))  # at most TRL's batch
        max_screens = self.strategy.allocation_max_screens if refills else 1
        groups: list[list[dict]] = []
        forced = declined = screens = generated = 0
        self._step_tokens, self._pilot_skips = 0.0, 0
        candidates = drawn
        while len(groups) < wanted:
            need, last = wanted - len(groups), screens + 1 >= max_screens
            if screens and self.may_generate is not None and not self.may_generate(generated):
                last = True  # a compute budget is spent: this round commits what the step still needs
            prompts = self._candidates(trainer, candidates, need, last) if refills else self._drawn(trainer, drawn)
            candidates = []
            keys = [row_key(row, self.prompt_key_column) for row in prompts]
            domains = [self._domain(row) for row in prompts]
            rounds = self.strategy.allocation_rounds(keys, domains, new_step=screens == 0)
            counts = rounds.start()
            pilot_rows, pilot_rewards = self._round(trainer, score_round, prompts, counts)
            index = torch.repeat_interleave(torch.arange(len(prompts)), counts)
            counts = rounds.add(pilot_rewards, index)
            self.strategy.observe_allocation_pilots(pilot_rewards, index, keys, domains, int(trainer.state.global_step))
            committing = counts > 0
            self.strategy.note_allocation_screen(len(prompts), int(committing.sum()))
            order = torch.cat([committing.nonzero().flatten(), (~committing).nonzero().flatten()])
            if refills:
                chosen = order[:need] if last else committing.nonzero().flatten()[:need]
            else:  # the committed groups only: at least one, and rows that split evenly over the processes
                chosen = order[: _fewest(int(committing.sum()), generations, accelerator.num_processes)]
            forced += int((~committing[chosen]).sum())
            declined += int(committing.sum()) - int(committing[chosen].sum())
            rounds.set_next(_only(chosen, len(prompts), generations - pilot))
            commit_counts = rounds.asked
            commit_rows, commit_rewards = self._round(trainer, score_round, prompts, commit_counts)
            rounds.add(commit_rewards, torch.repeat_interleave(torch.arange(len(prompts)), commit_counts))
            rounds.finish()
            generated += len(pilot_rows) + len(commit_rows)
            starts = torch.cumsum(commit_counts, 0) - commit_counts
            for i in sorted(chosen.tolist()):
                first, done = int(starts[i]), pilot * i
                groups.append(pilot_rows[done : done + pilot] + commit_rows[first : first + generations - pilot])
            screens += 1
            if not refills:
                break
        rows = [row for group in groups for row in group]
        inputs, output, rewards_per_func = assemble(rows, pad_id=pad_id(trainer))
        group_index = torch.arange(len(rows)) // generations
        output["advantages"] = grpo_advantages(trainer, rewards_per_func, group_index, len(rows) // generations)
        per_rank = len(rows) // accelerator.num_processes
        local = slice(accelerator.process_index * per_rank, (accelerator.process_index + 1) * per_rank)
        metrics = self.strategy.allocation_metrics()
        metrics.update({"alloc/screens": float(screens), "alloc/forced_groups": float(forced)})
        metrics["alloc/declined_prompts"] = float(declined)
        if "alloc/evicted_prompts" in metrics or "alloc/prior_skips" in metrics:  # an allocator that skips pilots
            metrics["alloc/step_pilot_skips"] = float(self._pilot_skips)
        if self._step_tokens is not None:
            metrics["alloc/step_generated_tokens"] = self._step_tokens
        if len(groups) < len(drawn) or not refills:
            metrics["alloc/step_groups"] = float(len(groups))
        local_output = {key: value[local] for key, value in output.items()}
        # Without refill the callback fills TRL's batch with masked rows around the committed groups.
        full = refills and len(groups) == len(drawn)
        return inputs[local], local_output, rewards_per_func, None if full else group_index, metrics

    def generate_stages(
        self, trainer: Any, score_round: Callable, inputs: list
    ) -> tuple[list, dict, torch.Tensor, torch.Tensor | None, dict]:
        """Run one step's stages for an allocator whose groups differ in size (``adaptive``); return what it trains on.

        TRL's B drawn prompts each get the allocator's first stage; further stages (`AllocationRounds.add`) go to the
        prompts it asks for, while TRL's batch of B x ``num_generations`` rows has room: a stage that does not fit
        goes to the first prompts it fits (in TRL's shuffled order) and ends the step (``alloc/step_unfinished_groups``
        counts the prompts left short of the rule's answer). Each call of TRL's scoring generates one count per prompt
        (TRL groups rows by ``num_generations``). With reuse, a prompt all wrong at the cap gets its stored earlier
        correct row appended to its group before the advantages (off-policy; `reuse.StagedReuse`, which keeps room
        for it and counts ``alloc/step_reused_responses`` and the reuses skipped for want of room).

        Returns:
            ``(inputs, output, rewards_per_func, group_index, metrics)``: this rank's real rows, prompt by prompt (the
            callback fills TRL's batch up to its rows with masked rows, `fewer_groups.fill_rows`), their batch dict with
            advantages over each prompt's group (`grpo_advantages`), the ``(R, F)`` rewards of every rank, ``(R,)``
            each real row's prompt (every rank), and ``alloc/*``.
        """
        accelerator = trainer.accelerator
        gathered = _gathered_inputs(accelerator, inputs)
        prompts = gathered[:: trainer.num_generations]
        keys = [row_key(row, self.prompt_key_column) for row in prompts]
        rounds = self.strategy.allocation_rounds(keys, [self._domain(row) for row in prompts])
        room, rows, index, holding = len(gathered), [], [], self.reuse.holding(keys)
        self._step_tokens, counts = 0.0, rounds.start()
        while bool(counts.any()):
            fits = torch.cumsum(counts, 0) <= room - self.reuse.reserve(rounds, holding)  # room kept for reuses
            full = not bool(fits.all())
            if full:
                fitted = torch.where(fits, counts, 0)
                if not bool(fitted.any()):  # no prompt's next stage fits: the step ends with these groups short
                    break
                counts = fitted
                rounds.set_next(counts)
            round_rows_, rewards, round_index = self._staged_round(trainer, score_round, prompts, counts)
            room -= len(round_rows_)
            rows += round_rows_
            index.append(round_index)
            counts = rounds.add(rewards, round_index)
            if full:
                break
        unfinished = int((counts > 0).sum())
        done = rounds.finish()
        processes = accelerator.num_processes
        reused, reused_index, skipped = self.reuse.put_back(done, prompts, keys, rows, room, processes)
        self.reuse.store(done, keys, rows, rounds.rewards)  # the step's passes, after the earlier ones were put back
        rows, group_index = rows + reused, torch.cat([*index, reused_index])
        order = torch.argsort(group_index, stable=True)  # each prompt's rows together, in the order generated
        rows, group_index = [rows[i] for i in order.tolist()], group_index[order]
        local_inputs, output, rewards_per_func = assemble(rows, pad_id=pad_id(trainer))
        output["advantages"] = grpo_advantages(trainer, rewards_per_func, group_index, len(prompts))
        per_rank = len(rows) // accelerator.num_processes
        local = slice(accelerator.process_index * per_rank, (accelerator.process_index + 1) * per_rank)
        sizes = torch.bincount(group_index, minlength=len(prompts)).double()
        metrics = self.strategy.allocation_metrics()
        self.reuse.count(metrics, len(reused), skipped)
        metrics.update(
            {
                "alloc/step_group_size_min": float(sizes.min()),
                "alloc/step_group_size_mean": float(sizes.mean()),
                "alloc/step_group_size_max": float(sizes.max()),
                "alloc/step_unfinished_groups": float(unfinished),
                "alloc/step_filler_rows": float(len(gathered) - len(rows)),
            }
        )
        if self._step_tokens is not None:
            metrics["alloc/step_generated_tokens"] = self._step_tokens
        output = {key: value[local] for key, value in output.items()}
        return local_inputs[local], output, rewards_per_func, group_index, metrics

    def _staged_round(
        self, trainer: Any, score_round: Callable, prompts: list, counts: torch.Tensor
    ) -> tuple[list, torch.Tensor, torch.Tensor]:
        """One stage: ``counts[i]`` completions of ``prompts[i]``, one call of TRL's scoring per distinct count;
        every rank's rows, their selection rewards and ``(n,)`` prompt indices."""
        rows: list = []
        rewards: list[torch.Tensor] = []
        index: list[torch.Tensor] = []
        for count in torch.unique(counts[counts > 0]).tolist():
            chosen = torch.where(counts == count, counts, 0)
            if (int(chosen.sum()) % trainer.accelerator.num_processes) != 0:
                raise ConfigError(
                    NOT_SUPPORTED.format(
                        what=f"a stage of {int(chosen.sum())} completions on {trainer.accelerator.num_processes} "
                        "processes",
                        fix="choose stage and cap multiples of the number of processes",
                    )
                )
            call_rows, call_rewards = self._round(trainer, score_round, prompts, chosen)
            rows += call_rows
            rewards.append(call_rewards)
            index.append(torch.repeat_interleave(torch.arange(len(prompts)), chosen))
        return rows, torch.cat(rewards), torch.cat(index)

    def _domain(self, row: Mapping[str, Any]) -> str:
        return str(row[self.domain_key]) if self.domain_key is not None and self.domain_key in row else NO_DOMAIN

    def _round(self, trainer, score_round: Callable, prompts: list, counts: torch.Tensor):
        """Generate ``counts[i]`` completions of ``prompts[i]`` by TRL's method; every rank's rows and rewards."""
        rows_global = [row for row, count in zip(prompts, counts.tolist(), strict=True) for _ in range(count)]
        if not rows_global:
            return [], torch.zeros(0)
        accelerator = trainer.accelerator
        per_rank = len(rows_global) // accelerator.num_processes
        mine = rows_global[accelerator.process_index * per_rank : (accelerator.process_index + 1) * per_rank]
        logged = len(_logged_lengths(trainer) or [])
        with generations_per_prompt(trainer, int(counts[counts > 0][0])):
            output, rewards_per_func = score_round(mine)
        # TRL logs each call's mean completion length over every rank's rows and averages the calls at logging
        # time; pilot and commit calls differ in size, so the step's tokens are summed here, call by call.
        lengths = _logged_lengths(trainer) or []
        if self._step_tokens is not None and len(lengths) > logged:
            self._step_tokens += round(float(lengths[-1]) * len(rows_global))
        else:
            self._step_tokens = None
        rows = round_rows(trainer, mine, output, rewards_per_func, "allocation")
        return rows, selection_rewards(rewards_per_func, trainer.reward_weights, self.reward_index)

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """The prompt stream's position and the reuses skipped (the allocator's counts, history and response bank are
        in the strategy's state)."""
        return {"stream": None if self.stream is None else self.stream.state_dict(), "reuse": self.reuse.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._pending_stream = restore_stream(self.stream, state.get("stream"))
        self.reuse.load_state_dict(state.get("reuse") or {})


def _fewest(committed: int, generations: int, processes: int) -> int:
    """Groups a step without refill trains: the ``committed`` ones, at least one, and more (the rule's next) until
    their rows split evenly over the ``processes``."""
    count = max(committed, 1)
    while (count * generations) % processes:
        count += 1
    return count


def _only(chosen: torch.Tensor, size: int, count: int) -> torch.Tensor:
    """``(size,)`` long: ``count`` at the ``chosen`` prompts, 0 elsewhere."""
    counts = torch.zeros(size, dtype=torch.long)
    counts[chosen] = count
    return counts


def _logged_lengths(trainer) -> list | None:
    """TRL's list of this step's logged mean completion lengths (one per call of its scoring), or None without one."""
    metrics = getattr(trainer, "_metrics", None)
    if not isinstance(metrics, Mapping) or "train" not in metrics:
        return None
    lengths = metrics["train"].get("completions/mean_length")
    return lengths if isinstance(lengths, list) else None


def _gathered_inputs(accelerator, inputs: list) -> list:
    if accelerator.num_processes == 1:
        return list(inputs)
    from accelerate.utils import gather_object

    return gather_object(list(inputs))
