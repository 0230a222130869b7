"""What the TRL adapter needs of the train dataset, checked while the trainer is built, in the user's settings.

- Enough prompts: one generation batch holds ``generation_batch_size // num_generations`` distinct
  prompts (TRL's ``RepeatSampler`` and the adapter's `DomainMixingSampler` both drop an incomplete
  batch), so fewer rows would train nothing. `check_enough_prompts` refuses that, naming the
  ``GRPOConfig`` (or ``RLOOConfig``) fields that set the batch and the dataset's size.
- Streams (``datasets.IterableDataset``): `check_stream` refuses a strategy part that needs random
  access to the rows (``mix``: it draws each prompt from the rows of a chosen domain) in one line
  naming it; the rest run over a stream (see `streaming`).
"""

from __future__ import annotations

from typing import Any

from dataflex_callbacks.errors import ConfigError
from dataflex_callbacks.host.context_length import check_context_length

from .signals import longest_prompt_tokens


def is_stream(dataset: Any) -> bool:
    """True for a ``datasets.IterableDataset`` (or a subclass): rows come in order and have no length."""
    return dataset is not None and any(cls.__name__ == "IterableDataset" for cls in type(dataset).__mro__)


def prompts_per_generation(trainer) -> int:
    """Distinct prompts in one generation batch of ``trainer`` (all processes together)."""
    return int(trainer.args.generation_batch_size) // int(trainer.num_generations)


def batch_settings(trainer) -> str:
    """The config fields that size one generation batch, as the user wrote them (``GRPOConfig(...)``)."""
    args = trainer.args
    fields = [
        f"per_device_train_batch_size={args.per_device_train_batch_size}",
        f"num_generations={trainer.num_generations}",
        f"gradient_accumulation_steps={args.gradient_accumulation_steps}",
    ]
    if int(args.steps_per_generation) != int(args.gradient_accumulation_steps):
        fields.append(f"steps_per_generation={args.steps_per_generation}")
    processes = int(trainer.accelerator.num_processes)
    where = f" on {processes} processes" if processes > 1 else ""
    return f"{type(args).__name__}({', '.join(fields)}){where}"


def too_few_prompts_message(trainer, available: int, rows: str = "") -> str:
    """One line: the dataset's prompts against the prompts one generation batch needs, and the settings to change."""
    args, need = trainer.args, prompts_per_generation(trainer)
    batch_fields = (
        "per_device_train_batch_size or steps_per_generation"
        if int(args.steps_per_generation) != int(args.gradient_accumulation_steps)
        else "per_device_train_batch_size or gradient_accumulation_steps"
    )
    return (
        f"dataflex: the train dataset has {available} prompt(s){rows}, but one generation batch needs {need} "
        f"distinct prompts: {batch_settings(trainer)} generates {args.generation_batch_size} completions per "
        f"batch (generation_batch_size), {trainer.num_generations} per prompt, so the run would train nothing; "
        f"add prompts to the dataset (at least {need}), or lower {batch_fields}, or raise num_generations"
    )


def check_enough_prompts(trainer, dataset: Any, strategy, domain_key: str | None) -> None:
    """Refuse a train dataset with fewer prompts than one generation batch needs (a stream is not counted).

    With a ``mix`` part that lists its domains, only the rows of those domains count.
    """
    if dataset is None or is_stream(dataset) or not hasattr(dataset, "__len__"):
        return
    available, rows = len(dataset), ""
    columns = list(getattr(dataset, "column_names", None) or [])
    if strategy.mix_enabled and strategy.domains is not None and domain_key in columns:
        mixed = {str(d) for d in strategy.domains}
        available = sum(str(d) in mixed for d in dataset[domain_key])
        rows = f" in the mixed domains {sorted(mixed)} ({len(dataset)} in all)"
    if available < prompts_per_generation(trainer):
        raise ConfigError(too_few_prompts_message(trainer, available, rows))


def check_stream(dataset: Any, strategy) -> None:
    """Refuse, in one line naming the part, a strategy part that needs random access when the data is a stream."""
    if not is_stream(dataset) or not strategy.mix_enabled:
        return
    raise ConfigError(
        f"dataflex: strategy {strategy.name!r} has a mix part, which needs random access to the train dataset (it "
        f"draws each prompt from the rows of the domain it chose), but the dataset is a streaming "
        f"{type(dataset).__name__}; load it as a datasets.Dataset, or mix the streams with "
        "datasets.interleave_datasets(per_domain, probabilities=[...]) and drop the mix part (pre_select and "
        "dynamic_sampling run over a stream)"
    )


SAMPLER_SETTINGS = {
    "draw_size": "prompts per generation batch (generation_batch_size / num_generations: "
    "per_device_train_batch_size x processes x steps_per_generation / num_generations)",
    "num_generations": "num_generations",
    "repeat_count": "reuses of a generation batch (num_iterations x steps_per_generation)",
    "seed": "seed",
    "chunks_per_epoch": "generation batches per pass over the dataset (dataset size / prompts per generation batch)",
    "layout": "sampler layout",
    "domains": "the mix part's domains",
    "quota": "the mix part's quota",
}
"""The TRL settings behind each setting a saved `DomainMixingSampler` state must match."""


def sampler_resume_message(trainer, error: Exception) -> str:
    """One line for a checkpoint whose prompt sampler was drawn with other TRL settings than this run's."""
    setting = getattr(error, "sampler_setting", None)
    what = SAMPLER_SETTINGS.get(setting, setting)
    return (
        f"dataflex: cannot resume the prompt sampler: the checkpoint was saved with {what} = {error.saved!r}, this "
        f"run has {error.current!r} ({batch_settings(trainer)}, {len(trainer.train_dataset)} prompts); resume "
        f"with the {type(trainer.args).__name__} settings and dataset of the checkpoint's run"
    )


def check_prompt_positions(trainer) -> None:
    """Refuse, at train start, a train dataset whose longest prompt plus ``max_completion_length`` exceeds the
    model's ``max_position_embeddings`` (a `ContextLengthError` naming both numbers).

    Past the model's positions every completion is cut or generated on positions it never learned, and
    transformers only logs a reminder. A stream is not read ahead, and a model whose config names no
    positions is not checked.
    """
    dataset = getattr(trainer, "train_dataset", None)
    config = getattr(getattr(trainer, "model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    completion = getattr(trainer.args, "max_completion_length", None)
    if not positions or completion is None or is_stream(dataset) or "prompt" not in (dataset.column_names or []):
        return
    longest = longest_prompt_tokens(trainer, dataset["prompt"])
    if longest is None:
        return
    check_context_length(
        longest,
        int(completion),
        int(positions),
        prompts="the train dataset",
        setting=f"max_completion_length ({type(trainer.args).__name__}, now {int(completion)})",
    )
