"""The prompt feed in verl's real ``_init_dataloader`` / ``_save_checkpoint`` / ``_load_checkpoint`` path.

verl's dataset (``RLHFDataset`` over a parquet file), ``StatefulDataLoader`` and checkpoint code run
unchanged; only the actor worker group is a stub (its own checkpoint is not what is tested).
"""

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import os  # noqa: E402

import torch  # noqa: E402
from test_trainer_transfer_queue import verl_config  # noqa: E402

from dataflex_callbacks import DomainMixingSampler  # noqa: E402

DOMAINS = {"math": 12, "code": 6, "logic": 6}


class StubWorkerGroup:
    """Stands in for the actor worker group: its own checkpoint is not under test."""

    def save_checkpoint(self, local_path, *args, **kwargs):
        os.makedirs(local_path, exist_ok=True)

    def load_checkpoint(self, *args, **kwargs):
        pass


def write_parquet(path):
    import pandas as pd

    rows = []
    for domain, count in DOMAINS.items():
        for i in range(count):
            index = len(rows)
            rows.append(
                {
                    "prompt": [{"role": "user", "content": f"{domain} question {i}"}],
                    "data_source": domain,
                    "reward_model": {"style": "rule", "ground_truth": str(i)},
                    "extra_info": {"index": index},
                }
            )
    pd.DataFrame(rows).to_parquet(path)
    return path


def make_trainer(data_file, checkpoint_dir, *dataflex):
    from verl.trainer.ppo.v1 import get_trainer_cls

    from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer

    config = verl_config(
        f"data.train_files={data_file}",
        f"data.val_files={data_file}",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "data.dataloader_num_workers=0",
        "data.max_prompt_length=64",
        "data.filter_overlong_prompts=False",
        f"trainer.default_local_dir={checkpoint_dir}",
        "trainer.resume_mode=auto",
        "data.seed=7",
        *dataflex,
    )
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    trainer.tokenizer, trainer.processor = build_tiny_tokenizer(), None
    trainer.actor_rollout_wg = StubWorkerGroup()
    trainer._init_dataloader()
    return trainer


def fetch_indices(trainer, batches):
    return [[int(i) for i in trainer._fetch_one_gen_batch()["index"]] for _ in range(batches)]


MIX = (
    "+dataflex.mix.mixer.name=static",
    "+dataflex.mix.mixer.params.proportions={math:0.2,code:0.4,logic:0.4}",
    "+dataflex.mix.warmup_steps=0",
)


def test_prompts_are_drawn_by_the_domain_mixing_sampler(tmp_path):
    data_file = write_parquet(tmp_path / "train.parquet")
    trainer = make_trainer(data_file, tmp_path / "ckpt", *MIX)
    assert isinstance(trainer.prompt_sampler, DomainMixingSampler)
    assert trainer.train_dataloader.sampler is trainer.prompt_sampler
    drawn = [row for batch in fetch_indices(trainer, 5) for row in batch]
    assert len(drawn) == 20
    domains = trainer.train_dataset.dataframe["data_source"]
    counts = {d: sum(domains[i] == d for i in drawn) for d in DOMAINS}
    # math holds half of the rows; the mix gives it a low share
    assert counts["math"] < counts["code"] + counts["logic"]
    assert trainer.prompt_sampler.actual_proportions()["math"] < 0.5


def test_sampler_and_strategy_state_resume_through_verl_checkpoint(tmp_path):
    data_file = write_parquet(tmp_path / "train.parquet")
    checkpoint_dir = tmp_path / "ckpt"
    uninterrupted = make_trainer(data_file, tmp_path / "other", *MIX)
    expected = fetch_indices(uninterrupted, 8)

    trainer = make_trainer(data_file, checkpoint_dir, *MIX)
    assert fetch_indices(trainer, 3) == expected[:3]
    trainer.global_steps = 3
    trainer.strategy.observe_sampled({"math": 5})  # some state the strategy must carry over
    trainer._save_checkpoint()
    assert os.path.exists(checkpoint_dir / "global_step_3" / "data.pt")
    assert os.path.exists(checkpoint_dir / "global_step_3" / "dataflex.pt")
    saved_strategy = trainer.strategy.state_dict()

    resumed = make_trainer(data_file, checkpoint_dir, *MIX)
    resumed._load_checkpoint()  # verl's resume: finds global_step_3, loads data.pt into the dataloader
    assert resumed.global_steps == 3
    assert _same(resumed.strategy.state_dict(), saved_strategy)  # dataflex.pt
    assert fetch_indices(resumed, 5) == expected[3:]  # data.pt: the stream goes on where it stopped


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b or (a != a and b != b)


def test_without_mix_verl_keeps_its_own_sampler(tmp_path):
    data_file = write_parquet(tmp_path / "train.parquet")
    trainer = make_trainer(data_file, tmp_path / "ckpt", "+dataflex.strategy=difffilter")
    assert trainer.prompt_sampler is None
    assert not isinstance(trainer.train_dataloader.sampler, DomainMixingSampler)


def test_pre_select_skips_prompts_before_generation(tmp_path):
    import numpy as np

    from dataflex_callbacks import RolloutBatch

    data_file = write_parquet(tmp_path / "train.parquet")
    trainer = make_trainer(data_file, tmp_path / "ckpt", "+dataflex.strategy=skip", "data.shuffle=False")
    history_prompts = list(range(12))  # the math rows: every group all-correct, several times
    rewards = torch.ones(len(history_prompts) * 2)
    batch = RolloutBatch(
        rewards=rewards,
        group_ids=torch.arange(len(history_prompts)).repeat_interleave(2),
        prompt_keys=[k for k in history_prompts for _ in range(2)],
        domains=["math"] * len(rewards),
    )  # data_source, as apply_strategy records it
    for step in range(6):
        trainer.strategy.pre_select.observe(batch, step)
    drawn = [row for batch in fetch_indices(trainer, 4) for row in batch]
    assert len(drawn) == 16
    assert trainer.strategy.pre_select.skipped > 0
    math_share = np.mean([i < 12 for i in drawn])
    assert math_share < 0.5  # the zero-variance prompts are mostly skipped


def test_pre_select_asks_about_the_domain_the_rollouts_are_recorded_under(tmp_path):
    # One "no domain" rule (issue 24): verl's candidates reach the filter with their data_source, the
    # domain apply_strategy records their rollouts under, so a domain whose groups were all solved
    # predicts its unseen prompts too. Before, verl asked with no labels and kept every unseen prompt.
    from dataflex_callbacks import RolloutBatch

    data_file = write_parquet(tmp_path / "train.parquet")
    trainer = make_trainer(data_file, tmp_path / "ckpt", "+dataflex.strategy=skip", "data.shuffle=False")
    observed = list(range(6))  # half of the math rows, every group all-correct
    batch = RolloutBatch(
        rewards=torch.ones(12),
        group_ids=torch.arange(6).repeat_interleave(2),
        prompt_keys=[k for k in observed for _ in range(2)],
        domains=["math"] * 12,
    )
    for step in range(6):
        trainer.strategy.pre_select.observe(batch, step)
    drawn = [row for batch in fetch_indices(trainer, 4) for row in batch]
    unseen_math = [i for i in drawn if 6 <= i < 12]
    assert len(unseen_math) <= 3, unseen_math  # kept with min_keep = 0.2; all 6 came first in order otherwise
