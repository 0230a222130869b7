"""Shared fixtures for the TRL adapter tests: a tiny local model, a toy dataset, a trainer factory."""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

torch.set_num_threads(1)

pytest.importorskip("trl")

# Helper modules next to these tests (mixing_runs.py) are imported by bare name; tests/ is not a package.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from cpu_settings import CPU_RUN_SETTINGS  # noqa: E402
from datasets import Dataset  # noqa: E402
from toy_rewards import checksum_reward, digit_reward, parity_reward  # noqa: E402

from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def reward_functions():
    """The toy reward functions by name."""
    return {"parity_reward": parity_reward, "digit_reward": digit_reward, "checksum_reward": checksum_reward}


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def toy_dataset():
    prompts = [f"{i}+{i % 7}=" for i in range(24)]
    domains = ["add", "mul", "echo"] * 8
    return Dataset.from_dict({"prompt": prompts, "domain": domains})


@pytest.fixture(scope="session")
def make_trainer(tmp_path_factory, tiny_tokenizer, toy_dataset):
    """Build a tiny GRPO trainer: ``make_trainer(cls=GRPOTrainer, peft_config=None, trainer_kwargs=..., **config)``."""
    from trl import GRPOConfig, GRPOTrainer

    def build(cls=GRPOTrainer, peft_config=None, reward_funcs=None, trainer_kwargs=None, **config):
        settings = dict(
            output_dir=str(tmp_path_factory.mktemp("run")),
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=6,
            max_steps=2,
            learning_rate=1e-3,
            seed=0,
            **CPU_RUN_SETTINGS,
        )
        settings.update(config)
        kwargs = dict(trainer_kwargs or {})
        return cls(
            model=build_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=reward_funcs or [parity_reward],
            args=GRPOConfig(**settings),
            train_dataset=toy_dataset,
            processing_class=tiny_tokenizer,
            peft_config=peft_config,
            **kwargs,
        )

    return build


@pytest.fixture(scope="session")
def make_rloo(tmp_path_factory, tiny_tokenizer, toy_dataset):
    """Build a tiny RLOO trainer: ``make_rloo(cls=RLOOTrainer, reward_funcs=None, trainer_kwargs=..., **config)``."""
    from trl import RLOOConfig, RLOOTrainer

    def build(cls=RLOOTrainer, reward_funcs=None, trainer_kwargs=None, **config):
        settings = dict(
            output_dir=str(tmp_path_factory.mktemp("rloo")),
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=6,
            max_steps=2,
            learning_rate=1e-3,
            beta=0.0,
            seed=0,
            **CPU_RUN_SETTINGS,
        )
        settings.update(config)
        torch.manual_seed(
            settings["seed"]
        )  # TRL <= 1.14 draws a LoRA adapter's weights before seeding (1.16 seeds first)
        return cls(
            model=build_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=reward_funcs or [checksum_reward],
            args=RLOOConfig(**settings),
            train_dataset=toy_dataset,
            processing_class=tiny_tokenizer,
            **(trainer_kwargs or {}),
        )

    return build
