"""Helpers for the mixing-sampler and pre-rollout tests: a tiny GRPO run on the built-in suite with a spy on
the sampler.
"""

import os

from cpu_settings import CPU_RUN_SETTINGS
from torch.utils.data import Sampler
from trl import GRPOConfig

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.recipes import tasks
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer


class RecordingSampler(Sampler):
    """Yields what ``inner`` yields and keeps every index, in order (prefetched ones included)."""

    def __init__(self, inner):
        self.inner = inner
        self.indices: list[int] = []

    def __iter__(self):
        for index in self.inner:
            self.indices.append(index)
            yield index

    def __len__(self):
        return len(self.inner)


def suite_trainer(output_dir, strategy, *, steps, seed=0, n_train=50, prompts=4, num_generations=4, **config):
    """A DataFlexGRPOTrainer on the built-in suite whose train sampler is wrapped in a `RecordingSampler`."""
    tokenizer = build_tiny_tokenizer()
    train = tasks.load_task_suite(seed=seed, n_train=n_train, n_test=1)["train"]
    settings = dict(
        output_dir=os.fspath(output_dir),
        per_device_train_batch_size=prompts * num_generations,
        num_generations=num_generations,
        max_completion_length=4,
        max_steps=steps,
        learning_rate=3e-3,
        beta=0.0,
        seed=seed,
        **CPU_RUN_SETTINGS,
    )
    settings.update(config)
    trainer = DataFlexGRPOTrainer(
        model=build_tiny_model(tokenizer, seed=seed),
        reward_funcs=tasks.make_reward_fn(seed=seed),
        args=GRPOConfig(**settings),
        train_dataset=train,
        processing_class=tokenizer,
        strategy=strategy,
        record_decisions=True,
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return record_train_sampler(trainer)


def record_train_sampler(trainer):
    """Wrap the sampler ``trainer`` installs in a `RecordingSampler`, kept as ``trainer.recorder``."""
    install = trainer._get_train_sampler

    def recording(dataset=None):
        trainer.recorder = RecordingSampler(install(dataset))
        return trainer.recorder

    trainer._get_train_sampler = recording
    return trainer


def logged(trainer, key):
    """Values of one logged metric, one per logging step."""
    return [entry[key] for entry in trainer.state.log_history if key in entry]
