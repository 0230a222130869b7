"""The TRL adapter with real vLLM generation (colocate mode, vLLM's CPU build): the properties proven on HF generate.

Runs only where vLLM imports (``.venv-vllm``, built by scripts/setup_vllm_env.sh; `scripts/test_vllm.sh`
sets DATAFLEX_REQUIRE_VLLM=1 so that a broken vLLM fails instead of skipping). One vLLM engine serves
every trainer of this module: TRL builds it through ``vllm.LLM``, which `shared_engine` answers with the
same engine each time (TRL pushes each new trainer's weights into it before its first generation), and
re-seeds torch's global generator, which vLLM's CPU sampler draws from, as a fresh engine does.

Every engine here is built with vLLM's repacking CPU dispatch forced (`force_repacking_dispatch`), so
that on any CPU the tests see what AVX-512 and AMX machines do: linear weights packed at load and
``layer.weight`` dropped. The shared engine is built inside `cpu_engine`, whose live weights are what
lets TRL's weight push reach it; the first test shows the push failing without them.
"""

import os
import subprocess
import sys

import pytest
import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # TRL's colocate weight push reaches into the engine

if os.environ.get("DATAFLEX_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (must import: scripts/test_vllm.sh runs this module to test vLLM)
else:
    pytest.importorskip("vllm")

from loss_checks import loss_and_grad, masked_inputs  # noqa: E402
from mixing_runs import record_train_sampler  # noqa: E402
from toy_rewards import checksum_reward  # noqa: E402
from trl import GRPOTrainer  # noqa: E402
from vllm.model_executor.layers import utils as layer_utils  # noqa: E402

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import save_tiny  # noqa: E402
from dataflex_callbacks.recipes.vllm_colocate import CPU_ENGINE_SETTINGS, colocate_config, cpu_engine  # noqa: E402
from dataflex_callbacks.recipes.vllm_cpu import (  # noqa: E402
    LIVE_WEIGHTS_ENV,
    RepackedWeight,
    force_repacking_dispatch,
    multiply_with_live_weights,
)

STEPS = 3
LOGPROB_TOLERANCE = 1e-4  # float32 on both sides: measured max |trainer - vLLM| 7e-7
LOSS_TOLERANCE = 1e-5


class SharedEngine:
    """One `vllm.LLM` for every trainer of the module, recording each generate call's prompts."""

    def __init__(self, model_path):
        self.model_path = model_path
        self.llm = None
        self.builds = 0
        self.prompts: list[list[list[int]]] = []  # per generate call: its prompts' token ids

    def build(self, original, *args, **kwargs):
        if self.llm is None:
            kwargs.update(model=self.model_path, max_num_seqs=64)
            self.llm = original(*args, **kwargs)
            self.builds += 1
            generate = self.llm.generate

            def recording(prompts, *a, **k):
                self.prompts.append([list(p["prompt_token_ids"]) if isinstance(p, dict) else p for p in prompts])
                return generate(prompts, *a, **k)

            self.llm.generate = recording
        torch.manual_seed(kwargs.get("seed", 0))  # as a fresh engine seeds the sampler's generator
        return self.llm


VLLM_DISPATCH = layer_utils.dispatch_cpu_unquantized_gemm  # vLLM's own, before any fix replaces it


@pytest.fixture(scope="module")
def repacking():
    """vLLM's repacking dispatch, forced for the module whatever this CPU is."""
    restore = force_repacking_dispatch()
    yield
    restore()


@pytest.fixture(scope="module")
def engine(tmp_path_factory, repacking):
    from trl.generation import vllm_generation

    shared = SharedEngine(save_tiny(tmp_path_factory.mktemp("vllm_model")))
    with cpu_engine():  # restores TRL's constructor on exit
        with_cpu_settings = vllm_generation.LLM
        vllm_generation.LLM = lambda *a, **k: shared.build(with_cpu_settings, *a, **k)
        repacked = RepackedWeight.created
        yield shared
        assert RepackedWeight.created == repacked, "a layer of the shared engine was repacked despite cpu_engine()"


def test_a_repacked_engine_refuses_trls_weight_push_without_live_weights(
    make_trainer, repacking, monkeypatch, tmp_path
):
    # What stock GRPOTrainer(use_vllm=True) does on an AVX-512 or AMX CPU: vLLM's dispatch packs the
    # linear weights and drops them, and TRL's first weight push finds no loader.
    import vllm
    from trl.generation import vllm_generation

    monkeypatch.setattr(layer_utils, "dispatch_cpu_unquantized_gemm", VLLM_DISPATCH)
    folder = save_tiny(tmp_path / "model")
    monkeypatch.setattr(
        vllm_generation,
        "LLM",
        lambda *a, **k: vllm.LLM(*a, **{**k, **CPU_ENGINE_SETTINGS, "model": folder, "max_num_seqs": 64}),
    )
    repacked = RepackedWeight.created
    trainer = make_trainer(reward_funcs=[checksum_reward], **vllm_settings(max_steps=1))
    assert RepackedWeight.created > repacked, "the forced dispatch repacked no layer: the test would prove nothing"
    with pytest.raises(AttributeError, match="weight_loader"):
        trainer.train()
    del trainer


def test_the_vllm_plugin_keeps_live_weights_only_when_asked():
    # vLLM runs its general plugins once per process (each worker it starts), so each case gets its own.
    script = (
        "from vllm.plugins import load_general_plugins; load_general_plugins()\n"
        "from vllm.model_executor.layers import utils\n"
        "print(utils.dispatch_cpu_unquantized_gemm.__module__)"
    )
    for value, expected in (("1", multiply_with_live_weights.__module__), ("", VLLM_DISPATCH.__module__)):
        env = {**os.environ, LIVE_WEIGHTS_ENV: value}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[-1] == expected, (value, done.stdout[-500:])


def vllm_settings(**config):
    return {**colocate_config(on_cpu=True, max_model_length=64), "learning_rate": 1e-2, "max_steps": STEPS, **config}


def build(make_trainer, engine, strategy=None, **config):
    """A stock GRPOTrainer (strategy None) or a DataFlexGRPOTrainer generating with the shared engine."""
    kwargs = {} if strategy is None else {"trainer_kwargs": {"strategy": strategy, "record_decisions": True}}
    cls = GRPOTrainer if strategy is None else DataFlexGRPOTrainer
    trainer = make_trainer(cls=cls, reward_funcs=[checksum_reward], **kwargs, **vllm_settings(**config))
    assert trainer.vllm_generation.llm is engine.llm
    return trainer


class RoundRecorder:
    """Spy on TRL's ``_generate_and_score_completions``: each round's batch, with the step it was generated at."""

    def __init__(self, monkeypatch):
        self.rounds: list[tuple[int, dict]] = []
        self.syncs: list[int] = []
        stock = GRPOTrainer._generate_and_score_completions

        def record(trainer, inputs):
            output = stock(trainer, inputs)
            if trainer.model.training:
                self.rounds.append(
                    (
                        trainer.state.global_step,
                        {k: v.detach().clone() for k, v in output.items() if torch.is_tensor(v)},
                    )
                )
            return output

        monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", record)
        from trl.generation.vllm_generation import VLLMGeneration

        sync = VLLMGeneration.sync_weights

        def counted(generation):
            self.syncs.append(self.trainer.state.global_step)
            return sync(generation)

        monkeypatch.setattr(VLLMGeneration, "sync_weights", counted)
        self.trainer = None


def logged_losses(trainer):
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def trainer_logps(trainer, output, model=None):
    """``(N, T)`` log-probs of a round's completions under the trainer's model (``model`` to override)."""
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], 1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, model or trainer.model, ids, mask, output["completion_ids"].shape[1]
        )
    return logps


def max_gap(a, b, mask):
    return (a - b)[mask.bool()].abs().max().item()


# ---------------------------------------------------------------- baseline == stock TRL


def test_baseline_gives_stock_trls_losses_and_parameters_with_vllm(make_trainer, engine):
    stock = build(make_trainer, engine)
    calls = len(engine.prompts)
    stock.train()
    stock_prompts = engine.prompts[calls:]
    ours = build(make_trainer, engine, "baseline")
    calls = len(engine.prompts)
    ours.train()
    assert engine.prompts[calls:] == stock_prompts and len(stock_prompts) == STEPS  # one vLLM call a step
    assert logged_losses(ours) == pytest.approx(logged_losses(stock), abs=LOSS_TOLERANCE)
    for name, a in stock.model.named_parameters():
        b = dict(ours.model.named_parameters())[name]
        assert torch.allclose(a, b, atol=1e-6, rtol=0), name
    assert engine.builds == 1


# ---------------------------------------------------------------- selection == removal, with the IS correction


@pytest.fixture(scope="module")
def vllm_batch(make_trainer, engine):
    """One real vLLM-generated TRL batch (importance-sampling correction on) and its trainer."""
    trainer = build(make_trainer, engine, "baseline", max_steps=1)
    captured = {}
    stock = trainer.dataflex.score_completions

    def capture(host, original, inputs):
        output = stock(host, original, inputs)
        captured.update({k: v.detach().clone() for k, v in output.items()})
        return output

    trainer.dataflex.score_completions = capture
    trainer.train()
    assert trainer.vllm_importance_sampling_correction and "importance_sampling_ratio" in captured
    assert "sampling_per_token_logps" in captured
    # The engine agrees with the trainer to float32 precision, so the real ratio is ~1 and its slicing would
    # go unnoticed: spread it over [0.5, 1.5] so that a row's ratio reaching another row shows.
    generator = torch.Generator().manual_seed(0)
    ratio = captured["importance_sampling_ratio"]
    assert (ratio - 1).abs().max().item() < 1e-3
    captured["importance_sampling_ratio"] = 0.5 + torch.rand(ratio.shape, generator=generator)
    captured["advantages"] = torch.randn(captured["advantages"].shape, generator=generator)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer, captured


def reduced(inputs, keep):
    out = {k: v[keep] for k, v in inputs.items() if v.dim() > 0}
    out["num_items_in_batch"] = inputs["completion_mask"][keep].sum()
    return out


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_selection_equals_removing_the_rows_with_the_vllm_importance_ratio(vllm_batch, loss_type):
    trainer, inputs = vllm_batch
    trainer.loss_type = loss_type
    rows = inputs["completion_mask"].shape[0]
    for keep in (torch.arange(rows) % 3 != 1, torch.arange(rows) < rows // 2):
        loss, grad = loss_and_grad(trainer, trainer._compute_loss, masked_inputs(trainer, inputs, keep))
        stock = lambda model, batch: GRPOTrainer._compute_loss(trainer, model, batch)  # noqa: E731
        ref_loss, ref_grad = loss_and_grad(trainer, stock, reduced(inputs, keep))
        assert (loss - ref_loss).abs().item() <= LOSS_TOLERANCE, (loss_type, keep)
        assert (grad - ref_grad).abs().max().item() <= LOSS_TOLERANCE, (loss_type, keep)


# ---------------------------------------------------------------- dapo: every round from the step's weights


def test_dapo_rounds_are_generated_by_the_steps_weights_and_carried_groups_keep_theirs(
    make_trainer, engine, monkeypatch
):
    recorder = RoundRecorder(monkeypatch)
    trainer = build(make_trainer, engine, "dapo", max_steps=4, per_device_train_batch_size=8)
    recorder.trainer = trainer
    weights_at: dict[int, dict] = {}
    trained = []

    from transformers import TrainerCallback

    class Snapshots(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            weights_at[state.global_step] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    trainer.add_callback(Snapshots())
    stock = trainer.dataflex.score_completions

    def keep_trained(host, original, inputs):
        output = stock(host, original, inputs)
        carried_rows = _carried_rows(host.dataflex.dynamic.last)  # the groups trained: carried ones lead
        trained.append((host.state.global_step, {k: v.detach().clone() for k, v in output.items()}, carried_rows))
        return output

    trainer.dataflex.score_completions = keep_trained
    trainer.train()

    steps = [step for step, _ in recorder.rounds]
    assert len(steps) > len(set(steps)), "no step generated a second round: the test is void"
    assert recorder.syncs == sorted(set(steps)), "weights must reach vLLM once per optimizer step"
    for step, output in recorder.rounds:
        mask = output["completion_mask"]
        # old_per_token_logps: the trainer's own log-probs at generation time (TRL computes them with the correction on)
        assert max_gap(output["old_per_token_logps"], output["sampling_per_token_logps"], mask) < LOGPROB_TOLERANCE
        if step > 0:  # the previous step's weights give measurably different log-probs: a lag would show
            current = {k: v.clone() for k, v in trainer.model.state_dict().items()}
            trainer.model.load_state_dict(weights_at[step - 1])
            stale = trainer_logps(trainer, output)
            trainer.model.load_state_dict(current)
            assert max_gap(stale, output["sampling_per_token_logps"], mask) > 100 * LOGPROB_TOLERANCE

    carried = 0
    for step, batch, carried_rows in trained:
        earlier = [out for s, out in recorder.rounds if s < step]
        for row in range(carried_rows):  # a carried row is one an earlier step generated, with its log-probs
            sources = [(out, r) for out in earlier for r in _same_tokens(out, batch, row)]
            assert sources, (step, row)
            width = int(batch["completion_mask"][row].sum())
            assert any(
                torch.equal(batch["sampling_per_token_logps"][row, :width], out["sampling_per_token_logps"][r, :width])
                and torch.equal(
                    batch["importance_sampling_ratio"][row, :width], out["importance_sampling_ratio"][r, :width]
                )
                for out, r in sources
            ), (step, row)
            carried += 1
    assert carried > 0, "no group was carried into a later step: the test is void"


def _carried_rows(taken) -> int:
    """Rows of the carried groups (source_round -1) in a `SignalGroups`; they lead the assembled batch."""
    sizes = taken.group_sizes.tolist()
    rows, start = 0, 0
    for size in sizes:
        if int(taken.source_round[start]) < 0:
            rows += size
        start += size
    return rows


def _same_tokens(output, batch, row) -> list[int]:
    """Rows of ``output`` with the prompt and completion tokens of ``batch``'s row ``row``."""

    def tokens(ids, mask, r):
        return ids[r][mask[r].bool()].tolist()

    prompt = tokens(batch["prompt_ids"], batch["prompt_mask"], row)
    completion = tokens(batch["completion_ids"], batch["completion_mask"], row)
    return [
        r
        for r in range(output["completion_ids"].shape[0])
        if tokens(output["completion_ids"], output["completion_mask"], r) == completion
        and tokens(output["prompt_ids"], output["prompt_mask"], r) == prompt
    ]


# ---------------------------------------------------------------- pre-rollout selection and mixing through the sampler


def half_solved_reward(completions, domain, **kwargs):
    """1 on the `solved` domain (solved groups: a pre-rollout filter learns to skip them), else the checksum."""
    return [1.0 if d == "solved" else r for d, r in zip(domain, checksum_reward(completions), strict=True)]


@pytest.mark.parametrize("strategy", ["skip", "dapo+skip", "static"])
def test_prompts_reach_vllm_through_the_samplers_draws(engine, tiny_tokenizer, tmp_path, strategy):
    from cpu_settings import CPU_RUN_SETTINGS
    from datasets import Dataset
    from trl import GRPOConfig

    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    # 4 prompts, 2 a step: each is seen 6 times in 12 steps, enough for skip_predicted to learn to skip `solved`.
    data = Dataset.from_dict({"prompt": [f"{i}*3=" for i in range(4)], "domain": ["solved", "mixed"] * 2})
    config = {"mix": {"mixer": "static", "warmup_steps": 1, "update_every": 1}} if strategy == "static" else strategy
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        seed=0,
        **CPU_RUN_SETTINGS,
        **vllm_settings(max_steps=12),
    )
    trainer = record_train_sampler(
        DataFlexGRPOTrainer(
            model=build_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=[half_solved_reward],
            args=args,
            train_dataset=data,
            processing_class=tiny_tokenizer,
            strategy=config,
            record_decisions=True,
        )
    )
    calls = len(engine.prompts)
    trainer.train()
    generated = engine.prompts[calls:]
    size = trainer.args.generation_batch_size
    assert trainer.dataflex.sampler is not None
    if strategy == "dapo+skip":  # further rounds come from the prompt stream: round 0 of each step is the sampler's
        generated = _first_round_per_step(generated, trainer)
    assert len(generated) == 12
    rows = trainer.recorder.indices
    for step, prompts in enumerate(generated):
        drawn = [data[int(i)]["prompt"] for i in rows[step * size : (step + 1) * size]]
        assert [tiny_tokenizer.decode(p) for p in prompts] == drawn, step
    if strategy != "static":
        assert trainer.dataflex.strategy.pre_select.skipped > 0, "no prompt was skipped: the test is void"


def _first_round_per_step(calls, trainer):
    """The vLLM calls that opened each step (TRL's sampler batch), from the dynamic-sampling round counts."""
    rounds = [int(d["dynamic"]["dynamic/rounds"]) for d in trainer.dataflex.decisions]
    firsts, index = [], 0
    for count in rounds:
        firsts.append(calls[index])
        index += count
    assert index == len(calls)
    return firsts


# ---------------------------------------------------------------- resume


def test_resume_mid_run_equals_the_uninterrupted_run_with_vllm(make_trainer, engine, tmp_path):
    checkpoints = dict(save_strategy="steps", save_steps=2, max_steps=4)
    full = build(make_trainer, engine, "difffilter", output_dir=str(tmp_path / "full"), **checkpoints)
    full.train()
    resumed = build(make_trainer, engine, "difffilter", output_dir=str(tmp_path / "resumed"), **checkpoints)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert [d["prompt_keys"] for d in resumed.dataflex.decisions] == [
        d["prompt_keys"] for d in full.dataflex.decisions[2:]
    ]
    for a, b in zip(full.dataflex.decisions[2:], resumed.dataflex.decisions, strict=True):
        assert torch.equal(a["keep"], b["keep"])
    assert logged_losses(resumed)[-2:] == pytest.approx(logged_losses(full)[-2:], abs=LOSS_TOLERANCE)
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- split generation batches, reused batches, LoRA


VARIANTS = {
    "steps_per_generation": dict(steps_per_generation=2, per_device_train_batch_size=4, max_steps=4),
    "num_iterations": dict(num_iterations=2, max_steps=4),
    "peft_lora": dict(max_steps=3),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_vllm_generates_with_the_trained_weights(make_trainer, engine, monkeypatch, variant):
    recorder = RoundRecorder(monkeypatch)
    config = dict(VARIANTS[variant])
    if variant == "peft_lora":
        peft = pytest.importorskip("peft")
        config["peft_config"] = peft.LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        )
    trainer = build(make_trainer, engine, "difffilter", **config)
    recorder.trainer = trainer
    trainer.train()
    generation_steps = [step for step, _ in recorder.rounds]
    assert recorder.syncs == generation_steps and len(generation_steps) >= 2
    if variant != "peft_lora":
        every = trainer.args.steps_per_generation * trainer.num_iterations
        assert generation_steps == list(range(0, trainer.state.global_step, every))
    for step, output in recorder.rounds:
        assert (
            max_gap(output["old_per_token_logps"], output["sampling_per_token_logps"], output["completion_mask"])
            < LOGPROB_TOLERANCE
        ), step
    last = recorder.rounds[-1][1]
    if variant == "peft_lora":  # the adapter changed the model: unmerged weights would give other log-probs
        with trainer.model.disable_adapter():
            base = trainer_logps(trainer, last)
        assert max_gap(base, last["sampling_per_token_logps"], last["completion_mask"]) > 100 * LOGPROB_TOLERANCE
    assert all(torch.isfinite(torch.tensor(logged_losses(trainer))))
