"""Data strategies under TRL's AsyncGRPOTrainer: the real trainer on a CPU, with an in-process worker
(HF generate engine).

The worker (`InProcessRolloutWorker`) is the one the vLLM stage runs with vLLM's CPU engine
(test_async_vllm.py); here its engine is the model's own ``generate``, so these tests need no vLLM.
"""

import contextlib
import os
import threading
import time
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from toy_rewards import checksum_reward  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer  # noqa: E402

from dataflex_callbacks.errors import (  # noqa: E402
    ConfigError,
    HostError,
    InputError,
    NoSignalStepWarning,
    ParamError,
)
from dataflex_callbacks.integrations.trl import DataFlexAsyncGRPOTrainer, attach  # noqa: E402
from dataflex_callbacks.integrations.trl.async_rollout import (  # noqa: E402
    EngineWeightTransfer,
    InProcessRolloutWorker,
    TransformersEngine,
    cpu_device_name,
    use_cpu_tree_attention,
)
from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer, save_tiny  # noqa: E402

G = 4  # num_generations
B = 2  # groups per step: per_device_train_batch_size 4 x gradient_accumulation_steps 2 / G


def echo_zero_reward(completions, domain, **kwargs):
    """checksum_reward, but 0 for every completion of an 'echo' prompt: those groups never carry signal."""
    return [0.0 if d == "echo" else float(sum(map(ord, c)) % 2) for c, d in zip(completions, domain, strict=True)]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("async_model"))


@pytest.fixture(scope="module")
def prompts():
    return Dataset.from_dict({"prompt": [f"{i}+{i % 7}=" for i in range(24)], "domain": ["add", "mul", "echo"] * 8})


def hf_engine(path, tokenizer):
    return TransformersEngine(
        AutoModelForCausalLM.from_pretrained(path), tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=0
    )


def build(
    path,
    dataset,
    out,
    *,
    strategy=None,
    how="class",
    engine=None,
    worker_class=InProcessRolloutWorker,
    reward=checksum_reward,
    wave_groups=4,
    worker_generations=G,
    cpu_helpers=True,
    trainer_options=None,
    **config,
):
    """An AsyncGRPOTrainer (stock, attached or DataFlexAsyncGRPOTrainer) with an in-process worker;
    (trainer, worker). ``cpu_helpers=False``: built as a user would without `cpu_device_name` and
    `use_cpu_tree_attention` (the DataFlex trainer needs neither on a CPU).
    """
    tokenizer = build_tiny_tokenizer()
    engine = engine or hf_engine(path, tokenizer)
    worker = worker_class(
        engine, dataset, [reward], tokenizer, num_generations=worker_generations, max_tokens=6, wave_groups=wave_groups
    )
    settings = dict(
        output_dir=str(out),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=G,
        max_completion_length=6,
        max_steps=3,
        learning_rate=1e-3,
        seed=0,
        bf16=False,
        use_cpu=True,
        token_budget=0,
        max_staleness=1,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
    )
    settings.update(config)
    kwargs = dict(
        model=path,
        reward_funcs=[reward],
        args=AsyncGRPOConfig(**settings),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_worker=worker,
        weight_transfer=EngineWeightTransfer(engine),
    )
    with cpu_device_name() if cpu_helpers else contextlib.nullcontext():
        if how == "class" and strategy is not None:
            trainer = DataFlexAsyncGRPOTrainer(
                **kwargs, strategy=strategy, record_decisions=True, **(trainer_options or {})
            )
        else:
            trainer = AsyncGRPOTrainer(**kwargs)
            if strategy is not None:
                attach(trainer, strategy, record_decisions=True)
    if cpu_helpers:
        use_cpu_tree_attention()
    return trainer, worker


def params(trainer):
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def losses(trainer):
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


SKIP_SEEN_PROMPTS = {
    "name": "skip_echo",
    "pre_select": {
        "name": "skip_zero_variance",
        "params": {"explore": 1e-6, "min_keep": 1e-9, "adapt_rate": 0.0, "domain_prior": False, "noise_check": False},
    },
}
"""A pre-rollout filter that skips, almost surely, every prompt once it gave a no-signal group."""


@pytest.mark.parametrize("how", ["attach", "class"])
def test_baseline_equals_the_stock_async_trainer(model_path, prompts, tmp_path, how):
    stock, stock_worker = build(model_path, prompts, tmp_path / "stock")
    stock.train()
    ours, worker = build(model_path, prompts, tmp_path / "ours", strategy="baseline", how=how)
    ours.train()
    assert (
        type(ours.dataflex if how == "class" else ours.callback_handler.callbacks[-1]).__name__
        == "DataFlexAsyncCallback"
    )
    assert worker.fed_rows == stock_worker.fed_rows and ours._trained_groups == stock._trained_groups
    assert losses(ours) == losses(stock)
    for name, value in params(stock).items():
        assert torch.equal(params(ours)[name], value), name


class ZeroVarianceRemovingWorker(InProcessRolloutWorker):
    """The reference for selection: a worker that never queues a group whose rewards are all equal."""

    def _score_group(self, *args, **kwargs):
        samples = super()._score_group(*args, **kwargs)
        return samples if np.std([s.metrics["reward"] for s in samples]) > 0 else []


def test_selection_equals_removing_the_dropped_rows(model_path, prompts, tmp_path):
    # One wave holds the whole run, generated by policy 0 in both runs, and nothing goes stale: the two
    # runs see the same completions, so the only difference is the removal.
    settings = dict(wave_groups=16, max_staleness=100, max_steps=3)
    reference, _ = build(model_path, prompts, tmp_path / "ref", worker_class=ZeroVarianceRemovingWorker, **settings)
    reference.train()
    ours, _ = build(model_path, prompts, tmp_path / "ours", strategy="diffband", **settings)
    ours.train()
    dropped = sum(int((~d["keep"]).sum()) for d in ours.dataflex.decisions)
    assert dropped > 0  # the strategy dropped rows: the equality below is not vacuous
    assert losses(ours) == pytest.approx(losses(reference), abs=1e-6)
    for name, value in params(reference).items():
        assert torch.allclose(params(ours)[name], value, atol=1e-6), name


def test_dynamic_sampling_trains_b_signal_groups_a_step_without_generating_more(model_path, prompts, tmp_path):
    trainer, worker = build(
        model_path, prompts, tmp_path / "dapo", strategy="dapo", reward=echo_zero_reward, max_steps=4
    )
    trainer.train()
    decisions = trainer.dataflex.decisions
    assert len(decisions) >= 4  # one per step, and one more the dataloader fetched ahead
    for decision in decisions:
        ids = decision["group_ids"]
        assert len(set(ids.tolist())) == B and bool(decision["keep"].all())
    spent = sum(d["zero_signal_groups"] for d in decisions)
    assert spent > 0 and spent == trainer.dataflex.groups_spent
    # Every group the engine generated is trained, counted as spent, dropped as stale or still waiting: none was
    # generated for the strategy beyond the worker's own waves.
    trained = sum(len(set(d["group_ids"].tolist())) for d in decisions)
    stale = int(trainer.dataflex.staleness.dropped_stale.sum()) // G
    waiting = (worker.rollout_buffer.qsize() + len(trainer.dataflex._open_group)) // G
    assert len(worker.fed_rows) == worker.engine.calls * worker.wave_groups == trained + spent + stale + waiting


def test_a_skipped_prompt_never_reaches_the_engine(model_path, prompts, tmp_path):
    skip = SKIP_SEEN_PROMPTS
    trainer, worker = build(
        model_path, prompts, tmp_path / "skip", strategy=skip, reward=echo_zero_reward, max_steps=20, max_staleness=100
    )
    trainer.train()
    tokenizer = build_tiny_tokenizer()
    seen = [tokenizer.decode(ids) for ids in worker.engine.prompts_seen]
    assert seen == [prompts[r]["prompt"] for r in worker.fed_rows]  # the engine saw exactly the fed prompts
    echo = {p for p, d in zip(prompts["prompt"], prompts["domain"], strict=True) if d == "echo"}
    observed = trainer.dataflex.strategy.pre_select.history
    streaks = {key: int(observed.streaks([key])[0]) for key in echo if observed.lookup([key])[0] >= 0}
    assert streaks and all(s >= 1 for s in streaks.values())
    # Once an echo prompt's zero-signal outcome was consumed, it is skipped: in the second pass over the data (after
    # a margin for prompts whose outcome was still in flight) no echo prompt reaches the engine.
    assert len(seen) >= len(prompts) + 16 and not any(p in echo for p in seen[len(prompts) + 8 :])
    others = [p for p in seen if p not in echo]
    assert len(others) > len(prompts) - len(echo)  # the other prompts came round again


def test_staleness_values_equal_the_trainers_own_count(model_path, prompts, tmp_path):
    trainer, _ = build(model_path, prompts, tmp_path / "stale", strategy="baseline", wave_groups=12, max_steps=6)
    counted = []
    trainer.add_callback(
        type(
            "Copy",
            (__import__("transformers").TrainerCallback,),
            {"on_step_end": lambda self, *a, **k: counted.extend(trainer._metrics["train"]["sample/staleness_max"])},
        )()
    )
    trainer.train()
    ours = [int(v) for d in trainer.dataflex.decisions for v in d["staleness"].tolist()]
    assert ours and max(ours) >= 1  # off-policy samples were consumed
    assert trainer.dataflex.consumed_staleness == [int(v) for v in counted]
    assert ours == trainer.dataflex.consumed_staleness[: len(ours)]
    dropped = int(trainer.dataflex.staleness.dropped_stale.sum())
    assert dropped > 0
    values = trainer.state.log_history[-2]
    assert any(key.startswith("dataflex/staleness/mean/") for key in values)


def test_resume_restores_the_strategy_and_the_prompt_feed(model_path, prompts, tmp_path):
    skip = SKIP_SEEN_PROMPTS
    full, full_worker = build(
        model_path,
        prompts,
        tmp_path / "full",
        strategy=skip,
        reward=echo_zero_reward,
        max_steps=8,
        max_staleness=100,
        save_strategy="steps",
        save_steps=4,
    )
    full.train()
    saved = torch.load(tmp_path / "full" / "checkpoint-4" / "dataflex_strategy.pt", weights_only=True)
    resumed, worker = build(
        model_path, prompts, tmp_path / "full", strategy=skip, reward=echo_zero_reward, max_steps=8, max_staleness=100
    )
    probe, _ = build(model_path, prompts, tmp_path / "probe", strategy=skip, reward=echo_zero_reward)
    assert probe.dataflex.load_state(str(tmp_path / "full" / "checkpoint-4"))
    history = probe.dataflex.strategy.pre_select.history.state_dict()
    assert history["keys"] == saved["strategy"]["pre_select"]["history"]["keys"]
    assert torch.equal(torch.as_tensor(history["streak"]), saved["strategy"]["pre_select"]["history"]["streak"])
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"))
    fed_before = saved["next_group_id"]
    # The feed continues exactly where the saved run's stood: the same prompts in the same order. The samples that
    # were queued at the save are not restored (TRL keeps no queue in a checkpoint), so the resumed run generates
    # further: compare the prompts both runs fed after the save.
    tail = full_worker.fed_rows[fed_before:]
    common = min(len(tail), len(worker.fed_rows))
    assert common >= 4 and worker.fed_rows[:common] == tail[:common]


@pytest.mark.parametrize(
    "config, part",
    [
        ("entropy_top", "select: selector 'entropy_top_tokens' works on tokens"),
        ("ar", "reweight: reweighter 'advantage_reweight' works on tokens"),
    ],
)
def test_parts_that_cannot_run_are_refused_at_attach(model_path, prompts, tmp_path, config, part):
    trainer, _ = build(model_path, prompts, tmp_path)
    with pytest.raises(ConfigError, match=part):
        attach(trainer, config)


def test_an_unknown_selection_reward_is_refused_naming_the_rewards(model_path, prompts, tmp_path):
    trainer, _ = build(model_path, prompts, tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"selection_reward='accuracy' is not one of this trainer's reward functions "
        r"\['checksum_reward'\]\. Pass one of these names",
    ):
        attach(trainer, "diffband", selection_reward="accuracy")


# ---------------------------------------------------------------- never waiting forever


def zero_reward(completions, **kwargs):
    """0 for every completion: what a model that solves nothing yet earns; no group carries signal."""
    return [0.0] * len(completions)


def unscored_reward(completions, **kwargs):
    """None for every completion (a reward that cannot score any: TRL reads it as NaN)."""
    return [None] * len(completions)


def train_within(trainer, worker, seconds: float):
    """``trainer.train()`` in a thread; ``(caught warnings, seconds taken)``.

    Past ``seconds`` the worker is stopped (the trainer's next pull then fails) and the test fails: a hang becomes a
    failure, not a stuck suite.
    """
    failure = []

    def run():
        try:
            trainer.train()
        except BaseException as error:  # re-raised in the test's thread
            failure.append(error)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(seconds)
        taken = time.monotonic() - start
        if thread.is_alive():
            generated = worker.next_group_id
            worker.stop()
            thread.join(60)
            pytest.fail(
                f"train() was still running after {seconds} s: {generated} groups generated, "
                f"{trainer.state.global_step} optimizer steps"
            )
    if failure:
        raise failure[0]
    return list(caught), taken


@pytest.mark.parametrize(
    "strategy, reward, cause",
    [
        ("diffband", zero_reward, "equal_rewards"),
        ("dapo", zero_reward, "equal_rewards"),
        ("diffband", unscored_reward, "nonfinite_rewards"),
    ],
    ids=["diffband", "dapo", "none_reward"],
)
def test_a_run_without_signal_ends_each_step_masked_out_and_warns_with_the_fix(
    model_path, prompts, tmp_path, strategy, reward, cause, capsys
):
    trainer, worker = build(model_path, prompts, tmp_path, strategy=strategy, reward=reward, max_steps=2)
    before = params(trainer)
    caught, taken = train_within(trainer, worker, 60)
    out = capsys.readouterr().out
    # The start line names the reward the strategy selects on; the end line says no step trained anything.
    assert f"selects on reward function {reward.__name__!r}" in out, out
    end = [line for line in out.splitlines() if line.startswith("dataflex: train end:")]
    assert len(end) == 1, out
    assert "2 steps, 2 kept nothing, mean kept fraction 0.00, 0 signal groups trained" in end[0], end[0]
    assert "NoSignalStepWarning names the cause" in end[0], end[0]
    assert trainer.state.global_step == 2
    warned = [w.message for w in caught if isinstance(w.message, NoSignalStepWarning)]
    assert len(warned) == 1, [str(w.message) for w in caught]
    assert warned[0].cause == cause and "Fix:" in str(warned[0]), str(warned[0])
    if reward is unscored_reward:
        assert "reward functions ['unscored_reward'] returned None (or NaN) for every completion" in str(warned[0])
    # Each step took at most max_rounds (4) steps' worth of groups, then trained on B of them masked out (advantage
    # 0): the weights did not move. Two steps and the one the dataloader fetches ahead: at most 3 x 4 x B groups.
    assert worker.next_group_id <= 3 * 4 * B + worker.wave_groups
    for name, value in before.items():
        assert torch.equal(params(trainer)[name], value), name
    # Summed over each log window: the two steps, and perhaps the one the dataloader fetched ahead.
    assert sum(log.get("dataflex/no_signal_steps_window_total", 0) for log in trainer.state.log_history) >= 2


@pytest.mark.parametrize("reward, unscored", [(zero_reward, False), (unscored_reward, True), (checksum_reward, None)])
def test_the_first_steps_rewards_all_zero_or_none_warn_once(model_path, prompts, tmp_path, reward, unscored):
    from dataflex_callbacks.errors import ZeroRewardWarning
    from dataflex_callbacks.host.zero_rewards import DEFAULT_WATCH_STEPS

    trainer, worker = build(
        model_path, prompts, tmp_path, strategy="baseline", reward=reward, max_steps=DEFAULT_WATCH_STEPS
    )
    caught, _ = train_within(trainer, worker, 120)
    warned = [w.message for w in caught if isinstance(w.message, ZeroRewardWarning)]
    if unscored is None:  # a reward that pays: nothing to warn about
        assert warned == []
        return
    assert len(warned) == 1 and f"[{reward.__name__!r}]" in str(warned[0]), [str(w) for w in warned]
    assert (warned[0].unscored == warned[0].completions) is unscored


def test_a_worker_of_another_group_size_is_refused_naming_both(model_path, prompts, tmp_path):
    with pytest.raises(
        ConfigError, match=r"InProcessRolloutWorker\(num_generations=2\).*AsyncGRPOConfig\(num_generations=4\)"
    ):
        build(model_path, prompts, tmp_path, strategy="diffband", worker_generations=2)


class ShortGroupsWorker(InProcessRolloutWorker):
    """A worker that loses one completion of every group, as TRL's worker will after a cancelled or failed rollout
    (huggingface/trl PR 7176 scores such a group with the completions it has)."""

    @staticmethod
    def is_short(group_id: int) -> bool:
        return True

    def _score_group(self, example, prompt_ids, group, version, group_id, sample_class):
        group = group[:-1] if self.is_short(group_id) else group
        return super()._score_group(example, prompt_ids, group, version, group_id, sample_class)


class SomeShortGroupsWorker(ShortGroupsWorker):
    @staticmethod
    def is_short(group_id: int) -> bool:
        return group_id % 2 == 1


@pytest.mark.parametrize("worker_class", [ShortGroupsWorker, SomeShortGroupsWorker], ids=["every", "some"])
def test_a_short_group_is_decided_on_never_waited_for(model_path, prompts, tmp_path, worker_class):
    trainer, worker = build(
        model_path, prompts, tmp_path, strategy="diffband", worker_class=worker_class, max_steps=3, max_staleness=100
    )
    train_within(trainer, worker, 120)
    assert trainer.state.global_step == 3
    sizes: dict[int, int] = {}
    for decision in trainer.dataflex.decisions:
        for group_id in decision["group_ids"].tolist():
            sizes[group_id] = sizes.get(group_id, 0) + 1
    short = {g for g in sizes if worker_class.is_short(g)}
    assert short and all(sizes[g] == G - 1 for g in short)
    assert all(sizes[g] == G for g in sizes if g not in short)
    counted = sum(d["short_groups"] for d in trainer.dataflex.decisions)
    assert counted == len(short)
    assert any(log.get("dataflex/short_groups_window_total", 0) > 0 for log in trainer.state.log_history)


def test_a_second_attach_is_refused_at_the_second_attach(model_path, prompts, tmp_path):
    trainer, _ = build(model_path, prompts, tmp_path, strategy="diffband", how="attach")
    with pytest.raises(HostError, match=r"already applies strategy 'diffband'.*Give the strategy once"):
        attach(trainer, "dapo")


def double_reward(completions, **kwargs):
    return [0.0, 1.0] * len(completions)


def strict_reward(completions):
    return [0.0] * len(completions)


def none_reward(completions, **kwargs):
    return None


@pytest.mark.parametrize(
    "reward, message",
    [
        (
            double_reward,
            r"reward 'double_reward' returned 8 value\(s\) for 4 completions; return a list of floats or None",
        ),
        (strict_reward, r"reward 'strict_reward' does not take TRL's keyword arguments .*\*\*kwargs"),
        (
            none_reward,
            r"reward 'none_reward' returned None \(NoneType\) for 4 completions; "
            r"return a list of floats or None, one per completion",
        ),
    ],
    ids=["wrong_count", "no_kwargs", "returns_none"],
)
def test_a_reward_the_worker_cannot_use_is_refused_naming_the_fix(model_path, prompts, tmp_path, reward, message):
    trainer, worker = build(model_path, prompts, tmp_path, strategy="baseline", reward=reward, max_steps=1)
    with pytest.raises(InputError, match=message):
        train_within(trainer, worker, 60)


def test_an_unknown_argument_names_the_adapters_and_trls_options(model_path, prompts, tmp_path):
    with pytest.raises(ParamError, match=r"unknown option 'selection_rewards'.*AdapterOptions.*AsyncGRPOTrainer's own"):
        build(
            model_path, prompts, tmp_path, strategy="diffband", trainer_options={"selection_rewards": "checksum_reward"}
        )


def test_token_budget_none_with_the_in_process_worker_is_refused_before_waiting(model_path, prompts, tmp_path):
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"token_budget=None.*no vLLM server.*token_budget=0"):
        trainer, worker = build(model_path, prompts, tmp_path, strategy="diffband", token_budget=None)
        train_within(trainer, worker, 30)
    assert time.monotonic() - start < 30


def test_the_dataflex_trainer_runs_on_a_cpu_without_the_cpu_helpers(model_path, prompts, tmp_path):
    from transformers import AttentionInterface
    from trl.experimental.async_grpo.packing import TREE_ATTENTION

    from dataflex_callbacks.integrations.trl.async_rollout import cpu_tree_attention

    trainer, worker = build(model_path, prompts, tmp_path, strategy="diffband", cpu_helpers=False, max_steps=1)
    assert AttentionInterface._global_mapping[TREE_ATTENTION] is cpu_tree_attention
    train_within(trainer, worker, 60)
    assert trainer.state.global_step == 1


def test_screening_asks_the_worker_for_k_then_more_and_counts_every_completion(model_path, prompts, tmp_path):
    trainer, worker = build(model_path, prompts, tmp_path / "screen", strategy="screen", wave_groups=4)
    asked, generate = [], worker.engine.generate

    def recording(prompt_ids, n, max_tokens, temperature=1.0):
        asked.append((len(prompt_ids), n))
        return generate(prompt_ids, n, max_tokens, temperature)

    worker.engine.generate = recording
    trainer.train()
    allocator = trainer.dataflex.strategy.allocation
    assert {n for _, n in asked} <= {2}  # pilots of k = 2, commits of G - k = 2
    assert (
        allocator.totals["commit_completions"] > 0
        and allocator.totals["pilot_completions"] == 2 * allocator.totals["prompts"]
    )
    assert allocator.totals["pilot_completions"] + allocator.totals["commit_completions"] == sum(
        p * n for p, n in asked
    )
    decisions = trainer.dataflex.decisions
    assert decisions and all(d["keep"].numel() == B * G for d in decisions)
    # Every queued group is a committed one: its pilot differed, so it carries signal; staleness per completion.
    assert allocator.totals["signal_groups"] == allocator.totals["trained_groups"] > 0
    assert len(trainer.dataflex.consumed_staleness) >= len(decisions) * B * G


# ---------------------------------------------------------------- the mix part's domain column


MIX = {"name": "mix_ucb", "mix": {"mixer": "dump_ucb"}}


@pytest.mark.parametrize(
    "columns, options, named",
    [
        ({}, {}, r"'domain' \(the default domain column 'domain'\)"),
        ({"topic": ["a", "b", "c"] * 8}, {"domain_key": "subject"}, r"'subject' \(domain_key='subject'\)"),
    ],
    ids=["no_domain_column", "domain_key_not_a_column"],
)
def test_a_mix_part_without_its_domain_column_is_refused_naming_domain_key_and_the_columns(
    model_path, tmp_path, columns, options, named
):
    data = Dataset.from_dict({"prompt": [f"{i}+{i % 7}=" for i in range(24)], **columns})
    # Before: "the mix part needs domain labels, which TRL's AsyncGRPOTrainer ... does not provide".
    with pytest.raises(ConfigError, match=rf"mix part needs the domain column {named}; the train dataset has") as err:
        build(model_path, data, tmp_path, strategy=MIX, trainer_options=options)
    assert str(list(data.column_names)) in str(err.value) and "domain_key=" in str(err.value)


# ---------------------------------------------------------------- the end-of-run line


@pytest.mark.parametrize("strategy", ["diffband", "dapo"])
def test_the_end_line_counts_every_group_taken_from_the_queue_for_every_strategy(
    model_path, prompts, tmp_path, strategy, capsys
):
    trainer, worker = build(model_path, prompts, tmp_path, strategy=strategy, reward=zero_reward, max_steps=2)
    train_within(trainer, worker, 60)
    end = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dataflex: train end:")]
    # Each step took its bound, max_rounds (4) x B groups: diffband decided on them all (refilling), dapo set them
    # aside as zero-signal. Before: "of 16 groups" for diffband, "of 4 groups" for dapo.
    assert len(end) == 1 and f"0 signal groups trained (of {2 * 4 * B} groups)" in end[0], end


def test_the_dynamic_sampling_end_line_counts_the_zero_signal_groups_it_set_aside(
    model_path, prompts, tmp_path, capsys
):
    trainer, worker = build(model_path, prompts, tmp_path, strategy="dapo", reward=echo_zero_reward, max_steps=4)
    trainer.train()
    end = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dataflex: train end:")]
    steps = trainer.dataflex.decisions[:4]  # the dataloader fetched one step ahead: not trained, not in the line
    spent = sum(int(d["zero_signal_groups"]) for d in steps)
    assert spent > 0
    assert f"(of {4 * B + spent} groups)" in end[0], end[0]
    # A step's kept fraction is of the rows it took: its B signal groups kept, its zero-signal ones not.
    kept = sum(B / (B + d["zero_signal_groups"]) for d in steps) / len(steps)
    assert f"mean kept fraction {kept:.2f}" in end[0], end[0]
