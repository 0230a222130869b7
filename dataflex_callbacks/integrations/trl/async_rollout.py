"""An in-process rollout worker for TRL's ``AsyncGRPOTrainer``: a real engine in the trainer's process, no server.

TRL's default `AsyncRolloutWorker` spawns a process that sends HTTP requests to a vLLM server and
the trainer pushes weights to that server over NCCL: neither runs on a CPU-only machine. The
trainer takes any object implementing TRL's ``RolloutWorkerProtocol`` and ``WeightTransferProtocol``;
this module gives it

- `InProcessRolloutWorker`: generates with an engine in this process and scores each group
  exactly as TRL's worker does (rewards summed over the reward functions, NaN-aware; advantage
  ``(r - mean) / (std + 1e-8)`` within the group), tagging every sample with the policy version
  it was generated with. It takes its prompts from a *prompt feed*, which a data strategy
  replaces (`set_prompt_feed`): a prompt the strategy skips is never sent to the engine. With an
  ``allocation`` part (`set_allocation`) a wave is screened: a pilot of k completions per prompt, then
  the rest of the group for the prompts the allocator commits.
- `VLLMEngine` (a ``vllm.LLM``, vLLM's CPU build in CI) and `TransformersEngine` (the model's own
  ``generate``, for the main test suite where vLLM is not installed): ``generate`` and ``load_weights``.
- `EngineWeightTransfer`: the trainer's weight sync loads the new weights into the engine.
- `cpu_device_name`: TRL 1.16's trainer asks ``torch.cuda.get_device_name`` for its MFU metric in
  ``__init__`` (``trl/trainer/utils.py:1824``, ``get_peak_flops_per_device``), which raises on a
  CPU-only torch; inside this context the name is ``"cpu"``, an unknown device, so TRL turns its
  MFU metric off as it does for any device it does not know.
- `use_cpu_tree_attention`: TRL packs each micro-batch into a prefix tree and attends with a
  FlashAttention-3 kernel fetched from the Hub (GPU only); this registers the same attention,
  computed with plain torch, under TRL's attention name, so the trainer's forward runs on a CPU.

Generation is *pull-driven*: when the trainer finds the queue empty, the worker generates one
wave of ``wave_groups`` groups in one engine call, all with the policy it holds now. The trainer
then consumes the wave over the next steps, so samples lag the trainer by up to
``wave_groups / groups_per_step`` versions: the off-policy data an asynchronous run trains on,
made deterministic (the run does not depend on thread timing). Generation does not overlap
training here; that overlap is what a GPU deployment with TRL's own worker adds.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import queue
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from dataflex_callbacks.errors import ConfigError, HostError, InputError
from dataflex_callbacks.host.reward_values import reward_values

__all__ = [
    "EngineWeightTransfer",
    "InProcessRolloutWorker",
    "TransformersEngine",
    "VLLMEngine",
    "cpu_device_name",
    "dataset_order_feed",
    "use_cpu_tree_attention",
]


# ---------------------------------------------------------------- engines


class TransformersEngine:
    """Generation with a Hugging Face causal LM's ``generate`` (sampling), returning token ids and their log-probs.

    Args:
        model: the generation policy (a copy of the trainer's model; `load_weights` keeps it in step).
        pad_token_id, eos_token_ids: as the trainer's tokenizer and model declare them.
        seed: seeds torch's generator before each call, so a run is reproducible.
    """

    def __init__(self, model, pad_token_id: int, eos_token_ids: Sequence[int], seed: int = 0):
        self.model = model.eval()
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(e) for e in eos_token_ids]
        self.seed = int(seed)
        self.calls = 0
        self.prompts_seen: list[list[int]] = []  # every prompt sent to the engine, as token ids

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], n: int, max_tokens: int, temperature: float = 1.0
    ) -> list[list[tuple[list[int], list[float]]]]:
        """``n`` completions of each prompt: per prompt, ``n`` pairs (completion token ids, their log-probs)."""
        self.prompts_seen.extend(list(p) for p in prompts)
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(self.seed * 1_000_003 + self.calls)
        self.calls += 1
        try:
            out = []
            for prompt in prompts:
                ids = torch.tensor([list(prompt)] * n, device=self.model.device)
                result = self.model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=True,
                    temperature=temperature,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_tokens,
                    pad_token_id=self.pad_token_id,
                    eos_token_id=self.eos_token_ids,
                    output_scores=True,
                    return_dict_in_generate=True,
                )
                tokens = result.sequences[:, ids.shape[1] :]
                logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in result.scores], dim=1)
                picked = logps.gather(2, tokens.unsqueeze(2)).squeeze(2)
                group = []
                for row, row_logps in zip(tokens.tolist(), picked.tolist(), strict=True):
                    length = next((i + 1 for i, t in enumerate(row) if t in self.eos_token_ids), len(row))
                    group.append((row[:length], row_logps[:length]))
                out.append(group)
            return out
        finally:
            torch.random.set_rng_state(generator_state)

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterator[tuple[str, torch.Tensor]]) -> None:
        params = dict(self.model.named_parameters())
        for name, tensor in named_tensors:
            params[name].copy_(tensor)


class VLLMEngine:
    """Generation with an in-process ``vllm.LLM``
    (vLLM's CPU build in CI: see `dataflex_callbacks.recipes.vllm_colocate`).

    Build the ``LLM`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the engine must live in this
    process for `load_weights` to reach it) and inside ``cpu_engine()`` on a CPU (live weights).
    """

    def __init__(self, llm, seed: int = 0):
        self.llm = llm
        self.seed = int(seed)
        self.calls = 0
        self.prompts_seen: list[list[int]] = []

    def generate(self, prompts, n, max_tokens, temperature=1.0):
        from vllm import SamplingParams

        self.prompts_seen.extend(list(p) for p in prompts)
        params = SamplingParams(
            n=n,
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=-1,
            top_p=1.0,
            logprobs=0,
            seed=self.seed * 1_000_003 + self.calls,
        )
        self.calls += 1
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        groups = []
        for output in outputs:
            group = []
            for completion in output.outputs:
                ids = list(completion.token_ids)
                logps = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)]
                group.append((ids, logps))
            groups.append(group)
        return groups

    def load_weights(self, named_tensors):
        model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(list(named_tensors))
        self.llm.reset_prefix_cache()


class EngineWeightTransfer:
    """TRL's ``WeightTransferProtocol`` for an in-process engine: the trainer's weight sync loads into it."""

    def __init__(self, engine):
        self.engine = engine
        self.syncs = 0

    def init_weight_transfer(self) -> None:
        pass  # nothing to connect: the engine is in this process

    def pause(self) -> None:
        pass  # generation is pull-driven: nothing runs while the trainer syncs

    def send_weights(self, iterator) -> None:
        self.engine.load_weights(iterator)
        self.syncs += 1

    def resume(self) -> None:
        pass

    def destroy(self) -> None:
        pass


# ---------------------------------------------------------------- the worker


def dataset_order_feed(dataset, start: int = 0) -> Iterator[int]:
    """TRL's worker's prompt order: the dataset's rows in order from ``start``, cycling."""
    size = len(dataset)
    index = start % size
    while True:
        yield index
        index = (index + 1) % size


class _GeneratingQueue(queue.Queue):
    """The worker's ``rollout_buffer``: when the trainer finds it empty, the worker generates one wave first."""

    def __init__(self, worker: InProcessRolloutWorker):
        super().__init__()
        self._worker = worker

    def get(self, block: bool = True, timeout: float | None = None):
        if self.empty() and self._worker.running:
            self._worker.generate_wave()
        return super().get(block, timeout)


class InProcessRolloutWorker:
    """TRL's ``RolloutWorkerProtocol`` with the engine in the trainer's process (see the module docstring).

    Args:
        engine: a `VLLMEngine` or `TransformersEngine`.
        dataset: the train dataset (a ``prompt`` column of strings or chat messages; other columns
            are passed to the reward functions, as TRL does).
        reward_funcs: TRL reward functions ``f(prompts, completions, completion_ids, **columns) -> list[float]``;
            one that does not take these keywords, or returns anything but one float (or None) per
            completion, is refused (`InputError`) at its first call.
        processing_class: the trainer's tokenizer.
        num_generations: completions per prompt; the same as ``AsyncGRPOConfig(num_generations=...)`` (the
            adapter refuses another).
        max_tokens: completion length cap (TRL's ``max_completion_length``).
        wave_groups: groups generated per engine call, all with the policy current at the call.
        temperature: sampling temperature (TRL's ``temperature``).
    """

    def __init__(
        self,
        engine,
        dataset,
        reward_funcs: Sequence[Callable],
        processing_class,
        num_generations: int,
        max_tokens: int,
        wave_groups: int,
        temperature: float = 1.0,
    ):
        if wave_groups < 1:
            raise ConfigError(f"InProcessRolloutWorker: wave_groups must be >= 1; got {wave_groups}")
        self.engine = engine
        self.dataset = dataset
        self.reward_funcs = list(reward_funcs)
        self.reward_func_names = [getattr(f, "__name__", type(f).__name__) for f in self.reward_funcs]
        self.tokenizer = processing_class
        self.num_generations = int(num_generations)
        self.max_tokens = int(max_tokens)
        self.wave_groups = int(wave_groups)
        self.temperature = float(temperature)
        self.rollout_buffer = _GeneratingQueue(self)
        self.metrics_queue: queue.Queue = queue.Queue()
        self.model_version = 0
        self.running = False
        self._feed: Iterator[int] = dataset_order_feed(dataset)
        self.next_group_id = 0
        self.group_rows: dict[int, int] = {}  # group id -> dataset row it was generated from
        self.fed_rows: list[int] = []  # every dataset row sent to the engine, in order
        self.allocating = None  # the strategy whose allocation part screens each wave's prompts (`set_allocation`)

    # -- RolloutWorkerProtocol
    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def update_model_version(self, model_version: int) -> None:
        self.model_version = int(model_version)

    def check_health(self, stale_after_s: float) -> None:
        if not self.running:
            raise HostError("InProcessRolloutWorker is stopped: the trainer asked for samples after train end")

    # -- the prompt feed
    def set_prompt_feed(self, feed: Iterator[int], next_group_id: int = 0) -> None:
        """Take prompts (dataset row indices) from ``feed`` from now on; group ids continue from ``next_group_id``."""
        self._feed = feed
        self.next_group_id = int(next_group_id)

    def set_allocation(self, strategy) -> None:
        """Screen each wave's prompts with ``strategy``'s allocation part (a pilot and a commit, its group size bound to
        ``num_generations``).

        A wave then asks the engine for a pilot of k completions per prompt, the allocator decides (`AllocationRounds`
        on the pilots' rewards), and the engine is asked for the ``num_generations - k`` further completions of the
        committed prompts; a committed group queues its pilot and commit completions, each tagged with the policy
        version it was generated with. An uncommitted prompt's pilot is counted (``dataflex/alloc/*``) and dropped.
        """
        self.allocating = strategy

    def row_of(self, group_id: int) -> int:
        """The dataset row group ``group_id`` was generated from."""
        return self.group_rows[group_id]

    # -- generation
    def _prompt_ids(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)

    def generate_wave(self) -> None:
        """Generate ``wave_groups`` groups with the current policy, score them and queue their samples."""
        from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

        if self.allocating is not None:
            self._generate_screened_wave(RolloutSample)
            return
        rows = [next(self._feed) for _ in range(self.wave_groups)]
        group_ids = list(range(self.next_group_id, self.next_group_id + len(rows)))
        self.next_group_id += len(rows)
        self.fed_rows.extend(rows)
        examples = [self.dataset[int(r)] for r in rows]
        prompt_ids = [self._prompt_ids(example["prompt"]) for example in examples]
        version = self.model_version
        start = time.perf_counter()
        generated = self.engine.generate(prompt_ids, self.num_generations, self.max_tokens, self.temperature)
        self.metrics_queue.put({"rollout/generate_s": time.perf_counter() - start})
        for row, group_id, example, ids, group in zip(rows, group_ids, examples, prompt_ids, generated, strict=True):
            self.group_rows[group_id] = int(row)
            for sample in self._score_group(example, ids, group, version, group_id, RolloutSample):
                sample.enqueued_at = time.time()
                self.rollout_buffer.put_nowait(sample)

    def _generate_screened_wave(self, sample_class) -> None:
        """One wave of `set_allocation`'s screening: pilots, the allocator's decision, commits, merged groups queued."""
        rows = [int(next(self._feed)) for _ in range(self.wave_groups)]
        self.fed_rows.extend(rows)
        examples = [self.dataset[r] for r in rows]
        prompt_ids = [self._prompt_ids(example["prompt"]) for example in examples]
        rounds = self.allocating.allocation_rounds(rows)
        pilot = int(rounds.start()[0])
        start, pilot_version = time.perf_counter(), self.model_version
        pilots = self.engine.generate(prompt_ids, pilot, self.max_tokens, self.temperature)
        pilot_scores = [self._group_rewards(example, group) for example, group in zip(examples, pilots, strict=True)]
        rewards = torch.tensor(np.concatenate([_summed(arr) for arr, _ in pilot_scores]))
        counts = rounds.add(rewards, torch.arange(len(rows)).repeat_interleave(pilot))
        committed = counts.nonzero().flatten().tolist()
        more, commit_version = self.num_generations - pilot, self.model_version
        commits = (
            self.engine.generate([prompt_ids[i] for i in committed], more, self.max_tokens, self.temperature)
            if committed
            else []
        )
        self.metrics_queue.put({"rollout/generate_s": time.perf_counter() - start})
        commit_scores = [self._group_rewards(examples[i], group) for i, group in zip(committed, commits, strict=True)]
        commit_rewards = [_summed(arr) for arr, _ in commit_scores]
        rounds.add(
            torch.tensor(np.concatenate(commit_rewards)) if commit_rewards else torch.zeros(0),
            torch.tensor(committed, dtype=torch.long).repeat_interleave(more),
        )
        done = rounds.finish()
        self.metrics_queue.put({f"dataflex/{name}": value for name, value in done.metrics.items()})
        for i, group, (values, texts) in zip(committed, commits, commit_scores, strict=True):
            group_id, self.next_group_id = self.next_group_id, self.next_group_id + 1
            self.group_rows[group_id] = rows[i]
            merged = list(pilots[i]) + list(group)
            scored = (np.concatenate([pilot_scores[i][0], values], axis=1), pilot_scores[i][1] + texts)
            versions = [pilot_version] * pilot + [commit_version] * more
            samples = self._score_group(
                examples[i], prompt_ids[i], merged, pilot_version, group_id, sample_class, scored, versions
            )
            for sample in samples:
                sample.enqueued_at = time.time()
                self.rollout_buffer.put_nowait(sample)

    def _group_rewards(self, example: dict, group) -> tuple[np.ndarray, list[str]]:
        """``(F, n)`` each reward function's values for one group's ``n`` completions (None as NaN), and their texts."""
        completion_ids = [ids for ids, _ in group]
        completions = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        prompts = [example["prompt"]] * len(group)
        columns = {k: [v] * len(group) for k, v in example.items() if k != "prompt"}
        arguments = dict(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
        per_func = [
            self._reward_values(f, name, arguments, len(group))
            for f, name in zip(self.reward_funcs, self.reward_func_names, strict=True)
        ]
        return np.array(per_func, dtype=float).reshape(len(self.reward_funcs), len(group)), completions

    @staticmethod
    def _reward_values(func: Callable, name: str, arguments: dict, count: int) -> list:
        """``func``'s rewards for one group, called as TRL calls it, as floats (None as NaN); refused unless one
        number (or None) per completion."""
        try:
            values = func(**arguments)
        except TypeError as error:
            try:
                inspect.signature(func).bind(**arguments)
            except TypeError:  # the call itself does not fit the function: not an error inside it
                raise InputError(
                    f"dataflex: InProcessRolloutWorker: reward {name!r} does not take TRL's keyword arguments "
                    f"({error}); define it as def {name}(completions, **kwargs): TRL passes prompts, completions, "
                    "completion_ids and every dataset column by name"
                ) from error
            raise
        return reward_values(values, name, count, where="dataflex: InProcessRolloutWorker: ")

    def _score_group(
        self,
        example: dict,
        prompt_ids: list[int],
        group,
        version: int,
        group_id: int,
        sample_class,
        scored: tuple[np.ndarray, list[str]] | None = None,
        versions: list[int] | None = None,
    ):
        """TRL's `_score_group` for one group: rewards summed over functions (NaN-aware), group-normalised advantage.

        ``scored``: the group's `_group_rewards` when already computed (a screened group's pilot and commit);
        ``versions``: each completion's policy version (default: ``version`` for all).
        """
        arr, completions = self._group_rewards(example, group) if scored is None else scored
        rewards = _summed(arr)
        advantages = np.zeros_like(rewards)
        valid = ~np.isnan(rewards)
        reward_std = float(rewards[valid].std()) if valid.any() else math.nan
        if valid.any():
            advantages[valid] = (rewards[valid] - rewards[valid].mean()) / (rewards[valid].std() + 1e-8)
        samples = []
        for i, (ids, logps) in enumerate(group):
            metrics = {
                "reward": float(rewards[i]),
                "reward_std": reward_std,
                **{f"rewards/{name}": float(arr[j, i]) for j, name in enumerate(self.reward_func_names)},
            }
            samples.append(
                sample_class(
                    prompt=example["prompt"],
                    completion=completions[i],
                    input_ids=np.asarray(prompt_ids + ids, dtype=np.int64),
                    completion_mask=np.asarray([0] * len(prompt_ids) + [1] * len(ids), dtype=np.int64),
                    old_log_probs=np.asarray([0.0] * len(prompt_ids) + logps, dtype=np.float32),
                    advantage=float(advantages[i]),
                    model_version=version if versions is None else versions[i],
                    group_id=group_id,
                    metrics=metrics,
                )
            )
        return samples


def _summed(arr: np.ndarray) -> np.ndarray:
    """``(n,)`` the reward of each completion: the sum over ``arr (F, n)``'s functions, NaN where every one is NaN."""
    rewards = np.nansum(arr, axis=0)
    rewards[np.all(np.isnan(arr), axis=0)] = np.nan
    return rewards


# ---------------------------------------------------------------- TRL's packed attention on a CPU


def cpu_tree_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    *,
    tree_kv_index,
    tree_cu_seqlens_q,
    tree_cu_seqlens_k,
    tree_max_seqlen_q,
    tree_max_seqlen_k,
    scaling=None,
    sliding_window=None,
    softcap=None,
    **kwargs,
):
    """TRL's ``tree_attention`` (packing.py) computed with plain torch:
    each segment attends to its root-to-segment path.

    Same inputs and output as TRL's FlashAttention-3 call (``causal=True`` aligns a segment's
    queries with the *end* of its path, as FlashAttention does when queries are fewer than keys).
    """
    if sliding_window or softcap:
        raise HostError(
            "cpu_tree_attention supports neither sliding windows nor logit soft-capping; use a model "
            "without them on a CPU"
        )
    q = query.transpose(1, 2)[0]  # (T, Hq, D)
    k = key.transpose(1, 2)[0].index_select(0, tree_kv_index)
    v = value.transpose(1, 2)[0].index_select(0, tree_kv_index)
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads != kv_heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    out = torch.empty_like(q)
    cu_q, cu_k = tree_cu_seqlens_q.tolist(), tree_cu_seqlens_k.tolist()
    for s in range(len(cu_q) - 1):
        qs, ks = q[cu_q[s] : cu_q[s + 1]], k[cu_k[s] : cu_k[s + 1]]
        vs = v[cu_k[s] : cu_k[s + 1]]
        lq, lk = qs.shape[0], ks.shape[0]
        scores = torch.einsum("qhd,khd->hqk", qs.float(), ks.float()) * scale
        allowed = torch.arange(lk, device=q.device).unsqueeze(0) <= (
            torch.arange(lq, device=q.device).unsqueeze(1) + (lk - lq)
        )
        scores = scores.masked_fill(~allowed, float("-inf"))
        out[cu_q[s] : cu_q[s + 1]] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vs.float()).to(q.dtype)
    return out.unsqueeze(0), None


def use_cpu_tree_attention() -> None:
    """Register `cpu_tree_attention` under TRL's tree-attention name
    (call after building the trainer, which registers its own)."""
    from transformers import AttentionInterface
    from trl.experimental.async_grpo.packing import TREE_ATTENTION

    AttentionInterface.register(TREE_ATTENTION, cpu_tree_attention)


@contextlib.contextmanager
def cpu_device_name():
    """Build an ``AsyncGRPOTrainer`` on a CPU-only torch: ``torch.cuda.get_device_name`` answers ``"cpu"`` inside.

    Does nothing where CUDA is available.
    """
    if torch.cuda.is_available():
        yield
        return
    original = torch.cuda.get_device_name
    torch.cuda.get_device_name = lambda device=None: "cpu"
    try:
        yield
    finally:
        torch.cuda.get_device_name = original
