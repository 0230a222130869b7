"""Pre-rollout skipping on data without a domain column skips as on data with one domain (issue 24).

One rule for "no domain": the pooled sampler labels every row `NO_DOMAIN`, and a `RolloutBatch`
without ``domains`` is recorded under `NO_DOMAIN`, so the filter is asked about the domain it
learnt. Each pre-rollout preset runs through the real GRPOTrainer with a reward that is always 0
(every group gives no signal), on the same prompts (a) without a domain column, (b) with a
one-value domain column and (c) with two domains.
"""

import os

import pytest
from cpu_settings import CPU_RUN_SETTINGS
from datasets import Dataset
from mixing_runs import logged
from trl import GRPOConfig

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer
from dataflex_callbacks.rollout.batch import NO_DOMAIN

pytestmark = pytest.mark.slow

PROMPTS = [f"{i} plus {i % 5} is" for i in range(24)]
STEPS = 8


def zero_reward(completions, **kwargs):
    """Always 0: every group has equal rewards, so every prompt is one to skip."""
    return [0.0] * len(completions)


def dataset(domains):
    columns = {"prompt": PROMPTS}
    if domains is not None:
        columns["domain"] = [domains[i % len(domains)] for i in range(len(PROMPTS))]
    return Dataset.from_dict(columns)


def skip_run(tmp_path, preset, domains):
    tokenizer = build_tiny_tokenizer()
    args = GRPOConfig(
        output_dir=os.fspath(tmp_path),
        per_device_train_batch_size=32,
        num_generations=2,
        max_completion_length=2,
        max_steps=STEPS,
        learning_rate=1e-3,
        beta=0.0,
        seed=0,
        **CPU_RUN_SETTINGS,
    )
    trainer = DataFlexGRPOTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=zero_reward,
        args=args,
        train_dataset=dataset(domains),
        processing_class=tokenizer,
        strategy=preset,
    )
    trainer.train()
    return trainer


def test_the_no_domain_label_is_all():
    assert NO_DOMAIN == "all"


@pytest.mark.parametrize("preset", ["skip", "greso", "dapo+skip"])
def test_no_domain_column_skips_as_one_domain(tmp_path, preset):
    runs = {
        name: skip_run(tmp_path / name, preset, domains)
        for name, domains in (("none", None), ("one", ["task"]), ("several", ["a", "b"]))
    }
    skipped = {name: logged(trainer, "dataflex/pre_select/skipped_prompts") for name, trainer in runs.items()}
    assert len(skipped["none"]) == STEPS
    assert skipped["none"] == skipped["one"], "same seed, same prompts: the domain's name changes nothing"
    assert skipped["none"][-1] > 0 and skipped["several"][-1] > 0, skipped
    none, one = (runs[name].dataflex.strategy.pre_select for name in ("none", "one"))
    assert none.history.keys == one.history.keys
    assert (none.history.streak == one.history.streak).all()
    if preset == "greso":  # the domain prior learnt under the domain the sampler asks about
        assert none.history.domain_prior == {NO_DOMAIN: one.history.domain_prior["task"]}
    else:
        assert list(none.domains) == [NO_DOMAIN] and list(one.domains) == ["task"]
        assert (none.groups == one.groups).all()
