"""Misuse of the TRL adapter gives one clear error or a loud warning naming the fix, never a silent no-op."""

import warnings

import pytest
import torch
from datasets import Dataset
from mixing_runs import record_train_sampler

from dataflex_callbacks.errors import ConfigError, DroppedAllWarning
from dataflex_callbacks.integrations.trl import DataFlexCallback, DataFlexGRPOTrainer, attach
from dataflex_callbacks.integrations.trl.lifecycle import STATE_FILE

RESCALE_WARNING = "rescaled by B/K"
MIX = {"mix": {"mixer": "reward_gap", "warmup_steps": 1, "update_every": 1}}


def constant_partial_reward(completions, **kwargs):
    """0.3 for every completion: a partial-credit reward that is never 'solved' at the default threshold 0.5."""
    return [0.3] * len(completions)


def partial_credit_reward(completions, **kwargs):
    """0.1 or 0.3 by the parity of the characters' code sum: varies within groups, never 'solved' at 0.5."""
    return [0.1 + 0.2 * (sum(map(ord, c)) % 2) for c in completions]


def parity_reward(completions, **kwargs):
    return [float(len(c) % 2 == 0) for c in completions]


def build_warnings(make_trainer, strategy, **config):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": strategy}, **config)
    return trainer, [str(w.message) for w in caught]


# ---------------------------------------------------------------- B/K warning only where rows can be dropped
@pytest.mark.parametrize("strategy", ["baseline", "softmax", "static", "skip"])
def test_no_rescale_warning_for_strategies_that_never_drop_rows(make_trainer, strategy):
    _, messages = build_warnings(make_trainer, strategy, loss_type="grpo", entropy_coef=0.01)
    assert not [m for m in messages if RESCALE_WARNING in m]


@pytest.mark.parametrize("strategy", ["difffilter", "topk", {"nan_policy": "drop"}])
def test_rescale_warning_for_strategies_that_drop_rows(make_trainer, strategy):
    _, messages = build_warnings(make_trainer, strategy, loss_type="dr_grpo", entropy_coef=0.01)
    assert [m for m in messages if RESCALE_WARNING in m and "logged loss" in m]


# ---------------------------------------------------------------- one strategy, given once
def test_trainer_with_the_same_strategy_in_a_callback_uses_that_callback(make_trainer):
    callback = DataFlexCallback("difffilter", record_decisions=True)
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer, max_steps=1, trainer_kwargs={"strategy": "difffilter", "callbacks": [callback]}
    )
    assert trainer.dataflex is callback and callback.attached
    assert sum(isinstance(cb, DataFlexCallback) for cb in trainer.callback_handler.callbacks) == 1
    trainer.train()  # used to raise "never attached ... use DataFlexGRPOTrainer"
    assert len(callback.decisions) == 1


def test_trainer_with_only_a_callback_uses_it(make_trainer):
    callback = DataFlexCallback("softmax")
    trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"callbacks": [callback]})
    assert trainer.dataflex is callback and callback.strategy.name == "softmax"


def test_two_different_strategies_are_refused_with_the_fix(make_trainer):
    with pytest.raises(ValueError, match=r"two different strategies.*Give the strategy once"):
        make_trainer(
            cls=DataFlexGRPOTrainer,
            trainer_kwargs={"strategy": "difffilter", "callbacks": [DataFlexCallback("softmax")]},
        )
    with pytest.raises(ValueError, match=r"selection_reward='parity_reward'.*set it in one place"):
        make_trainer(
            cls=DataFlexGRPOTrainer,
            trainer_kwargs={"selection_reward": "parity_reward", "callbacks": [DataFlexCallback("difffilter")]},
        )
    with pytest.raises(ValueError, match="needs strategy="):
        make_trainer(cls=DataFlexGRPOTrainer)


def test_a_second_strategy_added_later_is_refused(make_trainer):
    trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": "difffilter"})
    with pytest.raises(ValueError, match="already applies strategy 'difffilter'"):
        trainer.add_callback(DataFlexCallback("softmax"))
    with pytest.raises(RuntimeError, match=r"already applies strategy 'difffilter'.*attach\(\) is for a stock"):
        attach(trainer, "softmax")


# ---------------------------------------------------------------- strict resume is a real option
@pytest.fixture(scope="module")
def mixed_checkpoint(make_trainer, tmp_path_factory):
    out = tmp_path_factory.mktemp("strict")
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        max_steps=2,
        save_strategy="steps",
        save_steps=2,
        output_dir=str(out),
        trainer_kwargs={"strategy": MIX},
    )
    trainer.train()
    return out / "checkpoint-2", None


CHANGED_MIX = {"mix": {"mixer": "reward_gap", "warmup_steps": 1, "update_every": 2}}


def test_changed_config_on_resume_names_the_adapters_strict_option(make_trainer, mixed_checkpoint, tmp_path):
    checkpoint, _ = mixed_checkpoint
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer, max_steps=3, output_dir=str(tmp_path), trainer_kwargs={"strategy": CHANGED_MIX}
    )
    with pytest.raises(ConfigError, match=r"changed: mix.*DataFlexGRPOTrainer\(\.\.\., strict=False\)"):
        trainer.train(resume_from_checkpoint=str(checkpoint))


def assert_same_state(a, b, where="state"):
    """Nested dicts/lists of tensors and Python values are equal."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert torch.equal(torch.as_tensor(a), torch.as_tensor(b)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.parametrize("way_in", ["subclass", "attach"])
def test_strict_false_resumes_a_changed_config_with_the_mixing_state(make_trainer, mixed_checkpoint, tmp_path, way_in):
    checkpoint, _ = mixed_checkpoint
    if way_in == "subclass":
        trainer = make_trainer(
            cls=DataFlexGRPOTrainer,
            max_steps=3,
            output_dir=str(tmp_path),
            trainer_kwargs={"strategy": CHANGED_MIX, "strict": False, "record_decisions": True},
        )
        callback = trainer.dataflex
    else:
        trainer = make_trainer(max_steps=3, output_dir=str(tmp_path))
        callback = attach(trainer, CHANGED_MIX, strict=False, record_decisions=True)
    assert callback.load_state(str(checkpoint))
    saved = torch.load(checkpoint / STATE_FILE)
    assert_same_state(callback.strategy.state_dict()["mixing"], saved["strategy"]["mixing"])
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert [h["step"] for h in callback.decisions] == [2]


# ---------------------------------------------------------------- domain column named in the error
def test_mix_preset_without_a_domain_column_names_domain_column(make_trainer, tiny_tokenizer):
    from cpu_settings import CPU_RUN_SETTINGS
    from trl import GRPOConfig

    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    data = Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3=", "4+4="], "topic": ["a", "b", "a", "b"]})
    args = GRPOConfig(
        output_dir="unused", per_device_train_batch_size=4, num_generations=4, max_steps=1, **CPU_RUN_SETTINGS
    )
    with pytest.raises(ConfigError, match=r"domain column 'domain'.*has \['prompt', 'topic'\].*pass domain_key="):
        DataFlexGRPOTrainer(
            model=build_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=parity_reward,
            args=args,
            train_dataset=data,
            processing_class=tiny_tokenizer,
            strategy="static",
        )


@pytest.mark.parametrize("strategy", ["static", "skip"])
def test_a_null_domain_label_is_refused_with_its_row(tiny_tokenizer, strategy):
    from cpu_settings import CPU_RUN_SETTINGS
    from trl import GRPOConfig

    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    data = Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3=", "4+4="], "domain": ["a", None, "a", "b"]})
    args = GRPOConfig(
        output_dir="unused", per_device_train_batch_size=4, num_generations=4, max_steps=1, **CPU_RUN_SETTINGS
    )
    with pytest.raises(ConfigError, match=r"null domain label in column 'domain' \(row 1\)"):
        trainer = DataFlexGRPOTrainer(
            model=build_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=parity_reward,
            args=args,
            train_dataset=data,
            processing_class=tiny_tokenizer,
            strategy=strategy,
        )
        trainer._get_train_sampler(data)


# ---------------------------------------------------------------- shuffle_dataset=False is not ignored
@pytest.mark.parametrize("strategy", ["static", "skip"])
def test_shuffle_dataset_false_with_a_prompt_choosing_strategy_is_refused(make_trainer, strategy):
    with pytest.raises(ConfigError, match=r"shuffle_dataset=False.*Set shuffle_dataset=True"):
        make_trainer(cls=DataFlexGRPOTrainer, shuffle_dataset=False, trainer_kwargs={"strategy": strategy})


def test_shuffle_dataset_false_keeps_the_dataset_order_without_a_prompt_choosing_part(make_trainer):
    trainer = make_trainer(cls=DataFlexGRPOTrainer, shuffle_dataset=False, trainer_kwargs={"strategy": "difffilter"})
    stream = list(trainer._get_train_sampler())
    assert stream[:: trainer.num_generations][:6] == [0, 1, 2, 3, 4, 5]


# ---------------------------------------------------------------- every group dropped: loud, once, with the fix
def test_a_step_that_drops_every_group_warns_once_naming_the_fix(make_trainer):
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        max_steps=3,
        reward_funcs=[partial_credit_reward],
        trainer_kwargs={"strategy": "difffilter"},
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    dropped = [w.message for w in caught if w.category is DroppedAllWarning]
    assert len(dropped) == 1, [str(w) for w in dropped]
    assert (dropped[0].cause, dropped[0].step) == ("reward_scale", 1)  # TRL logs its first step as 1
    assert "not 0/1" in dropped[0].fix and "selection_reward=" in dropped[0].fix
    assert "group_reward_variance" in dropped[0].fix and "rewards from 0.1 to 0.3" in str(dropped[0])
    assert [e["dataflex/dropped_all"] for e in trainer.state.log_history if "dataflex/dropped_all" in e] == [1.0] * 3


@pytest.mark.parametrize("strategy", ["diffband", "dapo"])
def test_equal_reward_groups_are_explained_without_a_settings_fix(make_trainer, strategy):
    # Every completion scores 0.3: every group has equal rewards, which diffband and dapo exist to drop.
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        max_steps=2,
        reward_funcs=[constant_partial_reward],
        trainer_kwargs={"strategy": strategy},
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    dropped = [w.message for w in caught if w.category is DroppedAllWarning]
    assert [(w.cause, w.fix, w.step) for w in dropped] == [("equal_rewards", None, 1)]
    assert "Fix:" not in str(dropped[0]) and "repeats" in str(dropped[0])


def test_no_dropped_all_warning_when_something_trains(make_trainer):
    trainer = make_trainer(cls=DataFlexGRPOTrainer, max_steps=2, trainer_kwargs={"strategy": "softmax"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if "kept no response" in str(w.message)]


# ---------------------------------------------------------------- no prompt twice in one generation batch
def test_a_mixing_generation_batch_holds_each_prompt_once(make_trainer, tiny_tokenizer):
    """One generation batch holds each drawn prompt exactly num_generations times, also when a small domain's pass
    wraps around inside the batch (5 rows drawn at 50%, 4 prompts per batch)."""
    from cpu_settings import CPU_RUN_SETTINGS
    from trl import GRPOConfig

    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    data = Dataset.from_dict({"prompt": [f"q{i}=" for i in range(30)], "domain": ["small"] * 5 + ["big"] * 25})
    args = GRPOConfig(
        output_dir="unused",
        per_device_train_batch_size=8,
        num_generations=2,
        max_completion_length=4,
        max_steps=7,
        seed=0,
        **CPU_RUN_SETTINGS,
    )
    strategy = {"mix": {"mixer": {"name": "static", "proportions": {"small": 0.5, "big": 0.5}}}}
    trainer = DataFlexGRPOTrainer(
        model=build_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward,
        args=args,
        train_dataset=data,
        processing_class=tiny_tokenizer,
        strategy=strategy,
        record_decisions=True,
    )
    record_train_sampler(trainer)
    trainer.train()
    size, generations = args.generation_batch_size, trainer.num_generations
    rows = trainer.recorder.indices
    batches = [rows[i : i + size] for i in range(0, len(rows) - size + 1, size)]
    assert len(batches) >= 7
    for batch in batches:
        assert batch[::generations] == batch[1::generations]  # TRL's layout: each prompt twice in a row
        assert len(set(batch[::generations])) == size // generations, batch
    for entry in trainer.dataflex.decisions:  # what the strategy saw: 4 groups of 2 under 4 different keys
        assert len(set(entry["prompt_keys"])) == size // generations
    # The same over many more batches of the installed sampler (several epochs of its stream).
    sampler = trainer.dataflex.sampler
    for _ in range(6):
        stream = list(sampler)
        for start in range(0, len(stream) - size + 1, size):
            prompts = stream[start : start + size][::generations]
            assert len(set(prompts)) == len(prompts), prompts


def test_mix_quota_from_the_config_reaches_the_trl_sampler(tiny_tokenizer):
    from cpu_settings import CPU_RUN_SETTINGS
    from trl import GRPOConfig

    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    data = Dataset.from_dict({"prompt": [f"q{i}=" for i in range(12)], "domain": ["a", "b", "c"] * 4})
    args = GRPOConfig(
        output_dir="unused", per_device_train_batch_size=6, num_generations=2, max_steps=1, **CPU_RUN_SETTINGS
    )
    trainer = DataFlexGRPOTrainer(
        model=build_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward,
        args=args,
        train_dataset=data,
        processing_class=tiny_tokenizer,
        strategy={"mix": {"mixer": "static", "quota": "exact"}},
    )
    sampler = trainer._get_train_sampler(data)
    assert sampler.quota == "exact"
    rows = list(sampler)[::2][: 3 * 6]  # one row per prompt, 3 generation batches of 3 prompts
    for batch in (rows[i : i + 3] for i in range(0, len(rows), 3)):
        assert sorted(data[r]["domain"] for r in batch) == ["a", "b", "c"]


# ---------------------------------------------------------------- dynamic sampling: what the TRL adapter refuses
DYNAMIC = {
    "select": {
        "scorer": "group_reward_variance",
        "selector": {"name": "threshold_band", "low": 0.0, "high": float("inf")},
    },
    "dynamic_sampling": True,
}


def test_dynamic_sampling_is_refused_by_the_rloo_adapter_in_one_line():
    from dataflex_callbacks.integrations.trl.rloo import DataFlexRLOOCallback

    with pytest.raises(
        ConfigError,
        match=r"^dynamic_sampling is not supported by the TRL adapter's "
        r"DataFlexRLOOTrainer yet; remove the dynamic_sampling part",
    ):
        DataFlexRLOOCallback(DYNAMIC)


def test_dynamic_sampling_with_a_mix_part_is_refused_in_one_line(make_trainer):
    strategy = {**DYNAMIC, "mix": {"mixer": "static"}}
    with pytest.raises(
        ConfigError,
        match=r"^dynamic_sampling in the TRL adapter does not support a strategy with a "
        r"mix part yet; drop",
    ):
        make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": strategy})
    with pytest.raises(ConfigError, match=r"^dynamic_sampling in the TRL adapter does not support"):
        attach(make_trainer(), strategy)


def test_dynamic_sampling_with_a_token_level_select_part_is_refused_when_built():
    strategy = {
        "select": {"scorer": "token_entropy", "selector": {"name": "entropy_top_tokens", "fraction": 0.2}},
        "dynamic_sampling": True,
    }
    with pytest.raises(ConfigError, match="dynamic_sampling judges whole groups"):
        DataFlexCallback(strategy)


# ---------------------------------------------------------------- too few prompts, in the user's GRPOConfig fields
THREE_PROMPTS = {"prompt": ["1+1=", "2+2=", "3+3="], "domain": ["add", "mul", "add"]}


def build_on(tiny_tokenizer, tmp_path, data, strategy=None, way_in="trainer", **config):
    """A tiny trainer on ``data``: a DataFlexGRPOTrainer, or (``way_in="attach"``) a stock GRPOTrainer + attach()."""
    from cpu_settings import CPU_RUN_SETTINGS
    from trl import GRPOConfig, GRPOTrainer

    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, **{"max_completion_length": 4, **CPU_RUN_SETTINGS, **config}
    )
    common = dict(
        model=build_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward,
        args=args,
        train_dataset=data,
        processing_class=tiny_tokenizer,
    )
    if way_in == "trainer":
        return DataFlexGRPOTrainer(**common, strategy=strategy)
    trainer = GRPOTrainer(**common)
    attach(trainer, strategy)
    return trainer


@pytest.mark.parametrize("strategy", ["skip", "greso", "difffilter", "dapo", "baseline"])
@pytest.mark.parametrize("way_in", ["trainer", "attach"])
def test_too_few_prompts_for_one_generation_batch_names_the_grpo_config_fields(
    tiny_tokenizer, tmp_path, strategy, way_in
):
    data = Dataset.from_dict(THREE_PROMPTS)
    with pytest.raises(ConfigError) as caught:
        # 16 completions per batch at 4 per prompt: 4 distinct prompts, the data has 3.
        trainer = build_on(
            tiny_tokenizer, tmp_path, data, strategy, way_in, per_device_train_batch_size=16, num_generations=4
        )
        trainer.train()  # the old adapter refused some of these only here, in the sampler's own terms
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    for field in (
        "GRPOConfig(",
        "per_device_train_batch_size=16",
        "num_generations=4",
        "gradient_accumulation_steps=1",
        "has 3 prompt(s)",
        "needs 4 distinct prompts",
    ):
        assert field in message, (field, message)
    assert "num_samples" not in message and "chunk" not in message


def test_too_few_prompts_names_gradient_accumulation_when_it_sizes_the_batch(tiny_tokenizer, tmp_path):
    data = Dataset.from_dict(THREE_PROMPTS)
    with pytest.raises(
        ConfigError,
        match=r"gradient_accumulation_steps=2\).*lower per_device_train_batch_size or "
        r"gradient_accumulation_steps",
    ):
        build_on(
            tiny_tokenizer,
            tmp_path,
            data,
            "skip",
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            num_generations=2,
        ).train()


def test_too_few_prompts_in_the_mixed_domains_counts_only_those(tiny_tokenizer, tmp_path):
    data = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(8)], "domain": ["add"] * 6 + ["mul"] * 2})
    strategy = {"mix": {"mixer": "reward_gap", "domains": ["mul"]}}
    with pytest.raises(ConfigError, match=r"has 2 prompt\(s\) in the mixed domains \['mul'\] \(8 in all\)"):
        build_on(tiny_tokenizer, tmp_path, data, strategy, per_device_train_batch_size=12, num_generations=4).train()


def test_resuming_the_prompt_sampler_with_another_batch_names_the_grpo_config_fields(
    make_trainer, mixed_checkpoint, tmp_path
):
    checkpoint, _ = mixed_checkpoint  # saved with 4 completions per batch at 4 per prompt: 1 prompt per batch
    trainer = make_trainer(
        cls=DataFlexGRPOTrainer,
        max_steps=3,
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        trainer_kwargs={"strategy": MIX},
    )
    with pytest.raises(ConfigError) as caught:
        trainer.train(resume_from_checkpoint=str(checkpoint))
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    for text in (
        "prompts per generation batch",
        "= 1, this run has 2",
        "per_device_train_batch_size=8",
        "num_generations=4",
        "gradient_accumulation_steps=1",
        "24 prompts",
        "GRPOConfig settings",
    ):
        assert text in message, (text, message)


# ---------------------------------------------------------------- prompts + completions past the model's positions
@pytest.mark.parametrize("way_in", ["trainer", "attach"])
def test_prompts_past_the_models_positions_are_refused_at_train_start_naming_both_numbers(
    tiny_tokenizer, tmp_path, way_in
):
    from dataflex_callbacks.errors import ContextLengthError

    # GSM8K-length prompts on the tiny model: 60 tokens + 6 completion tokens > its 64 positions.
    long_prompt = "1+1=" * 15
    data = Dataset.from_dict({"prompt": ["2+2=", long_prompt, "3+3=", "4+4="], "domain": ["add"] * 4})
    trainer = build_on(
        tiny_tokenizer,
        tmp_path,
        data,
        "diffband",
        way_in,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
    )
    assert len(tiny_tokenizer(long_prompt)["input_ids"]) == 60
    with pytest.raises(ContextLengthError) as caught:
        trainer.train()
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    for part in (
        "the longest prompt of the train dataset is 60 tokens",
        "completions are up to 6 tokens: 66 positions",
        "the model holds 64 (max_position_embeddings)",
        "lower max_completion_length (GRPOConfig, now 6) to at most 4",
        "shorten the prompts",
        "a model with more positions",
    ):
        assert part in message, (part, message)
    assert trainer.state.global_step == 0


def test_prompts_that_fit_the_models_positions_train(tiny_tokenizer, tmp_path):
    data = Dataset.from_dict({"prompt": ["1+1=" * 14 + "1=", "3+3=", "4+4=", "5+5="], "domain": ["add"] * 4})
    trainer = build_on(
        tiny_tokenizer,
        tmp_path,
        data,
        "diffband",
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
    )  # 58 + 6 = 64 positions: exactly what the model holds
    trainer.train()
    assert trainer.state.global_step == 1
