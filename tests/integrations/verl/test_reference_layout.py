"""DataFlex-RL's mix runs through this adapter unchanged: its data layout and its script's lines.

The reference's mix data keeps ``data_source`` for reward routing (here ``openai/gsm8k`` for both
domains) and puts the domain in a ``domain`` column (``gsm8k_short`` / ``gsm8k_long``). Its mix
scripts also name its own replay buffer (``trainer.v1.sampler.custom_sampler.path=pkg://dataflex_verl...``).
verl's real dataset, dataloader and replay-buffer construction run; only the actor is a stub.
"""

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import logging  # noqa: E402

from test_prompt_feed import fetch_indices, make_trainer  # noqa: E402

from dataflex_callbacks import DomainMixingSampler  # noqa: E402
from dataflex_callbacks.errors import ConfigError  # noqa: E402

ROWS = {"gsm8k_short": 10, "gsm8k_long": 6}

# The lines of the reference's examples/run_mix_grpo.sh that configure DataFlex (written out here).
REFERENCE_SAMPLER = (
    "trainer.v1.sampler.custom_sampler.path=pkg://dataflex_verl.replay_buffer",
    "trainer.v1.sampler.custom_sampler.name=DataFlexMixReplayBuffer",
)
REFERENCE_MIX_BLOCK = (
    "+dataflex.mechanism=mix",
    "+dataflex.domains=[gsm8k_short,gsm8k_long]",
    "+dataflex.scorer.name=reward_difficulty",
    "+dataflex.actuator.name=reward_gap",
    "+dataflex.actuator.params.temperature=1.0",
    "+dataflex.actuator.params.floor=0.05",
    "+dataflex.warmup_step=1",
    "+dataflex.update_step=1",
    "+dataflex.window=50",
)
# The prior sets the proportions before the strategy has observed a step (the first prompt batches).
STATIC_MIX = (
    "+dataflex.mix.mixer.name=static",
    "+dataflex.mix.warmup_steps=0",
    "+dataflex.mix.mixer.params.proportions={gsm8k_short:0.2,gsm8k_long:0.8}",
    "+dataflex.mix.prior={gsm8k_short:0.2,gsm8k_long:0.8}",
)


def write_reference_mix_parquet(path):
    """GSM8K split by length into two domains, the reference's layout: ``domain`` beside ``data_source``."""
    import pandas as pd

    rows = []
    for domain, count in ROWS.items():
        for i in range(count):
            rows.append(
                {
                    "data_source": "openai/gsm8k",
                    "domain": domain,
                    "prompt": [{"role": "user", "content": f"{domain} question {i}"}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": str(i)},
                    "extra_info": {"index": len(rows)},
                }
            )
    pd.DataFrame(rows).to_parquet(path)
    return path


def drawn_domains(trainer, batches):
    domains = trainer.train_dataset.dataframe["domain"]
    return [domains[i] for batch in fetch_indices(trainer, batches) for i in batch]


def test_domain_key_domain_reads_the_domain_column(tmp_path):
    data_file = write_reference_mix_parquet(tmp_path / "train.parquet")
    trainer = make_trainer(data_file, tmp_path / "ckpt", "+dataflex.domain_key=domain", *STATIC_MIX)
    assert trainer._domain_key() == "domain"
    assert isinstance(trainer.prompt_sampler, DomainMixingSampler)
    assert sorted(trainer.prompt_sampler.domains) == sorted(ROWS)
    drawn = drawn_domains(trainer, 10)
    # gsm8k_short holds 10 of 16 rows; the mix gives it 20%
    assert drawn.count("gsm8k_short") < drawn.count("gsm8k_long")


def test_reference_mix_script_lines_run_unchanged(tmp_path, caplog):
    """run_mix_grpo.sh: reference-form block without domain_key, plus the custom_sampler lines."""
    from dataflex_callbacks.integrations.verl import config as verl_config_module

    verl_config_module._warned_reference_sampler = False
    data_file = write_reference_mix_parquet(tmp_path / "train.parquet")
    with caplog.at_level(logging.WARNING, logger="dataflex_callbacks.integrations.verl"):
        trainer = make_trainer(
            data_file,
            tmp_path / "ckpt",
            "trainer.v1.trainer_mode=dataflex_mix_sync",
            *REFERENCE_SAMPLER,
            *REFERENCE_MIX_BLOCK,
        )
    # verl built its own replay buffer instead of importing the reference's module
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    assert type(trainer.replay_buffer) is ReplayBuffer
    assert trainer.config.trainer.v1.sampler.custom_sampler.path is None
    warnings = [r.getMessage() for r in caplog.records if "custom_sampler" in r.getMessage()]
    assert len(warnings) == 1 and "pkg://dataflex_verl.replay_buffer" in warnings[0]
    # domains come from the `domain` column, where the block's domains live
    assert trainer._domain_key() == "domain"
    assert trainer.prompt_sampler.domains == ["gsm8k_short", "gsm8k_long"]
    # ... and, like the reference's buffer, every batch holds exactly the largest-remainder quotas
    assert trainer.prompt_sampler.quota == "exact"
    from dataflex_callbacks.sampling.sampler import largest_remainder_quotas

    target = trainer.strategy.mixing.target
    expected = largest_remainder_quotas([target[d] for d in trainer.prompt_sampler.domains], 4).tolist()
    domains = trainer.train_dataset.dataframe["domain"]
    for batch in fetch_indices(trainer, 6):
        labels = [domains[i] for i in batch]
        assert [labels.count(d) for d in trainer.prompt_sampler.domains] == expected

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dataflex_callbacks.integrations.verl"):
        make_trainer(data_file, tmp_path / "ckpt2", *REFERENCE_SAMPLER, *REFERENCE_MIX_BLOCK)
    assert not [r for r in caplog.records if "custom_sampler" in r.getMessage()]  # warned once per process


def test_without_the_fix_verl_cannot_import_the_reference_sampler():
    """What the replacement saves users from: verl's own loader on the reference's line."""
    from verl.utils.import_utils import load_extern_object

    with pytest.raises(Exception, match="dataflex_verl"):
        load_extern_object("pkg://dataflex_verl.replay_buffer", "DataFlexMixReplayBuffer")


def test_other_custom_samplers_are_left_alone():
    from omegaconf import OmegaConf

    from dataflex_callbacks.integrations.verl.config import drop_reference_sampler

    config = OmegaConf.create(
        {"trainer": {"v1": {"sampler": {"custom_sampler": {"path": "pkg://my_project.buffers", "name": "MyBuffer"}}}}}
    )
    OmegaConf.set_struct(config, True)
    assert drop_reference_sampler(config) is False
    assert config.trainer.v1.sampler.custom_sampler.path == "pkg://my_project.buffers"
    config.trainer.v1.sampler.custom_sampler.path = "dataflex_verl/replay_buffer.py"
    OmegaConf.set_readonly(config, True)
    assert drop_reference_sampler(config) is True
    assert config.trainer.v1.sampler.custom_sampler.name is None


def test_explicit_domain_key_missing_from_data_is_named(tmp_path):
    from test_prompt_feed import write_parquet

    data_file = write_parquet(tmp_path / "train.parquet")  # data_source only, no `domain` column
    with pytest.raises(ConfigError, match="no domain column 'domain'"):
        make_trainer(
            data_file,
            tmp_path / "ckpt",
            "+dataflex.domain_key=domain",
            "+dataflex.mix.mixer.name=static",
            "+dataflex.mix.warmup_steps=0",
        )


def test_quota_option(tmp_path):
    data_file = write_reference_mix_parquet(tmp_path / "train.parquet")
    independent = make_trainer(
        data_file, tmp_path / "a", *REFERENCE_SAMPLER, *REFERENCE_MIX_BLOCK, "+dataflex.quota=independent"
    )
    assert independent.prompt_sampler.quota == "independent"  # the user's word wins over the reference lines
    exact = make_trainer(data_file, tmp_path / "b", "+dataflex.domain_key=domain", *STATIC_MIX, "+dataflex.quota=exact")
    assert exact.prompt_sampler.quota == "exact"
    assert (
        make_trainer(data_file, tmp_path / "c", "+dataflex.domain_key=domain", *STATIC_MIX).prompt_sampler.quota
        == "independent"
    )
    with pytest.raises(ConfigError, match="dataflex.quota must be one of independent, exact; got 'even'"):
        make_trainer(data_file, tmp_path / "d", *STATIC_MIX, "+dataflex.quota=even")
    with pytest.raises(ConfigError, match="dataflex.quota sets the per-batch domain counts of a mix part"):
        make_trainer(data_file, tmp_path / "e", "+dataflex.strategy=difffilter", "+dataflex.quota=exact")
